#!/usr/bin/env bash
# Operating a fleet on PostgreSQL (SPEC 7.5, 8.2, 8.4), read back with psql:
#   - the schema's upgrade from version 1 (the operator functions and the
#     signals table come with version 2), 2 and 3 (version 4: the hot tables'
#     autovacuum without cost delay), 4 (version 5: the claim's room_of), 5 (version 6:
#     finish() hands items over), 6 (version 7: the queues' levels and resets, for the
#     floors the claims start at), 7 (version 8: add_one, one lock order);
#   - the operator commands with only the URL, no runner: items (text,
#     --json, --state, --limit), remove, retry KEY and --all, purge-dead,
#     pause/resume, and their refusals (exit 1, unknown queue or key);
#   - two worker runners and an API runner that never claims: pause from
#     the command line and over HTTP stops starts on both workers from 1 s
#     after it returns; resume starts them within 1 s; an HTTP cancel and a
#     CLI cancel reach the runner that runs the key within 1 s (its wait
#     raises "cancelled"; no retry, no dead letter); HTTP remove, items,
#     dead, retry and purge act on the whole database;
#   - shared options: two runners define max_retries differently, the last
#     one started wins, both log a warning naming both values, and the first
#     runner applies the winner's value.
. "$(dirname "$0")/lib.sh"
pg_need

LUA=$E2E_DIR/lua
DB=$(pg_fresh_db)
LOG=$TMP/runs.log
: >"$LOG"
q() { pg_psql "$DB" "$1"; }

# ---- the upgrade from version 1 ------------------------------------------------
UP=$(pg_fresh_db)
run migrate --db "$UP"
expect_eq "$OUT" 'schema "wqrun" created (version 13)' "a new schema is version 13"
# What version 10 added (queues.unique_adds, dead.traceback; add()'s unique_add default NULL), taken away
# again with every older version set below.
# What version 11 added (table history, queues.history, jobs.progress and the items view's column),
# taken away with every older version.
V10="drop table wqrun.history; alter table wqrun.queues drop column history;
  alter table wqrun.jobs drop column progress cascade;"
V9="$V10 alter table wqrun.queues drop column unique_adds; alter table wqrun.dead drop column traceback;
  alter table wqrun.runners drop column locked_at;"
# What version 9 added (flows), taken away again with every older version set below.
V8="$V9 drop table wqrun.flow_deps, wqrun.flow_nodes, wqrun.flows cascade; drop sequence wqrun.flow_ids;
  alter table wqrun.jobs drop column node;"
# What version 7 added, taken away again with every older version set below.
V6="$V8 drop table wqrun.levels; alter table wqrun.queues drop column resets;"
# Back to version 1's tables (the functions are made anew by every migration).
V1="$V6 drop table wqrun.signals, wqrun.groups cascade; drop function wqrun.pause, wqrun.remove, wqrun.cancel,
  wqrun.retry_dead, wqrun.purge_dead, wqrun.known_queue, wqrun.check_queue;
  alter table wqrun.queues drop column keep_done, drop column g_conc, drop column g_rate,
    drop column g_burst, drop column q_rate, drop column q_burst, drop column q_tat;
  alter table wqrun.jobs drop column held; alter table wqrun.runners drop column done;
  create index jobs_claim on wqrun.jobs (queue, priority desc, run_at, seq) where not running;
  drop index wqrun.done_expiry;
  update wqrun.meta set value = '1' where key = 'schema_version'"
pg_psql "$UP" "$V1" >/dev/null
run add --db "$UP" w k1
expect_rc 0 "a command upgrades a version 1 schema first"
expect_eq "$(pg_psql "$UP" "select value from wqrun.meta where key = 'schema_version'")" 13 \
    "upgraded to version 13"
expect_eq "$(pg_psql "$UP" "select wqrun.remove('w', 'k1')")" removed "the version 2 functions work"
pg_psql "$UP" "$V1" >/dev/null
run migrate --db "$UP"
expect_rc 0 "migrate a version 1 schema"
expect_eq "$OUT" 'schema "wqrun" upgraded from version 1 to 13' "migrate says what it did"
# Version 2 had add() without unique_add: its functions are replaced, the new one works.
pg_psql "$UP" "$V6 drop function wqrun.add(text, text, jsonb, double precision, integer, text, boolean, boolean);
  update wqrun.meta set value = '2' where key = 'schema_version'" >/dev/null
