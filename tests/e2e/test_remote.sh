#!/usr/bin/env bash
# Remote workers over HTTP (SPEC 10.2) on both backends, through real HTTP:
# remote_check.py drives the protocol (bad input, claims and long polls,
# exclusivity, group limits, pause, retries, dead letters, cancel told at the
# heartbeat, leases that run out, keep_done, batches); then the state file
# read back with sqlite3 / the database with psql; --token guards the routes;
# and an acknowledged report survives a kill -9 right after its answer. On
# PostgreSQL, a runner that hangs past its lease or is killed with kill -9
# while a remote worker holds its item: another runner hands it out again.
. "$(dirname "$0")/lib.sh"

jobs=$(script jobs.lua <<'LUA'
wq.queue("r", {max_retries = 1, limiter = wq.limiter.exponential(0.05, 0.05)})
wq.queue("g", {group_of = function(key) return key:sub(1, 1) end, group_limit = {concurrency = 1}})
wq.queue("kd", {keep_done = 60})
LUA
)

suite() { # suite WHAT DB
    listen_start -- --serve --db "$2" "$jobs" || return
    run_py=$(python3 "$E2E_DIR/remote_check.py" "$BASE" 2>&1)
    check "$1: the protocol ($(tail -1 <<<"$run_py"))" test "$(grep -c '^FAIL' <<<"$run_py")" = 0
    grep '^FAIL' <<<"$run_py" >&2
    kill -TERM "$PID"
    wait_exit "$PID" 20
    expect_eq "$RC" 0 "$1: a clean stop"
}

suite "state file" "$TMP/r.db"
h() { sqlite3 "$TMP/r.db" "$1"; }
expect_eq "$(h "SELECT state, count(*) FROM history WHERE queue = 'r' GROUP BY state ORDER BY state")" \
"cancelled|1
dead|2
done|59" "state file: the runs in the history (sqlite3)"
expect_eq "$(h "SELECT key, attempts, error FROM dead ORDER BY key")" "bad|2|boom again
perm|1|no such file" "state file: the dead letters"
expect_eq "$(h "SELECT count(*) FROM items WHERE queue IN ('r', 'g', 'kd')")" 0 "state file: nothing left pending"

pg_need
DB=$(pg_fresh_db)
suite "PostgreSQL" "$DB"
expect_eq "$(pg_psql "$DB" "SELECT state || ' ' || count(*) FROM wqrun.history WHERE queue = 'r' GROUP BY state ORDER BY state")" \
"cancelled 1
dead 2
done 59" "PostgreSQL: the runs in the history (psql)"
expect_eq "$(pg_psql "$DB" "SELECT count(*) FROM wqrun.jobs")" 0 "PostgreSQL: nothing left"

# PostgreSQL: a runner that hangs past its lease loses its remote runs with its claims; another
# runner hands the item out again; the hung runner's token answers 409 once it knows
DB=$(pg_fresh_db)
pg_bg s --serve --runner-name S --lease 2 --listen "127.0.0.1:$((PORT + 1))" --db "$DB" "$jobs"
S=$BG_PID
SB=http://127.0.0.1:$((PORT + 1))
pg_bg o --quiet --serve --runner-name O --lease 2 --listen "127.0.0.1:$((PORT + 2))" --db "$DB" "$jobs"
O=$BG_PID
OB=http://127.0.0.1:$((PORT + 2))
check "S and O are registered" pg_wait "$DB" "select count(*) from wqrun.runners" 2 10
pg_psql "$DB" "select wqrun.add('r', 'hung')" >/dev/null
claim_tok() { python3 -c 'import json,sys; a=json.load(sys.stdin); print(a[0]["token"] if a else "")'; }
stok=$(curl -s -m 20 -X POST "$SB/queues/r/claim" -d '{"wait": 10, "lease": 60}' | claim_tok)
check "S's worker holds it" test -n "$stok"
kill -STOP "$S"
otok=$(curl -s -m 20 -X POST "$OB/queues/r/claim" -d '{"wait": 15, "lease": 60}' | claim_tok)
check "once S's lease ran out, O hands it out again" test -n "$otok"
kill -CONT "$S"
for _ in $(seq 200); do grep -Eq "declared dead|lease lost" "$TMP/s.err" && break; sleep 0.05; done
check "S learns it lost its claims" grep -Eq "declared dead|lease lost" "$TMP/s.err"
sleep 0.3
expect_eq "$(curl -s -m 10 -o /dev/null -w '%{http_code}' -X POST "$SB/queues/r/items/hung/done" -d "{\"token\": \"$stok\"}")" \
    409 "S's old token: 409, nothing changed"
