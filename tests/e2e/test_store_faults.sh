#!/usr/bin/env bash
# The state file failing under a running service (issue 9): deleted while
# handlers run, locked by another connection past the acknowledgement
# bound, SIGHUP, and inbox rows no queue can take.
. "$(dirname "$0")/lib.sh"

command -v sqlite3 >/dev/null || { echo "FAIL: needs sqlite3" >&2; exit 1; }
command -v curl >/dev/null || { echo "FAIL: needs curl" >&2; exit 1; }
SCRIPT=$E2E_DIR/lua/store_faults.lua
sql() { sqlite3 -batch -cmd '.timeout 5000' "$@"; }

# post PATH BODY: sets CODE and BODY_OUT
post() {
    BODY_OUT=$(curl -s -m 15 -o - -w '\n%{http_code}' --data-binary "$2" "$BASE$1")
    CODE=${BODY_OUT##*$'\n'}
    BODY_OUT=${BODY_OUT%$'\n'*}
}
expect_code() { check "$1 (got $CODE: $BODY_OUT)" test "$CODE" = "$2"; }

# ---------------------------------------------------------------- the file deleted while handlers run
# Noticed within a second and logged; adds get 503 from then on; running
# handlers finish (within --grace), then the runner exits 1.
DB=$TMP/gone.db
listen_start -- --serve --grace 10 --db "$DB" "$SCRIPT" 1.5
post /queues/slow/items '{"key":"a"}'
expect_code "before: a post is accepted" 202
post /queues/slow/items '{"key":"b"}'
check "two handlers started" wait_for "$OUTF" "start " 2 10
rm -f "$DB" "$DB-wal" "$DB-shm"
t0=$(now)
check "the deletion is logged within a second" wait_for "$ERRF" "deleted or replaced" 1 1
post /queues/slow/items '{"key":"c"}'
expect_code "a post after the deletion gets 503" 503
expect_in "$BODY_OUT" "deleted or replaced" "the 503 says the file is gone"
post /queues/jobs/items '{"key":"d"}'
expect_code "on every queue" 503
check "still running while handlers finish" kill -0 "$PID"
wait_exit "$PID" 10
ELAPSED=$(since "$t0")
check "exit 1 after the running handlers ended (got $RC)" test "$RC" = 1
expect_count "$(cat "$OUTF")" "end " 2 "the handlers running at the deletion finished"
expect_count "$(cat "$OUTF")" "start " 2 "nothing started after the deletion"
expect_between "$ELAPSED" 0.5 8 "it waited for them (not the whole grace)"
expect_in "$(cat "$ERRF")" "finishing running handlers" "the stop is logged"

# ---------------------------------------------------------------- a write lock that is never released
# A sqlite3 session holds the write lock (BEGIN IMMEDIATE) for 6.5 s: a post
# waits at most 5 s for its commit, then gets 503 saying why. The item stays
# pending and is written once the lock is free (503 = not acknowledged).
DB=$TMP/locked.db
listen_start -- --serve --db "$DB" "$SCRIPT" 0
post /queues/jobs/items '{"key":"before"}'
expect_code "before the lock: 202" 202
printf '%s\n' "BEGIN IMMEDIATE;" "INSERT INTO inbox(queue, key) VALUES ('elsewhere', 'x');" \
    ".shell touch $TMP/locked" ".shell sleep 6.5" "COMMIT;" | sql "$DB" &
locker=$!
PIDS+=("$locker")
for i in $(seq 250); do [ -e "$TMP/locked" ] && break; sleep 0.02; done
t0=$(now)
post /queues/jobs/items '{"key":"during"}'
took=$(since "$t0")
expect_code "a post while the file stays locked gets 503" 503
expect_in "$BODY_OUT" "locked" "the 503 says the file is locked"
expect_between "$took" 4.5 6.4 "after the 5 s bound, before the lock is released"
wait "$locker"
for i in $(seq 100); do
    [ "$(sql "$DB" "SELECT count(*) FROM items WHERE key = 'during'")" = 1 ] && break
    sleep 0.05
done
expect_eq "$(sql "$DB" "SELECT count(*) FROM items WHERE key = 'during'")" 1 \
    "the refused item is written once the lock is free"
post /queues/jobs/items '{"key":"after"}'
expect_code "after the lock: 202" 202
expect_in "$(cat "$ERRF")" "writable again" "the end of the wait is logged"
kill -TERM "$PID"
wait_exit "$PID" 10
expect_rc 0 "then a clean stop"

# ---------------------------------------------------------------- SIGHUP: like SIGTERM
DB=$TMP/hup.db
listen_start -- --serve --db "$DB" "$SCRIPT" 1
post /queues/slow/items '{"key":"h1"}'
post /queues/slow/items '{"key":"h2"}'
check "two handlers started" wait_for "$OUTF" "start " 2 10
kill -HUP "$PID"
wait_exit "$PID" 10
ERR=$(cat "$ERRF")
expect_rc 0 "SIGHUP: drained and exit 0"
expect_count "$(cat "$OUTF")" "end " 2 "SIGHUP: the running handlers finished"
expect_in "$ERR" "SIGHUP received" "SIGHUP: logged"
expect_eq "$(sql "$DB" "SELECT count(*) FROM items")" 0 "SIGHUP: their completion was committed"
check "SIGHUP: the file was closed cleanly (no -wal left)" test ! -e "$DB-wal"
# started with SIGHUP ignored (nohup): it stays ignored
listen_start bash -c 'trap "" HUP; exec "$@"' _ -- --serve --db "$DB" "$SCRIPT" 0
kill -HUP "$PID"
sleep 0.3
check "SIGHUP ignored at start (nohup) stays ignored" kill -0 "$PID"
kill -TERM "$PID"
wait_exit "$PID" 10
expect_rc 0 "then SIGTERM stops it"

# ---------------------------------------------------------------- inbox rows no queue can take
# A key over 128 MiB or a group over 1 KiB: the row stays in the inbox (the
# user removes or fixes it) and each run says so once.
DB=$TMP/big.db
"$WQRUN" add --db "$DB" jobs ok1 >/dev/null
sql "$DB" "INSERT INTO inbox(queue, key, grp) VALUES ('jobs', 'g1', printf('%.2000c', 'g'))"
sql "$DB" "INSERT INTO inbox(queue, key) VALUES ('slow', substr(hex(zeroblob(67108864)), 1) || 'x')"
sql "$DB" "INSERT INTO inbox(queue, key, grp) VALUES ('jobs', 'g2', printf('%.2000c', 'g'))"
run --quiet --db "$DB" "$SCRIPT" 0
expect_rc 0 "oversized rows: the run ends"
expect_in "$ERR" "inbox rows for queue 'jobs' stay in the inbox: a group of 2000 bytes (at most 1024)" \
    "a group too long is logged"
expect_in "$ERR" "inbox rows for queue 'slow' stay in the inbox: a key of 134217729 bytes (at most 134217727)" \
    "a key too long is logged"
expect_count "$ERR" "a group of" 1 "once per queue"
expect_eq "$(sql "$DB" "SELECT group_concat(queue, ' ') FROM (SELECT queue FROM inbox ORDER BY id)")" \
    "jobs slow jobs" "the rows stay in the inbox"
expect_eq "$(sql "$DB" "SELECT key FROM items")" "ok1" "the good row was taken"

finish
