#!/usr/bin/env bash
# A job's life across the runners of one PostgreSQL database (SPEC 11): GET
# /events on runner A carries runner B's events (relayed only while someone
# listens); GET items/KEY?wait= on A answers when B finishes the key;
# `wqrun add --wait` (no runner of its own) prints the result of whichever
# runner ran it and exits 0, 1 dead, 124 at the timeout; a running job's
# progress is on its row (read back with psql), printed by `wqrun show` and
# `wqrun items`, and goes with the run; B's started, progress, retrying,
# done, cancelled (a cancel made through A) reach A's stream once; with
# nobody listening, no runner sends events.
. "$(dirname "$0")/lib.sh"
pg_need

DB=$(pg_fresh_db)
q() { pg_psql "$DB" "$1"; }

jobs=$(script jobs.lua <<'LUA'
local who = os.getenv("WHO")
wq.queue("work", {workers = 2, max_retries = 0, handler = function(key, payload, job)
    local p = payload or {}
    if p.on and p.on ~= who then -- not this runner's: hand it back to run elsewhere
        return wq.requeue(0.05)
    end
    if p.progress then job:progress(p.progress) end
    wq.sleep(p.s or 0)
    if key:match("^bad") then error("broken") end
    return {by = who .. "/" .. key}
end})
wq.queue("noise", {handler = who == "B" and function() end or nil})
-- run by B only: fails its first run, retried at once
wq.queue("again", {max_retries = 1, limiter = wq.limiter.exponential(0.01, 0.01),
    handler = who == "B" and function(key, payload, job)
        if job.attempt == 1 then error("once") end
        return {by = who .. "/" .. key}
    end or nil})
LUA
)

# A listens (HTTP), B works; B is started first and alone has workers for "on": "B" items
WHO=B pg_bg B --quiet --serve --runner-name B --db "$DB" "$jobs"
B_PID=$BG_PID
listen_start env WHO=A -- --serve --runner-name A --db "$DB" "$jobs"
check "both runners registered" pg_wait "$DB" "SELECT string_agg(name, ',' ORDER BY name) FROM wqrun.runners" "A,B" 15

# nobody listens yet: the runners send no events (a psql session LISTENs meanwhile)
"${WQ_PG_BIN:-/usr/lib/postgresql/15/bin}/psql" -X "$DB" -c "LISTEN wqrun" -c "SELECT pg_sleep(3)" \
    >"$TMP/listen.out" 2>&1 &
LSN=$!
check "the listener listens" pg_wait "$DB" "SELECT count(*) FROM pg_stat_activity
  WHERE query = 'SELECT pg_sleep(3)' AND state = 'active'" 1 10
for i in 1 2 3 4 5; do curl -s -X POST "$BASE/queues/work/items" -d "{\"key\": \"q$i\", \"payload\": {\"on\": \"B\"}}" >/dev/null; done
check "B ran them" pg_wait "$DB" "SELECT count(*) FROM wqrun.history WHERE key LIKE 'q_'" 5 15
wait "$LSN"
expect_eq "$(grep -c 'payload "~' "$TMP/listen.out")" 0 "no events sent while nobody listens"

curl -sN "$BASE/events?queue=work" >"$TMP/a.sse" 2>/dev/null &
SSE=$!
PIDS+=("$SSE")
wait_for "$TMP/a.sse" ": wqrun events" 1 5 || fail "the stream did not start"
curl -sN "$BASE/events?queue=again" >"$TMP/r.sse" 2>/dev/null &
RSSE=$!
PIDS+=("$RSSE")
wait_for "$TMP/r.sse" ": wqrun events" 1 5 || fail "the again stream did not start"
post() { curl -s -X POST "$BASE/queues/work/items" -d "$1"; }
# heard FILE KEY: B relays work's events once it has heard A's announcement; B's run of the
# probe KEY, done on the stream A writes to FILE, says it has
heard() {
    post "{\"key\": \"$2\", \"payload\": {\"on\": \"B\"}}" >/dev/null
    wait_for "$1" "\"event\":\"done\",\"queue\":\"work\",\"key\":\"$2\"" 1 15 ||
        fail "B's events of work did not reach A's stream"
}
heard "$TMP/a.sse" b0
post '{"key": "b1", "payload": {"on": "B", "s": 0.2}}' >/dev/null
wait_for "$TMP/a.sse" '"event":"done","queue":"work","key":"b1"' 1 15 ||
    fail "A's stream did not carry B's done"
expect_in "$(grep '"key":"b1"' "$TMP/a.sse" | grep '"event":"done"')" '"runner":"B"' \
    "B's event, named as B's, on A's stream"
expect_in "$(grep '"key":"b1"' "$TMP/a.sse" | grep '"event":"done"')" '"result":{"by":"B/b1"}' \
    "with its result"
