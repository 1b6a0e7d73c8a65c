#!/usr/bin/env bash
# A PostgreSQL restart under load (SPEC 8.3, 7.6), on a private cluster (the
# shared one is never restarted): a runner takes HTTP adds (POST
# /queues/q/items) while `scripts/pg.sh restart` crashes and recovers the
# server in the middle. The runner logs the lost connection and reconnects;
# every add answered 202 runs (counted from the handler's log); adds during
# the outage (lengthened to ~3.5 s: the database refuses connections for 3 s
# after the restart) answer 503, never 202-then-lost; no answer is anything
# else;
# the restart (shorter than the lease) causes no takeover. Two runners
# running 3 items each through a restart: nobody is declared dead, nothing
# runs twice. A runner that registered before a restart and took its lock
# again after it, killed -9 while the database is younger than its --lease
# 60: taken over within 10 s, the takeover logged naming it. Then an outage
# longer than a runner's --lease 2: it cancels its running handlers ("lease
# lost") and, once back, runs those items again.
. "$(dirname "$0")/lib.sh"
pg_need

PG=$WQ_SOURCE_DIR/scripts/pg.sh
PD=$(mktemp -d /tmp/wqrun-pgr.XXXXXX)
chmod 755 "$PD"
lib_exit=$(eval "set -- $(trap -p EXIT)" && printf '%s' "${3:-}")
trap 'bash "$PG" stop "$PD" >/dev/null 2>&1; rm -rf "$PD"; eval "$lib_exit"' EXIT
if ! bash "$PG" start "$PD" >"$TMP/pg.env" 2>"$TMP/pg.err"; then
    pg_abort "could not start a private cluster in $PD: $(cat "$TMP/pg.err")"
fi
DB=$(bash "$PG" createdb t_restart "$PD") || pg_abort "createdb in the private cluster failed"
# private_db NAME: a database NAME in the private cluster with its schema made; sets PDB
private_db() {
    PDB=$(bash "$PG" createdb "$1" "$PD") || pg_abort "createdb in the private cluster failed"
    run migrate --db "$PDB"
    expect_rc 0 "migrate $1"
}

LOG=$TMP/runs.log
ACKS=$TMP/acks
: >"$LOG"
: >"$ACKS"
listen_start -- --serve --runner-name R --db "$DB" "$E2E_DIR/lua/pg_http.lua" "$LOG" || finish

# producer N: posts keys k1..kN, one every 20 ms, each in a curl of its own
# (a request held by the runner does not hold up the others); "KEY STATUS
# SENT ANSWERED" per line in $ACKS (Unix times)
producer() {
    local i
    for ((i = 1; i <= $1; i++)); do
        (
            t0=$(date +%s.%N)
            code=$(curl -s -o /dev/null -w '%{http_code}' -m 20 -X POST -H 'Content-Type: application/json' \
                --data "{\"key\":\"k$i\"}" "$BASE/queues/q/items")
            echo "k$i $code $t0 $(date +%s.%N)" >>"$ACKS"
        ) &
        sleep 0.02
    done
    wait
}
producer 400 &
prod=$!
PIDS+=("$prod")
wait_for "$ACKS" " 202 " 60 20
# The outage: the database refuses new connections (the runner's own one
# survives that), then the restart drops it; 3 s later connections are
# allowed again.
bash "$PG" psql "$PD" -- -q -v ON_ERROR_STOP=1 -c "alter database t_restart allow_connections false" || pg_abort "could not disallow connections"
t_restart=$(now)
bash "$PG" restart "$PD" >"$TMP/restart.out" 2>&1
RC=$?
t_up=$(since "$t_restart")
LAST_CMD="pg.sh restart" OUT=$(cat "$TMP/restart.out") ERR=""
expect_rc 0 "pg.sh restart"
sleep 3
t_allow=$(now)
bash "$PG" psql "$PD" -- -q -c "alter database t_restart allow_connections true" >/dev/null
t_back=$(since "$t_restart")
wait "$prod"

