#!/usr/bin/env bash
# --virtual-time end to end: the virtual-time scenarios in tests/e2e/lua/
# (exact retry, delay and limiter timings), every Lua test of tests/lua/
# once more under the virtual clock, and wq.sleep(86400) being instant.
. "$(dirname "$0")/lib.sh"

# ---- wq.sleep(86400) returns at once with now() exactly 86400 later ----------------
day=$(script day.lua <<'EOF'
local t0, w0 = wq.now(), wq.time()
wq.sleep(86400)
print(string.format("slept %.9f wall %.3f", wq.now() - t0, wq.time() - w0))
EOF
)
run --virtual-time --quiet "$day"
expect_rc 0 "wq.sleep(86400) under --virtual-time"
expect_in "$OUT" "slept 86400.000000000 wall 86400.000" "now() and time() exactly 86400 s later"
expect_between "$ELAPSED" 0 5 "and it took no real time"

# the clock works in real time too (a short sleep, for contrast)
short=$(script short.lua <<'EOF'
local t0 = wq.now()
wq.sleep(0.2)
print(string.format("slept %.3f", wq.now() - t0))
EOF
)
run --quiet "$short"
expect_rc 0 "a real sleep"
expect_between "$ELAPSED" 0.19 5 "real time passes without --virtual-time"

# a delayed item a year away is still processed, instantly
year=$(script year.lua <<'EOF'
local q = wq.queue("y", {handler = function(k) print("ran " .. k .. " at " .. string.format("%.0f", wq.now() - T0)) end})
T0 = wq.now()
q:add_after("far", 365 * 86400)
EOF
)
run --virtual-time --quiet "$year"
expect_rc 0 "a year-long add_after"
expect_in "$OUT" "ran far at 31536000" "the delayed item ran at its virtual time"
expect_between "$ELAPSED" 0 5 "instantly"

# ---- the scenario scripts ------------------------------------------------------------
n=0
for f in "$WQ_SOURCE_DIR"/tests/e2e/lua/vt_*.lua; do
    n=$((n + 1))
    run --virtual-time --quiet "$f"
    expect_rc 0 "$(basename "$f") under --virtual-time"
    expect_in "$OUT" "checks passed" "$(basename "$f") reported its checks"
done
check "found the virtual-time scenarios" test "$n" -ge 2

# ---- every Lua test again, under the virtual clock -----------------------------------
n=0
for f in "$WQ_SOURCE_DIR"/tests/lua/test_*.lua; do
    n=$((n + 1))
    t0=$(date +%s.%N)
    (cd "$WQ_SOURCE_DIR/tests/lua" && timeout -s KILL 120 "$WQRUN" --virtual-time --quiet "$f" \
        >"$TMP/out" 2>"$TMP/err" </dev/null)
    RC=$?
    OUT=$(cat "$TMP/out")
    ERR=$(grep -v "dead-lettered" "$TMP/err")
    ELAPSED=$(since "$t0")
    LAST_CMD="wqrun --virtual-time --quiet $f"
    expect_rc 0 "$(basename "$f") under --virtual-time"
    expect_in "$OUT" "checks passed" "$(basename "$f") reported its checks"
done
check "found the Lua tests" test "$n" -ge 5

finish