run migrate --db "$UP"
expect_eq "$OUT" 'schema "wqrun" upgraded from version 2 to 13' "a version 2 schema is upgraded"
expect_eq "$(pg_psql "$UP" "select wqrun.add('w', 'u1'), wqrun.add('w', 'u1', unique_add => true)")" \
    "queued|skipped: pending" "wqrun.add(..., unique_add => true) leaves a pending key alone"
# Version 3 ran the hot tables' autovacuum with the default cost delay; 4 without.
RELOPTS="select c.relname || ':' || coalesce(array_to_string(c.reloptions, ','), '')
  from pg_class c where c.oid in ('wqrun.jobs'::regclass, 'wqrun.groups'::regclass) order by 1"
pg_psql "$UP" "$V6 alter table wqrun.jobs reset (autovacuum_vacuum_cost_delay);
  alter table wqrun.groups reset (autovacuum_vacuum_cost_delay);
  update wqrun.meta set value = '3' where key = 'schema_version'" >/dev/null
expect_eq "$(pg_psql "$UP" "$RELOPTS" | grep -c 'autovacuum_vacuum_cost_delay')" 0 "version 3: no cost delay set"
run add --db "$UP" w v3item
expect_rc 0 "a command on a version 3 schema"
run migrate --db "$UP"
expect_eq "$OUT" 'schema "wqrun" is up to date (version 13)' "the command upgraded it first"
pg_psql "$UP" "$V6 alter table wqrun.jobs reset (autovacuum_vacuum_cost_delay);
  alter table wqrun.groups reset (autovacuum_vacuum_cost_delay);
  update wqrun.meta set value = '3' where key = 'schema_version'" >/dev/null
run migrate --db "$UP"
expect_eq "$OUT" 'schema "wqrun" upgraded from version 3 to 13' "a version 3 schema is upgraded"
expect_eq "$(pg_psql "$UP" "$RELOPTS" | sed 's/fillfactor=[0-9]*,\{0,1\}//; s/autovacuum_[a-z_]*scale_factor=[0-9.]*,\{0,1\}//g')" \
    "groups:autovacuum_vacuum_cost_delay=0
jobs:autovacuum_vacuum_cost_delay=0" "version 4: jobs and groups vacuum without cost delay"
expect_eq "$(pg_psql "$UP" "select key from wqrun.jobs where key = 'v3item'")" v3item "the version 3 schema's items kept"
# Version 4's claims joined their candidates to room(queue, groups[]); 5 drops it (room_of).
pg_psql "$UP" "$V6 create function wqrun.room(p_queue text, p_grps text[]) returns table (o_grp text)
  language sql as 'select null::text'; drop index wqrun.groups_rated;
  update wqrun.meta set value = '4' where key = 'schema_version'" >/dev/null
run migrate --db "$UP"
expect_eq "$OUT" 'schema "wqrun" upgraded from version 4 to 13' "a version 4 schema is upgraded"
expect_eq "$(pg_psql "$UP" "select string_agg(proname, ',' order by proname) from pg_proc
  where pronamespace = 'wqrun'::regnamespace and proname in ('room', 'room_of')")" room_of \
    "version 5: room() is gone, room_of() is there"
expect_eq "$(pg_psql "$UP" "select count(*) from pg_indexes where schemaname = 'wqrun' and indexname = 'groups_rated'")" 1 \
    "version 5: the index of the groups with a rate of their own"
# Version 5's finish() returned the count of stale outcomes; 6 returns the items it hands over.
pg_psql "$UP" "$V6 drop function wqrun.finish(text, bigint, text[], bigint[], smallint[], double precision[],
    integer[], text[], jsonb[], jsonb[], integer, jsonb[], boolean, boolean);
  create function wqrun.finish(text, bigint, text[], bigint[], smallint[], double precision[],
    integer[], text[], jsonb[], jsonb[] default null) returns integer language sql as 'select 0';
  update wqrun.meta set value = '5' where key = 'schema_version'" >/dev/null
run migrate --db "$UP"
expect_eq "$OUT" 'schema "wqrun" upgraded from version 5 to 13' "a version 5 schema is upgraded"
expect_eq "$(pg_psql "$UP" "select pronargs || ':' || (pg_get_function_result(oid) like 'TABLE(o_stale integer, o_key text%') from pg_proc
  where pronamespace = 'wqrun'::regnamespace and proname = 'finish'")" "14:true" \
    "version 6: one finish(), with p_take (and version 9's p_results, 11's p_keep and p_hist), returning the items it hands over"
