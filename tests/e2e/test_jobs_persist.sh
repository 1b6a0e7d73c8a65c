#!/usr/bin/env bash
# Job-runner state survives restarts (SPEC 7.1-7.3): job.enqueued_at and
# job.attempt, the completed-job memory (table done), and schedules with
# their catch-up policy, read back with the sqlite3 shell.
. "$(dirname "$0")/lib.sh"

command -v sqlite3 >/dev/null || { echo "FAIL: needs sqlite3" >&2; exit 1; }
sql() { sqlite3 -batch -cmd '.timeout 5000' "$@"; }
DB=$TMP/jobs.db
LUA=$E2E_DIR/lua/persist_jobs.lua

run --quiet --db "$DB" "$LUA" first
expect_rc 0 "first run"
expect_in "$OUT" "ran a attempt 1" "a ran"
expect_in "$(sql "$DB" "SELECT key, json_extract(result, '$.key') FROM done WHERE queue = 'handled'")" "a|a" \
    "the done table holds a with its result"
enq=$(sql "$DB" "SELECT printf('%.6f', enqueued_at) FROM items WHERE queue = 'later' AND key = 'e'")
check "items.enqueued_at is stamped ($enq)" test -n "$enq"
expect_in "$(sql "$DB" "SELECT name || ' ' || spec || ' ' || catch_up FROM schedules ORDER BY name")" \
    "once @every 2s once" "the schedules are in the file"
expect_in "$("$WQRUN" status --db "$DB")" "once" "wqrun status lists the schedules"

sleep 2.5 # both schedules' times pass while no runner runs
run --quiet --db "$DB" "$LUA" second
expect_rc 0 "second run"
expect_in "$OUT" "later e enqueued_at $enq" "job.enqueued_at is the time of the first run's add"
expect_in "$OUT" "re-add a: false" "a finished key is skipped after a restart"
expect_in "$OUT" "a result a" "and its result is kept"
expect_count "$OUT" "tick once" 1 "catch_up once: the missed time is added once"
expect_not_in "$OUT" "tick skipped" "catch_up skip: the missed time is not added"
last=$(sql "$DB" "SELECT last_at > 0 FROM schedules WHERE name = 'once'")
check "last_at is recorded ($last)" test "$last" = 1

# Expired memories: their rows leave the file too (swept in slices, once a prune pass dropped any).
run --quiet --db "$TMP/prune.db" "$E2E_DIR/lua/persist_prune.lua" 3000
expect_rc 0 "prune run"
expect_in "$OUT" "re-add k1 at once: false" "a finished key is remembered"
expect_in "$OUT" "k1 remembered after 3 s: false" "and forgotten after keep_done"
left=$(sql "$TMP/prune.db" "SELECT group_concat(key) FROM done")
check "the expired rows are gone from the done table, the fresh one is there ($left)" \
    test "$left" = fresh

finish
