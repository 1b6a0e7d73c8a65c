#!/usr/bin/env bash
# A graceful stop with PostgreSQL (SPEC 8.3): runner A (2 workers) gets 10
# items whose handlers sleep 4 s (it claims at most as many as it has free
# workers, so it holds 2 claims); SIGTERM A: A starts nothing more, finishes
# its 2 running items and exits 0; the other items are free in the database
# at the signal: runner B, started right after it, starts all 8 before A has
# even finished; every key runs exactly once; nothing is left.
. "$(dirname "$0")/lib.sh"
pg_need

LUA=$E2E_DIR/lua/pg_takeover.lua
LOG=$TMP/runs.log
: >"$LOG"
DB=$(pg_fresh_db)
run migrate --db "$DB"
expect_rc 0 "migrate"
pg_bg a --serve --runner-name A --db "$DB" "$LUA" "$LOG" A 2
A=$BG_PID
check "A is registered" pg_wait "$DB" "select count(*) from wqrun.runners" 1 10
pg_psql "$DB" "select wqrun.add('t', 'k' || i, '{\"s\": 4}') from generate_series(1, 10) i" >/dev/null
check "A starts 2" wait_for "$LOG" "start A " 2 10
sleep 0.3
expect_eq "$(grep -c '^start A ' "$LOG")" 2 "A runs 2 at a time"
held=$(pg_psql "$DB" "select count(*) from wqrun.items where state = 'processing'")
expect_between "$held" 2 10 "A holds its 2 running items in the database ($held claimed)"
t_term=$(now)
kill -TERM "$A"
sleep 0.2
pg_bg b --quiet --serve --runner-name B --db "$DB" "$LUA" "$LOG" B 8
B=$BG_PID
check "B starts the other 8" wait_for "$LOG" "start B " 8 10
t_b=$(awk -v t="$t_term" '$1 == "start" && $2 == "B" { d = $5 - t; if (d > m) m = d } END { printf "%.3f", m }' "$LOG")
expect_eq "$(grep -c '^end A ' "$LOG")" 0 "B started all 8 while A's 2 still ran (handed back at the signal)"
wait_exit "$A" 10
t_exit_abs=$(now)
t_exit=$(since "$t_term")
a_last_end=$(awk '$1 == "end" && $2 == "A" { if ($5 > m) m = $5 } END { printf "%.3f", m }' "$LOG")
ERR=$(cat "$TMP/a.err")
LAST_CMD="runner A (SIGTERM)"
expect_rc 0 "A exits 0 after SIGTERM"
expect_eq "$(grep -c '^end A ' "$LOG")" 2 "A finished its 2 running items"
expect_eq "$(grep -c '^start A ' "$LOG")" 2 "A started nothing after the signal"
expect_between "$(awk -v a="$a_last_end" -v b="$t_exit_abs" 'BEGIN { printf "%.3f", b - a }')" 0 2 \
    "A left after its handlers were done, within 2 s"
check "B finishes the 8" wait_for "$LOG" "end B " 8 10
check "nothing left in the database" pg_wait "$DB" "select count(*) from wqrun.jobs" 0 10
expect_eq "$(awk '$1 == "start" { print $3 }' "$LOG" | sort | uniq -d | tr '\n' ' ')" "" "no key ran twice"
expect_eq "$(awk '$1 == "start" { print $3 }' "$LOG" | sort -u | wc -l)" 10 "all 10 keys ran"
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.dead")|$(pg_psql "$DB" "select string_agg(name, ',') from wqrun.runners")" "0|B" \
    "no dead letter; only B is registered"
echo "SIGTERM: A held $held claims; B started the 8 handed-back items within ${t_b}s of the signal; A exited after ${t_exit}s"
kill -TERM "$B"
wait_exit "$B" 10
expect_rc 0 "B exits 0"
finish
