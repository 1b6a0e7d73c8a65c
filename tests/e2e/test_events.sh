#!/usr/bin/env bash
# A job's life, visible (SPEC 11; issue 28 items 2-4) through real processes:
# GET /events streams added, started, progress, retrying, done, dead,
# cancelled, removed, paused and resumed with queue, key, attempt and runner
# (read by curl); ?queue= filters; a client that never reads is cut off while
# 100k jobs run and the runner neither stalls nor grows; GET items/KEY?wait=S
# answers at the key's end (not at the deadline) or with its state at the
# deadline; job:progress shows in the item routes and in the state file
# (read back with sqlite3); wqrun add --wait prints the result and exits 0
# done, 1 dead, 124 at the timeout, and refuses at once (2, nothing added) a
# queue whose runner keeps no history (queues.history = 0 in the file).
. "$(dirname "$0")/lib.sh"

jobs=$(script jobs.lua <<'LUA'
local work = wq.queue("work", {workers = 4, max_retries = 1,
    limiter = wq.limiter.exponential(0.05, 0.05),
    handler = function(key, payload, job)
        local p = payload or {}
        if p.progress then job:progress(p.progress) end
        wq.sleep(p.s or 0)
        if key:match("^bad") then error("broken " .. job.attempt) end
        return {ok = key}
    end})
local other = wq.queue("other", {handler = function() end})
local fast = wq.queue("fast", {workers = 8, handler = function() end})
local quiet = wq.queue("quiet", {history = 0, handler = function() return "r" end})
-- a timer always armed: a loop held for seconds shows as a turn that came late (see late)
wq.every(0.1, function() end)
LUA
)

# ---- the stream ----
# (under ASan, freed memory waits in a quarantine: kept small, the runner's size below is its own)
listen_start env ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=4:thread_local_quarantine_size_kb=64" \
    -- --serve "$jobs"
curl -sN "$BASE/events" >"$TMP/all.sse" 2>/dev/null &
SSE=$!
curl -sN "$BASE/events?queue=other" >"$TMP/other.sse" 2>/dev/null &
SSE2=$!
PIDS+=("$SSE" "$SSE2")
wait_for "$TMP/all.sse" ": wqrun events" 1 5 || fail "the stream did not start"
wait_for "$TMP/other.sse" ": wqrun events" 1 5 || fail "the filtered stream did not start"
post() { curl -s -X POST "$BASE/queues/$1/items" -d "$2"; }
post work '{"key": "a", "payload": {"progress": 40, "s": 0.2}}' >/dev/null
post work '{"key": "bad1"}' >/dev/null
post work '{"key": "slow", "payload": {"s": 30}}' >/dev/null
post other '{"key": "o1"}' >/dev/null
post work '{"key": "later", "after": 3600}' >/dev/null
wait_for "$TMP/all.sse" '"event":"started","queue":"work","key":"slow"' 1 5
curl -s -X POST "$BASE/queues/work/items/slow/cancel" >/dev/null
curl -s -X DELETE "$BASE/queues/work/items/later" >/dev/null
curl -s -X POST "$BASE/queues/work/pause" >/dev/null
curl -s -X POST "$BASE/queues/work/resume" >/dev/null
wait_for "$TMP/all.sse" '"event":"dead"' 1 10 || fail "no dead event"
wait_for "$TMP/all.sse" '"event":"done","queue":"work","key":"a"' 1 10 || fail "no done event"
wait_for "$TMP/all.sse" '"event":"cancelled","queue":"work","key":"slow"' 1 10 || fail "no cancelled event"
wait_for "$TMP/all.sse" '"event":"resumed","queue":"work"' 1 10 || fail "no resumed event"
wait_for "$TMP/other.sse" '"event":"done","queue":"other","key":"o1"' 1 10 || fail "no done event of o1"
sleep 0.2
events() { sed -n 's/^data: //p' "$1" | python3 -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line)
    print(e["event"], e["queue"], e.get("key", "-"), e.get("attempt", "-"),
          json.dumps(e.get("progress", e.get("result"))), e.get("error", "-"))'; }
