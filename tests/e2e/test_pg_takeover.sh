#!/usr/bin/env bash
# Runners that die or hang (SPEC 8.3), on databases of its own:
#   - kill -9 of a runner running 20 items: an idle runner starts all 20
#     within 2 s of the kill (timestamps logged by the handler), job.attempt
#     unchanged (1), wqrun.counters 'takeovers' >= 20, no failure counted;
#   - SIGSTOP of a runner (--lease 2) running 5 items that end after 3 s:
#     after 4 s the other runner has taken them over; SIGCONT: the stopped
#     runner's late outcomes are discarded (its log says so, and that it was
#     declared dead), every key ran again elsewhere, no row and no dead
#     letter is left;
#   - a job that kills every runner that runs it: dead-lettered once its
#     runner died while running it more than 5 times in a row, job.attempt
#     unchanged, counters 'crash_dead' 1.
. "$(dirname "$0")/lib.sh"
pg_need

LUA=$E2E_DIR/lua/pg_takeover.lua
LOG=$TMP/runs.log
: >"$LOG"

# ---- kill -9: takeover within 2 s ----------------------------------------------
DB=$(pg_fresh_db)
run migrate --db "$DB"
expect_rc 0 "migrate"
pg_bg a --quiet --serve --runner-name A --db "$DB" "$LUA" "$LOG" A 20
A=$BG_PID
pg_psql "$DB" "select wqrun.add('t', 'k' || i, '{\"s\": 30}') from generate_series(1, 20) i" >/dev/null
check "A starts all 20" wait_for "$LOG" "start A " 20 15
pg_bg b --quiet --serve --runner-name B --db "$DB" "$LUA" "$LOG" B 20
B=$BG_PID
check "B is registered" pg_wait "$DB" "select count(*) from wqrun.runners" 2 10
sleep 0.5
expect_eq "$(grep -c '^start B ' "$LOG")" 0 "B idles while A runs everything"
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.items i join wqrun.runners r on r.id = i.runner where r.name = 'A' and i.state = 'processing'")" 20 \
    "the database shows A running 20"
t_kill=$(now)
{ kill -9 "$A"; wait "$A"; } 2>/dev/null
check "B starts all 20" wait_for "$LOG" "start B " 20 10
delay=$(awk -v t="$t_kill" '$1 == "start" && $2 == "B" { d = $5 - t; if (d > m) m = d } END { printf "%.3f", m }' "$LOG")
expect_between "$delay" 0 1.999 "the last of the 20 started on B within 2 s of the kill"
expect_eq "$(awk '$1 == "start" && $2 == "B" { print $3 }' "$LOG" | sort -u | wc -l)" 20 "20 different keys on B"
expect_eq "$(awk '$1 == "start" && $2 == "B" && $4 != 1 { n++ } END { print n + 0 }' "$LOG")" 0 "job.attempt unchanged (1) on B"
expect_between "$(pg_psql "$DB" "select value from wqrun.counters where name = 'takeovers'")" 20 1000000 "counters: takeovers >= 20"
expect_eq "$(pg_psql "$DB" "select count(*) || '|' || sum(requeues) from wqrun.items where state = 'processing'")" "20|0" \
    "20 processing, no failure counted"
expect_eq "$(pg_psql "$DB" "select string_agg(name, ',') from wqrun.runners")" B "A's runners row is gone"
LAST_CMD="runner B" ERR=$(cat "$TMP/b.err")
expect_re "$ERR" "WARN wqrun: dead runner A \(id [0-9]+\): took over 20 item\(s\): t 'k1', t 'k10', t 'k11', .* and 10 more" \
    "B's log names the dead runner and its first 10 keys, and how many more"
echo "takeover after kill -9: all 20 items started on B within ${delay}s"
{ kill -9 "$B"; wait "$B"; } 2>/dev/null

# ---- SIGSTOP: declared dead after the lease, late outcomes discarded ---------------
DB=$(pg_fresh_db)
: >"$LOG"
pg_bg s --serve --runner-name S --lease 2 --db "$DB" "$LUA" "$LOG" S 5
S=$BG_PID
check "S is registered" pg_wait "$DB" "select count(*) from wqrun.runners" 1 10
pg_psql "$DB" "select wqrun.add('t', 'p' || i, '{\"s\": 3}') from generate_series(1, 5) i" >/dev/null
check "S starts all 5" wait_for "$LOG" "start S " 5 10
pg_bg o --quiet --serve --runner-name O --lease 2 --db "$DB" "$LUA" "$LOG" O 5
O=$BG_PID
check "O is registered" pg_wait "$DB" "select count(*) from wqrun.runners" 2 10
kill -STOP "$S"
t_stop=$(now)
sleep 4
check "O took over the 5" wait_for "$LOG" "start O " 5 1
expect_eq "$(grep -c ' S ' "$LOG" | tr -d ' ')" 5 "S (stopped) logged nothing more"
t_o=$(awk -v t="$t_stop" '$1 == "start" && $2 == "O" { d = $5 - t; if (d > m) m = d } END { printf "%.3f", m }' "$LOG")
expect_between "$t_o" 1.5 4 "O started them after S's lease (2 s) ran out"
kill -CONT "$S"
check "O finishes the 5" wait_for "$LOG" "end O " 5 10
check "no row left" pg_wait "$DB" "select count(*) from wqrun.jobs" 0 10
sleep 1.5
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.jobs")|$(pg_psql "$DB" "select count(*) from wqrun.dead")" "0|0" \
    "every key finished: no row, no dead letter"