# Version 7: the priorities the queues' items have (levels), filled from the items at the
# upgrade, and the queues' resets; an add writes its level.
pg_psql "$UP" "select wqrun.add('lv', 'p3', null, null, 3), wqrun.add('lv', 'p0')" >/dev/null
pg_psql "$UP" "$V6 update wqrun.meta set value = '6' where key = 'schema_version'" >/dev/null
run migrate --db "$UP"
expect_eq "$OUT" 'schema "wqrun" upgraded from version 6 to 13' "a version 6 schema is upgraded"
expect_eq "$(pg_psql "$UP" "select string_agg(priority::text, ',' order by priority) from wqrun.levels where queue = 'lv'")" \
    "0,3" "version 7: the levels of the items there"
pg_psql "$UP" "select wqrun.add('lv', 'p7', null, null, 7)" >/dev/null
expect_eq "$(pg_psql "$UP" "select string_agg(priority::text, ',' order by priority) from wqrun.levels where queue = 'lv'")" \
    "0,3,7" "version 7: an add writes a new level"
expect_eq "$(pg_psql "$UP" "insert into wqrun.queues (name) values ('rs') returning resets" | head -1)" 0 "version 7: the queues' resets"
expect_eq "$(pg_psql "$UP" "begin; select wqrun.add('lv', 'same-txn'); select state from wqrun.items where key = 'same-txn'; commit" | grep -v '^[A-Z]')" \
    "queued
queued" "version 7: an item added in the reader's own transaction is queued"
# Version 8: the functions that take rows in one lock order (add_one beside add); the
# tables are as they were.
pg_psql "$UP" "$V8 drop function wqrun.add_one; update wqrun.meta set value = '7' where key = 'schema_version'" >/dev/null
run migrate --db "$UP"
expect_eq "$OUT" 'schema "wqrun" upgraded from version 7 to 13' "a version 7 schema is upgraded"
expect_eq "$(pg_psql "$UP" "select count(*) from pg_proc where pronamespace = 'wqrun'::regnamespace and proname = 'add_one'")" 1 \
    "version 8: add_one() is there"
expect_eq "$(pg_psql "$UP" "select wqrun.add_many('[{\"queue\":\"lv\",\"key\":\"z\",\"group\":\"g\"},{\"queue\":\"lv\",\"key\":\"a\",\"group\":\"g\"}]')")" \
    '["queued", "queued"]' "version 8: a grouped batch is added"
expect_eq "$(pg_psql "$UP" "select string_agg(key, ',' order by run_at, seq) from wqrun.jobs where queue = 'lv' and key in ('z', 'a')")" \
    "z,a" "version 8: a batch keeps its items' order (not the keys' order it locks them in)"
# Version 9: flows, on a schema holding items: the items stay, and a flow can be added.
NITEMS=$(pg_psql "$UP" "select count(*) from wqrun.jobs")
check "items are there before the upgrade to 9 ($NITEMS)" test "$NITEMS" -gt 0
pg_psql "$UP" "$V8 update wqrun.meta set value = '8' where key = 'schema_version'" >/dev/null
run migrate --db "$UP"
expect_eq "$OUT" 'schema "wqrun" upgraded from version 8 to 13' "a version 8 schema is upgraded"
expect_eq "$(pg_psql "$UP" "select count(*) from wqrun.jobs where node is null")" "$NITEMS" \
    "version 9: every item kept, of no flow"