ev=$(events "$TMP/all.sse")
of() { grep " work $1 " <<<"$ev"; }
expect_eq "$(of a)" "added work a - null -
started work a 1 null -
progress work a 1 40 -
done work a 1 {\"ok\": \"a\"} -" "a run's life: added, started, its progress, done with the result"
expect_eq "$(of bad1)" "added work bad1 - null -
started work bad1 1 null -
retrying work bad1 1 null $TMP/jobs.lua:7: broken 1
started work bad1 2 null -
dead work bad1 2 null $TMP/jobs.lua:7: broken 2" "a failing one: retrying with the error, then dead"
expect_eq "$(of slow | cut -d' ' -f1,4,6)" "added - -
started 1 -
cancelled 1 cancelled" "a cancel ends the run: cancelled"
expect_eq "$(of later | cut -d' ' -f1)" "added
removed" "a delayed item removed: removed"
expect_eq "$(grep -E '^(paused|resumed) ' <<<"$ev")" "paused work - - null -
resumed work - - null -" "a pause and a resume"
expect_eq "$(sed -n 's/^data: //p' "$TMP/all.sse" | python3 -c '
import json, sys
r = set()
for line in sys.stdin:
    e = json.loads(line)
    r.add(e["runner"]); assert e["at"] > 1.7e9
print(*r)')" "$(hostname):$PID" "every event carries the runner (host:pid) and its time"
expect_eq "$(events "$TMP/other.sse" | cut -d' ' -f1-3)" "added other o1
started other o1
done other o1" "?queue=other: only that queue's events"
expect_in "$(sed -n 's/^event: //p' "$TMP/all.sse" | sort -u | tr '\n' ' ')" \
    "added cancelled dead done paused progress removed resumed retrying started" \
    "each event also names its type on the event: line"
kill "$SSE" "$SSE2" 2>/dev/null

expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$BASE/events")" 405 "POST /events: 405"
expect_eq "$(curl -s -w ' %{http_code}' "$BASE/events?queue=nope")" \
    '{"error":"no such queue '"'"'nope'"'"' in this runner"} 404' "an unknown queue: 404"
expect_eq "$(curl -s -w ' %{http_code}' "$BASE/events?x=1")" \
    '{"error":"the only parameter is queue, a queue'"'"'s name"} 400' "an unknown parameter: 400"

# ---- waiting for a result over HTTP ----
post work '{"key": "w1", "payload": {"s": 0.5}}' >/dev/null
t0=$(now)
out=$(curl -s "$BASE/queues/work/items/w1?wait=10")
took=$(since "$t0")
expect_in "$out" '"key":"w1","state":"done"' "?wait=: answered with the end"
expect_in "$out" '"attempts":1,"runner":"'"$(hostname):$PID"'","result":{"ok":"w1"},"error":null' \
    "with the run's attempts, runner and result"
expect_between "$took" 0.3 5 "answered when the run ended (0.5 s), not at the deadline (10 s)"
post work '{"key": "w2", "payload": {"s": 30}}' >/dev/null
for _ in $(seq 200); do
    curl -s "$BASE/queues/work/items/w2" | grep -q '"state":"processing"' && break
    sleep 0.05
done
t0=$(now)
out=$(curl -s "$BASE/queues/work/items/w2?wait=0.5")
expect_between "$(since "$t0")" 0.45 3 "the deadline: answered then"
expect_in "$out" '"key":"w2","payload":{"s":30},"state":"processing"' "with its state now"
expect_eq "$(curl -s -w ' %{http_code}' "$BASE/queues/work/items/nokey?wait=5")" \
    '{"error":"no item '"'"'nokey'"'"' in queue '"'"'work'"'"' (not pending, done or dead)"} 404' \
    "a key not pending: answered at once (404 for one never seen)"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/queues/work/items/w2?wait=x")" 400 \
    "?wait=x: 400"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/queues/work/items/w2?wait=99999")" 400 \
    "?wait= beyond an hour: 400"
# a client that leaves while waiting takes its wait with it; the runner goes on
timeout 0.3 curl -s "$BASE/queues/work/items/w2?wait=60" >/dev/null
curl -s -X POST "$BASE/queues/work/items/w2/cancel" >/dev/null
expect_eq "$(curl -s "$BASE/healthz")" ok "alive after a waiter left"

# ---- progress in the item routes ----
post work '{"key": "p1", "payload": {"progress": {"step": "copy", "n": 3}, "s": 30}}' >/dev/null
for _ in $(seq 200); do
    curl -s "$BASE/queues/work/items/p1" | grep -q '"progress":' && break
    sleep 0.05
done
expect_in "$(curl -s "$BASE/queues/work/items/p1")" '"progress":{"step":"copy","n":3}' \
    "GET items/KEY shows the progress"
expect_in "$(curl -s "$BASE/queues/work/items?state=processing")" '"key":"p1"' "listed"
expect_in "$(curl -s "$BASE/queues/work/items?state=processing")" '"progress":{"step":"copy","n":3}' \
    "GET items shows it too"
curl -s -X POST "$BASE/queues/work/items/p1/cancel" >/dev/null

# ---- a client that never reads, while 200k jobs run ----
# fast_run PREFIX: 200,000 no-op jobs added in batches of 10,000
fast_run() {
    python3 - "$BASE" "$1" <<'PY'
import json, sys, urllib.request
base, prefix = sys.argv[1], sys.argv[2]
for b in range(20):
    items = [{"key": "%s%d" % (prefix, b * 10000 + i)} for i in range(10000)]
    req = urllib.request.Request(base + "/queues/fast/items:batch", data=json.dumps(items).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req).read()
PY
}
succeeded() { curl -s "$BASE/queues/fast" | sed -n 's/.*"succeeded":\([0-9]*\).*/\1/p'; }
wait_succeeded() {
    for i in $(seq 1 600); do
        [ "$(succeeded)" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}
# a first round without the slow client: what the jobs themselves take stays allocated
fast_run w
wait_succeeded 200000
python3 - "$PORT" >"$TMP/slow.out" 2>&1 <<'PY' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
time.sleep(8)  # reads nothing meanwhile
s.settimeout(10)
n = 0
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        n += len(b)
    print("closed", n)
except socket.timeout:
    print("still open", n)
except ConnectionResetError:
    print("closed", n)
PY
SLOW=$!
PIDS+=("$SLOW")
sleep 0.3
# loop turns that came more than a second late (wqrun_loop_lag_seconds; the script keeps a
# 0.1 s timer armed): a loop that waited for the slow client (it reads nothing for 8 s) would be
late() {
    curl -s "$BASE/metrics" | awk '/^wqrun_loop_lag_seconds_bucket\{le="1"\}/ { b = $2 }
        /^wqrun_loop_lag_seconds_count/ { c = $2 } END { print c - b }'
}
late0=$(late)
rss0=$(awk '/VmRSS/ { print $2 }' /proc/$PID/status)
t0=$(now)
fast_run f
wait_succeeded 400000
took=$(since "$t0")
rss1=$(awk '/VmRSS/ { print $2 }' /proc/$PID/status)
expect_eq "$(succeeded)" 400000 "200k more jobs ran with a client that never reads"
expect_between "$took" 0 60 "in reasonable time"
expect_eq "$(late)" "$late0" "no loop turn came a second late meanwhile: nothing waited for the slow client"
# what those jobs told it (~87 MB) would have piled up for it without the cut (the runner
# grew by 122 MiB with 150k jobs then): at most 16 MiB waits for it, plus what a round costs
# again (ASan under load: up to 49 MiB seen)
expect_between "$(( (rss1 - rss0) / 1024 ))" -1000 64 \
    "the runner grew by less than 64 MiB over a round like the first (MiB)"
wait_exit "$SLOW" 30
expect_in "$(cat "$TMP/slow.out")" "closed" "the slow client was cut off (its connection closed)"
expect_eq "$(curl -s "$BASE/healthz")" ok "the runner serves on"
kill -TERM "$PID"
wait_exit "$PID" 10
expect_eq "$RC" 0 "a clean stop with streams open"

# ---- the state file: progress read back with sqlite3; wqrun add --wait ----
listen_start -- --serve --db "$TMP/s.db" "$jobs"
post work '{"key": "p2", "payload": {"progress": 25, "s": 30}}' >/dev/null
for i in $(seq 1 100); do
    [ "$(sqlite3 "$TMP/s.db" "SELECT progress FROM items WHERE key = 'p2'")" = 25 ] && break
    sleep 0.05
done
expect_eq "$(sqlite3 "$TMP/s.db" "SELECT state, progress FROM items WHERE key = 'p2'")" "processing|25" \
    "items.progress in the state file"
run show --db "$TMP/s.db" work p2
expect_in "$OUT" "progress     25" "wqrun show prints it"
run items --db "$TMP/s.db" work --json
expect_in "$OUT" '"progress":25' "wqrun items --json too"
curl -s -X POST "$BASE/queues/work/items/p2/cancel" >/dev/null

t0=$(now)
run add --db "$TMP/s.db" work aw '{"s": 0.3}' --wait --timeout 20
expect_rc 0 "add --wait: exit 0 when done"
expect_eq "$OUT" '{"ok":"aw"}' "it prints the result"
expect_between "$(since "$t0")" 0.25 10 "after the run"
run add --db "$TMP/s.db" work bad2 --wait
expect_rc 1 "add --wait: exit 1 when dead"
expect_in "$ERR" "work 'bad2' is dead after 2 attempts: $TMP/jobs.lua:7: broken 2" "saying why"
run add --db "$TMP/s.db" work aw2 '{"s": 30}' --wait --timeout 0.5
expect_rc 124 "add --wait --timeout: 124 at the timeout"
expect_in "$ERR" "work 'aw2' did not finish within 0.5 s" "saying so"
run add --db "$TMP/s.db" work x --timeout 1
expect_rc 2 "--timeout without --wait: a usage error"
expect_eq "$(sqlite3 "$TMP/s.db" "SELECT name, history FROM queues WHERE name IN ('work', 'quiet')
                                   ORDER BY name")" "quiet|0.0
work|86400.0" "queues.history: each queue's history option, as its runner defined it"
t0=$(now)
run add --db "$TMP/s.db" quiet q1 --wait --timeout 20
expect_rc 2 "add --wait on a queue that keeps no history: refused"
expect_in "$ERR" "queue 'quiet' keeps no history (its script sets history = 0)" "saying why"
expect_between "$(since "$t0")" 0 5 "at once, not at the timeout"
expect_eq "$(sqlite3 "$TMP/s.db" "SELECT count(*) FROM inbox WHERE key = 'q1';
                                   SELECT count(*) FROM history WHERE key = 'q1'")" "0
0" "nothing was added"
run add --db "$TMP/s.db" quiet q2
expect_rc 0 "without --wait the same add goes ahead"
curl -s -X POST "$BASE/queues/work/items/aw2/cancel" >/dev/null # (else the stop waits for it)
kill -TERM "$PID"
wait_exit "$PID" 40

finish