expect_in "$(grep '"key":"b1"' "$TMP/a.sse" | grep '"event":"started"' | tail -1)" '"runner":"B"' \
    "and B's started"

# ?wait on A for a key B runs
post '{"key": "b2", "payload": {"on": "B", "s": 0.5}}' >/dev/null
t0=$(now)
out=$(curl -s "$BASE/queues/work/items/b2?wait=20")
expect_in "$out" '"key":"b2","state":"done"' "?wait= on A: answered with B's end"
expect_in "$out" '"result":{"by":"B/b2"}' "its result"
expect_between "$(since "$t0")" 0.3 10 "when the run ended"

# progress on the job's row while it runs, gone with it; `wqrun show` and `wqrun items` print it
post '{"key": "p1", "payload": {"on": "B", "progress": 60, "s": 4}}' >/dev/null
check "progress on the row" pg_wait "$DB" \
    "SELECT state || ' ' || progress::text FROM wqrun.items WHERE key = 'p1'" "processing 60" 15
expect_in "$(curl -s "$BASE/queues/work/items/p1")" '"progress":60' "GET items/KEY on A shows B's job's progress"
run show --db "$DB" work p1
expect_eq "$(printf '%s\n' "$OUT" | grep -E '^(state|progress) ')" "state        processing
progress     60" "wqrun show: the running item's progress"
run show --db "$DB" work p1 --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["state"], d["progress"])')" \
    "processing 60" "wqrun show --json: its progress"
run items --db "$DB" work
expect_re "$(printf '%s\n' "$OUT" | grep '^p1 ')" '^p1 +processing on B .*  progress 60$' \
    "wqrun items: the running item's row ends with its progress"
run items --db "$DB" work --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; print([(i["state"], i["runner"], i["progress"]) for i in json.load(sys.stdin) if i["key"] == "p1"])')" \
    "[('processing', 'B', 60)]" "wqrun items --json: its progress"
wait_for "$TMP/a.sse" '"event":"progress","queue":"work","key":"p1"' 1 10 ||
    fail "A's stream did not carry B's progress"
ev() { # ev FILE EVENT KEY: the fields of the first such event
    grep -F "\"event\":\"$2\"," "$1" | grep -F "\"key\":\"$3\"" | head -1 | sed 's/^data: //' |
        python3 -c 'import json,sys; e=json.loads(sys.stdin.read()); print(e["event"], e["queue"], e["key"], e["runner"], e.get("attempt"), json.dumps(e.get("progress", e.get("result"))), e.get("error", "-"), "retry_in" in e)'
}
expect_eq "$(ev "$TMP/a.sse" progress p1)" "progress work p1 B 1 60 - False" \
    "B's progress, on A's stream: its value, named as B's"
check "cleared with the run" pg_wait "$DB" "SELECT count(*) FROM wqrun.jobs WHERE key = 'p1'" 0 15

# a retry and a cancel on B, heard on A's streams
curl -s -X POST "$BASE/queues/again/items" -d '{"key": "r1"}' >/dev/null
wait_for "$TMP/r.sse" '"event":"done","queue":"again","key":"r1"' 1 15 ||
    fail "A's again stream did not carry B's done of r1"
expect_eq "$(ev "$TMP/r.sse" retrying r1)" "retrying again r1 B 1 null $TMP/jobs.lua:16: once True" \
    "B's retrying, on A's stream: attempt 1, its error, when it runs again"
expect_eq "$(ev "$TMP/r.sse" "done" r1)" 'done again r1 B 2 {"by": "B/r1"} - False' "then B's done of attempt 2"
post '{"key": "c1", "payload": {"on": "B", "s": 30}}' >/dev/null
check "c1 runs on B" pg_wait "$DB" \
    "SELECT i.state || ' ' || r.name FROM wqrun.items i JOIN wqrun.runners r ON r.id = i.runner WHERE i.key = 'c1'" \
    "processing B" 15
expect_in "$(curl -s -X POST "$BASE/queues/work/items/c1/cancel")" '"cancelled":true' "a cancel through A"
wait_for "$TMP/a.sse" '"event":"cancelled","queue":"work","key":"c1"' 1 10 ||
    fail "A's stream did not carry B's cancelled"
expect_eq "$(ev "$TMP/a.sse" cancelled c1)" "cancelled work c1 B 1 null cancelled False" \
    "B's cancelled, on A's stream: the run B ended"
sleep 0.5
expect_eq "$(grep -c '"event":"cancelled","queue":"work","key":"c1"' "$TMP/a.sse")" 1 "told once"
kill "$RSSE"

