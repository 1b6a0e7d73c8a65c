#!/usr/bin/env bash
# Outcomes lost at commit (issue 32): two runners work 4,000 items of a
# group-limited queue, whose outcomes also claim the next items of the groups
# they free, while every 5th outcomes' transaction that committed is reported
# lost instead, its connection dropped (WQ_TEST_PG_LOSE_AT_COMMIT: the second
# connection went down between the commit and its answer; the runner keeps its
# lock on the first). Whether such a transaction committed is unknown to the
# runner: its outcomes go again (a token already written matches nothing),
# and the items its finish claimed are handed back with them (a claim that
# never committed matches nothing), never run on a guess (they may be another
# runner's) nor forgotten (they may be this one's: they would stay
# "processing" for a runner that lives on). Checks: every item ran exactly
# once; nothing is left pending or running; every group's count of running
# items is back to 0; the losses happened.
. "$(dirname "$0")/lib.sh"
pg_need
command -v python3 >/dev/null || pg_abort "python3 is needed for the checker"

LUA=$E2E_DIR/lua/pg_lost_commit.lua
DB=$(pg_fresh_db)
run migrate --db "$DB"
expect_rc 0 "migrate"
LOG=$TMP/runs.log
: >"$LOG"
q() { pg_psql "$DB" "$1"; }

N=4000
q "select wqrun.add_many((select jsonb_agg(jsonb_build_object('queue', 's', 'key', 'k' || g,
     'group', 'g' || (g % 20)) order by g) from generate_series(1, $N) g))" >/dev/null
export WQ_TEST_PG_LOSE_AT_COMMIT=5
pg_bg r1 --serve --runner-name r1 --db "$DB" "$LUA" "$LOG" r1
pg_bg r2 --serve --runner-name r2 --db "$DB" "$LUA" "$LOG" r2
unset WQ_TEST_PG_LOSE_AT_COMMIT
check "every item finished" pg_wait "$DB" "select count(*) from wqrun.jobs" 0 120
LOST=$(cat "$TMP/r1.err" "$TMP/r2.err" | grep -c "outcomes' connection was lost (lost at commit")
LAST_CMD="the runners' logs" OUT="" ERR=$(head -c 1500 "$TMP/r1.err")
check "transactions were lost at commit ($LOST)" [ "$LOST" -ge 5 ]

python3 - "$LOG" "$N" >"$TMP/check.txt" <<'PY'
import sys, collections
runs = collections.Counter()
for line in open(sys.argv[1]):
    w = line.split()
    runs[w[2]] += 1
n = int(sys.argv[2])
keys = ["k%d" % i for i in range(1, n + 1)]
missing = [k for k in keys if runs[k] == 0]
twice = [k for k in keys if runs[k] > 1]
print(len(missing), len(twice))
for k in missing[:3]: print("missing:", k)
for k in twice[:3]: print("ran %d times: %s" % (runs[k], k))
PY
read -r MISSING TWICE <"$TMP/check.txt"
LAST_CMD="the checker" OUT=$(cat "$TMP/check.txt") ERR=""
expect_eq "$MISSING" 0 "items that never ran"
expect_eq "$TWICE" 0 "items that ran more than once"
expect_eq "$(q "select count(*) from wqrun.jobs where running")" 0 "nothing left running"
expect_eq "$(q "select coalesce(sum(running), 0) from wqrun.groups")" 0 \
    "every group's count of running items is back to 0"
echo "test_pg_lost_commit: $LOST transactions lost at commit"
finish
