#!/usr/bin/env bash
# The HTTP server under hostile clients (issue 9): a client must deliver a
# whole request within the deadline (trickling a byte at a time does not
# keep a connection), connections are bounded (new ones evict the slowest),
# and running out of file descriptors pauses accept instead of spinning,
# while a job's wq.exec waits instead of failing.
. "$(dirname "$0")/lib.sh"

command -v curl >/dev/null || { echo "FAIL: needs curl" >&2; exit 1; }

cat >"$TMP/idle.lua" <<'LUA'
wq.queue("jobs")
LUA

# start [VAR=value...] -- wqrun-args...: a runner on a free port (listen_start in lib.sh).
start() {
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    listen_start env "${envs[@]}" -- "$@"
}

fds() { ls "/proc/$PID/fd" 2>/dev/null | wc -l; }

# ---------------------------------------------------------------- trickling clients
start WQ_TEST_HTTP_DEADLINE_MS=1500 -- "$TMP/idle.lua"
sleep 0.3 # the start-up probe's connection is given back
base_fds=$(fds)
tricklers=()
for i in 1 2 3 4 5; do
    (
        trap '' PIPE
        exec 3<>"/dev/tcp/127.0.0.1/$PORT" || exit 2
        printf 'POST /queues/jobs/items HTTP/1.1\r\nHost: x\r\n' >&3
        for _ in $(seq 40); do
            printf 'X' >&3 2>/dev/null || exit 0 # the server closed it
            sleep 0.25
        done
        exit 1 # still open after 10 s
    ) &
    tricklers+=("$!")
    PIDS+=("$!")
done
sleep 0.5
check "the trickling connections are open at first ($(fds) descriptors, $base_fds before)" \
    test "$(fds)" -ge $((base_fds + 5))
t0=$(now)
cut=0
for p in "${tricklers[@]}"; do
    wait "$p" && cut=$((cut + 1))
done
check "every trickling client was cut off ($cut of 5)" test "$cut" -eq 5
check "by the 1.5 s deadline, not the 10 s of trickling ($(since "$t0") s)" \
    awk -v s="$(since "$t0")" 'BEGIN { exit !(s < 4) }'
check "healthz answers afterwards" test "$(curl -s -m 2 "http://127.0.0.1:$PORT/healthz")" = ok
sleep 0.3
check "their descriptors are given back ($(fds), $base_fds before)" test "$(fds)" -le $((base_fds + 1))
kill -TERM "$PID"
wait_exit "$PID" 5
check "SIGTERM ends the runner with 0 (got $RC)" test "$RC" = 0

# ---------------------------------------------------------------- a bounded number of connections
start -- --max-connections 4 "$TMP/idle.lua"
holders=()
for i in $(seq 10); do
    ( exec 3<>"/dev/tcp/127.0.0.1/$PORT"; sleep 20 ) &
    holders+=("$!")
    PIDS+=("$!")
done
sleep 0.5
check "with 10 idle connections held, a new client is served (max 4)" \
    test "$(curl -s -m 3 "http://127.0.0.1:$PORT/healthz")" = ok
check "the runner holds at most 2 x 4 client connections ($(fds) descriptors)" test "$(fds)" -le 20
for p in "${holders[@]}"; do kill "$p" 2>/dev/null; done
kill -TERM "$PID"
wait_exit "$PID" 5

# ---------------------------------------------------------------- out of descriptors
start -- "$TMP/idle.lua" # only to find a port; the real run has a low limit
kill -TERM "$PID"
wait_exit "$PID" 5
(ulimit -n 64; exec "$WQRUN" --quiet --listen "127.0.0.1:$PORT" "$E2E_DIR/lua/http_fds.lua") \
    >"$TMP/fds.out" 2>"$TMP/fds.err" </dev/null &
PID=$!
PIDS+=("$PID")
for i in $(seq 100); do grep -q hogging "$TMP/fds.out" && break; sleep 0.05; done
check "the script holds the descriptors" grep -q hogging "$TMP/fds.out"
clients=()
for i in $(seq 20); do
    curl -s -m 4 -o /dev/null "http://127.0.0.1:$PORT/healthz" &
    clients+=("$!")
done
t_before=$(awk '{ print $14 + $15 }' "/proc/$PID/stat")
sleep 1.5
t_after=$(awk '{ print $14 + $15 }' "/proc/$PID/stat")
ticks=$((t_after - t_before))
check "no busy loop while accept fails ($ticks CPU ticks in 1.5 s)" test "$ticks" -lt 50
lines=$(wc -l <"$TMP/fds.err")
check "stderr is not flooded ($lines lines)" test "$lines" -lt 20
for p in "${clients[@]}"; do wait "$p" 2>/dev/null; done
for i in $(seq 100); do grep -q "succeeded" "$TMP/fds.out" && break; sleep 0.05; done
check "the job's exec waited for descriptors and ran" grep -q "exec ok during" "$TMP/fds.out"
check "nothing was dead-lettered" grep -q "succeeded 1 dead 0" "$TMP/fds.out"
check "healthz answers once descriptors are back" \
    test "$(curl -s -m 2 "http://127.0.0.1:$PORT/healthz")" = ok
kill -TERM "$PID"
wait_exit "$PID" 5
check "the runner ends normally (got $RC)" test "$RC" = 0
if [ "$FAILED" -gt 0 ]; then
    echo "--- runner stderr ---" >&2
    cat "$TMP/fds.err" >&2
fi

finish
