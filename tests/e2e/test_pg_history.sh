#!/usr/bin/env bash
# The history of finished runs on PostgreSQL (SPEC 11, issue 28 item 1: its
# PostgreSQL half), read back with psql: every run that ends done, dead,
# cancelled or removed leaves a row in wqrun.history, written in the
# transaction of its outcome, with its times, attempts, runner, result or
# error; a runner's deaths that dead-letter an item leave a 'dead' row of the
# runner that died; a remove from the command line a 'removed' row; two
# runners both write theirs; history = 0 keeps none; rows past the queue's
# history seconds are pruned while a runner runs; `wqrun history`, `wqrun
# show` (a finished key answers from its last run), q:item and GET
# /queues/Q/history and /items/KEY read it (a key dead with its dead letter
# purged, cancelled or removed: its state, attempts and error); a version 10
# schema is upgraded to 11.
. "$(dirname "$0")/lib.sh"
pg_need

DB=$(pg_fresh_db)
q() { pg_psql "$DB" "$1"; }

jobs=$(script jobs.lua <<'LUA'
local hist = tonumber(os.getenv("HIST") or "86400")
local keep = tonumber(os.getenv("KEEP") or "0")
local name = os.getenv("QNAME") or "files"
local gate = false
local q = wq.queue(name, {max_retries = 1, history = hist, keep_done = keep,
    limiter = wq.limiter.exponential(0.01, 0.01),
    handler = function(key, payload, job)
        if key == "bad" then error("broken " .. job.attempt) end
        if key == "flaky" and job.attempt == 1 then error("once") end
        if key == "slow" then while not gate do wq.sleep(0.01) end end
        if key == "r" then return {rows = 3} end
        if key == "s" then return "text" end
    end})
for i = 1, 3 do q:add("f" .. i) end
q:add("r"); q:add("s"); q:add("bad"); q:add("flaky"); q:add("slow")
q:add_after("later", 3600)
wq.sleep(0.3)
assert(q:remove("later"))
q:cancel("slow")
q:wait_idle()
local it = q:item("r")
print("item r", it and it.state, it and it.result and it.result.rows)
local b = q:item("bad")
print("item bad", b and b.state)
wq.exit(0)
LUA
)
t0=$(date +%s.%N)
run --db "$DB" --runner-name hist-a "$jobs"
expect_rc 0 "the run"
t1=$(date +%s.%N)
expect_eq "$(q "SELECT key, state, attempts, coalesce(result::text, '-'), coalesce(error, '-'), coalesce(runner, '-')
  FROM wqrun.history WHERE queue = 'files' ORDER BY key")" \
