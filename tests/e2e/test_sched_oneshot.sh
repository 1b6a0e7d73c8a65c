#!/usr/bin/env bash
# Schedules after downtime in a one-shot script (issue 19): a script that
# only defines its schedules and ends still adds (and runs) the time missed
# while it was down, and next_at in the file moves to the future; a
# schedule restored from the file that the script does not define again is
# listed with defined = false and never fires.
. "$(dirname "$0")/lib.sh"

command -v sqlite3 >/dev/null || { echo "FAIL: needs sqlite3" >&2; exit 1; }
sql() { sqlite3 -batch -cmd '.timeout 5000' "$@"; }
S=$(script sched.lua <<'LUA'
local q = wq.queue("rep", {handler = function(key) print("ran " .. key) end})
q:schedule("every5", "*/5 * * * *")
if arg[1] == "both" then q:schedule("gone", "*/5 * * * *", {key = "gone-key"}) end
for _, s in ipairs(q:schedules()) do print("schedule", s.name, s.defined) end
LUA
)
DB=$TMP/s.db
run --db "$DB" "$S" both
expect_rc 0 "the first run defines two schedules"
expect_not_in "$OUT" "ran " "nothing is due yet"
# The process was down for an hour: both next times are in the past.
sql "$DB" "UPDATE schedules SET next_at = next_at - 3600"
run --db "$DB" "$S"
expect_rc 0 "a one-shot run after the downtime"
expect_eq "$(printf '%s\n' "$OUT" | grep -c '^ran every5$')" 1 "the missed time of the defined schedule ran once"
expect_not_in "$OUT" "ran gone-key" "the schedule the script no longer defines does not fire"
expect_in "$OUT" "schedule	every5	true" "q:schedules(): defined by this run"
expect_in "$OUT" "schedule	gone	false" "q:schedules(): restored only, defined = false"
expect_eq "$(sql "$DB" "SELECT next_at > strftime('%s', 'now') FROM schedules WHERE name = 'every5'")" 1 \
    "next_at in the file moved to the future"
expect_eq "$(sql "$DB" "SELECT last_at > 0 FROM schedules WHERE name = 'every5'")" 1 "last_at recorded"
run --db "$DB" "$S"
expect_not_in "$OUT" "ran every5" "run again at once: nothing missed, nothing added"

finish