expect_eq "$(awk '$1 == "start" && $2 == "O" { print $3 }' "$LOG" | sort -u | tr '\n' ' ')" "p1 p2 p3 p4 p5 " "each key ran again on O"
expect_eq "$(grep -c '^start' "$LOG")" 10 "10 starts: 5 on S, 5 on O, none more"
ERR=$(cat "$TMP/s.err")
LAST_CMD="runner S (stopped, then continued)"
expect_re "$ERR" "outcome\(s\) discarded|discarded" "S says its late outcomes were discarded"
expect_re "$ERR" "declared dead|lease lost" "S says it was declared dead / lost its lease"
echo "SIGSTOP: O started the items $t_o s after the stop"
echo "--- S's log:"
cat "$TMP/s.err"
kill -TERM "$S" "$O"
wait_exit "$S" 10
wait_exit "$O" 10

# ---- a database younger than the lease: a killed runner is still taken over at once --
# The lock-based detection used to wait until the postmaster was older than the lease (after
# a database restart, runners take their locks again only once they reconnect). A runner that
# took its lock since the database started (registered then, or re-locked since) and no longer
# holds it is dead now, however young the database. --lease 86400: older than any test cluster.
DB=$(pg_fresh_db)
: >"$LOG"
pg_bg y1 --quiet --serve --runner-name Y1 --lease 86400 --db "$DB" "$LUA" "$LOG" Y1 5
Y1=$BG_PID
check "Y1 is registered" pg_wait "$DB" "select count(*) from wqrun.runners" 1 10
pg_psql "$DB" "select wqrun.add('t', 'y' || i, '{\"s\": 30}') from generate_series(1, 3) i" >/dev/null
check "Y1 starts all 3" wait_for "$LOG" "start Y1 " 3 10
pg_bg y2 --quiet --serve --runner-name Y2 --lease 86400 --db "$DB" "$LUA" "$LOG" Y2 5
Y2=$BG_PID
check "Y2 is registered" pg_wait "$DB" "select count(*) from wqrun.runners" 2 10
expect_eq "$(pg_psql "$DB" "select pg_postmaster_start_time() > now() - interval '86400 s'")" t \
    "the database is younger than the lease"
t_kill=$(now)
{ kill -9 "$Y1"; wait "$Y1"; } 2>/dev/null
check "Y2 starts all 3 (no wait for the day-long lease)" wait_for "$LOG" "start Y2 " 3 10
delay=$(awk -v t="$t_kill" '$1 == "start" && $2 == "Y2" { d = $5 - t; if (d > m) m = d } END { printf "%.3f", m }' "$LOG")
expect_between "$delay" 0 2.999 "taken over within 3 s of the kill"
echo "young database: Y1's items started on Y2 ${delay}s after the kill"
kill -TERM "$Y2"
wait_exit "$Y2" 10

# ---- a job that kills every runner that runs it: dead-lettered ------------------
DB=$(pg_fresh_db)
KLOG=$TMP/kill.log
: >"$KLOG"
run add --db "$DB" kill bomb
expect_eq "$OUT" queued "add bomb"
rcs=""
for ((i = 1; i <= 8; i++)); do
    # (in a subshell with stderr closed: bash's "Killed" notice stays quiet)
    RC=$( { timeout -s KILL 30 "$WQRUN" --quiet --db "$DB" "$E2E_DIR/lua/pg_killer.lua" "$KLOG" \
        >/dev/null 2>"$TMP/killer.err"; echo $?; } 2>/dev/null)
    rcs="$rcs$RC "
    [ "$RC" = 0 ] && break
done
runs=$(grep -c '^run bomb ' "$KLOG")
LAST_CMD="wqrun --db URL pg_killer.lua (until one exits 0)" OUT="" ERR=$(cat "$TMP/killer.err")
expect_re "$rcs" '^(137 )+0 $' "runners die (137) until one finds bomb dead-lettered and exits 0"
expect_eq "$(awk '$3 != 1' "$KLOG")" "" "job.attempt stays 1 through the deaths"
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.jobs")" 0 "no row left"
expect_re "$(pg_psql "$DB" "select attempts || '|' || error from wqrun.dead where key = 'bomb'")" \
    '^1\|.*runner died while running it [0-9]+ times in a row' "the dead letter says its runner died while running it"
expect_eq "$(pg_psql "$DB" "select value from wqrun.counters where name = 'crash_dead'")" 1 "counters: crash_dead 1"
# SPEC 8.3 dead-letters an item whose runner died while running it "more
# than 5 times in a row": at the 6th death.
expect_eq "$runs" 6 "bomb ran (and killed its runner) 6 times, more than 5, before it was dead-lettered"
expect_re "$ERR" "ERROR wqrun: dead-lettered 1 item\(s\) whose runner died while running them 5 times in a row \([^)]*\(id [0-9]+\)\): kill 'bomb'" \
    "the runner that reaped logs the dead letter at error level, with the key and the dead runner"
echo "killer job: dead-lettered after $runs runs (runner exits: $rcs)"
finish
