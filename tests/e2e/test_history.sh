#!/usr/bin/env bash
# The history of finished runs in the state file (SPEC 11, issue 28 item 1: its
# SQLite half) and the re-run note of issue 31: every run that ends done, dead,
# cancelled or removed leaves a row in table history (read back with sqlite3)
# with its times, attempts, runner, result or error; history = 0 keeps none;
# rows older than the queue's history are pruned while the runner runs; a
# one-shot run that ran keys again which an earlier run of the file had
# finished says so once, unless the queue has keep_done.
. "$(dirname "$0")/lib.sh"

jobs=$(script jobs.lua <<'LUA'
local hist = tonumber(os.getenv("HIST") or "86400")
local keep = tonumber(os.getenv("KEEP") or "0")
local gate = false
local q = wq.queue("files", {max_retries = 1, history = hist, keep_done = keep,
    limiter = wq.limiter.exponential(0.01, 0.01),
    handler = function(key, payload, job)
        if key == "bad" then error("broken " .. job.attempt) end
        if key == "flaky" and job.attempt == 1 then error("once") end
        if key == "slow" then while not gate do wq.sleep(0.01) end end
        if key == "r" then return {rows = 3} end
    end})
for i = 1, 3 do q:add("f" .. i) end
q:add("r"); q:add("bad"); q:add("flaky"); q:add("slow")
q:add_after("later", 3600)
q:remove("later")
wq.sleep(0.1)
q:cancel("slow")
q:wait_idle()
wq.exit(0)
LUA
)
t0=$(date +%s.%N)
run --db "$TMP/h.db" "$jobs"
expect_rc 0 "the run"
t1=$(date +%s.%N)
h() { sqlite3 "$TMP/h.db" "$1"; }
expect_eq "$(h "SELECT key, state, attempts, coalesce(result, '-'), coalesce(error, '-') FROM history ORDER BY key")" \
"bad|dead|2|-|$TMP/jobs.lua:7: broken 2
f1|done|1|-|-
f2|done|1|-|-
f3|done|1|-|-
flaky|done|2|-|-
later|removed|0|-|-
r|done|1|{\"rows\":3}|-
slow|cancelled|1|-|cancelled" "a row per finished run: state, attempts, result or error"
expect_eq "$(h "SELECT count(*) FROM history WHERE added_at BETWEEN $t0 AND $t1 AND finished_at BETWEEN $t0 AND $t1
  AND (started_at BETWEEN added_at AND finished_at OR (state = 'removed' AND started_at IS NULL))")" 8 \
    "times: added <= started <= finished, within the run (a removed item never started)"
expect_eq "$(h "SELECT DISTINCT runner FROM history")" "$(hostname):$(h "SELECT 0" >/dev/null; sed -n 's/.*started (pid \([0-9]*\)).*/\1/p' <<<"$ERR")" \
    "the runner: host:pid"
expect_not_in "$ERR" "note:" "a first run: nothing was finished before"

run --db "$TMP/h.db" "$jobs"
expect_in "$ERR" "wqrun: note: queue 'files' ran 5 key(s) again that an earlier run of this state file had finished; with keep_done = SECONDS a re-run skips" \
    "a re-run that redid finished keys says so, once, with the option"
expect_count "$ERR" "note:" 1 "once"
expect_eq "$(h "SELECT count(*) FROM history")" 16 "its runs are in the history too"

# wqrun history: newest first, paged; show answers from the last run once not pending
run history --db "$TMP/h.db" files --limit 3
expect_rc 0 "wqrun history"
expect_eq "$(printf '%s\n' "$OUT" | awk 'NR > 1 && $1 != "..." { print $1 }' | tr '\n' ' ')" "16 15 14 " \
    "the newest 3 rows, newest first"
last=$(printf '%s\n' "$OUT" | awk 'NR == 4 { print $1 }')
expect_in "$OUT" "... more: --before $last" "it says how to get the next page"
run history --db "$TMP/h.db" files --limit 2 --before "$last" --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; print([r["id"] for r in json.load(sys.stdin)])')" \
    "[13, 12]" "--before ID --json: the next page"
run show --db "$TMP/h.db" files r --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["state"], d["result"])')" \
    "done {'rows': 3}" "show: a finished key (no keep_done) answers from its last run, with its result"