"bad|dead|2|-|$TMP/jobs.lua:8: broken 2|hist-a
f1|done|1|-|-|hist-a
f2|done|1|-|-|hist-a
f3|done|1|-|-|hist-a
flaky|done|2|-|-|hist-a
later|removed|0|-|-|-
r|done|1|{\"rows\": 3}|-|hist-a
s|done|1|\"text\"|-|hist-a
slow|cancelled|1|-|cancelled|hist-a" "a row per finished run: state, attempts, result or error, runner"
expect_eq "$(q "SELECT count(*) FROM wqrun.history WHERE added_at BETWEEN to_timestamp($t0) AND to_timestamp($t1)
  AND finished_at BETWEEN to_timestamp($t0) AND to_timestamp($t1)
  AND (started_at BETWEEN added_at AND finished_at OR (state = 'removed' AND started_at IS NULL))")" 9 \
    "times: added <= started <= finished, within the run (a removed item never started)"
expect_in "$OUT" $'item r\tdone\t3' "q:item of a finished key (no keep_done): its last run, with its result"
expect_in "$OUT" $'item bad\tdead' "q:item of a dead key"
expect_eq "$(q "SELECT history FROM wqrun.queues WHERE name = 'files'")" 86400 \
    "queues.history: the runner's definition (the default, a day)"

# wqrun history: newest first, paged, as on a state file
run history --db "$DB" files --limit 3
expect_rc 0 "wqrun history"
ids=$(q "SELECT string_agg(id::text, ' ' ORDER BY id DESC) FROM (SELECT id FROM wqrun.history
  WHERE queue = 'files' ORDER BY id DESC LIMIT 5) x")
expect_eq "$(printf '%s\n' "$OUT" | head -1)" \
    "ID        KEY                       STATE      FINISHED (UTC)       ATTEMPTS      TOOK  ERROR OR RESULT" "the header"
expect_eq "$(printf '%s\n' "$OUT" | awk 'NR > 1 && $1 != "..." { print $1 }' | tr '\n' ' ')" \
    "$(echo "$ids" | cut -d' ' -f1-3) " "the newest 3 rows, newest first"
last=$(printf '%s\n' "$OUT" | awk 'NR == 4 { print $1 }')
expect_in "$OUT" "... more: --before $last" "it says how to get the next page"
run history --db "$DB" files --limit 2 --before "$last" --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; print(" ".join(str(r["id"]) for r in json.load(sys.stdin)))')" \
    "$(echo "$ids" | cut -d' ' -f4-5)" "--before ID --json: the next page"
run history --db "$DB" files --limit 100 --json
expect_eq "$(printf '%s' "$OUT" | python3 -c '
import json,sys
rs = {r["key"]: r for r in json.load(sys.stdin)}
r = rs["r"]
print(list(r), r["result"], rs["bad"]["error"].endswith("broken 2"), rs["later"]["started_at"], r["runner"])')" \
    "['id', 'key', 'state', 'added_at', 'started_at', 'finished_at', 'attempts', 'runner', 'result', 'error'] {'rows': 3} True None hist-a" \
    "--json: the state file's fields in its order"
run history --db "$DB" nosuch
expect_eq "$OUT" "ID        KEY                       STATE      FINISHED (UTC)       ATTEMPTS      TOOK  ERROR OR RESULT" \
    "an unknown queue: an empty listing"
run history --db "$DB"
expect_rc 2 "history without QUEUE: usage"

# wqrun show: a key no longer pending answers from its last run
run show --db "$DB" files r --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["state"], d["result"])')" \
    "done {'rows': 3}" "show: a finished key (no keep_done) answers from its last run, with its result"
run show --db "$DB" files slow
expect_in "$OUT" "cancelled" "show: a cancelled key"
run show --db "$DB" files later
expect_in "$OUT" "removed" "show: a removed key"

# HIST=0: no rows; a CLI remove of a pending item of a queue keeping history: a row
HIST=0 QNAME=off run --db "$DB" "$jobs"
expect_rc 0 "history = 0"
expect_eq "$(q "SELECT count(*) FROM wqrun.history WHERE queue = 'off'")" 0 "history = 0: no rows"
expect_eq "$(q "SELECT history FROM wqrun.queues WHERE name = 'off'")" 0 "queues.history: 0"
run add --db "$DB" files pending1
run remove --db "$DB" files pending1
expect_rc 0 "wqrun remove"
expect_eq "$(q "SELECT state, attempts, runner IS NULL, started_at IS NULL FROM wqrun.history WHERE key = 'pending1'")" \
    "removed|0|t|t" "a CLI remove: a 'removed' row, no runner, never started"
run add --db "$DB" off pending2
run remove --db "$DB" off pending2
expect_eq "$(q "SELECT count(*) FROM wqrun.history WHERE key = 'pending2'")" 0 "none for a queue with history = 0"