total=$(wc -l <"$ACKS")
acked=$(awk '$2 == 202' "$ACKS" | wc -l)
n503=$(awk '$2 == 503' "$ACKS" | wc -l)
expect_eq "$total" 400 "the producer made 400 requests"
expect_eq "$(awk '$2 != 202 && $2 != 503 { print $1 ":" $2 }' "$ACKS" | head -5)" "" "every answer is 202 or 503"
awk '$2 == 202 { print $1 }' "$ACKS" | sort >"$TMP/acked"
deadline=$(($(date +%s) + 20))
while :; do
    awk '{ print $2 }' "$LOG" | sort -u >"$TMP/ran"
    missing=$(comm -23 "$TMP/acked" "$TMP/ran" | wc -l)
    [ "$missing" = 0 ] || [ "$(date +%s)" -gt "$deadline" ] && break
    sleep 0.2
done
expect_eq "$missing" 0 "every key answered 202 ran ($acked acknowledged; missing: $(comm -23 "$TMP/acked" "$TMP/ran" | head -5 | tr '\n' ' '))"
check "the database drains" pg_wait "$DB" "select count(*) from wqrun.jobs" 0 20
ERR=$(cat "$ERRF")
LAST_CMD="the runner (its stderr)"
expect_in "$ERR" "lost the connection to PostgreSQL" "the runner logs the lost connection"
expect_in "$ERR" "reconnected to PostgreSQL" "and that it reconnected"
expect_eq "$(pg_psql "$DB" "select value from wqrun.counters where name = 'takeovers'")" 0 "a restart shorter than the lease causes no takeover"
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.runners where locked_at > pg_postmaster_start_time()")" 1 \
    "the runner took its lock again since the restart (runners.locked_at): from now on a lost lock is its death"
check "the runner still runs" kill -0 "$PID"
# Requests sent while the database was unreachable for sure: from 0.2 s after
# the restart returned (the server went down before) to 0.2 s before
# connections were allowed again.
during=$(awk -v a="$t_restart" -v u="$t_up" -v b="$t_allow" '$3 > a + u + 0.2 && $3 < b - 0.2' "$ACKS")
n_during=$(printf '%s' "$during" | grep -c .)
held=$(printf '%s\n' "$during" | awk '$2 == 202' | grep -c .)
check "requests were sent during the outage ($n_during)" [ "$n_during" -ge 10 ]
check "some adds answered 503 ($n503)" [ "$n503" -ge 1 ]
# (Before 735d26b such adds were held and answered 202 after the reconnect.)
expect_eq "$held" 0 "adds sent during the outage answer 503 (got $held of $n_during answered 202 later, e.g. $(printf '%s\n' "$during" | awk '$2 == 202 { printf "%s after %.1fs", $1, $4 - $3; exit }'))"
dups=$(awk '{ print $2 }' "$LOG" | sort | uniq -d | wc -l)
echo "restart: server up after ${t_up}s, connections allowed after ${t_back}s; 400 adds: $acked answered 202 (all ran), $n503 answered 503, $n_during sent during the outage ($held of them 202); $dups keys ran twice"
echo "--- runner log:"
grep -v '^$' "$ERRF" | head -20
kill -TERM "$PID"
wait_exit "$PID" 15
expect_rc 0 "the runner exits 0 on SIGTERM"

