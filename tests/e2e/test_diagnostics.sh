#!/usr/bin/env bash
# Loop-blocking diagnostics: code that holds the loop for over a second
# without yielding gets one log line naming it (main chunk, the queue and key
# of a handler, a spawned task, a timer callback) and where it was; wqrun_loop_lag_seconds shows how late
# timers fired meanwhile.
. "$(dirname "$0")/lib.sh"

# A random port; another test may hold it: then try another.
for try in 1 2 3 4 5 6; do
    PORT=$(rand_port)
    run --quiet --listen "127.0.0.1:$PORT" "$E2E_DIR/lua/diag_stall.lua" "$PORT"
    case $ERR in *"cannot listen"*) continue ;; esac
    break
done
expect_rc 0 "the script ends normally"
expect_re "$ERR" "main chunk has held the loop for over 1 s without yielding, at [^ ]*diag_stall.lua:8" \
    "the main chunk is named, with its line"
expect_re "$ERR" "worker of queue 'slow' \\(key 'k/\\\\xc3\\\\xa9'\\) has held the loop for over 1 s without yielding, at [^ ]*diag_stall.lua:13" \
    "the handler's queue, key and line are named"
expect_re "$ERR" "task [0-9]+ has held the loop for over 1 s without yielding, at [^ ]*diag_stall.lua:20" \
    "a spawned task is named, with its line"
expect_re "$ERR" "timer callback \\(task [0-9]+\\) has held the loop for over 1 s without yielding, at [^ ]*diag_stall.lua:27" \
    "a timer callback is named, with its line"
expect_count "$ERR" "held the loop" 4 "one line per stall"
count=$(printf '%s\n' "$OUT" | awk '$1 == "wqrun_loop_lag_seconds_count" { print $2 }')
sum=$(printf '%s\n' "$OUT" | awk '$1 == "wqrun_loop_lag_seconds_sum" { print $2 }')
check "timers fired late were observed (count ${count:-none})" test "${count:-0}" -ge 1
check "the lag includes the 1.2 s the main chunk held the loop (sum ${sum:-none} s)" \
    awk -v s="${sum:-0}" 'BEGIN { exit !(s >= 1.0) }'
expect_in "$OUT" 'wqrun_loop_lag_seconds_bucket{le="10"}' "the histogram has the usual buckets"

finish
