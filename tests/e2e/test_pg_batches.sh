#!/usr/bin/env bash
# Batches against the runners' outcomes (issue 32): two runners, two producers
# calling wqrun.add_many with 1,000 items over 50 groups at once for
# $WQ_BATCH_SECS seconds (45 by default; back to back while fewer than 4,000
# items are pending), into a group-limited queue "s" (the
# limited claim path) and a grouped queue without limits "p" (the plain claim
# path), both with keep_done and a handler that fails for about 1% of keys.
# Before the lock order was one, batches locked group rows in item order and
# outcomes in name order, and PostgreSQL aborted some batches (deadlock
# detected). Checks:
#   - no producer call failed, and no runner logged a database error;
#   - every acknowledged item ran exactly once (3 times for a failing key:
#     max_retries 2), from the handlers' log; nothing ran that was not added;
#   - the database agrees: nothing pending, the failing keys and only they are
#     dead letters, every group's count of running items is back to 0.
. "$(dirname "$0")/lib.sh"
pg_need
command -v python3 >/dev/null || pg_abort "python3 is needed for the checker"

SECS=${WQ_BATCH_SECS:-45}
LUA=$E2E_DIR/lua/pg_batches.lua
DB=$(pg_fresh_db)
run migrate --db "$DB"
expect_rc 0 "migrate"
LOG=$TMP/runs.log
: >"$LOG"
q() { pg_psql "$DB" "$1"; }

pg_bg r1 --quiet --serve --runner-name r1 --db "$DB" "$LUA" "$LOG" r1
pg_bg r2 --quiet --serve --runner-name r2 --db "$DB" "$LUA" "$LOG" r2
check "two runners registered" pg_wait "$DB" "select count(*) from wqrun.runners" 2 15

# produce N: calls add_many until $SECS s have passed, alternating the two queues; each
# call's keys are its own ("kN-CALL-G"); "CALL QUEUE RC" per call in $TMP/calls.N.
produce() {
    local p=$1 i=0 que rc end
    end=$(($(date +%s) + SECS))
    while (($(date +%s) < end)); do
        # back-to-back, as the issue's producer, while the runners keep up (a backlog of a
        # few batches keeps every group busy; a larger one only makes the drain long)
        if (($(pg_psql "$DB" "select count(*) from wqrun.jobs") > 4000)); then
            sleep 0.05
            continue
        fi
        i=$((i + 1))
        que=s
        ((i % 2)) || que=p
        pg_psql "$DB" "select wqrun.add_many((select jsonb_agg(jsonb_build_object(
            'queue', '$que', 'key', 'k$p-$i-' || g, 'group', 'g' || (g % 50),
            'payload', jsonb_build_object('f', g % 97 = 0)) order by g)
            from generate_series(1, 1000) g))" >/dev/null 2>>"$TMP/producer.err"
        rc=$?
        echo "$i $que $rc" >>"$TMP/calls.$p"
    done
}
: >"$TMP/producer.err"
produce 1 &
P1=$!
produce 2 &
P2=$!
PIDS+=("$P1" "$P2")
wait "$P1" "$P2"

CALLS=$(cat "$TMP/calls.1" "$TMP/calls.2" | wc -l)
BAD=$(awk '$3 != 0' "$TMP/calls.1" "$TMP/calls.2" | wc -l)
LAST_CMD="the producers' calls" OUT="$CALLS calls" ERR=$(head -c 1500 "$TMP/producer.err")
check "the producers made calls ($CALLS)" [ "$CALLS" -ge 4 ]
expect_eq "$BAD" 0 "producer calls that failed (of $CALLS)"
check "every item finished" pg_wait "$DB" "select count(*) from wqrun.jobs" 0 180

# the checker: runs per key from the log against the acknowledged calls
python3 - "$LOG" "$TMP/calls.1" "$TMP/calls.2" >"$TMP/check.txt" <<'PY'
import sys, collections
runs = collections.Counter()
for line in open(sys.argv[1]):
    w = line.split()
    runs[(w[1], w[2])] += 1
want = {}
for path in sys.argv[2:]:
    p = path.rsplit(".", 1)[1]
    for line in open(path):
        i, que, rc = line.split()
        if rc != "0":
            continue
        for g in range(1, 1001):
            want[(que, "k%s-%s-%d" % (p, i, g))] = 3 if g % 97 == 0 else 1
wrong = [(k, n, runs.get(k, 0)) for k, n in want.items() if runs.get(k, 0) != n]
extra = [k for k in runs if k not in want]
print(len(want), len(wrong), len(extra), sum(1 for k, n in want.items() if n == 3))
for k, n, got in wrong[:5]:
    print("wrong: %s %s ran %d times, expected %d" % (k[0], k[1], got, n))
for k in extra[:5]:
    print("extra: %s %s ran but was not acknowledged" % k)
PY
read -r ITEMS WRONG EXTRA FAILING <"$TMP/check.txt"
LAST_CMD="the checker" OUT=$(cat "$TMP/check.txt") ERR=""
check "items were acknowledged ($ITEMS)" [ "$ITEMS" -ge 4000 ]
expect_eq "$WRONG" 0 "acknowledged items that did not run exactly once (3 times when failing)"
expect_eq "$EXTRA" 0 "runs of items no call acknowledged"
expect_eq "$(q "select count(*) from wqrun.dead")" "$FAILING" "dead letters: the failing keys"
expect_eq "$(q "select count(*) from wqrun.dead where error not like '%planned failure%'")" 0 \
    "every dead letter failed in its handler"
expect_eq "$(q "select coalesce(sum(running), 0) from wqrun.groups")" 0 \
    "every group's count of running items is back to 0"

kill -TERM "${PIDS[0]}" "${PIDS[1]}" 2>/dev/null
wait "${PIDS[0]}" "${PIDS[1]}" 2>/dev/null
for r in r1 r2; do
    ERRS=$(grep -iE 'deadlock|error|warn' "$TMP/$r.err" | grep -v 'planned failure' | head -5)
    LAST_CMD="runner $r" OUT="" ERR=$ERRS
    expect_eq "$ERRS" "" "runner $r logged no database error or warning"
done
echo "test_pg_batches: $CALLS add_many calls, $ITEMS items ($FAILING failing keys) in ${SECS} s"
finish