# ---- two runners through a restart: nobody is declared dead ------------------------
private_db t_two
DB3=$PDB
LOG3=$TMP/two.log
: >"$LOG3"
pg_bg p1 --serve --runner-name P1 --db "$DB3" "$E2E_DIR/lua/pg_takeover.lua" "$LOG3" P1 3
P1=$BG_PID
pg_bg p2 --serve --runner-name P2 --db "$DB3" "$E2E_DIR/lua/pg_takeover.lua" "$LOG3" P2 3
P2=$BG_PID
check "P1 and P2 are registered" pg_wait "$DB3" "select count(*) from wqrun.runners" 2 10
pg_psql "$DB3" "select wqrun.add('t', 'x' || i, '{\"s\": 5}') from generate_series(1, 6) i" >/dev/null
check "the 6 start" wait_for "$LOG3" "start " 6 10
expect_eq "$(awk '$1 == "start" { print $2 }' "$LOG3" | sort | uniq -c | awk '{ printf "%s:%s ", $2, $1 }')" "P1:3 P2:3 " "3 on each runner"
bash "$PG" restart "$PD" >"$TMP/restart3.out" 2>&1 || pg_abort "pg.sh restart failed: $(cat "$TMP/restart3.out")"
check "P1 reconnects" wait_for "$TMP/p1.err" "reconnected to PostgreSQL" 1 15
check "P2 reconnects" wait_for "$TMP/p2.err" "reconnected to PostgreSQL" 1 15
check "the 6 end" wait_for "$LOG3" "end " 6 15
check "nothing left" pg_wait "$DB3" "select count(*) from wqrun.jobs" 0 10
sleep 1
expect_eq "$(grep -c '^start ' "$LOG3")" 6 "no item started again"
expect_eq "$(pg_psql "$DB3" "select value from wqrun.counters where name = 'takeovers'")" 0 "no takeover"
expect_eq "$(pg_psql "$DB3" "select string_agg(name, ',' order by name) from wqrun.runners")" "P1,P2" "both still registered"
ERR=$(cat "$TMP/p1.err" "$TMP/p2.err")
LAST_CMD="runners P1, P2 through a restart"
expect_not_in "$ERR" "declared dead" "neither was declared dead"
expect_not_in "$ERR" "cancelled" "no handler was cancelled"
kill -TERM "$P1" "$P2"
wait_exit "$P1" 15
expect_rc 0 "P1 exits 0"
wait_exit "$P2" 15
expect_rc 0 "P2 exits 0"

# ---- re-locked after a restart, then killed: taken over at once, not after the lease ----
# A registered before the restart and took its lock again after it (runners.locked_at); it is
# then killed while the database is younger than its --lease 60: it no longer holds its lock,
# so it is dead now. B (registered since the restart) takes its item over within 10 s, not
# when A's lease runs out (60 s of silence); the takeover is logged naming A.
private_db t_relock
DB4=$PDB
LOG4=$TMP/relock.log
: >"$LOG4"
pg_bg ra --serve --runner-name A --lease 60 --db "$DB4" "$E2E_DIR/lua/pg_takeover.lua" "$LOG4" A 5
RA=$BG_PID
check "A is registered" pg_wait "$DB4" "select count(*) from wqrun.runners" 1 10
bash "$PG" restart "$PD" >"$TMP/restart4.out" 2>&1 || pg_abort "pg.sh restart failed: $(cat "$TMP/restart4.out")"
check "A reconnects" wait_for "$TMP/ra.err" "reconnected to PostgreSQL" 1 15
check "A registered before the restart and took its lock again after it (locked_at)" pg_wait "$DB4" \
    "select count(*) from wqrun.runners where name = 'A' and started_at < pg_postmaster_start_time()
       and locked_at > pg_postmaster_start_time()" 1 15
