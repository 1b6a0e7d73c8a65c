#!/usr/bin/env bash
# Backoff jitter is seeded per process: two runs of the same script draw
# different jittered delays, each within [duration, duration * (1 + jitter)).
. "$(dirname "$0")/lib.sh"

jit=$(script jitter.lua <<'EOF_LUA'
print(wq.backoff{duration = 1, jitter = 1}:step())
EOF_LUA
)

run --quiet "$jit"
expect_rc 0 "first run"
first=$OUT
run --quiet "$jit"
expect_rc 0 "second run"
second=$OUT

in_range() {
  awk -v v="$1" 'BEGIN { exit !(v ~ /^[0-9.eE+-]+$/ && v >= 1 && v < 2) }'
}
check "first jittered step '$first' in [1, 2)" in_range "$first"
check "second jittered step '$second' in [1, 2)" in_range "$second"
check "two processes draw different jitter ('$first' vs '$second')" test "$first" != "$second"

finish
