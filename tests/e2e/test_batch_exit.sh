#!/usr/bin/env bash
# A one-shot run's exit status (SPEC section 12, issue 31): a run whose
# handlers dead-lettered anything exits 3 (1 stays a script's error), and its
# last line says how many; wq.exit(n) chooses the status itself (0 included);
# --serve is unchanged (a signal's stop exits 0). The same on a state file.
. "$(dirname "$0")/lib.sh"

jobs=$(script jobs.lua <<'LUA'
local bad = tonumber(os.getenv("BAD") or "0")
local q = wq.queue("jobs", {workers = 2, max_retries = 1,
    limiter = wq.limiter.exponential(0.01, 0.01),
    handler = function(key, payload, job)
        if key:match("^bad") then error("broken " .. key, 0) end
        if key == "flaky" and job.attempt == 1 then error("once", 0) end
    end})
for i = 1, 5 do q:add("ok" .. i) end
q:add("flaky")
for i = 1, bad do q:add("bad" .. i) end
local code = os.getenv("EXIT")
if code then -- the script decides: after the batch, its own status
    q:wait_idle()
    wq.exit(tonumber(code))
end
if os.getenv("SERVE") then
    q:wait_idle()
    print("idle")
    io.stdout:flush()
end
if os.getenv("BREAK") then
    q:wait_idle()
    error("the script broke after the batch")
end
LUA
)

run "$jobs"
expect_rc 0 "nothing dead-lettered (a retried key succeeded)"
expect_not_in "$ERR" "dead-lettered" "no dead letter reported"

BAD=2 run "$jobs"
expect_rc 3 "two keys dead-lettered: exit 3"
expect_in "$ERR" "exit status 3 (2 dead-lettered)" "the last line says how many"
expect_in "$ERR" "'bad1' failed 2 times, dead-lettered: broken bad1" "each dead letter is logged"

BAD=1 run --quiet "$jobs"
expect_rc 3 "--quiet: exit 3 all the same"
expect_in "$ERR" "exit status 3 (1 dead-lettered)" "--quiet still prints the non-zero status"

BAD=1 EXIT=0 run "$jobs"
expect_rc 0 "wq.exit(0) from the script overrides the default"
expect_in "$ERR" "exit status 0 (1 dead-lettered)" "the count is still said"

BAD=1 EXIT=7 run "$jobs"
expect_rc 7 "wq.exit(7) chooses 7"

BAD=1 BREAK=1 run "$jobs"
expect_rc 1 "a script error stays 1"
expect_in "$ERR" "the script broke after the batch" "with its message"

# On a state file: the same; a second run with nothing dead-lettered in it exits 0
# (the dead letters of the first are kept, but they are not this run's).
BAD=1 run --db "$TMP/state.db" "$jobs"
expect_rc 3 "--db: dead-lettered in this run: 3"
expect_eq "$(sqlite3 "$TMP/state.db" "select count(*) from dead")" 1 "the dead letter is in the file"
run --db "$TMP/state.db" "$jobs"
expect_rc 0 "--db, a later run that dead-letters nothing: 0"
expect_eq "$(sqlite3 "$TMP/state.db" "select count(*) from dead")" 1 "the earlier dead letter is still kept"

# --serve: a service is unchanged; its stop by a signal exits 0
BAD=1 SERVE=1 "$WQRUN" --serve "$jobs" >"$TMP/serve.out" 2>"$TMP/serve.err" </dev/null &
pid=$!
PIDS+=("$pid")
check "the service ran its batch" wait_for "$TMP/serve.out" idle 1 20
kill -TERM "$pid"
wait_exit "$pid" 20
expect_eq "$RC" 0 "--serve: SIGTERM exits 0 even with a dead letter"
check "its last line counts the dead letter" grep -q "exit status 0 (1 dead-lettered)" "$TMP/serve.err"

finish
