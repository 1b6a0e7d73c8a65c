#!/usr/bin/env bash
# Process pools (SPEC 10.1) end to end: kill -9 of the runner leaves no pool
# process (nor what one started) alive, the keeper kills their groups; a
# SIGTERM lets a job running on a pool finish within the drain time, then
# the processes are gone; examples/pool.lua runs its jobs through python3,
# node and bash workers.
. "$(dirname "$0")/lib.sh"

MARK="pool-e2e-$$"
# marked: pids of live (not zombie) processes whose environment holds WQ_POOL_MARK=$MARK
marked() {
    local f pid state
    for f in $(grep -lsz "WQ_POOL_MARK=$MARK" /proc/[0-9]*/environ 2>/dev/null); do
        pid=${f#/proc/}
        pid=${pid%/environ}
        state=$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$pid/stat" 2>/dev/null)
        [ -n "$state" ] && [ "$state" != Z ] && echo "$pid"
    done
}
# count_within N SECONDS: the number of marked processes is exactly N within SECONDS
count_within() {
    local i
    for ((i = 0; i < $2 * 50; i++)); do
        [ "$(marked | wc -l)" -eq "$1" ] && return 0
        sleep 0.02
    done
    echo "     marked processes: $(marked | tr '\n' ' ')" >&2
    return 1
}
# file_within FILE SECONDS: FILE exists within SECONDS
file_within() {
    local i
    for ((i = 0; i < $2 * 50; i++)); do
        [ -s "$1" ] && return 0
        sleep 0.02
    done
    return 1
}
trap 'for p in $(marked); do kill -9 "$p" 2>/dev/null; done; for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT

worker=$WQ_SOURCE_DIR/tests/lua/pool_worker.py

# --- kill -9 of the runner: no pool process outlives it ---
s=$(script kill.lua <<EOF
local p = assert(wq.pool({"python3", "$worker"}, {size = 3, env = {WQ_POOL_MARK = "$MARK"}}))
wq.spawn(function() p:call({op = "hang", pidfile = "$TMP/hang.pid"}) end) -- and a grandchild
wq.sleep(3600)
EOF
)
"$WQRUN" --quiet "$s" >"$TMP/out" 2>"$TMP/err" &
runner=$!
PIDS+=("$runner")
check "3 pool processes and a grandchild run" count_within 4 10
kill -9 "$runner"
{ wait "$runner"; } 2>/dev/null
check "every pool process and the grandchild are gone after kill -9 of the runner" count_within 0 5

# --- SIGTERM: the running job finishes within the drain time, then the processes end ---
db=$TMP/state.db
s=$(script term.lua <<EOF
local p = assert(wq.pool({"python3", "$worker"}, {size = 2, env = {WQ_POOL_MARK = "$MARK"}}))
local q = wq.queue("terms", {handler = p, keep_done = 600})
if arg[1] == "add" then q:add("slow", {op = "sleep", s = 1, pidfile = "$TMP/slow.pid"}) end
EOF
)
"$WQRUN" --serve --grace 10 --db "$db" "$s" add >"$TMP/out" 2>"$TMP/err" &
runner=$!
PIDS+=("$runner")
check "the job started" file_within "$TMP/slow.pid" 10
kill -TERM "$runner"
wait_exit "$runner" 15
expect_eq "$RC" 0 "the runner stopped cleanly after SIGTERM"
run show --db "$db" terms slow
expect_in "$OUT" "done" "the running job finished during the drain"
check "no pool process after the stop" count_within 0 5

# --- the examples: python3, node and bash workers ---
for kind in python node bash; do
    run --quiet "$WQ_SOURCE_DIR/examples/pool.lua" "$kind" 60
    if [ "$kind" = bash ]; then
        expect_rc 0
        expect_in "$OUT" "bash pool: 60 jobs" "the bash example ran"
        expect_in "$OUT" "60 succeeded" "bash: every job"
    else
        expect_rc 3 # text-007 is dead-lettered on purpose
        expect_in "$OUT" "$kind pool: 60 jobs" "the $kind example ran"
        expect_in "$OUT" "59 succeeded, 7 failed runs (retried), 1 dead" "$kind: outcomes"
        expect_in "$OUT" "answered by: $kind" "$kind: the results came from its workers"
        expect_in "$OUT" "dead: text-007: refused: marked bad" "$kind: the permanent failure"
        expect_in "$OUT" "processes started: 4 (size 4)" "$kind: no process replaced"
    fi
done
finish
