#!/usr/bin/env bash
# Flows on PostgreSQL (SPEC 9, docs/flows.md), driven through SQL with a real runner
# (tests/e2e/lua/pg_flows.lua) running the nodes' items:
#   - add_flow's refusals (a node added twice, an after naming no node, a cycle, an unknown
#     queue, a key pending outside the flow), each naming the node and adding nothing;
#   - a fan-in (3 parts -> join): parts pending, join blocked (flow_nodes and the items
#     view), an add of the blocked key leaves it blocked (payload replaced, priority only
#     raised), the join runs exactly once, after the last part;
#   - a dead node kills its dependents with the error, down the graph; ignore_dead runs;
#     retry_dead repairs: the nodes it killed come back blocked and the flow completes;
#   - appending to an existing flow (nodes already in it skipped, new ones wait for old);
#   - remove of a blocked node and of a node's pending item; cancel_flow (blocked and
#     queued nodes dead 'flow cancelled', the running one cancelled: dead 'cancelled');
#   - two transactions finishing the join's last two dependencies at once: the second
#     waits for the first, the join is released once; claim() and finish() hand the
#     node's flow and deps (with results) over;
#   - flow_list, flow_show, prune_flows.
. "$(dirname "$0")/lib.sh"
pg_need

LUA=$E2E_DIR/lua
DB=$(pg_fresh_db)
LOG=$TMP/runs.log
FIXED=$TMP/fixed
mkdir -p "$FIXED"
: >"$LOG"
q() { pg_psql "$DB" "$1"; }
# qe SQL: the error of a statement that must fail (its primary message), or "no error"
qe() { pg_psql "$DB" "$1" 2>&1 >/dev/null | sed -n 's/^\(psql:[^E]*\)\{0,1\}ERROR:  //p' | head -1; }
# pgw: pg_wait, saying what it saw last when it gives up
pgw() { pg_wait "$@" || { echo "     last: $PG_GOT" >&2; return 1; }; }
counts() { q "select (select count(*) from wqrun.flows) || '/' || (select count(*) from wqrun.flow_nodes) || '/' || (select count(*) from wqrun.jobs)"; }

run migrate --db "$DB"
expect_rc 0 "migrate"
expect_eq "$(q "select value from wqrun.meta where key = 'schema_version'")" 13 "schema version 13"
q "insert into wqrun.queues (name) values ('parts'), ('reports'), ('cq'), ('cj')" >/dev/null
# no runner yet: nothing runs
q "select wqrun.add('parts', 'busy')" >/dev/null

# ---- refusals: nothing added ---------------------------------------------------
BEFORE=$(counts)
expect_eq "$BEFORE" "0/0/1" "before the refusals: one plain item"
expect_eq "$(qe "select wqrun.add_flow('{\"id\":\"v1\",\"nodes\":[{\"queue\":\"parts\",\"key\":\"a\"},{\"queue\":\"parts\",\"key\":\"b\"},{\"queue\":\"parts\",\"key\":\"a\"}]}')")" \
    "flow v1: node parts/a is added twice" "a node added twice"
expect_eq "$(qe "select wqrun.add_flow('{\"id\":\"v2\",\"nodes\":[{\"queue\":\"parts\",\"key\":\"a\"},{\"queue\":\"reports\",\"key\":\"j\",\"after\":[{\"queue\":\"parts\",\"key\":\"a\"},{\"queue\":\"parts\",\"key\":\"nope\"}]}]}')")" \
    "flow v2: node reports/j waits for parts/nope, which is no node of the flow" "an after naming no node"
expect_eq "$(qe "select wqrun.add_flow('{\"id\":\"v3\",\"nodes\":[{\"queue\":\"parts\",\"key\":\"root\"},{\"queue\":\"parts\",\"key\":\"tail\",\"after\":[{\"queue\":\"parts\",\"key\":\"c2\"}]},{\"queue\":\"parts\",\"key\":\"c1\",\"after\":[{\"queue\":\"parts\",\"key\":\"root\"},{\"queue\":\"parts\",\"key\":\"c2\"}]},{\"queue\":\"parts\",\"key\":\"c2\",\"after\":[{\"queue\":\"parts\",\"key\":\"c1\"}]}]}')")" \
    "flow v3: node parts/c2 is in a cycle" "a cycle (the node named is on it, not behind it)"
