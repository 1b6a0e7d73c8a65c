#!/usr/bin/env bash
# Signals end to end: the first SIGTERM/SIGINT stops handing out items,
# lets running handlers finish (within --grace) and exits 0; a second one
# exits at once; children do not outlive the process.
. "$(dirname "$0")/lib.sh"

# start [wqrun args...]: runs wqrun in the background; PID, output in $TMP/bg.out/.err
start() {
    : >"$TMP/bg.out"
    : >"$TMP/bg.err"
    "$WQRUN" "$@" >"$TMP/bg.out" 2>"$TMP/bg.err" </dev/null &
    PID=$!
    LAST_CMD="wqrun $*"
}

# stop_wait TIMEOUT: waits for the background wqrun; sets RC, OUT, ERR (RC=timeout if still running)
stop_wait() {
    wait_exit "$PID" "$1"
    OUT=$(cat "$TMP/bg.out")
    ERR=$(cat "$TMP/bg.err")
}

jobs_lua=$(script jobs.lua <<'EOF'
-- 3 workers, 9 items; each handler announces itself, sleeps, announces its end
local secs = tonumber(arg[1]) or 1
local child = arg[2] == "exec"
local q = wq.queue("jobs", {workers = 3, handler = function(key)
    print("start " .. key)
    io.stdout:flush()
    if child then
        wq.exec({"sleep", tostring(secs)})
    else
        wq.sleep(secs)
    end
    print("end " .. key)
    io.stdout:flush()
end})
for i = 1, 9 do q:add("k" .. i) end
EOF
)

# ---- SIGTERM while handlers run: they finish, then exit 0 -------------------------------
start --quiet "$jobs_lua" 1
check "three handlers started" wait_for "$TMP/bg.out" "start " 3 20
t_sig=$(now)
kill -TERM "$PID"
stop_wait 20
took=$(since "$t_sig")
ELAPSED=$took
expect_rc 0 "SIGTERM while handlers run: exit 0"
expect_count "$OUT" "start " 3 "no new item was handed out after the signal"
expect_count "$OUT" "end " 3 "the running handlers finished before the exit"
expect_between "$took" 0.5 10 "exited after the handlers' remaining sleep, not before"
expect_in "$ERR" "SIGTERM" "the signal is logged"

# ---- SIGINT behaves the same --------------------------------------------------------------
start --quiet "$jobs_lua" 1
check "three handlers started" wait_for "$TMP/bg.out" "start " 3 20
kill -INT "$PID"
stop_wait 20
expect_rc 0 "SIGINT: exit 0"
expect_count "$OUT" "end " 3 "SIGINT: running handlers finished"
expect_count "$OUT" "start " 3 "SIGINT: nothing new started"

# ---- a second signal exits at once ------------------------------------------------------
start --quiet "$jobs_lua" 30
check "three handlers started" wait_for "$TMP/bg.out" "start " 3 20
kill -TERM "$PID"
sleep 0.3
check "still running after the first signal (handlers sleep 30 s)" kill -0 "$PID"
t_sig=$(now)
kill -TERM "$PID"
stop_wait 10
took=$(since "$t_sig")
ELAPSED=$took
check "second signal: exited (status $RC)" test "$RC" != timeout
check "second signal: non-zero status ($RC)" test "$RC" != 0
expect_between "$took" 0 3 "second signal: exited at once"
expect_count "$OUT" "end " 0 "second signal: handlers did not finish"

# ---- --grace bounds the wait for running handlers ------------------------------------
start --quiet --grace 0.5 "$jobs_lua" 30
check "three handlers started" wait_for "$TMP/bg.out" "start " 3 20
t_sig=$(now)
kill -TERM "$PID"
stop_wait 15
took=$(since "$t_sig")
ELAPSED=$took
expect_rc 0 "--grace 0.5: exit 0 when the grace period is over"
expect_between "$took" 0.45 5 "--grace 0.5: exited after about 0.5 s"
expect_count "$OUT" "end " 0 "handlers were still running"
expect_in "$ERR" "grace" "the log says the grace period ran out"

start --quiet --grace=0 "$jobs_lua" 30
check "three handlers started" wait_for "$TMP/bg.out" "start " 3 20
t_sig=$(now)
kill -TERM "$PID"
stop_wait 10
took=$(since "$t_sig")
ELAPSED=$took
expect_rc 0 "--grace=0: exit 0"
expect_between "$took" 0 3 "--grace=0: at once"

# ---- children of handlers do not outlive the process ---------------------------------
marker="7.${$}1" # a sleep duration nobody else uses; ends in 1 (Lua would print 7.9610 as 7.961)
start --quiet --grace 0.3 "$jobs_lua" "$marker" exec
check "three exec handlers started" wait_for "$TMP/bg.out" "start " 3 20
children_running() {
    local i
    for i in $(seq 1 500); do
        [ "$(pgrep -f "^sleep $marker\$" | wc -l)" -ge 3 ] && return 0
        sleep 0.02
    done
    # say what was there instead (this check once failed on a loaded machine)
    {
        echo "     children seen: $(pgrep -af "sleep $marker" | tr '\n' ';')"
        echo "     wqrun output: $(tr '\n' ';' <"$TMP/bg.out") / $(tr '\n' ';' <"$TMP/bg.err")"
        echo "     wqrun running: $(kill -0 "$PID" 2>/dev/null && echo yes || echo no)"
    } >&2
    return 1
}
check "the three children run" children_running
kill -TERM "$PID"
stop_wait 10
expect_rc 0 "exec handlers, grace over: exit 0"
sleep 0.2
CHECKS=$((CHECKS + 1))
if pgrep -f "^sleep $marker\$" >/dev/null; then
    FAILED=$((FAILED + 1))
    echo "FAIL [$NAME:$LINENO] child processes outlived wqrun: $(pgrep -af "^sleep $marker\$")" >&2
    for p in $(pgrep -f "^sleep $marker\$"); do kill -KILL "$p" 2>/dev/null; done
