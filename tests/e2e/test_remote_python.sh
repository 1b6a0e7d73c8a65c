#!/usr/bin/env bash
# Remote workers over HTTP (SPEC 10.2) with the Python client
# contrib/python/wqrun_worker.py, on the SQLite state file and on PostgreSQL:
# a runner (--serve --token) has queues without handlers; 2,000 items added
# over HTTP are run by the client (2 threads, batched claims and reports)
# and end up done in the history (read back with sqlite3 / psql), none left
# pending; a failing key is dead-lettered after its retries, Retry(...)
# retries, Fail(...) dead-letters at once; a result (of a key with '/' and
# a space, percent-encoded) is served by GET items/KEY; a report with a
# token whose lease ran out answers 409; a worker killed with -9 mid-batch
# (1 s leases) loses its items to a second worker, which finishes them all;
# a cancel reaches the running function through the heartbeat; SIGTERM stops
# a worker cleanly. The PostgreSQL half fails (never skips) without one.
. "$(dirname "$0")/lib.sh"

CLIENT=$WQ_SOURCE_DIR/contrib/python/wqrun_worker.py
TOK=s3cret-$$
export PYTHONPATH=$TMP

jobs=$(script jobs.lua <<'LUA'
wq.queue("work", {max_retries = 2, limiter = wq.limiter.exponential(0.05, 0.05)})
wq.queue("slow", {max_retries = 0})
LUA
)

# the work: what a key's name asks for; every start is logged as "start KEY ATTEMPT"
cat >"$TMP/tasks.py" <<'PY'
import sys, time
from wqrun_worker import Fail, Retry

def say(*words):
    sys.stdout.write(" ".join(map(str, words)) + "\n")
    sys.stdout.flush()

def fn(key, payload, job):
    say("start", key, job.attempt)
    if key.startswith("bad"):
        raise ValueError("broken %d" % job.attempt)
    if key.startswith("retry") and job.attempt == 1:
        raise Retry(0.3, "not yet")
    if key.startswith("fail"):
        raise Fail("hopeless")
    if key.startswith("block"):  # runs until told it was cancelled
        while not job.cancelled.wait(0.05):
            pass
        say("cancelled", key)
        return "stopped"
    if payload and "s" in payload:
        time.sleep(payload["s"])
    say("end", key)
    return {"n": (payload or {}).get("n", 0) * 2, "attempt": job.attempt}
PY

H=(-H "Authorization: Bearer $TOK")
post() { curl -s "${H[@]}" -X POST "$BASE$1" -d "$2"; }
# worker NAME QUEUE ARGS...: the client in the background, output in $TMP/NAME.log; pid in WPID
worker() {
    local name=$1 queue=$2
    shift 2
    python3 "$CLIENT" "$BASE" "$queue" tasks:fn --token "$TOK" "$@" >"$TMP/$name.log" 2>&1 &
    WPID=$!
    PIDS+=("$WPID")
}
# add_many QUEUE PREFIX N PAYLOAD-JSON: N items PREFIX0..PREFIXn-1 in one items:batch
add_many() {
    python3 - "$1" "$2" "$3" "$4" <<'PY' | curl -s "${H[@]}" -X POST "$BASE/queues/$1/items:batch" --data-binary @- >/dev/null
import json, sys
q, prefix, n, payload = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
print(json.dumps([{"key": "%s%d" % (prefix, i), "payload": dict(payload, n=i)} for i in range(n)]))
PY
}
# wait_q SQL WANT TIMEOUT: polls the backend's query ($SQL_FN) until it prints WANT
wait_q() {
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        GOT=$($SQL_FN "$1" 2>&1)
        [ "$GOT" = "$2" ] && return 0
        sleep 0.1
    done
    echo "     last answer of [$1]: $GOT" >&2
    return 1
}