# a pause made through B (the database tells A): one "paused" on A's stream, not A's own and
# B's relayed copy too
WHO=B pg_bg B2 --quiet --serve --runner-name B2 --listen "127.0.0.1:$((PORT + 1))" --db "$DB" "$jobs"
B2_PID=$BG_PID
for _ in $(seq 100); do curl -s "http://127.0.0.1:$((PORT + 1))/healthz" >/dev/null && break; sleep 0.05; done
# B2 relays what A listens for once it has heard A's announcement (made every 2 s; the check
# below is then meaningful: a relayed pause would be told twice): probes until one of its runs
# is on A's stream
for i in $(seq 40); do
    grep -q '"runner":"B2"' "$TMP/a.sse" && break
    post "{\"key\": \"pr$i\", \"payload\": {\"on\": \"B\", \"s\": 0.2}}" >/dev/null
    sleep 0.5
done
check "B2's events reach A's stream" grep -q '"runner":"B2"' "$TMP/a.sse"
curl -s -X POST "http://127.0.0.1:$((PORT + 1))/queues/work/pause" >/dev/null
wait_for "$TMP/a.sse" '"event":"paused","queue":"work"' 1 10 || fail "A's stream did not carry the pause"
curl -s -X POST "http://127.0.0.1:$((PORT + 1))/queues/work/resume" >/dev/null
wait_for "$TMP/a.sse" '"event":"resumed","queue":"work"' 1 10 || fail "A's stream did not carry the resume"
sleep 1
expect_eq "$(grep -c '"event":"paused","queue":"work"' "$TMP/a.sse") $(grep -c '"event":"resumed","queue":"work"' "$TMP/a.sse")" \
    "1 1" "a pause and a resume through another runner: told once each on A's stream"
kill -TERM "$B2_PID"
wait_exit "$B2_PID" 10

kill "$SSE"

# only what is listened for is relayed: a stream of work on A, B runs work and noise
curl -sN "$BASE/events?queue=work" >"$TMP/w.sse" 2>/dev/null &
SSE=$!
PIDS+=("$SSE")
wait_for "$TMP/w.sse" ": wqrun events" 1 5 || fail "the work stream did not start"
heard "$TMP/w.sse" b2w
"${WQ_PG_BIN:-/usr/lib/postgresql/15/bin}/psql" -X "$DB" -c "LISTEN wqrun" -c "SELECT pg_sleep(4)" \
    >"$TMP/listen2.out" 2>&1 &
LSN=$!
check "the listener listens" pg_wait "$DB" "SELECT count(*) FROM pg_stat_activity
  WHERE query = 'SELECT pg_sleep(4)' AND state = 'active'" 1 10
for i in 1 2 3; do curl -s -X POST "$BASE/queues/noise/items" -d "{\"key\": \"n$i\"}" >/dev/null; done
post '{"key": "b3", "payload": {"on": "B"}}' >/dev/null
wait_for "$TMP/w.sse" '"event":"done","queue":"work","key":"b3"' 1 15 || fail "b3 did not reach A's stream"
wait "$LSN"
check "noise ran" pg_wait "$DB" "SELECT count(*) FROM wqrun.history WHERE queue = 'noise'" 3 15
expect_in "$(cat "$TMP/listen2.out")" '"queue":"work","key":"b3"' "work's events are relayed"
expect_eq "$(grep -c '"queue":"noise"' "$TMP/listen2.out")" 0 \
    "noise's are not: nobody listens for that queue"
expect_in "$(cat "$TMP/listen2.out")" ":work\" received" "A announced what it listens for: work"
kill "$SSE"
# wqrun add --wait: no runner of its own
t0=$(now)
run add --db "$DB" work w1 '{"on": "B", "s": 0.3}' --wait --timeout 20
expect_rc 0 "add --wait: done"
expect_eq "$OUT" '{"by":"B/w1"}' "prints the result of the runner that ran it"
expect_between "$(since "$t0")" 0.25 10 "after the run"
run add --db "$DB" work bad1 '{"on": "B"}' --wait --timeout 20
expect_rc 1 "add --wait: dead"
expect_in "$ERR" "work 'bad1' is dead after 1 attempt" "saying so"
run add --db "$DB" work slow '{"on": "B", "s": 30}' --wait --timeout 0.5
expect_rc 124 "add --wait --timeout: 124"
run add --db "$DB" work done1 '{"on": "A"}'
expect_rc 0 "a plain add"
check "done1 ran" pg_wait "$DB" "SELECT count(*) FROM wqrun.history WHERE key = 'done1'" 1 15
# a key that already ended before the wait began answers from its history at once... only for
# a run after the add: a new add of it runs again
run add --db "$DB" work done1 '{"on": "A"}' --wait --timeout 20
expect_rc 0 "add --wait on a key that ran before: its new run"
expect_eq "$OUT" '{"by":"A/done1"}' "the new run's result"

curl -s -X POST "$BASE/queues/work/items/slow/cancel" >/dev/null
kill -TERM "$PID" "$B_PID"
wait_exit "$PID" 20
wait_exit "$B_PID" 20
finish
