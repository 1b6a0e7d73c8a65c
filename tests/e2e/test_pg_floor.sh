#!/usr/bin/env bash
# The floors claims start at (issue 17, table health; pg_schema.c's schema_v7): a runner
# keeps, per queue, a ready time below which no item is pending, and its claims read the
# claim index from there rather than from its head, where a long transaction keeps the
# entries of every item claimed since it began. Nothing pending may be left below a floor:
#   - an item added by a transaction that stays open for 3 s (its ready time is older than
#     what the runner claims meanwhile from a steady stream) runs within 3 s of its commit;
#   - items of a runner killed (-9) while another one works a stream go back at their old
#     places, below that runner's floor: they start there within 3 s of the kill;
#   - while a REPEATABLE READ transaction holds its snapshot and a runner works items that
#     come in bursts (claims that come back short or empty, which claimed from the head),
#     the claim index is read in proportion to the items, at most 20 entries per item (from
#     the head, before the floors: 551,695 for the 6,000).
. "$(dirname "$0")/lib.sh"
pg_need

LUA=$E2E_DIR/lua/pg_takeover.lua
LOG=$TMP/runs.log

# stream URL N BATCH PAUSE: adds N batches of BATCH items (s: 0.01) to queue t, every PAUSE s.
stream() {
    local i
    for ((i = 0; i < $2; i++)); do
        pg_psql "$1" "select wqrun.add_many((select jsonb_agg(jsonb_build_object('queue', 't',
            'key', 's$i.' || g, 'payload', jsonb_build_object('s', 0.01))) from generate_series(1, $3) g))" >/dev/null
        sleep "$4"
    done
}

# ---- an item committed late --------------------------------------------------------
DB=$(pg_fresh_db)
: >"$LOG"
run migrate --db "$DB"
expect_rc 0 "migrate"
pg_bg b --quiet --serve --runner-name B --db "$DB" "$LUA" "$LOG" B 20
check "B is registered" pg_wait "$DB" "select count(*) from wqrun.runners" 1 10
stream "$DB" 100 20 0.05 &
FEED=$!
PIDS+=("$FEED")
check "B works the stream" wait_for "$LOG" "start B s5." 1 10
# The late item's ready time is the clock of its add; it commits 3 s later.
"${WQ_PG_BIN:-/usr/lib/postgresql/15/bin}/psql" -X -q -A -t "$DB" \
    -c "begin" -c "select wqrun.add('t', 'late', '{\"s\": 0}')" -c "select pg_sleep(3)" -c "commit" \
    >"$TMP/late.out" 2>&1
t_commit=$(now)
check "the late item starts" wait_for "$LOG" "start B late " 1 10
late=$(awk -v t="$t_commit" '$1 == "start" && $3 == "late" { printf "%.3f", $5 - t }' "$LOG")
echo "# the item committed late started ${late}s after its commit"
expect_between "$late" -1 3 "it started within 3 s of its commit"
expect_eq "$(grep -c '^start B s20\.' "$LOG")" 20 "B worked the stream meanwhile"
wait "$FEED"
check "B drains the stream" pg_wait "$DB" "select count(*) from wqrun.jobs" 0 20
{ kill -9 "$BG_PID"; wait "$BG_PID"; } 2>/dev/null

# ---- items handed back below a floor --------------------------------------------------
DB=$(pg_fresh_db)
: >"$LOG"
run migrate --db "$DB"
pg_bg a --quiet --serve --runner-name A --db "$DB" "$LUA" "$LOG" A 5
A=$BG_PID
pg_psql "$DB" "select wqrun.add('t', 'k' || i, '{\"s\": 60}') from generate_series(1, 5) i" >/dev/null
check "A starts k1-k5" wait_for "$LOG" "start A " 5 15
pg_bg b --quiet --serve --runner-name B --db "$DB" "$LUA" "$LOG" B 20
B=$BG_PID
stream "$DB" 60 20 0.05 &
FEED=$!
PIDS+=("$FEED")
check "B works the stream" wait_for "$LOG" "start B s40." 1 15
t_kill=$(now)
{ kill -9 "$A"; wait "$A"; } 2>/dev/null
check "B starts k1-k5" wait_for "$LOG" "start B k" 5 10
back=$(awk -v t="$t_kill" '$1 == "start" && $2 == "B" && $3 ~ /^k/ { d = $5 - t; if (d > m) m = d } END { printf "%.3f", m }' "$LOG")
echo "# the items of the killed runner started on B within ${back}s of the kill"
expect_between "$back" 0 3 "within 3 s of the kill, below B's floor"
expect_between "$(pg_psql "$DB" "select resets from wqrun.queues where name = 't'")" 1 1000 \
    "the queue's resets counted the items handed back"
wait "$FEED"
{ kill -9 "$B"; wait "$B"; } 2>/dev/null

# ---- bursts under a long transaction ---------------------------------------------------
DB=$(pg_fresh_db)
: >"$LOG"
run migrate --db "$DB"
READS="select idx_tup_read from pg_stat_user_indexes where indexrelid = 'wqrun.jobs_claim'::regclass"
R0=$(pg_psql "$DB" "$READS")
reader_begin "$DB" reader
pg_bg b --quiet --serve --runner-name B --db "$DB" "$LUA" "$LOG" B 20
B=$BG_PID
stream "$DB" 60 100 0.1
check "B works every burst" wait_for "$LOG" "end B " 6000 30
check "no item left" pg_wait "$DB" "select count(*) from wqrun.jobs" 0 10
{ kill -TERM "$B"; wait "$B"; } 2>/dev/null
echo "commit;" >&9
exec 9>&-
check "the runner's counts reported" pg_wait "$DB" "select ($READS) > $R0" t 10
READ=$(($(pg_psql "$DB" "$READS") - R0))
echo "# jobs_claim: $READ entries read for 6,000 items in 60 bursts under a long transaction"
expect_between "$READ" 6000 120000 "jobs_claim entries read: in proportion to the items"
finish