expect_eq "$(qe "select wqrun.add_flow('{\"id\":\"v4\",\"nodes\":[{\"queue\":\"parts\",\"key\":\"a\"},{\"queue\":\"no such\",\"key\":\"x\"}]}')")" \
    "flow v4: node no such/x: no queue named no such" "a name no queue can have"
expect_eq "$(qe "select wqrun.add_flow('{\"id\":\"v5\",\"nodes\":[{\"queue\":\"parts\",\"key\":\"a\"},{\"queue\":\"parts\",\"key\":\"busy\"}]}')")" \
    "flow v5: node parts/busy is already pending outside the flow" "a key pending outside the flow"
expect_eq "$(counts)" "$BEFORE" "the refused flows added nothing"
q "select wqrun.remove('parts', 'busy')" >/dev/null

# ---- a fan-in: states before any runner ------------------------------------------
FANIN='{"id":"f1","nodes":[{"queue":"parts","key":"p1"},{"queue":"parts","key":"p2"},{"queue":"parts","key":"p3"},{"queue":"reports","key":"join","after":[{"queue":"parts","key":"p1"},{"queue":"parts","key":"p2"},{"queue":"parts","key":"p3"},{"queue":"parts","key":"p2"}]}]}'
expect_eq "$(q "select wqrun.add_flow('$FANIN')")" f1 "add_flow returns the id"
expect_eq "$(q "select string_agg(key || ':' || state || ':' || waits, ',' order by id) from wqrun.flow_nodes where flow = 'f1'")" \
    "p1:pending:0,p2:pending:0,p3:pending:0,join:blocked:3" "parts pending, the join blocked on 3 (a repeated dependency counts once)"
expect_eq "$(q "select string_agg(key || ':' || state || ':' || coalesce(waits::text, '-') || ':' || flow, ',' order by key) from wqrun.items where flow = 'f1'")" \
    "join:blocked:3:f1,p1:queued:-:f1,p2:queued:-:f1,p3:queued:-:f1" "the items view shows the blocked node"
expect_eq "$(q "select count(*) from wqrun.jobs j join wqrun.flow_nodes n on n.id = j.node where n.flow = 'f1'")" 3 "the parts' items know their nodes"
expect_eq "$(q "select unfinished || ':' || (finished_at is null) from wqrun.flows where id = 'f1'")" "4:true" "4 unfinished nodes"
expect_eq "$(q "select wqrun.add('reports', 'join', '{\"x\":1}', null, 5)")" blocked "an add of a blocked key answers blocked"
expect_eq "$(q "select wqrun.add('reports', 'join', null, null, 2)")" blocked "again, at a lower priority"
expect_eq "$(q "select wqrun.add_many('[{\"queue\":\"reports\",\"key\":\"join\"},{\"queue\":\"reports\",\"key\":\"plain\"}]')")" \
    '["blocked", "queued"]' "add_many: a blocked key beside a new one"
expect_eq "$(q "select payload::text || ':' || priority || ':' || state from wqrun.flow_nodes where key = 'join'")" \
    '{"x": 1}:5:blocked' "the payload replaced, the priority only raised, still blocked"
expect_eq "$(q "select count(*) from wqrun.jobs where queue = 'reports' and key = 'join'")" 0 "no item for the blocked key"
expect_eq "$(qe "select wqrun.add_flow('{\"id\":\"v6\",\"nodes\":[{\"queue\":\"reports\",\"key\":\"join\"}]}')")" \
    "flow v6: node reports/join is already pending outside the flow" "a key blocked in another flow is pending outside"
q "select wqrun.remove('reports', 'plain')" >/dev/null

# ---- the runner ------------------------------------------------------------------
pg_bg w1 --quiet --serve --db "$DB" --runner-name w1 "$LUA/pg_flows.lua" "$LOG" "$FIXED"
W1=$BG_PID
check "the join ran" wait_for "$LOG" "end reports join" 1 15
sleep 0.5
expect_eq "$(grep -c 'run reports join' "$LOG")" 1 "the join ran exactly once"
LASTPART=$(grep -n 'end parts p' "$LOG" | tail -1 | cut -d: -f1)
JOINAT=$(grep -n 'run reports join' "$LOG" | cut -d: -f1)
expect_eq "$(grep -c 'end parts p' "$LOG")|$([ "$JOINAT" -gt "$LASTPART" ] && echo after)" "3|after" "after the 3 parts ended"
check "the fan-in is finished" pgw "$DB" "select string_agg(state, ',' order by id) || ':' || (select unfinished || ':' || (finished_at is not null) from wqrun.flows where id = 'f1') from wqrun.flow_nodes where flow = 'f1'" \
    "done,done,done,done:0:true" 5

