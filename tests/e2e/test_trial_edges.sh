#!/usr/bin/env bash
# Rough edges a trial found (issue 28), on the state file: wq.log in a handler
# carries the job (queue, key, attempt); a schedule restored from the file that
# the script no longer defines is reported once at start-up; `wqrun status`
# says which queues are paused.
. "$(dirname "$0")/lib.sh"

# ---- wq.log in a handler
logs=$(script logs.lua <<'LUA'
local q = wq.queue("mail", {max_retries = 1, limiter = wq.limiter.exponential(0.01, 0.01),
    handler = function(key, payload, job)
        wq.log("sending to %s", key)
        if job.attempt == 1 then error("first try fails") end
    end})
q:add("user-7")
wq.log("outside a handler")
LUA
)
run "$logs"
expect_rc 0 "the run"
expect_in "$ERR" "INFO mail 'user-7' (attempt 1): sending to user-7" "text: the job as a prefix"
expect_in "$ERR" "INFO mail 'user-7' (attempt 2): sending to user-7" "the attempt of the retry"
expect_re "$ERR" "INFO outside a handler$" "outside a handler: no prefix"
run --log-format json "$logs"
expect_eq "$(printf '%s\n' "$ERR" | python3 -c '
import json, sys
for line in sys.stdin:
    o = json.loads(line)
    if o["msg"].startswith("sending"):
        print(o["msg"], o["queue"], o["key"], o["attempt"])
    elif o["msg"] == "outside a handler":
        print(o["msg"], "queue" in o)')" "outside a handler False
sending to user-7 mail user-7 1
sending to user-7 mail user-7 2" "JSON: queue, key and attempt as fields"

# ---- a schedule the script no longer defines
sched=$(script sched.lua <<'LUA'
local q = wq.queue("reports")
if os.getenv("DEFINE") then q:schedule("nightly", "0 3 * * *", {key = "report"}) end
q:schedule("hourly", "@hourly")
LUA
)
DEFINE=1 run --db "$TMP/s.db" "$sched"
expect_rc 0 "a run that defines both schedules"
expect_not_in "$ERR" "does not define it" "no warning while the script defines them"
run --db "$TMP/s.db" "$sched"
expect_count "$ERR" "warning: schedule 'nightly' of queue 'reports' (0 3 * * *) is in the state file, but this script does not define it: it does not fire" 1 \
    "a restored schedule the script dropped is reported once"
expect_in "$ERR" "q:unschedule('nightly')" "with how to remove it"
expect_not_in "$ERR" "schedule 'hourly'" "not the one it still defines"
run --quiet --db "$TMP/s.db" "$sched"
expect_in "$ERR" "schedule 'nightly'" "reported under --quiet too (a warning)"

# ---- status says which queues are paused
run pause --db "$TMP/s.db" reports
expect_rc 0 "pause without a runner"
run status --db "$TMP/s.db"
expect_in "$OUT" "
reports (paused)  " "status marks the paused queue"
run resume --db "$TMP/s.db" reports
run status --db "$TMP/s.db"
expect_not_in "$OUT" "(paused)" "and not once resumed"
finish