# two runners, both writing theirs; GET /queues/Q/history through an API runner
two=$(script two.lua <<'LUA'
local q = wq.queue("two", {workers = 2, handler = function(key)
    wq.sleep(0.02)
    return {by = os.getenv("WHO")}
end})
if os.getenv("WHO") == "a" then for i = 1, 200 do q:add("k" .. i) end end
LUA
)
WHO=b pg_bg rb --serve --db "$DB" --runner-name rb "$two"
WHO=a pg_bg ra --serve --db "$DB" --runner-name ra "$two"
check "both runners ran the 200 items" pg_wait "$DB" "SELECT count(*) FROM wqrun.history WHERE queue = 'two'" 200 30
expect_eq "$(q "SELECT count(DISTINCT runner) FROM wqrun.history WHERE queue = 'two'")" 2 "two runners wrote rows"
expect_eq "$(q "SELECT count(*) FROM wqrun.history WHERE queue = 'two' AND result->>'by' = CASE runner WHEN 'ra' THEN 'a' ELSE 'b' END")" 200 \
    "each row has the result of the runner that ran it"
expect_eq "$(q "SELECT count(DISTINCT key) FROM wqrun.history WHERE queue = 'two'")" 200 "each key once"

api=$(script api.lua <<<'wq.queue("files"); wq.queue("two")')
listen_start -- --serve --db "$DB" --runner-name api "$api" || finish
newest=$(q "SELECT max(id) FROM wqrun.history WHERE queue = 'files'")
page1=$(curl -s -m 10 "$BASE/queues/files/history?limit=3")
expect_eq "$(printf '%s' "$page1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["history"][0]["id"], len(d["history"]), d["next"] == d["history"][2]["id"])')" \
    "$newest 3 True" "GET history?limit=3: the newest 3 and where the next page starts"
next=$(printf '%s' "$page1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["next"])')
expect_eq "$(curl -s -m 10 "$BASE/queues/files/history?limit=2&before=$next" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(all(r["id"] < '"$next"' for r in d["history"]), len(d["history"]))')" \
    "True 2" "before=ID: the next page"
expect_eq "$(curl -s -m 10 "$BASE/queues/files/history?limit=1000" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["history"]), d["next"], sorted(d["history"][0]))')" \
    "10 None ['added_at', 'attempts', 'error', 'finished_at', 'id', 'key', 'result', 'runner', 'started_at', 'state']" \
    "the whole history, a run's fields"
expect_eq "$(curl -s -m 10 "$BASE/queues/two/history?limit=1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["history"][0]["runner"] in ("ra", "rb"))')" \
    "True" "the runs of other runners (the API runner claims nothing)"
expect_eq "$(curl -s -m 10 "$BASE/queues/files/items/r" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["state"], d["result"])')" \
    "done {'rows': 3}" "GET /queues/files/items/r: its last run"
# a key whose last run ended dead (its dead letter purged: only the history knows it), one
# cancelled, one removed: their state, attempts and error, the time of the end within the run
item() {
    curl -s -m 10 "$BASE/queues/files/items/$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
t0, t1 = '"$t0, $t1"'
ended = d.pop("failed_at", None)
print(json.dumps(d, sort_keys=True), ended is not None and t0 - 1 <= ended <= t1 + 1)'
}
expect_eq "$(curl -s -m 10 -o /dev/null -w '%{http_code}' -X DELETE "$BASE/queues/files/dead")|$(q "SELECT count(*) FROM wqrun.dead WHERE queue = 'files'")" \
    "200|0" "DELETE /queues/files/dead: bad's dead letter purged"
expect_eq "$(item bad)" \
    "{\"attempts\": 2, \"error\": \"$TMP/jobs.lua:8: broken 2\", \"key\": \"bad\", \"payload\": null, \"state\": \"dead\"} True" \
    "GET items/bad, no dead letter left: its last run from the history (dead, 2 attempts, its error)"
expect_eq "$(item slow)" \
    '{"attempts": 1, "error": "cancelled", "key": "slow", "payload": null, "state": "cancelled"} True' \
    "GET items/slow: a cancelled key's last run (1 attempt, error cancelled)"
expect_eq "$(item later)" \
    '{"attempts": 0, "error": null, "key": "later", "payload": null, "state": "removed"} True' \
    "GET items/later: a removed key's last run (never ran)"
kill -TERM "$PID"
wait_exit "$PID" 20