expect_eq "$(curl -s -m 10 -X POST "$OB/queues/r/items/hung/done" -d "{\"token\": \"$otok\", \"result\": \"O\"}")" \
    '{"ok":true}' "O's token: done"
expect_eq "$(pg_psql "$DB" "SELECT state || ' ' || result FROM wqrun.history WHERE key = 'hung'")" 'done "O"' \
    "one run in the history: O's"
kill -TERM "$S" "$O"
wait_exit "$S" 10
wait_exit "$O" 10

# PostgreSQL: a runner killed with kill -9 while a remote worker holds its item: another
# runner hands the item out again as soon as it sees the runner dead (its lock gone, not its
# 5 s lease), and the new token ends the run
pg_bg k --quiet --serve --runner-name K --lease 5 --listen "127.0.0.1:$((PORT + 3))" --db "$DB" "$jobs"
K=$BG_PID
pg_bg o2 --quiet --serve --runner-name O2 --lease 5 --listen "127.0.0.1:$((PORT + 4))" --db "$DB" "$jobs"
O2=$BG_PID
check "K and O2 are registered" pg_wait "$DB" "select count(*) from wqrun.runners where name in ('K', 'O2')" 2 10
pg_psql "$DB" "select wqrun.add('r', 'killed')" >/dev/null
ktok=$(curl -s -m 20 -X POST "http://127.0.0.1:$((PORT + 3))/queues/r/claim" -d '{"wait": 10, "lease": 60}' | claim_tok)
check "K's worker holds it" test -n "$ktok"
ans=$(curl -s -w ' %{http_code}' -X POST "http://127.0.0.1:$((PORT + 4))/queues/r/items/killed/done" -d "{\"token\": \"$ktok\"}")
check "a report to another runner than the claim's: 404 saying where it goes ($ans)" \
    grep -q 'claimed through another runner.* 404$' <<<"$ans"
kill -9 "$K"
t0=$(date +%s.%N)
o2tok=$(curl -s -m 20 -X POST "http://127.0.0.1:$((PORT + 4))/queues/r/claim" -d '{"wait": 15, "lease": 60}' | claim_tok)
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
check "O2 hands it out again after K's kill -9" test -n "$o2tok"
check "within 4 s of the kill, before K's 5 s lease ran out (took ${took} s)" \
    awk -v t="$took" 'BEGIN { exit !(t < 4) }'
expect_eq "$(curl -s -m 10 -X POST "http://127.0.0.1:$((PORT + 4))/queues/r/items/killed/done" -d "{\"token\": \"$o2tok\", \"result\": \"O2\"}")" \
    '{"ok":true}' "O2's token: done"
expect_eq "$(pg_psql "$DB" "SELECT state || ' ' || result FROM wqrun.history WHERE key = 'killed'")" 'done "O2"' \
    "one run in the history: O2's"
expect_eq "$(pg_psql "$DB" "SELECT count(*) FROM wqrun.jobs WHERE key = 'killed'")" 0 "nothing left of it"
kill -TERM "$O2"
wait_exit "$O2" 10

# --token guards the routes
listen_start -- --serve --token s3cret --db "$TMP/t.db" "$jobs" || { finish; }
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$BASE/queues/r/claim")" 401 "--token: a claim without it is 401"
expect_eq "$(curl -s -X POST -H 'Authorization: Bearer s3cret' "$BASE/queues/r/claim")" "[]" "with it: 200"
# acknowledged means kept: a done answered 200 is in the file after a kill -9 right after
curl -s -X POST -H 'Authorization: Bearer s3cret' "$BASE/queues/r/items" -d '{"key": "kept"}' >/dev/null
tok=$(curl -s -X POST -H 'Authorization: Bearer s3cret' "$BASE/queues/r/claim" -d '{"wait": 5}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["token"])')
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Authorization: Bearer s3cret' \
    "$BASE/queues/r/items/kept/done" -d "{\"token\": \"$tok\", \"result\": 42}")
kill -9 "$PID"
wait_exit "$PID" 5
expect_eq "$code" 200 "done answered"
expect_eq "$(sqlite3 "$TMP/t.db" "SELECT state, result FROM history WHERE key = 'kept'")" "done|42" \
    "and kept: in the file after a kill -9 right after the answer"
finish