# (nodes get their ids in a topological order: dependencies first, else as listed)
# ---- dead down the graph, ignore_dead, repair --------------------------------------
q "select wqrun.add_flow('{\"id\":\"f2\",\"nodes\":[{\"queue\":\"parts\",\"key\":\"failA\"},{\"queue\":\"parts\",\"key\":\"mid\",\"after\":[{\"queue\":\"parts\",\"key\":\"failA\"}]},{\"queue\":\"reports\",\"key\":\"last\",\"after\":[{\"queue\":\"parts\",\"key\":\"mid\"}]},{\"queue\":\"reports\",\"key\":\"ign\",\"ignore_dead\":true,\"after\":[{\"queue\":\"parts\",\"key\":\"failA\"}]}]}')" >/dev/null
check "ignore_dead runs after a dead dependency" wait_for "$LOG" "end reports ign" 1 15
check "the dead node and its dependents" pgw "$DB" "select string_agg(key || ':' || state || ':' || coalesce(error, ''), '|' order by id) from wqrun.flow_nodes where flow = 'f2'" \
    "failA:dead:broken failA|mid:dead:dependency parts/failA is dead: broken failA|ign:done:|last:dead:dependency parts/mid is dead: dependency parts/failA is dead: broken failA" 5
expect_eq "$(grep -c 'run parts mid\|run reports last' "$LOG")" 0 "the dead nodes' dependents never ran"
expect_eq "$(q "select unfinished || ':' || (finished_at is not null) from wqrun.flows where id = 'f2'")" "0:true" "flow f2 finished (dead)"
expect_eq "$(q "select count(*) from wqrun.dead where key = 'failA'")" 1 "failA has a dead letter"
touch "$FIXED/failA"
expect_eq "$(q "select wqrun.retry_dead('parts', 'failA')")" 1 "retry_dead"
check "the repaired flow completes" pgw "$DB" "select string_agg(key || ':' || state, ',' order by id) || ':' || (select unfinished from wqrun.flows where id = 'f2') from wqrun.flow_nodes where flow = 'f2'" \
    "failA:done,mid:done,ign:done,last:done:0" 15
expect_eq "$(grep -c 'end parts mid' "$LOG")|$(grep -c 'end reports last' "$LOG")|$(grep -c 'run reports ign' "$LOG")" "1|1|1" \
    "mid and last ran once after the repair, ign did not run again"

# ---- append --------------------------------------------------------------------
q "select wqrun.add_flow('{\"id\":\"f3\",\"nodes\":[{\"queue\":\"parts\",\"key\":\"a1\"}]}')" >/dev/null
check "a1 ran" wait_for "$LOG" "end parts a1" 1 10
APPEND='{"id":"f3","nodes":[{"queue":"parts","key":"a1"},{"queue":"parts","key":"a3","after":[{"queue":"parts","key":"a2"}]},{"queue":"parts","key":"a2","after":[{"queue":"parts","key":"a1"}]}]}'
expect_eq "$(q "select wqrun.add_flow('$APPEND')")" f3 "append to f3"
check "the appended nodes ran" wait_for "$LOG" "end parts a3" 1 10
expect_eq "$(q "select wqrun.add_flow('$APPEND')")" f3 "append the same again"
sleep 0.5
expect_eq "$(grep -c 'run parts a1' "$LOG")|$(grep -c 'run parts a2' "$LOG")|$(grep -c 'run parts a3' "$LOG")|$(q "select count(*) from wqrun.flow_nodes where flow = 'f3'")" \
    "1|1|1|3" "each node once, the second append added nothing"
A2AT=$(grep -n 'run parts a2' "$LOG" | cut -d: -f1)
A3AT=$(grep -n 'run parts a3' "$LOG" | cut -d: -f1)
expect_eq "$([ "$A3AT" -gt "$A2AT" ] && echo after)" after "a3 (listed first) waited for a2"

