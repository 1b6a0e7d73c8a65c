#!/usr/bin/env bash
# Flows on PostgreSQL with several runners (SPEC 9.2, docs/flows.md), each
# part on its own database:
#   - two runners (--lease 2, 4 workers each) run one flow of 40 parts into
#     one join: both ran parts, each part ran once, the join exactly once,
#     after every part, with the 40 results in job.deps; psql: every node
#     done, the flow finished;
#   - the same with one runner killed (SIGKILL) while it runs parts: the
#     other takes its items over after its lease and finishes everything,
#     the join runs exactly once, every node is done, the flow finished;
#   - the last two dependencies of a join finishing at the same moment on
#     two runners (workers = 1 each, a barrier in the parts' handlers that
#     only two runners can pass, both parts returning at the same instant),
#     20 times: every join released and run exactly once;
#   - HTTP (POST /flows, GET /flows, GET /flows/ID, 400, 404, POST
#     /flows/ID/cancel) against a runner on PostgreSQL, and the command line
#     with the URL (add-flow, flows [--json], flow show [--json], flow
#     cancel).
. "$(dirname "$0")/lib.sh"
pg_need
for tool in curl python3; do
    command -v "$tool" >/dev/null || { echo "FAIL: test_pg_flows needs $tool" >&2; exit 1; }
done

# pgw: pg_wait, saying what it saw last when it gives up
pgw() { pg_wait "$@" || { echo "     last: $PG_GOT" >&2; return 1; }; }
kill9() {
    { kill -9 "$1" && wait "$1"; } 2>/dev/null
    return 0
}
stop() {
    local p
    for p in "$@"; do kill -TERM "$p" 2>/dev/null; done
    for p in "$@"; do
        wait_exit "$p" 15
        expect_eq "$RC" 0 "runner $p stops cleanly"
    done
}