run show --db "$TMP/h.db" files slow
expect_in "$OUT" "state        cancelled" "show: a cancelled key"
run history --db "$TMP/h.db" nosuch
expect_eq "$OUT" "ID        KEY                       STATE      FINISHED (UTC)       ATTEMPTS      TOOK  ERROR OR RESULT" \
    "an unknown queue: an empty listing"
run history --db "$TMP/h.db"
expect_rc 2 "history without QUEUE: usage"

# GET /queues/files/history: the same rows, newest first, paged by next / before
idle=$(script idle.lua <<'LUA'
wq.queue("files")
LUA
)
listen_start -- --serve --db "$TMP/h.db" "$idle" || { finish; }
page1=$(curl -s -m 10 "$BASE/queues/files/history?limit=3")
expect_eq "$(printf '%s' "$page1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print([r["id"] for r in d["history"]], d["next"])')" \
    "[16, 15, 14] 14" "GET history?limit=3: the newest 3 and where the next page starts"
expect_eq "$(curl -s -m 10 "$BASE/queues/files/history?limit=2&before=14" | python3 -c 'import json,sys; d=json.load(sys.stdin); print([r["id"] for r in d["history"]], d["next"])')" \
    "[13, 12] 12" "before=14: the next page"
expect_eq "$(curl -s -m 10 "$BASE/queues/files/history?limit=1000" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["history"]), d["next"])')" \
    "16 None" "the whole history: no next page"
expect_eq "$(curl -s -m 10 "$BASE/queues/files/history?limit=2&before=14" | python3 -c 'import json,sys; r=json.load(sys.stdin)["history"][0]; print(sorted(r))')" \
    "['added_at', 'attempts', 'error', 'finished_at', 'id', 'key', 'result', 'runner', 'started_at', 'state']" \
    "a run's fields"
code=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "$BASE/queues/files/history?limit=0")
expect_eq "$code $(cat "$TMP/body")" "400 {\"error\":\"bad parameter 'limit' (limit: 1 to 1000; before: a row id > 0)\"}" \
    "limit=0: 400 naming the parameter"
expect_eq "$(curl -s -m 10 -o /dev/null -w '%{http_code}' -X POST "$BASE/queues/files/history")" 405 "POST: 405"
# GET items/KEY in the runner: a key the engine no longer knows answers from its last run
item() { curl -s -m 10 -w ' %{http_code}' "$BASE/queues/files/items/$1"; }
expect_re "$(item r)" '^\{"state":"done","key":"r","finished_at":[0-9.]+,"result":\{"rows":3\}\} 200$' \
    "GET items/KEY: a finished key's last run, with its result"
expect_re "$(item slow)" '^\{"state":"cancelled","key":"slow","attempts":1,"failed_at":[0-9.]+,"error":"cancelled","payload":null\} 200$' \
    "a cancelled one, with its attempts and why"
expect_eq "$(item nokey)" \
    '{"error":"no item '"'"'nokey'"'"' in queue '"'"'files'"'"' (not pending, done or dead)"} 404' \
    "a key never seen: 404"
kill -TERM "$PID"
wait_exit "$PID" 20
listen_start -- --serve "$idle" || { finish; }
code=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "$BASE/queues/files/history")
expect_eq "$code" 404 "no state file: 404"
expect_in "$(cat "$TMP/body")" "only a state file (--db FILE) keeps it" "saying why"
kill -TERM "$PID"
wait_exit "$PID" 20

KEEP=3600 run --db "$TMP/h2.db" "$jobs"
KEEP=3600 run --db "$TMP/h2.db" "$jobs"
expect_not_in "$ERR" "note:" "with keep_done: skipped, no note"

HIST=0 run --db "$TMP/h3.db" "$jobs"
expect_rc 0 "history = 0"
expect_eq "$(sqlite3 "$TMP/h3.db" "SELECT count(*) FROM history")" 0 "history = 0: no rows"