# answers L WHAT: the runner still answers /healthz (else fails, with where its main thread is)
answers() {
    CHECKS=$((CHECKS + 1))
    [ "$(curl -s -m 3 "$BASE/healthz")" = ok ] && return 0
    FAILED=$((FAILED + 1))
    echo "FAIL [$NAME:${BASH_LINENO[0]}] $1: the runner no longer answers /healthz after $2" \
        "($(ps -o pcpu= -p "$PID" | tr -d ' ')% CPU); its main thread:" >&2
    command -v gdb >/dev/null && timeout 20 gdb -p "$PID" -batch -ex "bt 12" 2>/dev/null | grep '^#' >&2
    return 1
}

# scenario LABEL DB HISTORY_TABLE PENDING_TABLE
scenario() {
    local L=$1 db=$2 hist=$3 pend=$4
    listen_start -- --serve --token "$TOK" --db "$db" "$jobs" || return
    local t0
    t0=$(now)

    expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$BASE/queues/work/claim" -d '{}')" 401 \
        "$L: a claim without the token: 401"

    # a lease that runs out: the stale token's report answers 409, nothing changed
    post /queues/slow/items '{"key": "stale1"}' >/dev/null
    local c tokn
    c=$(post /queues/slow/claim '{"max": 1, "wait": 10, "lease": 0.5}')
    tokn=$(printf '%s' "$c" | python3 -c 'import json,sys; a=json.load(sys.stdin); print(a[0]["token"] if a else "")')
    expect_in "$c" '"key":"stale1"' "$L: a raw claim hands out stale1"
    sleep 1.2
    expect_eq "$(curl -s "${H[@]}" -o /dev/null -w '%{http_code}' -X POST "$BASE/queues/slow/items/stale1/done" \
        -d "{\"token\": \"$tokn\", \"result\": 1}")" 409 "$L: done with the token of a lease that ran out: 409"

    # ---- 2,000 items and the outcomes ----
    add_many work ok 2000 '{}'
    post /queues/work/items:batch '[{"key": "bad1"}, {"key": "retry1"}, {"key": "fail1"},
        {"key": "dir/a b", "payload": {"n": 21}}]' >/dev/null
    worker w1 work --threads 2 --batch 100 --lease 10
    local W1=$WPID
    check "$L: 2,002 done in the history" wait_q \
        "SELECT count(*) FROM $hist WHERE queue = 'work' AND state = 'done'" 2002 40
    check "$L: 2 dead in the history" wait_q \
        "SELECT count(*) FROM $hist WHERE queue = 'work' AND state = 'dead'" 2 10
    expect_eq "$($SQL_FN "SELECT count(*) FROM $pend WHERE queue = 'work'")" 0 "$L: nothing pending"
    expect_eq "$($SQL_FN "SELECT count(DISTINCT key) FROM $hist WHERE queue = 'work' AND state = 'done' AND key LIKE 'ok%'")" \
        2000 "$L: each of the 2,000 done"
    expect_eq "$($SQL_FN "SELECT key, attempts, error FROM $hist WHERE queue = 'work' AND state = 'dead' ORDER BY key")" \
        "bad1|3|ValueError: broken 3