# ---- remove and cancel ----------------------------------------------------------
q "select wqrun.pause('parts'), wqrun.pause('reports')" >/dev/null
q "select wqrun.add_flow('{\"id\":\"f5\",\"nodes\":[{\"queue\":\"parts\",\"key\":\"x1\"},{\"queue\":\"parts\",\"key\":\"x2\",\"after\":[{\"queue\":\"parts\",\"key\":\"x1\"}]},{\"queue\":\"parts\",\"key\":\"x3\",\"after\":[{\"queue\":\"parts\",\"key\":\"x2\"}]}]}')" >/dev/null
expect_eq "$(q "select wqrun.remove('parts', 'x2')")" removed "remove of a blocked node"
expect_eq "$(q "select wqrun.remove('parts', 'x1')")" removed "remove of a node's pending item"
expect_eq "$(q "select string_agg(key || ':' || state || ':' || error, '|' order by id) || ':' || (select unfinished || ':' || (finished_at is not null) from wqrun.flows where id = 'f5') from wqrun.flow_nodes where flow = 'f5'")" \
    "x1:dead:removed|x2:dead:removed|x3:dead:dependency parts/x2 is dead: removed:0:true" "removed nodes are dead, and so is x3"
q "select wqrun.pause('parts', false)" >/dev/null
q "select wqrun.add_flow('{\"id\":\"f4\",\"nodes\":[{\"queue\":\"parts\",\"key\":\"slowc\"},{\"queue\":\"reports\",\"key\":\"blk\",\"after\":[{\"queue\":\"parts\",\"key\":\"slowc\"}]},{\"queue\":\"reports\",\"key\":\"pend\"}]}')" >/dev/null
check "slowc runs" wait_for "$LOG" "run parts slowc" 1 10
expect_eq "$(q "select wqrun.cancel_flow('f4')")" 3 "cancel_flow: 3 nodes (blocked, queued, running)"
expect_eq "$(q "select wqrun.cancel_flow('nope') is null")" t "cancel_flow of no flow: NULL"
check "the running node is cancelled" pgw "$DB" "select string_agg(key || ':' || state || ':' || error, '|' order by id) || ':' || (select cancelled || ':' || (finished_at is not null) from wqrun.flows where id = 'f4') from wqrun.flow_nodes where flow = 'f4'" \
    "slowc:dead:cancelled|pend:dead:flow cancelled|blk:dead:flow cancelled:true:true" 10
expect_eq "$(q "select count(*) from wqrun.jobs where key in ('slowc', 'blk', 'pend')")|$(grep -c 'end parts slowc' "$LOG")" "0|0" \
    "no item left, slowc never ended"
expect_eq "$(qe "select wqrun.add_flow('{\"id\":\"f4\",\"nodes\":[{\"queue\":\"parts\",\"key\":\"more\"}]}')")" \
    "flow f4: cancelled (nothing can be added to it)" "a cancelled flow takes no more nodes"
q "select wqrun.pause('reports', false)" >/dev/null
kill -TERM "$W1"
wait_exit "$W1" 10
expect_eq "$RC" 0 "the runner stops cleanly"

# ---- two finishes of the join's last two dependencies at once -----------------------
RUNNER=$(q "insert into wqrun.runners (name, host, pid, lease) values ('fake', 'h', 1, 600) returning id" | head -1)
q "select wqrun.add_flow('{\"id\":\"f6\",\"nodes\":[{\"queue\":\"cq\",\"key\":\"a\"},{\"queue\":\"cq\",\"key\":\"b\"},{\"queue\":\"cj\",\"key\":\"j\",\"after\":[{\"queue\":\"cq\",\"key\":\"a\"},{\"queue\":\"cq\",\"key\":\"b\"}]}]}')" >/dev/null
expect_eq "$(q "select string_agg(o_key || ':' || o_flow || ':' || o_deps::text, ',' order by o_key) from wqrun.claim('cq', 10, $RUNNER)")" \
    "a:f6:[],b:f6:[]" "claim() returns the node's flow and deps"