pg_psql "$DB4" "select wqrun.add('t', 'r1', '{\"s\": 120}')" >/dev/null
check "A starts r1" wait_for "$LOG4" "start A r1 " 1 10
pg_bg rb --serve --runner-name B --lease 60 --db "$DB4" "$E2E_DIR/lua/pg_takeover.lua" "$LOG4" B 5
RB=$BG_PID
check "B is registered" pg_wait "$DB4" "select count(*) from wqrun.runners" 2 10
expect_eq "$(grep -c '^start B ' "$LOG4")" 0 "B idles while A runs r1"
t_kill=$(now)
{ kill -9 "$RA"; wait "$RA"; } 2>/dev/null
wait_for "$LOG4" "start B r1 " 1 10
st=$?
young=$(pg_psql "$DB4" "select pg_postmaster_start_time() > now() - interval '60 s'")
check "B starts r1 within 10 s of A's kill -9 (A's lease: 60 s)" [ "$st" = 0 ]
delay=$(awk -v t="$t_kill" '$1 == "start" && $2 == "B" && $3 == "r1" { printf "%.3f", $5 - t; exit }' "$LOG4")
expect_between "${delay:-none}" 0 10 "r1 started on B within 10 s of the kill"
expect_eq "$young" t "the database was still younger than the lease at the takeover"
expect_eq "$(awk '$1 == "start" && $3 == "r1" && $4 != 1 { n++ } END { print n + 0 }' "$LOG4")" 0 "job.attempt unchanged (1) on B"
expect_eq "$(pg_psql "$DB4" "select value from wqrun.counters where name = 'takeovers'")" 1 "counters: takeovers 1"
expect_eq "$(pg_psql "$DB4" "select string_agg(name, ',') from wqrun.runners")" B "A's runners row is gone"
LAST_CMD="runner B" ERR=$(cat "$TMP/rb.err")
expect_re "$ERR" "WARN wqrun: dead runner A \(id [0-9]+\): took over 1 item\(s\): t 'r1'" \
    "B's log names the dead runner A and r1"
echo "re-locked after a restart, then killed: r1 started on B ${delay:-never (not within 10 s)} s after A's kill -9 (lease 60 s)"
{ kill -9 "$RB"; wait "$RB"; } 2>/dev/null # (it runs r1 for 2 minutes)

# ---- an outage longer than the lease: handlers cancelled, items run again --------
private_db t_lease
DB2=$PDB
LOG2=$TMP/lease.log
: >"$LOG2"
pg_bg lease --serve --runner-name L --lease 2 --db "$DB2" "$E2E_DIR/lua/pg_takeover.lua" "$LOG2" L 5
L=$BG_PID
check "L is registered" pg_wait "$DB2" "select count(*) from wqrun.runners" 1 10
pg_psql "$DB2" "select wqrun.add('t', 'L' || i, '{\"s\": 6}') from generate_series(1, 3) i" >/dev/null
check "L starts the 3" wait_for "$LOG2" "start L " 3 10
bash "$PG" psql "$PD" -- -q -v ON_ERROR_STOP=1 -c "alter database t_lease allow_connections false" || pg_abort "could not disallow connections"
bash "$PG" restart "$PD" >"$TMP/restart2.out" 2>&1 || pg_abort "pg.sh restart failed: $(cat "$TMP/restart2.out")"
sleep 4
bash "$PG" psql "$PD" -- -q -c "alter database t_lease allow_connections true" >/dev/null
t_allow=$(now)
check "L reconnects" wait_for "$TMP/lease.err" "reconnected to PostgreSQL" 1 15
ERR=$(cat "$TMP/lease.err")
LAST_CMD="runner L (--lease 2) through a 4 s outage"
expect_in "$ERR" "unreachable for longer than --lease" "L says the database was unreachable for longer than its lease"
expect_count "$ERR" "cancelled" 4 "L cancels its 3 running handlers (and says so)"
expect_eq "$(grep -c '^end L ' "$LOG2")" 0 "no handler of L finished"
# After the reconnect L (its heartbeat revives it, nobody reaped it) hands
# the 3 rows whose handlers it cancelled back itself: they run again.
wait_for "$LOG2" "start L " 6 5
st=$?
rows=$(pg_psql "$DB2" "select string_agg(key || ':' || state || ':' || coalesce(runner::text, '-'), ' ' order by key) from wqrun.items")
check "the 3 cancelled items start again within 5 s of the reconnect (rows key:state:runner now: $rows)" [ "$st" = 0 ]
kill -TERM "$L"
wait_exit "$L" 15
expect_rc 0 "L exits 0 on SIGTERM"
expect_eq "$(pg_psql "$DB2" "select count(*) from wqrun.jobs where running")" 0 "nothing is left processing once L stopped"
finish