# q:item in the runner, from the history: right after the end (the row not committed yet) and
# behind 50,000 later runs (a walk of several slices)
lookup=$(script lookup.lua <<'LUA'
local q = wq.queue("lk", {max_retries = 0, handler = function(key)
    if key == "bad" then error("no good") end
    return {k = key}
end})
local off = wq.queue("off", {history = 0, handler = function() end})
local filler = wq.queue("filler", {workers = 8, handler = function() end})
local function show(i)
    if not i then return "nil" end
    return table.concat({i.state, i.key, tostring(i.result and i.result.k), tostring(i.error),
        tostring(i.attempts), tostring((i.finished_at or i.failed_at) ~= nil)}, " ")
end
q:add("target"); q:add("bad"); off:add("o")
q:wait("target", 10); q:wait("bad", 10); off:wait("o", 10)
print("at once " .. show(q:item("target")))
for b = 1, 50 do
    for i = 1, 1000 do filler:add("f" .. b .. "-" .. i) end
    filler:wait_idle()
end
print("behind " .. show(q:item("target")))
print("dead " .. show(q:item("bad")))
q:purge_dead()
print("purged " .. show(q:item("bad")))
print("never " .. show(q:item("never")))
print("off " .. show(off:item("o")))
wq.exit(0)
LUA
)
run --db "$TMP/l.db" "$lookup"
expect_rc 0 "the lookup run"
expect_eq "$(sqlite3 "$TMP/l.db" "SELECT count(*) FROM history")" 50002 "50,002 runs in the history"
expect_eq "$OUT" "at once done target target nil nil true
behind done target target nil nil true
dead dead bad nil $TMP/lookup.lua:2: no good 1 true
purged dead bad nil $TMP/lookup.lua:2: no good 1 true
never nil
off nil" "q:item answers from the last run (done with its result; dead with its error once the dead letter is purged), nil for a key never seen or a queue with history = 0"

# pruning while running: history = 1 s, a runner adding an item every 0.2 s
prune=$(script prune.lua <<'LUA'
local q = wq.queue("p", {history = 1, handler = function() end})
local n = 0
wq.every(0.2, function() n = n + 1; q:add("k" .. n) end)
wq.sleep(4)
wq.exit(0)
LUA
)
run --db "$TMP/p.db" "$prune"
expect_rc 0 "the pruning run"
rows=$(sqlite3 "$TMP/p.db" "SELECT count(*) FROM history")
old=$(sqlite3 "$TMP/p.db" "SELECT count(*) FROM history WHERE finished_at < (SELECT max(finished_at) FROM history) - 2.5")
check "rows were written ($rows)" test "$rows" -ge 3
expect_eq "$old" 0 "rows older than history (1 s) plus a prune interval are gone"
check "and the recent ones stay ($rows < 19)" test "$rows" -lt 19
# The prune never holds the loop: behind 2,000,000 young rows of another queue (a full read
# took 100-300 ms each second), a queue with history = 1 s is pruned while a timer checks
# how late the loop wakes it.
mk=$(script mk.lua <<'LUA'
wq.queue("big", {handler = function() end})
wq.exit(0)
LUA
)
run --db "$TMP/big.db" "$mk"
expect_rc 0 "the big file's first run"
sqlite3 "$TMP/big.db" "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000000)
  INSERT INTO history (queue, key, state, finished_at, attempts)
  SELECT 'big', 'b' || i, 'done', unixepoch('now') - 60, 1 FROM n"
lag=$(script lag.lua <<'LUA'
wq.queue("big", {handler = function() end})
local q = wq.queue("p", {history = 1, handler = function() end})
local n, worst, late = 0, 0, 0
wq.every(0.05, function() n = n + 1; q:add("k" .. n) end)
local stop = wq.now() + 4
while wq.now() < stop do
    local t = wq.now()
    wq.sleep(0.01)
    local d = wq.now() - t - 0.01
    if d > worst then worst = d end
    if d > 0.06 then late = late + 1 end
end
print(string.format("late %d worst %.3f", late, worst))
wq.exit(0)
LUA
)
run --db "$TMP/big.db" "$lag"
expect_rc 0 "the run behind 2M rows"
late=$(sed -n 's/^late \([0-9]*\) .*/\1/p' <<<"$OUT")
check "the loop was never held over 60 ms by a prune ($OUT)" test "${late:-99}" -le 1
old=$(sqlite3 "$TMP/big.db" "SELECT count(*) FROM history WHERE queue = 'p' AND finished_at < (SELECT max(finished_at) FROM history WHERE queue = 'p') - 2.5")
pn=$(sqlite3 "$TMP/big.db" "SELECT count(*) FROM history WHERE queue = 'p'")
expect_eq "$old" 0 "p's old rows were pruned behind the big queue's"
check "p's recent rows stay ($pn)" test "$pn" -ge 3
expect_eq "$(sqlite3 "$TMP/big.db" "SELECT count(*) FROM history WHERE queue = 'big'")" 2000000 "the young rows of big stay"
finish