expect_eq "$(q "select count(*) from wqrun.claim('cq', 10, $RUNNER) where o_flow is null")" 0 "nothing more to claim"
TA=$(q "select token from wqrun.jobs where queue = 'cq' and key = 'a'")
TB=$(q "select token from wqrun.jobs where queue = 'cq' and key = 'b'")
# session 1 finishes a (result {"n": 1}) and holds its transaction open for 2 s; session
# 2 finishes b meanwhile: it waits for the join's row, then sees waits 1 -> 0
FINA="select o_stale from wqrun.finish('cq', $RUNNER, array['a'], array[$TA]::bigint[], '{1}', '{0}', '{0}', '{NULL}', '{NULL}', NULL, 0, array['{\"n\":1}']::jsonb[]) where o_stale is not null"
FINB="select o_stale from wqrun.finish('cq', $RUNNER, array['b'], array[$TB]::bigint[], '{1}', '{0}', '{0}', '{NULL}', '{NULL}', NULL, 0, NULL) where o_stale is not null"
pg_psql "$DB" "begin; $FINA; select pg_sleep(2); commit" >"$TMP/s1.out" 2>&1 &
S1=$!
check "session 1 finished a and sleeps in its transaction (holding the join's row)" pgw "$DB" \
    "select count(*) from pg_stat_activity where datname = current_database() and wait_event = 'PgSleep'" 1 10
T0=$(now)
pg_psql "$DB" "begin; $FINB; commit" >"$TMP/s2.out" 2>&1
WAITED=$(since "$T0")
wait "$S1"
expect_eq "$(grep -cx 0 "$TMP/s1.out")|$(grep -cx 0 "$TMP/s2.out")" "1|1" "both finishes wrote their outcomes (none stale)"
expect_eq "$(awk -v w="$WAITED" 'BEGIN { print (w >= 1.0) ? "waited" : "did not wait: " w }')" waited "the second finish waited for the first (the join's row)"
expect_eq "$(q "select count(*) from wqrun.jobs where queue = 'cj' and key = 'j'")|$(q "select state || ':' || waits from wqrun.flow_nodes where key = 'j'")" \
    "1|pending:0" "the join is released once"
expect_eq "$(q "select o_key || ':' || o_flow || ':' || o_deps::text from wqrun.claim('cj', 10, $RUNNER)")" \
    'j:f6:[{"key": "a", "queue": "cq", "state": "done", "result": {"n": 1}}, {"key": "b", "queue": "cq", "state": "done"}]' \
    "the join's claim carries its deps in after's order, with results"

# ---- list, show, prune --------------------------------------------------------
expect_eq "$(q "select string_agg(x->>'id', ',' order by x->>'id') from jsonb_array_elements(wqrun.flow_list('running', 100)) x")" f6 "flow_list running"
expect_eq "$(q "select string_agg(x->>'id', ',' order by x->>'id') from jsonb_array_elements(wqrun.flow_list('finished', 100)) x")" "f1,f2,f3,f4,f5" "flow_list finished"
expect_eq "$(q "select x->>'nodes' || ':' || (x->>'done') || ':' || (x->>'pending') from jsonb_array_elements(wqrun.flow_list(null, 100)) x where x->>'id' = 'f6'")" "3:2:1" "flow_list counts per state"
expect_eq "$(qe "select wqrun.flow_list('bogus', 1)")" "wqrun.flow_list: bad argument 'state' (running, finished or NULL, got 'bogus')" "flow_list refuses a bad state"
expect_eq "$(q "select jsonb_array_length(s->'nodes') || ':' || (s->'nodes'->3->>'key') || ':' || (s->'nodes'->3->'after')::text || ':' || (s->>'done') from wqrun.flow_show('f1') s")" \
    '4:join:[{"key": "p1", "queue": "parts"}, {"key": "p2", "queue": "parts"}, {"key": "p3", "queue": "parts"}]:4' "flow_show: the nodes and their after"
expect_eq "$(q "select s->'nodes'->0->>'attempt' from wqrun.flow_show('f2') s")" "" "flow_show: a node done has no attempt"
expect_eq "$(q "select wqrun.flow_show('nope') is null")" t "flow_show of no flow: NULL"
expect_eq "$(q "select wqrun.prune_flows(10)")" 0 "nothing to prune within keep"
q "update wqrun.flows set finished_at = now() - interval '8 days' where id = 'f1'" >/dev/null
expect_eq "$(q "select wqrun.prune_flows(10)")|$(q "select count(*) from wqrun.flow_nodes where flow = 'f1'")" "1|0" "a flow past its keep is pruned with its nodes"

finish
