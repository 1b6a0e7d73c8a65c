#!/usr/bin/env bash
# Table health on PostgreSQL (issue 17): a claim of a queue without group
# limits reads the partial index of pending items (jobs_claim), never the
# whole table, so its cost does not grow with the dead tuples a long
# transaction leaves behind (bench/pg/health.sh measures that). Read back from
# the server's statistics after one runner worked 5,000 items: jobs_claim was
# scanned at least once per claim and the table was not scanned once per
# claim. Items held by group limits that are gone are still claimed.
# While a REPEATABLE READ transaction holds its snapshot (so that no entry of
# a claimed item can be cleaned up), a runner claiming 20 at a time works
# 6,000 items reading jobs_claim entries in proportion to the items, not to
# items x claims (each claim starts where the last one stopped), and an item
# added with a higher priority meanwhile still runs within a few claims.
# Outcomes find each finished item by its own key whatever the statistics
# say: with statistics taken when the queue held 5 items, under a long
# transaction, 6,000 items finished in batches read the key index in
# proportion to the items (a plan that scanned the queue's range of it for
# every batch read 1.6 M entries: seconds per batch in bench/pg/health.sh).
. "$(dirname "$0")/lib.sh"
pg_need

DB=$(pg_fresh_db)
q() { pg_psql "$DB" "$1"; }

run migrate --db "$DB"
expect_rc 0 "migrate"
q "select wqrun.add_many((select jsonb_agg(jsonb_build_object('queue', 'h', 'key', 'k' || g))
     from generate_series(1, 5000) g))" >/dev/null
# two items held by a group limit that no longer exists (no queue row, no group row)
q "insert into wqrun.jobs (queue, key, grp, run_at, seq, held)
     values ('h', 'held1', 'g', now(), 0, true), ('h', 'held2', 'g', now(), 0, true)" >/dev/null
q "analyze wqrun.jobs" >/dev/null
STATS="select coalesce(t.seq_scan, 0), coalesce(i.idx_scan, 0)
  from pg_stat_user_tables t, pg_stat_user_indexes i
  where t.relid = 'wqrun.jobs'::regclass and i.indexrelid = 'wqrun.jobs_claim'::regclass"
read -r SEQ0 IDX0 <<<"$(q "$STATS" | tr '|' ' ')"

run --quiet --db "$DB" "$E2E_DIR/lua/pg_health.lua"
expect_rc 0 "a runner works the queue until it is empty"
expect_eq "$(q "select count(*) from wqrun.jobs")" 0 "every item ran, the two held ones too"

# 5,000 items, at most 100 per claim: at least 50 claims. The runner's backend reports its
# counts when it exits.
check "jobs_claim read by every claim" pg_wait "$DB" \
    "select i.idx_scan - $IDX0 >= 50 from pg_stat_user_indexes i
       where i.indexrelid = 'wqrun.jobs_claim'::regclass" t 10
read -r SEQ1 IDX1 <<<"$(q "$STATS" | tr '|' ' ')"
echo "# jobs: $((SEQ1 - SEQ0)) sequential scans, jobs_claim: $((IDX1 - IDX0)) index scans"
expect_between "$((SEQ1 - SEQ0))" 0 25 "the table scanned a few times at most, not once per claim"

# ---- under a long transaction -------------------------------------------------------
DB2=$(pg_fresh_db)
run migrate --db "$DB2"
pg_psql "$DB2" "select wqrun.add_many((select jsonb_agg(jsonb_build_object('queue', 'h', 'key', 'k' || g))
     from generate_series(1, 6000) g)); analyze wqrun.jobs" >/dev/null
READS="select idx_tup_read from pg_stat_user_indexes where indexrelid = 'wqrun.jobs_claim'::regclass"
R0=$(pg_psql "$DB2" "$READS")
reader_begin "$DB2" reader
LOG=$TMP/order.log
: >"$LOG"
run --quiet --db "$DB2" "$E2E_DIR/lua/pg_health.lua" 20 "$LOG"
expect_rc 0 "a runner works the queue under the long transaction"
expect_eq "$(pg_psql "$DB2" "select count(*) from wqrun.jobs")" 0 "every item ran"
echo "commit;" >&9
exec 9>&-
expect_eq "$(head -1 "$TMP/reader.out")" 6000 "the reader saw the 6,000 items of its snapshot"
check "the runner's counts reported" pg_wait "$DB2" \
    "select idx_tup_read > $R0 from pg_stat_user_indexes where indexrelid = 'wqrun.jobs_claim'::regclass" t 10
READ=$(($(pg_psql "$DB2" "$READS") - R0))
echo "# jobs_claim: $READ entries read for 6,000 items in claims of 20"
# From the head every time: about 6,000 x 300 claims / 2 = 900,000.
expect_between "$READ" 6000 60000 "jobs_claim entries read: in proportion to the items"
AT=$(grep -n '^urgent$' "$LOG" | cut -d: -f1)
K100=$(grep -n '^k100$' "$LOG" | cut -d: -f1)
expect_between "$((AT - K100))" 1 100 "the priority 5 item added at k100 ran within a few claims"

# ---- outcomes under statistics of a moment with few rows, and a long transaction ----
DB3=$(pg_fresh_db)
run migrate --db "$DB3"
pg_psql "$DB3" "select wqrun.add_many((select jsonb_agg(jsonb_build_object('queue', 'h', 'key', 'k' || g))
     from generate_series(1, 5) g)); analyze wqrun.jobs;
   select wqrun.add_many((select jsonb_agg(jsonb_build_object('queue', 'h', 'key', 'k' || g))
     from generate_series(6, 6000) g))" >/dev/null
PKEY="select idx_tup_read from pg_stat_user_indexes where indexrelid = 'wqrun.jobs_pkey'::regclass"
P0=$(pg_psql "$DB3" "$PKEY")
reader_begin "$DB3" reader3
run --quiet --db "$DB3" "$E2E_DIR/lua/pg_health.lua" 20
expect_rc 0 "a runner works the queue under the long transaction and old statistics"
expect_eq "$(pg_psql "$DB3" "select count(*) from wqrun.jobs")" 0 "every item ran"
echo "commit;" >&9
exec 9>&-
check "the runner's counts reported" pg_wait "$DB3" \
    "select idx_tup_read > $P0 from pg_stat_user_indexes where indexrelid = 'wqrun.jobs_pkey'::regclass" t 10
PREAD=$(($(pg_psql "$DB3" "$PKEY") - P0))
echo "# jobs_pkey: $PREAD entries read for 6,000 items"
expect_between "$PREAD" 6000 60000 "jobs_pkey entries read: in proportion to the items"
finish