# pgf.lua LOG RUNNER [WORKERS]: parts log "start RUNNER KEY" and "end RUNNER KEY" around a
# sleep of payload.s and return {n = payload.n}; a join logs
# "join RUNNER KEY deps=N done=D sum=S" from job.deps.
PGF=$(script pgf.lua <<'LUA'
local log = assert(io.open(arg[1], "a"))
local me = arg[2]
local function note(s) log:write(s, "\n"); log:flush() end
wq.queue("parts", {workers = tonumber(arg[3] or "4"), handler = function(key, payload)
    note(string.format("start %s %s", me, key))
    wq.sleep(payload.s)
    note(string.format("end %s %s", me, key))
    return {n = payload.n}
end})
wq.queue("joins", {handler = function(key, payload, job)
    local sum, done = 0, 0
    for _, d in ipairs(job.deps) do
        if d.state == "done" then done = done + 1 end
        sum = sum + (type(d.result) == "table" and d.result.n or 0)
    end
    note(string.format("join %s %s deps=%d done=%d sum=%d", me, key, #job.deps, done, sum))
    return {sum = sum}
end})
LUA
)
# fanin ID PREFIX N SLEEP: a flow document of N parts PREFIX01.. (payload {n = i, s = SLEEP})
# and a join "ID-join" waiting for all of them
fanin() {
    python3 -c '
import json, sys
fid, pre, n, s = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
ps = [{"queue": "parts", "key": "%s%02d" % (pre, i), "payload": {"n": i, "s": s}} for i in range(1, n + 1)]
j = {"queue": "joins", "key": fid + "-join", "after": [{"queue": "parts", "key": p["key"]} for p in ps]}
print(json.dumps({"id": fid, "nodes": ps + [j]}))' "$@"
}

# ======================================================================================
# 1. two runners, one flow of 40 parts
# ======================================================================================
DB=$(pg_fresh_db)
LOG=$TMP/runs.log
: >"$LOG"
run migrate --db "$DB"
expect_rc 0 "migrate"
pg_bg a --quiet --serve --lease 2 --runner-name A --db "$DB" "$PGF" "$LOG" A 4
A=$BG_PID
pg_bg b --quiet --serve --lease 2 --runner-name B --db "$DB" "$PGF" "$LOG" B 4
B=$BG_PID
check "both runners registered" pgw "$DB" "select count(*) from wqrun.runners" 2 10
fanin f1 p 40 0.1 >"$TMP/f1.json"
run add-flow --db "$DB" "$TMP/f1.json"
expect_rc 0 "add-flow with the URL"
expect_eq "$OUT" "added flow f1" "add-flow prints the id"
check "the join ran" wait_for "$LOG" " f1-join " 1 20
sleep 0.5
expect_eq "$(grep -c ' f1-join ' "$LOG")" 1 "the join ran exactly once"
expect_re "$(grep ' f1-join ' "$LOG")" '^join [AB] f1-join deps=40 done=40 sum=820$' "job.deps: the 40 parts done, with their results"
expect_eq "$(grep -c '^start . p' "$LOG")|$(grep '^start . p' "$LOG" | awk '{ print $3 }' | sort -u | wc -l)|$(grep -c '^end . p' "$LOG")" \
    "40|40|40" "each part ran once"
NA=$(grep -c '^start A p' "$LOG")
NB=$(grep -c '^start B p' "$LOG")
expect_between "$NA" 1 39 "runner A ran parts ($NA)"
expect_between "$NB" 1 39 "runner B ran parts ($NB)"
LASTEND=$(grep -n '^end . p' "$LOG" | tail -1 | cut -d: -f1)
JOINAT=$(grep -n ' f1-join ' "$LOG" | cut -d: -f1)
check "the join ran after the last part ended" test "${JOINAT:-0}" -gt "${LASTEND:-999}"
check "psql: every node done, the flow finished" pgw "$DB" \
    "select string_agg(state || ':' || n, ',') || '|' || (select unfinished || ':' || (finished_at is not null) from wqrun.flows where id = 'f1')
       from (select state, count(*) n from wqrun.flow_nodes where flow = 'f1' group by state) s" "done:41|0:true" 5
expect_eq "$(pg_psql "$DB" "select result::text from wqrun.flow_nodes where key = 'f1-join'")" '{"sum": 820}' "the join's result is kept"
echo "two runners, 40 parts: A ran $NA, B ran $NB"

# ---- one runner killed in the middle ----
fanin f2 q 40 0.3 >"$TMP/f2.json"
run add-flow --db "$DB" "$TMP/f2.json"
expect_eq "$OUT" "added flow f2" "add-flow f2"
check "A runs parts of f2" wait_for "$LOG" "start A q" 6 15
kill9 "$A"
T_KILL=$(now)
cp "$LOG" "$TMP/at-kill.log"
check "B runs the join of f2" wait_for "$LOG" " f2-join " 1 25
echo "B finished f2 $(since "$T_KILL") s after the kill"
sleep 0.5
expect_eq "$(grep -c ' f2-join ' "$LOG")" 1 "the join ran exactly once"
expect_re "$(grep ' f2-join ' "$LOG")" '^join B f2-join deps=40 done=40 sum=820$' "on B, with the 40 results"
# every part ended somewhere; the ones A was running when it died ran again on B
started_a=$(grep '^start A q' "$TMP/at-kill.log" | awk '{ print $3 }' | sort -u)
ended_a=$(grep '^end A q' "$TMP/at-kill.log" | awk '{ print $3 }' | sort -u)
inflight=$(comm -23 <(printf '%s\n' "$started_a") <(printf '%s\n' "$ended_a") | grep .)
expect_between "$(printf '%s\n' "$inflight" | grep -c .)" 1 4 "A was running parts when it was killed"
expect_eq "$(grep '^end . q' "$LOG" | awk '{ print $3 }' | sort -u | wc -l)" 40 "every part of f2 ended"
missing=""
for k in $inflight; do
    grep -q "^end B $k\$" "$LOG" || missing="$missing $k"
done
expect_eq "$missing" "" "B took over and finished the parts A was running"
expect_eq "$(grep -c '^start A q' "$LOG")" "$(grep -c '^start A q' "$TMP/at-kill.log")" "A ran nothing after its death"
# a part ran twice only if A was running it (or had not committed its outcome) at the kill
again=$(grep '^start . q' "$LOG" | awk '{ print $3 }' | sort | uniq -d)
extra=$(comm -23 <(printf '%s\n' "$again") <(printf '%s\n' "$started_a") | grep .)
expect_eq "$extra" "" "no part ran twice unless A had started it"
LASTEND=$(grep -n '^end . q' "$LOG" | tail -1 | cut -d: -f1)
JOINAT=$(grep -n ' f2-join ' "$LOG" | cut -d: -f1)
check "the join ran after the last part ended" test "${JOINAT:-0}" -gt "${LASTEND:-999}"
check "psql: every node of f2 done, the flow finished" pgw "$DB" \
    "select string_agg(state || ':' || n, ',') || '|' || (select unfinished || ':' || (finished_at is not null) from wqrun.flows where id = 'f2')
       from (select state, count(*) n from wqrun.flow_nodes where flow = 'f2' group by state) s" "done:41|0:true" 5
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.jobs")|$(pg_psql "$DB" "select count(*) from wqrun.dead")|$(pg_psql "$DB" "select string_agg(name, ',') from wqrun.runners")" \
    "0|0|B" "no item or dead letter left; A's runners row gone"
echo "kill -9 of A: $(printf '%s\n' "$inflight" | grep -c .) parts in flight taken over, $(grep -c '^start . q' "$LOG") part runs for 40 parts"
stop "$B"

# ======================================================================================
# 2. two dependencies finishing at the same moment on two runners, 20 times
# ======================================================================================
# bar.lua LOG DIR RUNNER: one worker per queue. A part appends RUNNER to DIR/FLOW and
# waits until both parts of its flow are there (only two runners can get there: each
# runs one part at a time); the second to arrive (second line of DIR/FLOW) writes the
# instant both return, DIR/FLOW.go (50 ms ahead); both sleep until then and return. Lines:
#   arrive FLOW KEY RUNNER / finish FLOW KEY RUNNER TIME / join FLOW RUNNER N STATES
BAR=$(script bar.lua <<'LUA'
local log = assert(io.open(arg[1], "a"))
local dir, me = arg[2], arg[3]
local function note(s) log:write(s, "\n"); log:flush() end
local function lines(path)
    local f = io.open(path)
    if not f then return {} end
    local t = {}
    for l in f:lines() do t[#t + 1] = l end
    f:close()
    return t
end
local function read(path)
    local f = io.open(path)
    if not f then return nil end
    local s = f:read("a")
    f:close()
    return tonumber(s)
end
wq.queue("parts", {workers = 1, max_retries = 0, handler = function(key, payload, job)
    local flow = job.flow.id
    local path = dir .. "/" .. flow
    local f = assert(io.open(path, "a"))
    f:write(me, "\n")
    f:close()
    note(string.format("arrive %s %s %s", flow, key, me))
    local deadline = wq.time() + 8
    if lines(path)[2] == me then -- the second to arrive (it sees both lines) sets the instant
        local g = assert(io.open(path .. ".tmp", "w"))
        g:write(string.format("%.6f", wq.time() + 0.05))
        g:close()
        assert(os.rename(path .. ".tmp", path .. ".go"))
    end
    local at = read(path .. ".go")
    while not at do
        if wq.time() > deadline then
            note(string.format("timeout %s %s %s", flow, key, me))
            return wq.fail("barrier timeout")
        end
        wq.sleep(0.002)
        at = read(path .. ".go")
    end
    if at > wq.time() then wq.sleep(at - wq.time()) end
    note(string.format("finish %s %s %s %.4f", flow, key, me, wq.time()))
    return key
end})
wq.queue("joins", {workers = 1, handler = function(key, payload, job)
    local d = job.deps
    note(string.format("join %s %s %d %s:%s:%s,%s:%s:%s", job.flow.id, me, #d, d[1].key, d[1].state,
        tostring(d[1].result), d[2].key, d[2].state, tostring(d[2].result)))
end})
LUA
)
DB=$(pg_fresh_db)
BLOG=$TMP/bar.log
BDIR=$TMP/barrier
mkdir -p "$BDIR"
: >"$BLOG"
run migrate --db "$DB"
pg_bg c --quiet --serve --lease 2 --runner-name C --db "$DB" "$BAR" "$BLOG" "$BDIR" C
C=$BG_PID
pg_bg d --quiet --serve --lease 2 --runner-name D --db "$DB" "$BAR" "$BLOG" "$BDIR" D
D=$BG_PID
check "both runners registered" pgw "$DB" "select count(*) from wqrun.runners" 2 10
NFLOWS=20
for i in $(seq 1 $NFLOWS); do
    doc="{\"id\": \"b$i\", \"nodes\": [{\"queue\": \"parts\", \"key\": \"b$i-x\"}, {\"queue\": \"parts\", \"key\": \"b$i-y\"},
        {\"queue\": \"joins\", \"key\": \"b$i-j\", \"after\": [{\"queue\": \"parts\", \"key\": \"b$i-x\"}, {\"queue\": \"parts\", \"key\": \"b$i-y\"}]}]}"
    if [ $((i % 2)) = 0 ]; then
        printf '%s' "$doc" >"$TMP/b$i.json"
        run add-flow --db "$DB" "$TMP/b$i.json"
        expect_eq "$OUT" "added flow b$i" "add-flow b$i"
    else
        pg_psql "$DB" "select wqrun.add_flow('$doc'::jsonb)" >/dev/null
    fi
    wait_for "$BLOG" "join b$i " 1 12 || { fail "flow b$i: no join within 12 s"; break; }
done
sleep 0.5
expect_eq "$(grep -c '^timeout' "$BLOG")" 0 "no part waited in vain at the barrier"
expect_eq "$(grep -c '^join ' "$BLOG")|$(grep '^join ' "$BLOG" | awk '{ print $2 }' | sort -u | wc -l)" "$NFLOWS|$NFLOWS" \
    "$NFLOWS joins, one per flow: each released and run exactly once"
bad=""
for i in $(seq 1 $NFLOWS); do
    line=$(grep "^join b$i " "$BLOG")
    [[ $line =~ ^join\ b$i\ [CD]\ 2\ b$i-x:done:b$i-x,b$i-y:done:b$i-y$ ]] || bad="$bad [$line]"
done
expect_eq "$bad" "" "each join saw both parts done with their results"
expect_eq "$(awk '$1 == "arrive" { r[$2] = r[$2] $4 } END { for (f in r) if (r[f] != "CD" && r[f] != "DC") print f, r[f] }' "$BLOG")" "" \
    "the two parts of every flow ran on the two runners (one each)"
SPREAD=$(awk '$1 == "finish" { if ($2 in t) { d = $5 - t[$2]; if (d < 0) d = -d; if (d > m) m = d } else t[$2] = $5 } END { printf "%.4f", m }' "$BLOG")
expect_between "$SPREAD" 0 0.05 "the two parts of each flow returned within 50 ms of each other (at most ${SPREAD}s apart)"
check "psql: every node done, every flow finished" pgw "$DB" \
    "select (select string_agg(state || ':' || n, ',') from (select state, count(*) n from wqrun.flow_nodes group by state) s) || '|' ||
            (select count(*) from wqrun.flows where unfinished = 0 and finished_at is not null)" "done:$((3 * NFLOWS))|$NFLOWS" 5
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.flow_nodes where waits <> 0")|$(pg_psql "$DB" "select count(*) from wqrun.jobs")" "0|0" \
    "no count left above zero, no item left"
echo "simultaneous finishes: $NFLOWS flows, the two parts of a flow at most ${SPREAD}s apart"
stop "$C" "$D"

# ======================================================================================
# 3. HTTP and the command line against PostgreSQL
# ======================================================================================
DB=$(pg_fresh_db)
HLOG=$TMP/http.log
: >"$HLOG"
run migrate --db "$DB"
call() {
    local m=$1 p=$2
    shift 2
    CODE=$(curl -sS -m 10 -X "$m" -o "$TMP/body" -w '%{http_code}' "$@" "$BASE$p" 2>"$TMP/curl.err") ||
        CODE="curl failed: $(cat "$TMP/curl.err")"
    BODY=$(cat "$TMP/body" 2>/dev/null)
    OUT=$BODY ERR="" RC=$CODE LAST_CMD="curl -X $m $p"
}
post_flow() {
    call POST /flows -H 'Content-Type: application/json' --data-binary "$1"
}
jq_py() {
    printf '%s' "$BODY" | python3 -c "import json, sys; f = json.load(sys.stdin); print($1)" 2>&1
}
listen_start -- --db "$DB" --runner-name H "$PGF" "$HLOG" H 4 || finish
fanin h1 hp 5 0.01 >"$TMP/h1.json"
post_flow "$(cat "$TMP/h1.json")"
expect_eq "$CODE|$BODY" '202|{"id":"h1"}' "POST /flows on PostgreSQL: 202 with the id"
check "the posted flow's join ran" wait_for "$HLOG" "join H h1-join deps=5 done=5 sum=15" 1 10
check "h1 finished" pgw "$DB" "select finished_at is not null from wqrun.flows where id = 'h1'" t 5
call GET /flows/h1
expect_eq "$CODE" 200 "GET /flows/h1"
expect_eq "$(jq_py 'f["id"], f["done"], f["blocked"], f["pending"], f["dead"], f["cancelled"], f.get("finished_at") is not None, [(x["key"], x["state"], x.get("result")) for x in f["nodes"]][-2:]')" \
    "h1 6 0 0 0 False True [('hp05', 'done', {'n': 5}), ('h1-join', 'done', {'sum': 15})]" "GET /flows/h1: every node done with its result"
expect_eq "$(jq_py '[(a["queue"], a["key"]) for a in f["nodes"][-1]["after"]]')" \
    "[('parts', 'hp01'), ('parts', 'hp02'), ('parts', 'hp03'), ('parts', 'hp04'), ('parts', 'hp05')]" "the join's after, in order"
call GET "/flows?state=finished"
expect_eq "$CODE|$(jq_py '[(x["id"], x["nodes"], x["done"]) for x in f["flows"]]')" "200|[('h1', 6, 6)]" "GET /flows?state=finished"
call GET "/flows?state=running"
expect_eq "$CODE|$BODY" '200|{"flows":[]}' "GET /flows?state=running: none"
call GET /flows/nope
expect_eq "$CODE" 404 "GET /flows/nope"
post_flow '{"id": "h4", "nodes": [{"queue": "parts", "key": "x0"}, {"queue": "parts", "key": "x0"}]}'
expect_eq "$CODE" 400 "a duplicate node: 400"
expect_in "$BODY" "flow h4: node parts/x0 is added twice" "names the node"
post_flow '{"id": "h3", "nodes": [{"queue": "parts", "key": "x0"}, {"queue": "joins", "key": "xj", "after": [{"queue": "parts", "key": "zz"}]}]}'
expect_eq "$CODE" 400 "an unknown after: 400"
expect_in "$BODY" "flow h3: node joins/xj waits for parts/zz, which is no node of the flow" "names the node"
post_flow '{"id": "h2", "nodes": [{"queue": "parts", "key": "x1", "after": [{"queue": "parts", "key": "x2"}]}, {"queue": "parts", "key": "x2", "after": [{"queue": "parts", "key": "x1"}]}]}'
expect_eq "$CODE" 400 "a cycle: 400"
expect_re "$BODY" 'flow h2: node parts/x[12] is in a cycle' "names a node of the cycle"
post_flow '{"id": "h5", "nodes": [{"queue": "parts", "key": "x0"'
expect_eq "$CODE" 400 "malformed JSON: 400"
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.flows where id <> 'h1'")|$(pg_psql "$DB" "select count(*) from wqrun.flow_nodes where key like 'x%'")" \
    "0|0" "the refused flows added nothing"

# ---- cancel over HTTP and from the command line, on a paused queue ----
run pause --db "$DB" parts
expect_rc 0 "pause parts (URL)"
for f in hc cc; do
    cat >"$TMP/$f.json" <<EOF
{"id": "$f", "nodes": [{"queue": "parts", "key": "${f}1", "payload": {"n": 1, "s": 0}}, {"queue": "parts", "key": "${f}2", "payload": {"n": 2, "s": 0}},
  {"queue": "joins", "key": "${f}j", "after": [{"queue": "parts", "key": "${f}1"}, {"queue": "parts", "key": "${f}2"}]},
  {"queue": "joins", "key": "${f}z", "after": [{"queue": "joins", "key": "${f}j"}]}]}
EOF
done
post_flow "$(cat "$TMP/hc.json")"
expect_eq "$CODE" 202 "POST /flows hc"
call GET /flows/hc
expect_eq "$(jq_py 'f["pending"], f["blocked"], [(x["key"], x["state"]) for x in f["nodes"]], [x["waits"] for x in f["nodes"] if x["state"] == "blocked"]')" \
    "2 2 [('hc1', 'pending'), ('hc2', 'pending'), ('hcj', 'blocked'), ('hcz', 'blocked')] [2, 1]" "hc unstarted"
run show --db "$DB" joins hcj --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["state"], d["waits"], d["flow"])')" \
    "blocked 2 hc" "wqrun show --json: a blocked node, its dependencies left and its flow"
call POST /flows/hc/cancel
expect_eq "$CODE|$BODY" '200|{"cancelled":4}' "POST /flows/hc/cancel"
expect_eq "$(pg_psql "$DB" "select string_agg(key || ':' || state || ':' || error, ',' order by id) || '|' || (select cancelled || ':' || (finished_at is not null) from wqrun.flows where id = 'hc') from wqrun.flow_nodes where flow = 'hc'")" \
    "hc1:dead:flow cancelled,hc2:dead:flow cancelled,hcj:dead:flow cancelled,hcz:dead:flow cancelled|true:true" "psql: hc cancelled"
call POST /flows/nope/cancel
expect_eq "$CODE" 404 "POST /flows/nope/cancel"

run add-flow --db "$DB" "$TMP/cc.json"
expect_rc 0 "add-flow cc"
expect_eq "$OUT" "added flow cc" "add-flow prints the id"
run add-flow --db "$DB" "$TMP/cc.json"
expect_eq "$RC|$OUT|$(pg_psql "$DB" "select count(*) from wqrun.flow_nodes where flow = 'cc'")" "0|added flow cc|4" "the same flow again adds nothing"
printf '{"id": "cd", "nodes": [{"queue": "parts", "key": "d0"}, {"queue": "parts", "key": "d0"}]}' >"$TMP/cd.json"
run add-flow --db "$DB" "$TMP/cd.json"
expect_rc 1 "add-flow of a duplicate node"
expect_in "$ERR" "flow cd: node parts/d0 is added twice" "names the node"
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.flow_nodes where flow = 'cd'")" 0 "nothing added"
run flows --db "$DB"
expect_rc 0 "flows (URL)"
expect_re "$OUT" '^ID +STATE +NODES +BLOCKED +PENDING +DONE +DEAD +CREATED +FINISHED$' "flows: the header"
expect_re "$OUT" '^cc +running +4 +2 +2 +0 +0 ' "flows: cc running, 2 blocked, 2 pending"
expect_re "$OUT" '^hc +cancelled +4 +0 +0 +0 +4 ' "flows: hc cancelled"
expect_re "$OUT" '^h1 +finished +6 +0 +0 +6 +0 ' "flows: h1 finished"
run flows --db "$DB" --state running --json
expect_rc 0 "flows --json (URL)"
expect_eq "$(printf '%s' "$OUT" | python3 -c '
import json, sys
print([(f["id"], f["nodes"], f["blocked"], f["pending"], f["cancelled"], f.get("finished_at")) for f in json.load(sys.stdin)])' 2>&1)" \
    "[('cc', 4, 2, 2, False, None)]" "flows --state running --json: cc"
run flow show --db "$DB" cc
expect_rc 0 "flow show (URL)"
expect_re "$OUT" '^parts +cc1 +pending +- +1 +- +-$' "flow show: a pending part, attempt 1"
expect_re "$OUT" '^joins +ccj +blocked +2 +- +parts/cc1, parts/cc2 +-$' "flow show: the join, waiting for 2"
run flow show --db "$DB" h1 --json
expect_rc 0 "flow show --json (URL)"
expect_eq "$(printf '%s' "$OUT" | python3 -c '
import json, sys
f = json.load(sys.stdin)
n = {x["key"]: x for x in f["nodes"]}
print(f["id"], len(f["nodes"]), f["done"], n["h1-join"]["result"], n["hp02"]["result"], len(n["h1-join"]["after"]))' 2>&1)" \
    "h1 6 6 {'sum': 15} {'n': 2} 5" "flow show --json: nodes, results, after"
run flow show --db "$DB" nope
expect_rc 1 "flow show of no flow"
expect_in "$ERR" "no flow 'nope'" "says so"
run flow cancel --db "$DB" cc
expect_rc 0 "flow cancel (URL)"
expect_eq "$OUT" "cancelled flow 'cc': 4 unfinished nodes" "says how many"
expect_eq "$(pg_psql "$DB" "select string_agg(key || ':' || state || ':' || error, ',' order by id) || '|' || (select cancelled || ':' || (finished_at is not null) from wqrun.flows where id = 'cc') from wqrun.flow_nodes where flow = 'cc'")" \
    "cc1:dead:flow cancelled,cc2:dead:flow cancelled,ccj:dead:flow cancelled,ccz:dead:flow cancelled|true:true" "psql: cc cancelled"
run flow cancel --db "$DB" nope
expect_rc 1 "flow cancel of no flow"
run resume --db "$DB" parts
expect_rc 0 "resume parts"
sleep 0.5
expect_eq "$(grep -c ' hc\| cc' "$HLOG")|$(pg_psql "$DB" "select count(*) from wqrun.jobs")" "0|0" \
    "no node of a cancelled flow ran; no item left"
stop "$PID"

finish