# an item whose runners died with it 5 times in a row, and its runner died again: reap() writes a 'dead' row
q "INSERT INTO wqrun.runners (name, host, pid, lease, heartbeat_at) VALUES ('ghost', 'h', 1, 1, now() - interval '1 hour');
   INSERT INTO wqrun.jobs (queue, key, run_at, seq, running, runner, token, claimed_at, crashes, enqueued_at)
   SELECT 'files', 'crashy', now(), nextval('wqrun.seq'), true, id, nextval('wqrun.token'), now() - interval '1 s', 5,
     now() - interval '2 s' FROM wqrun.runners WHERE name = 'ghost'" >/dev/null
check "reap: a 'dead' row of the runner that died" pg_wait "$DB" \
    "SELECT state || ' ' || runner || ' ' || attempts || ' ' || (error LIKE '%died while running it 6 times%') FROM wqrun.history WHERE key = 'crashy'" \
    "dead ghost 1 true" 10
kill -TERM "${PIDS[@]}" 2>/dev/null
wait

# pruning while running: history = 1 s, an item every 0.2 s
prune=$(script prune.lua <<'LUA'
local q = wq.queue("p", {history = 1, handler = function() end})
local n = 0
wq.every(0.2, function() n = n + 1; q:add("k" .. n) end)
wq.sleep(8)
wq.exit(0)
LUA
)
q "INSERT INTO wqrun.queues (name, history) VALUES ('p', 1) ON CONFLICT DO NOTHING;
   INSERT INTO wqrun.history (queue, key, state, finished_at, attempts)
   SELECT 'p', 'old' || i, 'done', now() - interval '1 hour', 1 FROM generate_series(1, 2500) i" >/dev/null
run --db "$DB" "$prune"
expect_rc 0 "the pruning run"
rows=$(q "SELECT count(*) FROM wqrun.history WHERE queue = 'p'")
old=$(q "SELECT count(*) FROM wqrun.history WHERE queue = 'p' AND finished_at < (SELECT max(finished_at) FROM wqrun.history WHERE queue = 'p') - interval '6.5 s'")
check "rows were written ($rows)" test "$rows" -ge 3
expect_eq "$old" 0 "rows older than history (1 s) plus a prune interval are gone, 2,500 old ones too (slices of 1,000)"
check "and the recent ones stay ($rows < 39)" test "$rows" -lt 39
expect_eq "$(q "SELECT count(*) FROM wqrun.history WHERE queue = 'files'")" 11 "another queue's rows (a day) stay"

# the upgrade from version 10
UP=$(pg_fresh_db)
run migrate --db "$UP"
run add --db "$UP" held k1 '{"a": 1}' # an item the upgrade must keep
run add --db "$UP" held k2 --after 3600
pg_psql "$UP" "DROP TABLE wqrun.history; ALTER TABLE wqrun.queues DROP COLUMN history;
  ALTER TABLE wqrun.jobs DROP COLUMN progress CASCADE;
  UPDATE wqrun.meta SET value = '10' WHERE key = 'schema_version'" >/dev/null
run migrate --db "$UP"
expect_eq "$OUT" 'schema "wqrun" upgraded from version 10 to 13' "a version 10 schema is upgraded"
expect_eq "$(pg_psql "$UP" "SELECT count(*) FROM wqrun.history")|$(pg_psql "$UP" "SELECT column_default FROM information_schema.columns WHERE table_schema = 'wqrun' AND table_name = 'queues' AND column_name = 'history'")" \
    "0|86400" "version 11: table history, queues.history (a day by default)"
expect_eq "$(pg_psql "$UP" "SELECT key || ' ' || state || ' ' || coalesce(payload::text, '-') || ' ' ||
  (progress IS NULL) FROM wqrun.items WHERE queue = 'held' ORDER BY key")" 'k1 queued {"a": 1} true
k2 waiting - true' "the items it held are kept, in the items view with no progress (version 11)"
finish