fi

# with a generous grace, an exec handler finishes normally
start --quiet "$jobs_lua" 0.5 exec
check "three exec handlers started" wait_for "$TMP/bg.out" "start " 3 20
kill -TERM "$PID"
stop_wait 20
expect_rc 0 "exec handlers finishing within the grace period"
expect_count "$OUT" "end " 3 "their children ran to completion"

# ---- a signal while nothing runs: exit 0 at once --------------------------------------
idle_lua=$(script idle_sleep.lua <<'EOF'
local q = wq.queue("pending")
q:add("left")
print("sleeping")
io.stdout:flush()
wq.sleep(100)
print("woke up")
EOF
)
start --quiet "$idle_lua"
check "script started" wait_for "$TMP/bg.out" "sleeping" 1 20
t_sig=$(now)
kill -TERM "$PID"
stop_wait 10
took=$(since "$t_sig")
ELAPSED=$took
expect_rc 0 "SIGTERM with no handler running: exit 0"
expect_between "$took" 0 3 "at once"
expect_not_in "$OUT" "woke up" "the sleeping main chunk was not resumed"

# ---- queues created after the signal do not start work --------------------------------
late_lua=$(script late.lua <<'EOF'
local q = wq.queue("first", {handler = function(k) print("ran " .. k); io.stdout:flush(); wq.sleep(1) end})
q:add("a")
wq.sleep(0.3)
local q2 = wq.queue("second", {handler = function(k) print("late ran " .. k) end})
q2:add("b")
EOF
)
start --quiet "$late_lua"
check "handler started" wait_for "$TMP/bg.out" "ran a" 1 20
kill -TERM "$PID"
stop_wait 15
expect_rc 0 "signal, then a new queue"
expect_not_in "$OUT" "late ran" "a queue created during shutdown does not hand out items"

# ---- a handler stuck in a pure-Lua loop (no timeout) does not trap the signals ----------
spin_lua=$(script spin.lua <<'EOF'
local q = wq.queue("spin", {handler = function(key)
    print("spinning " .. key)
    io.stdout:flush()
    local x = 0
    while true do x = x + 1 end
end})
q:add("s")
EOF
)
start --quiet "$spin_lua"
check "handler spinning" wait_for "$TMP/bg.out" "spinning" 1 20
kill -TERM "$PID"
sleep 0.3
check "first signal: still running (the handler never ends)" kill -0 "$PID"
t_sig=$(now)
kill -TERM "$PID"
stop_wait 10
took=$(since "$t_sig")
ELAPSED=$took
check "spinning handler, second signal: exited (status $RC)" test "$RC" != timeout
expect_between "$took" 0 3 "spinning handler, second signal: at once"

for vt in "" --virtual-time; do
    start --quiet --grace 0.4 $vt "$spin_lua"
    check "handler spinning $vt" wait_for "$TMP/bg.out" "spinning" 1 20
    t_sig=$(now)
    kill -TERM "$PID"
    stop_wait 10
    took=$(since "$t_sig")
    ELAPSED=$took
    expect_rc 0 "spinning handler $vt: exit 0 when the grace period is over"
    expect_between "$took" 0.35 5 "spinning handler $vt: exited after about 0.4 s"
done

# ---- client-go style get/done workers also get the grace period ------------------------
ctl_lua=$(script ctl.lua <<'EOF'
local q = wq.queue("ctl")
for i = 1, 6 do q:add("k" .. i) end
for w = 1, 2 do
    wq.spawn(function()
        while true do
            local key = q:get()
            if key == nil then return end -- shut down
            print("got " .. key)
            io.stdout:flush()
            wq.sleep(1)
            print("finished " .. key)
            io.stdout:flush()
            q:done(key)
        end
    end)
end
EOF
)
start --quiet "$ctl_lua"
check "two get/done workers started" wait_for "$TMP/bg.out" "got " 2 20
kill -TERM "$PID"
stop_wait 20
expect_rc 0 "get/done workers, SIGTERM: exit 0"
expect_count "$OUT" "got " 2 "get/done workers: nothing new handed out after the signal"
expect_count "$OUT" "finished " 2 "get/done workers: the items in hand were finished"

# ---- a loop in a coroutine of the script's own: the second signal still ends it ---------
co_lua=$(script co_spin.lua <<'EOF'
wq.spawn(function()
    coroutine.wrap(function()
        print("spinning")
        io.stdout:flush()
        while true do end
    end)()
end)
EOF
)
start --quiet "$co_lua"
check "nested coroutine spinning" wait_for "$TMP/bg.out" "spinning" 1 20
kill -TERM "$PID"
sleep 0.3
t_sig=$(now)
kill -TERM "$PID"
stop_wait 10
took=$(since "$t_sig")
ELAPSED=$took
expect_rc 143 "nested spin, second SIGTERM: status 128 + 15"
expect_between "$took" 0 3 "nested spin, second SIGTERM: within about a second"

finish