fail1|1|hopeless" "$L: an exception: dead after 3 attempts (max_retries 2); Fail: dead at once"
    expect_eq "$($SQL_FN "SELECT state, attempts FROM $hist WHERE queue = 'work' AND key = 'retry1'")" "done|2" \
        "$L: Retry: failed once, done on the second attempt"
    expect_eq "$(grep -c '^start bad1 ' "$TMP/w1.log")" 3 "$L: bad1 ran 3 times"
    expect_in "$(curl -s "${H[@]}" "$BASE/queues/work/items/ok7")" '"state":"done"' "$L: GET items/ok7: done"
    expect_in "$(curl -s "${H[@]}" "$BASE/queues/work/items/ok7")" '"result":{"n":14,"attempt":1}' \
        "$L: with the function's return value as its result"
    expect_in "$(curl -s "${H[@]}" "$BASE/queues/work/items/dir%2Fa%20b")" '"result":{"n":42,"attempt":1}' \
        "$L: a key with '/' and a space (percent-encoded in the report's path)"
    expect_between "$(since "$t0")" 0 30 "$L: within 30 s"

    # ---- kill -9 mid-batch: its items go to the next worker ----
    add_many slow s 30 '{"s": 0.2}'
    worker wa slow --threads 2 --batch 30 --lease 1
    local WA=$WPID
    wait_for "$TMP/wa.log" "end s" 4 20 || fail "$L: worker A did not get going: $(cat "$TMP/wa.log")"
    kill -9 "$WA"
    wait "$WA" 2>/dev/null
    local adone
    adone=$(grep -c '^end s' "$TMP/wa.log")
    worker wb slow --threads 2 --batch 30 --lease 1
    local WB=$WPID
    sleep 2 # A's leases run out and are handed out again
    answers "$L" "A's leases ran out with B's claim waiting" || return
    check "$L: all 30 (and stale1) done after the kill" wait_q \
        "SELECT count(DISTINCT key) FROM $hist WHERE queue = 'slow' AND state = 'done'" 31 30
    expect_eq "$($SQL_FN "SELECT count(*) FROM $pend WHERE queue = 'slow'")" 0 "$L: nothing pending in slow"
    expect_eq "$($SQL_FN "SELECT count(*) FROM $hist WHERE queue = 'slow' AND state <> 'done'")" 0 \
        "$L: no failure, no dead letter: a lost lease is not a failure"
    local both
    both=$(comm -12 <(sed -n 's/^start \(s[0-9]*\) .*/\1/p' "$TMP/wa.log" | sort -u) \
        <(sed -n 's/^start \(s[0-9]*\) .*/\1/p' "$TMP/wb.log" | sort -u) | wc -l)
    expect_between "$both" 1 30 "$L: keys A started, B ran again (A had finished $adone)"
    expect_in "$(grep '^start stale1' "$TMP/wa.log" "$TMP/wb.log")" "start stale1" \
        "$L: stale1 (its raw claim's lease ran out) was handed out again"

    # ---- a cancel, told by the heartbeat ----
    post /queues/slow/items '{"key": "block1"}' >/dev/null
    wait_for "$TMP/wb.log" "start block1" 1 15 || fail "$L: block1 did not start"
    post /queues/slow/items/block1/cancel '' >/dev/null
    wait_for "$TMP/wb.log" "cancelled block1" 1 10 || fail "$L: the function was not told of the cancel"
    check "$L: recorded as cancelled" wait_q \
        "SELECT state FROM $hist WHERE queue = 'slow' AND key = 'block1'" cancelled 10

    # ---- a clean stop ----
    kill -TERM "$W1" "$WB"
    wait_exit "$W1" 10
    expect_eq "$RC" 0 "$L: SIGTERM: worker 1 stops cleanly (exit 0)"
    wait_exit "$WB" 10
    expect_eq "$RC" 0 "$L: SIGTERM: worker B too"
    expect_not_in "$(cat "$TMP/w1.log" "$TMP/wb.log")" "Traceback" "$L: no traceback from the workers"
    kill -TERM "$PID"
    wait_exit "$PID" 20
    expect_eq "$RC" 0 "$L: the runner stops cleanly"
    [ "$RC" = 0 ] || cat "$ERRF" >&2
    echo "$L: $(since "$t0") s" >&2
}

sqlite_q() { sqlite3 "$TMP/s.db" "$1"; }
SQL_FN=sqlite_q
scenario sqlite "$TMP/s.db" history items

pg_need
DB=$(pg_fresh_db)
pg_q() { pg_psql "$DB" "$1"; }
SQL_FN=pg_q
scenario pg "$DB" wqrun.history wqrun.jobs

finish