expect_eq "$(pg_psql "$UP" "select wqrun.add_flow('{\"id\":\"up\",\"nodes\":[{\"queue\":\"lv\",\"key\":\"f1\"},
    {\"queue\":\"lv\",\"key\":\"f2\",\"after\":[{\"queue\":\"lv\",\"key\":\"f1\"}]}]}');
    select string_agg(key || ':' || state, ',' order by key) from wqrun.items where flow = 'up'")" \
    "up
f1:queued,f2:blocked" "version 9: a flow on the upgraded schema, one node queued, one blocked"
# Version 10: the queues' unique option; add() without unique_add takes it from the queue.
pg_psql "$UP" "$V9 drop function wqrun.add(text, text, jsonb, double precision, integer, text, boolean, boolean);
  create function wqrun.add(queue text, key text, payload jsonb default null,
    after_seconds double precision default null, priority integer default null,
    grp text default null, force boolean default false, unique_add boolean default false)
    returns text language sql as 'select null::text';
  update wqrun.meta set value = '9' where key = 'schema_version'" >/dev/null
run migrate --db "$UP"
expect_eq "$OUT" 'schema "wqrun" upgraded from version 9 to 13' "a version 9 schema is upgraded"
expect_eq "$(pg_psql "$UP" "insert into wqrun.queues (name, unique_adds) values ('lv', true)
    on conflict (name) do update set unique_adds = true;
  select wqrun.add('lv', 'f1'), wqrun.add('lv', 'f1', unique_add => false)" | grep -v '^INSERT')" \
    "skipped: pending|deduplicated" "version 10: an add that does not say is unique as its queue is"

# ---- the commands with only the URL ----------------------------------------------
run add --db "$DB" w a '{"n":1}'
run add --db "$DB" w b --after 3600
run add --db "$DB" w c --priority 5
run items --db "$DB" w
expect_rc 0 "items"
expect_eq "$(printf '%s\n' "$OUT" | awk 'NR > 1 { print $1, $2, $3 }')" "c queued 5
a queued 0
b waiting 0" "items in run order: priority, then FIFO, the delayed one last"
run items --db "$DB" w --state waiting --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; print([(i["key"], i["state"], i["ready_at"] > 0) for i in json.load(sys.stdin)])')" \
    "[('b', 'waiting', True)]" "items --state waiting --json"
run items --db "$DB" w --limit 1
expect_in "$OUT" "... more (--limit 1 shows 1)" "items --limit says there is more"
run remove --db "$DB" w b
expect_rc 0 "remove"
expect_eq "$OUT" "removed 'b' from queue 'w'" "remove says so"
expect_eq "$(q "select count(*) from wqrun.jobs where key = 'b'")" 0 "the row is gone"
run remove --db "$DB" w b
expect_rc 1 "remove again"
expect_in "$ERR" "no queued or delayed item 'b' in queue 'w'" "remove again: nothing there"
run cancel --db "$DB" w a
expect_rc 1 "cancel of a queued key"
expect_in "$ERR" "'a' is not processing in queue 'w'" "cancel: not processing"
run pause --db "$DB" nosuch
expect_rc 1 "pause of an unknown queue"
expect_in "$ERR" "no queue 'nosuch'" "unknown queue named"
q "insert into wqrun.dead (queue, key, payload, error, attempts) values
   ('w', 'd1', '{\"x\": 1}', 'boom', 3), ('w', 'd2', null, 'boom', 1), ('w', 'd3', null, 'e', 1)" >/dev/null
q "insert into wqrun.jobs (queue, key, run_at, seq, requeues, last_error, running) values
   ('w', 'd1', now() + interval '1 hour', 0, 0, null, false)" >/dev/null
run retry --db "$DB" w d1
expect_rc 0 "retry KEY"
expect_eq "$OUT" "re-queued dead letter 'd1' of queue 'w'" "retry says so"
expect_eq "$(q "select state, payload::text, requeues from wqrun.items where key = 'd1'")" 'queued|{"x": 1}|0' \
    "the dead letter is queued now (its pending delayed row too), payload kept, count clean"
run retry --db "$DB" w d1
expect_rc 1 "retry of a key that is not dead"
run retry --db "$DB" w --all
expect_eq "$OUT" "re-queued 2 dead letters of queue 'w'" "retry --all"
expect_eq "$(q "select count(*) from wqrun.dead")" 0 "no dead letters left"
q "insert into wqrun.dead (queue, key, error, attempts) values ('w', 'd9', 'e', 1)" >/dev/null
run purge-dead --db "$DB" w
expect_eq "$OUT" "purged 1 dead letter of queue 'w'" "purge-dead"
for k in d1 d2 d3 a c; do run remove --db "$DB" w "$k"; done
expect_eq "$(q "select count(*) from wqrun.jobs")" 0 "all removed"

# ---- two workers and an API runner -------------------------------------------------
for i in $(seq 1 8); do run add --db "$DB" w "n$i"; done
run pause --db "$DB" w
expect_eq "$OUT" "paused queue 'w'" "pause before any runner"
listen_start -- --serve --db "$DB" --runner-name api "$LUA/pg_ops_api.lua" || finish
API=$BASE
pg_bg w1 --quiet --serve --db "$DB" --runner-name w1 "$LUA/pg_ops.lua" "$LOG" w1
W1=$BG_PID
pg_bg w2 --quiet --serve --db "$DB" --runner-name w2 "$LUA/pg_ops.lua" "$LOG" w2
W2=$BG_PID
check "three runners registered" pg_wait "$DB" "select count(*) from wqrun.runners" 3 10
sleep 1.5
expect_eq "$(grep -c '^start' "$LOG")" 0 "paused: nothing starts on either worker"
expect_eq "$(curl -s "$API/queues/w/items?state=queued" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))')" 8 \
    "the API runner lists the database's items"
run resume --db "$DB" w
T=$(now)
check "resumed: runs start" wait_for "$LOG" "start" 1 5
FIRST=$(awk '/^start/ { print $3; exit }' "$LOG")
expect_between "$(awk -v a="$FIRST" -v b="$T" 'BEGIN { printf "%.3f", a - b }')" -1 1 \
    "the first start within 1 s of resume returning"
check "all eight ran" wait_for "$LOG" "end n" 8 10
expect_eq "$(awk '/^start/ { print $4 }' "$LOG" | sort -u | tr '\n' ' ')" "w1 w2 " "both workers ran them"

# Pause over HTTP while items flow: no start from 1 s after the answer.
# all 40 in one transaction (one `wqrun add` each would feed them slower than they run)
q "select wqrun.add_many(jsonb_agg(jsonb_build_object('queue', 'w', 'key', 'm' || i)))
   from generate_series(1, 40) i" >/dev/null
check "m items start" wait_for "$LOG" "start m" 2 5
expect_eq "$(curl -s -X POST "$API/queues/w/pause")" '{"paused":true,"changed":true}' "HTTP pause"
T=$(now)
sleep 2
LATE=$(awk -v t="$T" '/^start m/ && $3 > t + 1 { n++ } END { print n + 0 }' "$LOG")
expect_eq "$LATE" 0 "no start on any worker from 1 s after the HTTP pause answered"
check "some m items are left" [ "$(grep -c '^start m' "$LOG")" -lt 40 ]
expect_eq "$(q "select paused from wqrun.queues where name = 'w'")" t "paused in the database"
expect_eq "$(curl -s -X POST "$API/queues/w/resume")" '{"paused":false,"changed":true}' "HTTP resume"
check "every m item ran after the resume" wait_for "$LOG" "end m" 40 15

# HTTP remove, 404 and 409.
run pause --db "$DB" w
run add --db "$DB" w r1
expect_eq "$(curl -s -X DELETE "$API/queues/w/items/r1")" '{"removed":true}' "HTTP remove"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$API/queues/w/items/r1")" 404 "HTTP remove again: 404"
expect_eq "$(q "select count(*) from wqrun.jobs where key = 'r1'")" 0 "removed from the database"
run resume --db "$DB" w

# Cancel over HTTP: the runner that runs it stops it within 1 s.
run add --db "$DB" w slow1
check "slow1 started" wait_for "$LOG" "start slow1" 1 5
T=$(now)
CODE=$(curl -s -o "$TMP/cancel.json" -w '%{http_code}' -X POST "$API/queues/w/items/slow1/cancel")
expect_eq "$CODE" 202 "HTTP cancel of a key another runner runs: 202"
check "slow1 ended" wait_for "$LOG" "end slow1" 1 3
END=$(awk '/^end slow1/ { print $3 }' "$LOG")
expect_between "$(awk -v a="$END" -v b="$T" 'BEGIN { printf "%.3f", a - b }')" 0 1 "slow1 ended within 1 s of the cancel"
expect_in "$(grep '^end slow1' "$LOG")" "cancelled" "its wait raised cancelled"
check "slow1's row is gone" pg_wait "$DB" "select count(*) from wqrun.jobs where key = 'slow1'" 0 3
expect_eq "$(q "select count(*) from wqrun.dead where key = 'slow1'")" 0 "not dead-lettered"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$API/queues/w/items/slow1/cancel")" 404 \
    "HTTP cancel of a key that is gone: 404"

# Cancel from the command line.
run add --db "$DB" w slow2
check "slow2 started" wait_for "$LOG" "start slow2" 1 5
run cancel --db "$DB" w slow2
expect_rc 0 "CLI cancel"
expect_eq "$OUT" "cancelled 'slow2' in queue 'w'" "CLI cancel waits for the run to end"
check "CLI cancel within 1 s" [ "$(awk -v e="$ELAPSED" 'BEGIN { print (e < 1.5) }')" = 1 ]
expect_in "$(grep '^end slow2' "$LOG")" "cancelled" "slow2's wait raised cancelled"
sleep 0.3
expect_eq "$(grep -c '^start slow2' "$LOG")" 1 "slow2 not retried"

# Dead letters over HTTP.
run add --db "$DB" w fail1 '{"k":"v"}'
check "fail1 is dead" pg_wait "$DB" "select count(*) from wqrun.dead where key = 'fail1'" 1 5
expect_eq "$(curl -s "$API/queues/w/dead" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["total"], d["dead"][0]["key"], d["dead"][0]["payload"], "boom fail1" in d["dead"][0]["error"], d["dead"][0]["attempts"])')" \
    "1 fail1 {'k': 'v'} True 1" "HTTP dead lists the database's dead letters"
expect_eq "$(curl -s -X POST "$API/queues/w/dead/fail1/retry")" '{"retried":true}' "HTTP retry"
check "fail1 ran again" wait_for "$LOG" "start fail1" 2 5
check "and is dead again" pg_wait "$DB" "select count(*) from wqrun.dead where key = 'fail1'" 1 5
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$API/queues/w/dead/nope/retry")" 404 "HTTP retry of no dead letter: 404"
expect_eq "$(curl -s -X DELETE "$API/queues/w/dead")" '{"purged":1}' "HTTP purge"
expect_eq "$(q "select count(*) from wqrun.dead")" 0 "purged in the database"

for p in "$W1" "$W2" "$PID"; do kill -TERM "$p"; done
for p in "$W1" "$W2" "$PID"; do wait_exit "$p" 10; expect_eq "$RC" 0 "runner $p stops cleanly"; done

# ---- shared options: the last runner started wins, both say so ---------------------
pg_bg d1 --quiet --serve --db "$DB" --runner-name d1 "$LUA/pg_define.lua" 3
D1=$BG_PID
check "d1 stored max_retries 3" pg_wait "$DB" "select max_retries || ' ' || defined_by from wqrun.queues where name = 'dq'" "3 d1" 10
pg_bg d2 --quiet --serve --db "$DB" --runner-name d2 "$LUA/pg_define.lua" 0
D2=$BG_PID
check "d2 (started last) stored max_retries 0" pg_wait "$DB" "select max_retries || ' ' || defined_by from wqrun.queues where name = 'dq'" "0 d2" 10
check "d2 warns, naming both values and d1" wait_for "$TMP/d2.err" "max_retries is 0 in this runner's script and was 3 as runner 'd1' defined it" 1 5
check "d1 warns that it follows d2" wait_for "$TMP/d1.err" "max_retries is 0 as runner 'd2' defined it since" 1 5
kill -TERM "$D2"
wait_exit "$D2" 10
run add --db "$DB" dq x1
check "x1 is dead after one run on d1 (max_retries 0 now)" pg_wait "$DB" "select attempts from wqrun.dead where key = 'x1'" 1 10
kill -TERM "$D1"
wait_exit "$D1" 10
# A queue row that a pause made first (no runner had defined the queue) is no earlier
# definition: nothing to warn about.
PW=$(pg_fresh_db)
pw=$(script pw.lua <<'LUA'
local q = wq.queue("pw", {keep_done = 60, max_retries = 7, handler = function() end})
q:pause()
q:add("a")
q:resume()
wq.sleep(0.3)
LUA
)
run --db "$PW" "$pw"
expect_rc 0 "a script that pauses its queue at once"
expect_not_in "$ERR" "the last runner started wins" "no warning of another definition: there was none"
expect_eq "$(pg_psql "$PW" "select max_retries || ' ' || keep_done from wqrun.queues where name = 'pw'")" "7 60" \
    "its options are stored"

# This runner's own numbers (before the database-wide ones have been read): items it
# claimed that never failed are not "retrying".
RT=$(pg_fresh_db)
rt=$(script rt.lua <<'LUA'
local q = wq.queue("rt", {workers = 3, handler = function() wq.sleep(30) end})
for i = 1, 3 do q:add("r" .. i) end
LUA
)
listen_start -- --serve --grace 0 --db "$RT" "$rt" || finish
check "three items run" pg_wait "$RT" "select count(*) from wqrun.jobs where running" 3 10
expect_eq "$(curl -s "$BASE/queues" | python3 -c 'import json,sys; q=json.load(sys.stdin)[0]; print(q["processing"], q["retrying"], q.get("scope", "runner"))')" \
    "3 0 runner" "the first GET /queues (this runner's numbers): 3 processing, none retrying"
kill -TERM "$PID"
wait_exit "$PID" 10

# ---- failed attempts: logged, and listed with their last error ---------------------------
FL=$(pg_fresh_db)
flog=$(script flog.lua <<'LUA'
local q = wq.queue("fl", {max_retries = 1, limiter = wq.limiter.exponential(0.01, 0.01),
    handler = function() error("refused\nsecond line", 0) end})
q:add("x")
LUA
)
run --db "$FL" "$flog"
expect_rc 3 "a key that fails twice (dead-lettered: 3)"
expect_in "$ERR" "wqrun: fl: 'x' failed (attempt 1), next try in 0.01 s: refused" \
    "its first failure is logged: attempt, delay, the error's first line"
expect_in "$ERR" "wqrun: fl: 'x' failed 2 times, dead-lettered: refused" "its second: dead-lettered"
expect_not_in "$ERR" "second line" "the error's first line only"
wait1=$(script wait1.lua <<'LUA'
local q = wq.queue("fl", {limiter = wq.limiter.exponential(3600, 3600), handler = function()
    error("disk full\nsecond line", 0)
end})
q:add("y", {n = 1})
wq.sleep(0.5)
wq.exit(0)
LUA
)
run --quiet --db "$FL" "$wait1"
expect_eq "$(pg_psql "$FL" "select state, attempt, last_error from wqrun.items where key = 'y'")" \
    "waiting|2|disk full
second line" "y failed once and waits an hour, with its last error"
run items --db "$FL" fl
expect_re "$OUT" '^KEY +STATE +PRIORITY +ATTEMPT +READY AT \(UTC\) +LAST ERROR +PAYLOAD$' \
    "items: a LAST ERROR column"
expect_re "$OUT" '^y +waiting +0 +2 +[0-9]{4}-[0-9-]+ [0-9:]+ +disk full +\{"n": 1\}$' \
    "items: y waits for attempt 2, with the first line of its error"
run items --db "$FL" fl --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; print([(i["key"], i["attempt"], i["last_error"]) for i in json.load(sys.stdin)])')" \
    "[('y', 2, 'disk full\\nsecond line')]" "items --json: attempt and the whole message"
listen_start -- --serve --db "$FL" "$(script fl_api.lua <<<'wq.queue("fl")')" || finish
expect_eq "$(curl -s "$BASE/queues/fl/items" | python3 -c 'import json,sys; print([(i["key"], i["state"], i["attempt"], i["last_error"]) for i in json.load(sys.stdin)["items"]])')" \
    "[('y', 'waiting', 2, 'disk full\\nsecond line')]" "GET /queues/fl/items: attempt and last_error"
kill -TERM "$PID"
wait_exit "$PID" 10
# ---- one key's state: wqrun show, GET items/KEY; the dead letters: wqrun dead ----------
SH=$(pg_fresh_db)
ksrv=$(script ksrv.lua <<'LUA'
local s = wq.queue("s", {keep_done = 3600, max_retries = 0, handler = function(key)
    if key == "slow" then wq.sleep(60) end
    if key == "bad" then error("fatal\nsecond line", 0) end
    if key == "ok" then return {rows = 3} end
end})
LUA
)
listen_start -- --serve --grace 1 --db "$SH" "$ksrv" || finish
run add --db "$SH" s ok
run add --db "$SH" s bad '{"n":1}'
run add --db "$SH" s slow
check "ok done, bad dead, slow running" pg_wait "$SH" \
    "select concat((select count(*) from wqrun.done where key = 'ok'),
       (select count(*) from wqrun.dead where key = 'bad'),
       (select count(*) from wqrun.jobs where key = 'slow' and running))" 111 10
run pause --db "$SH" s
run add --db "$SH" s 'a/b c%' '{"n":1}' --priority 5 --group g
run add --db "$SH" s later --after 3600
# jq EXPR: evaluates a Python expression over $OUT, parsed as d
jq_() { printf '%s' "$OUT" | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
run show --db "$SH" s 'a/b c%'
expect_rc 0 "show of a queued key"
expect_re "$OUT" '^state +queued$' "show: queued"
expect_re "$OUT" '^payload +\{"n": 1\}$' "show: its payload"
expect_re "$OUT" '^priority +5$' "show: its priority"
expect_re "$OUT" '^group +g$' "show: its group"
run show --db "$SH" s later --json
expect_eq "$(jq_ 'd["state"], d["ready_at"] > 1e9, d["attempt"], sorted(d)')" \
    "waiting True 1 ['attempt', 'group', 'key', 'last_error', 'payload', 'priority', 'ready_at', 'state']" \
    "show --json of a delayed key"
run show --db "$SH" s slow
expect_re "$OUT" '^state +processing$' "show: a running key is processing"
run show --db "$SH" s ok
expect_re "$OUT" '^state +done$' "show: done"
expect_re "$OUT" '^finished at +[0-9]{4}-[0-9-]+ [0-9:]+ UTC$' "show: finished at, in UTC"
run show --db "$SH" s ok --json
expect_eq "$(jq_ 'd["state"], d["result"], d["finished_at"] > 1e9, sorted(d)')" \
    "done {'rows': 3} True ['finished_at', 'key', 'result', 'state']" "show --json of a done key"
run show --db "$SH" s bad
expect_re "$OUT" '^state +dead$' "show: dead"
expect_re "$OUT" '^attempts +1$' "show: its attempts"
expect_re "$OUT" '^error +fatal$' "show: its error"
run show --db "$SH" s nope
expect_rc 1 "show of an unknown key"
expect_eq "$ERR" "wqrun: show: no such key 'nope' in queue 's' (not pending, done or dead)" \
    "show says no such key, and nothing else"
run dead --db "$SH" s
expect_rc 0 "dead"
expect_re "$OUT" '^bad +1 +[0-9]{4}-[0-9-]+ [0-9:]+ +fatal$' "dead: key, attempts, failed at, the error's first line"
expect_not_in "$OUT" "second line" "dead: the first line only"
run items --db "$SH" s --state dead --json
expect_eq "$(jq_ '[(x["key"], x["payload"], x["error"], x["attempts"]) for x in d]')" \
    "[('bad', {'n': 1}, 'fatal\\nsecond line', 1)]" "items --state dead --json lists the dead letters"
BODY=
for path in "a%2Fb%20c%25 queued" "later waiting" "slow processing" "ok done" "bad dead"; do
    set -- $path
    OUT=$(curl -s "$BASE/queues/s/items/$1")
    expect_eq "$(jq_ 'd["state"]')" "$2" "GET /queues/s/items/$1: $2"
done
OUT=$(curl -s "$BASE/queues/s/items/a%2Fb%20c%25")
expect_eq "$(jq_ 'd["key"], d["payload"], d["priority"], d["group"], d["attempt"], d["last_error"], d["ready_at"]')" \
    "a/b c% {'n': 1} 5 g 1 None None" "GET of a queued key: the listing's fields, null when absent"
OUT=$(curl -s "$BASE/queues/s/items/ok")
expect_eq "$(jq_ 'd["result"], sorted(d)')" "{'rows': 3} ['finished_at', 'key', 'result', 'state']" "GET of a done key"
OUT=$(curl -s "$BASE/queues/s/items/bad")
expect_eq "$(jq_ 'repr(d["error"]), d["attempts"], d["payload"], sorted(d)')" \
    "'fatal\\nsecond line' 1 {'n': 1} ['attempts', 'error', 'failed_at', 'key', 'payload', 'state', 'traceback']" "GET of a dead key"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/queues/s/items/nope")" 404 "GET of an unknown key: 404"
run add --db "$SH" s x/y
OUT=$(curl -s "$BASE/queues/s/items/x/y")
expect_eq "$(jq_ 'd["key"], d["state"]')" "x/y queued" "a key with '/' unencoded in the path"
kill -TERM "$PID"
wait_exit "$PID" 10
expect_eq "$RC" 0 "the runner stops cleanly"

finish
