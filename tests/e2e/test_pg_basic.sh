#!/usr/bin/env bash
# PostgreSQL basics (SPEC 8.1, 8.2, 8.4) with one runner on a database of its
# own: migrate (created, then up to date); `wqrun add` (queued, deduplicated);
# wqrun.add() inside a rolled back (nothing) and a committed transaction;
# wqrun.add_many's outcome array; adds from Lua; handler outcomes read back
# from the tables: success (row gone), errors retried with job.attempt 1,2,3
# then a dead letter (attempts = max_retries + 1, the error text), wq.fail
# (dead at once), wq.requeue with a new payload (failure count cleared);
# priorities; a delay not run early; the follow-up rule from another process;
# dedup; `wqrun status` and `wqrun runners`. Bad input: an unreachable
# database, refused or silent (exit 1 within 15 s, host and port named, no
# password), --virtual-time
# (exit 2), a bad queue name in SQL, a foreign `wqrun` schema (refused,
# untouched), a newer schema (refused, version named), --pg-schema other;
# concurrent migrates and adds on a database without the schema.
. "$(dirname "$0")/lib.sh"
pg_need

LUA=$E2E_DIR/lua
DB=$(pg_fresh_db)
LOG=$TMP/runs.log
: >"$LOG"
q() { pg_psql "$DB" "$1"; }

# ---- migrate, CLI and SQL adds before any runner -----------------------------
run migrate --db "$DB"
expect_rc 0 "migrate (first)"
expect_eq "$OUT" 'schema "wqrun" created (version 13)' "first migrate creates the schema"
run migrate --db "$DB"
expect_rc 0 "migrate (second)"
expect_eq "$OUT" 'schema "wqrun" is up to date (version 13)' "second migrate: up to date"
expect_eq "$(q "select value from wqrun.meta where key = 'schema_version'")" 13 "meta schema_version"

run add --db "$DB" q k '{"a":1}'
expect_rc 0 "wqrun add"
expect_eq "$OUT" queued "wqrun add prints queued"
expect_in "$ERR" "wqrun: add: warning: no runner has defined queue 'q' in " \
    "an add to a queue the database has never seen warns (and still queues: k runs below)"
run add --db "$DB" q k '{"a":1}'
expect_rc 0 "wqrun add again"
expect_eq "$OUT" deduplicated "wqrun add of a queued key prints deduplicated"
expect_not_in "$ERR" "warning" "no warning once the queue holds an item"
for bad in abc 2147483648 1e3; do
    run add --db "$DB" q kbad --priority "$bad"
    expect_rc 2 "--priority '$bad'"
    expect_in "$ERR" "bad argument '--priority' (32-bit integer expected, got '$bad')" \
        "--priority '$bad': the message as on SQLite"
done
expect_eq "$(q "select count(*) from wqrun.jobs where key = 'kbad'")" 0 "a refused --priority adds nothing"
expect_eq "$(q "select count(*), min(payload::text) from wqrun.jobs where queue = 'q' and key = 'k'")" '1|{"a": 1}' \
    "one row for q/k with the payload"

expect_eq "$(q "begin; select wqrun.add('q', 'k2'); rollback" 2>&1 | grep -c queued)" 1 "add in a transaction says queued"
expect_eq "$(q "select count(*) from wqrun.jobs where key = 'k2'")" 0 "a rolled back wqrun.add() adds nothing"
expect_eq "$(q "begin; select wqrun.add('q', 'k2'); commit" 2>&1 | grep -c queued)" 1 "add in a committed transaction"
expect_eq "$(q "select count(*) from wqrun.jobs where key = 'k2'")" 1 "a committed wqrun.add() adds the row"
expect_eq "$(q "select wqrun.add_many('[{\"queue\":\"q\",\"key\":\"a\"},{\"queue\":\"q\",\"key\":\"b\",\"after\":3600}]')")" \
    '["queued", "delayed"]' "add_many returns one outcome per item, in order"
expect_eq "$(q "select state from wqrun.items where key = 'b'")" waiting "add_many's delayed item is waiting"
# add_many's malformed batches: refused whole, naming the first bad item (found by one pass
# over the JSON, then looked for item by item)
am() { pg_psql "$DB" "select wqrun.add_many('$1')" 2>&1 | sed -n 's/.*ERROR: *//p; /^\[/p' | head -1; }
BADITEM='needs a string "key" and a "queue" of 1-64 characters of [A-Za-z0-9_.-])'
expect_eq "$(am '{"a": 1}')" "wqrun.add_many: bad argument 'items' (a JSON array expected, got object)" \
    "add_many of an object: refused"
expect_eq "$(am '[{"queue": "q", "key": "x1"}, {"queue": "q", "key": 5}]')" \
    "wqrun.add_many: bad argument 'items' (item 2 $BADITEM" "a number as key: item 2 named"
expect_eq "$(q "select count(*) from wqrun.jobs where key = 'x1'")" 0 "and the good item before it not added"
for bad in '[[{"queue": "q", "key": "x"}]]' '[{"queue": "q"}]' '[{"key": "k"}]' '[null]' '["s"]' \
    '[{"queue": "bad name", "key": "k"}]' '[{"queue": "", "key": "k"}]' '[{"queue": ["q"], "key": "k"}]' \
    '[{"queue": "q\n", "key": "k"}]' "[{\"queue\": \"$(printf 'q%.0s' $(seq 65))\", \"key\": \"k\"}]"; do
    expect_eq "$(am "$bad")" "wqrun.add_many: bad argument 'items' (item 1 $BADITEM" "add_many refuses $bad"
done
expect_eq "$(am "[{\"queue\": \"$(printf 'q%.0s' $(seq 64))\", \"key\": \"\"}]")" '["queued"]' \
    "a queue name of 64 characters and an empty key are fine"
# the outcomes of a batch that mixes new keys, keys pending, repeats and the options
expect_eq "$(am '[{"queue": "q", "key": "d1"}, {"queue": "q", "key": "d1"}, {"queue": "q", "key": "a"}, {"queue": "q", "key": "p1", "payload": null, "priority": "3", "after": "0"}, {"queue": "q", "key": "p2", "after": 2.5, "priority": -1, "payload": [1]}, {"queue": "q", "key": "f1", "force": true}, {"queue": "q", "key": "u1", "unique": true}, {"queue": "q", "key": "a", "unique": true}]')" \
    '["queued", "deduplicated", "deduplicated", "queued", "delayed", "queued", "queued", "skipped: pending"]' \
    "add_many: a key's first item in the batch is added, a repeat and a pending key deduplicated"
expect_eq "$(q "select string_agg(key || ' ' || coalesce(payload::text, '-') || ' ' || priority || ' ' || state, ', ' order by key) from wqrun.items where key in ('d1', 'p1', 'p2', 'f1', 'u1')")" \
    'd1 - 0 queued, f1 - 0 queued, p1 - 3 queued, p2 [1] -1 waiting, u1 - 0 queued' \
    "their rows: payload (JSON null: none), priority (a number or its text), delayed"
q "select wqrun.remove('q', k) from unnest(array['d1', 'p1', 'p2', 'f1', 'u1']) k;
   select wqrun.remove('$(printf 'q%.0s' $(seq 64))', '')" >/dev/null

# Plain re-adds of pending keys (no payload, priority, delay, group, force or unique) are
# applied to their rows at once; with one other item in the batch they go through add_one()
# one by one. Both ways give the same outcomes and rows: a queued key is left alone, a waiting
# one is queued now (its delay kept), a running one runs once more after, a running and dirty
# one is left alone, a second re-add in the batch deduplicates.
for way in set one; do
    Q=re_$way
    am "[{\"queue\":\"$Q\",\"key\":\"queued\"},{\"queue\":\"$Q\",\"key\":\"waiting\",\"after\":3600},
         {\"queue\":\"$Q\",\"key\":\"running\"},{\"queue\":\"$Q\",\"key\":\"dirty\"},{\"queue\":\"$Q\",\"key\":\"other\"}]" >/dev/null
    q "update wqrun.jobs set running = true, token = 7, claimed_at = now()
        where queue = '$Q' and key in ('running', 'dirty');
       update wqrun.jobs set dirty = true where queue = '$Q' and key = 'dirty'" >/dev/null
    before=$(q "select key || ' ' || seq || ' ' || run_at from wqrun.jobs where queue = '$Q' order by key")
    extra=
    [ $way = one ] && extra=",{\"queue\":\"$Q\",\"key\":\"other\",\"payload\":{\"a\":1}}" # not plain
    expect_eq "$(am "[{\"queue\":\"$Q\",\"key\":\"queued\"},{\"queue\":\"$Q\",\"key\":\"waiting\",\"payload\":null},
                      {\"queue\":\"$Q\",\"key\":\"running\",\"after\":0},{\"queue\":\"$Q\",\"key\":\"dirty\",\"unique\":false},
                      {\"queue\":\"$Q\",\"key\":\"waiting\"}$extra]")" \
        "[\"deduplicated\", \"queued\", \"follow-up\", \"deduplicated\", \"deduplicated\"${extra:+, \"deduplicated\"}]" \
        "plain re-adds ($way): each key's rule, a repeat deduplicated"
    expect_eq "$(q "select string_agg(key || ' ' || state || ' ' || j.dirty::text || ' ' || (delay_at is not null)::text, ', ' order by key)
                    from wqrun.items i join wqrun.jobs j using (queue, key) where queue = '$Q' and key <> 'other'")" \
        "dirty processing true false, queued queued false false, running processing true false, waiting queued false true" \
        "plain re-adds ($way): the waiting key queued with its delay kept, the running one dirty"
    expect_eq "$(q "select key || ' ' || seq || ' ' || run_at from wqrun.jobs where queue = '$Q' and key in ('dirty', 'queued', 'running') order by key")" \
        "$(grep -v -e '^waiting' -e '^other' <<<"$before")" "plain re-adds ($way): the other rows as they were"
    q "delete from wqrun.jobs where queue = '$Q'" >/dev/null
done

# A bad queue name raises and adds nothing.
OUT=$(q "select wqrun.add('bad name!', 'k')" 2>&1)
RC=$?
LAST_CMD="select wqrun.add('bad name!','k')"
check "wqrun.add with a bad queue name fails (status $RC)" [ "$RC" -ne 0 ]
expect_in "$OUT" "bad argument 'queue'" "the error names 'queue'"
expect_eq "$(q "select count(*) from wqrun.jobs where queue <> 'q'")" 0 "nothing added for the bad name"
# 1-64 characters (checked by a pattern and a length since schema 13): 65 refused, 64 fine
Q64=$(printf 'q%.0s' $(seq 64))
for f in "add('${Q64}q', 'k')" "pause('${Q64}q')" "add('', 'k')"; do
    expect_in "$(q "select wqrun.$f" 2>&1)" "bad argument 'queue'" "wqrun.$f: refused"
done
expect_eq "$(q "select wqrun.add('$Q64', 'k64'); select wqrun.remove('$Q64', 'k64')")" "queued
removed" "wqrun.add of a 64-character queue name"

# Priorities: added before the runner starts, to a one-worker queue.
for kp in p0a:0 p5:5 p0b:0 p2:2; do
    run add --db "$DB" prio "${kp%%:*}" --priority "${kp##*:}"
    expect_eq "$OUT" queued "add prio ${kp%%:*}"
done
# --unique: a pending key is left alone (payload kept), and the answer says why.
run add --db "$DB" piro2 u1 '{"v":1}'
expect_eq "$OUT" queued "add piro2 u1"
run add --db "$DB" piro2 u1 '{"v":2}' --unique
expect_rc 0 "add --unique of a pending key"
expect_eq "$OUT" "skipped: pending" "add --unique of a pending key is skipped, saying why"
expect_eq "$(q "select payload::text from wqrun.jobs where queue = 'piro2' and key = 'u1'")" '{"v": 1}' \
    "its payload is unchanged"
run add --db "$DB" piro2 u1 '{"v":3}'
expect_eq "$OUT" deduplicated "without --unique the same add is the usual dedup"
expect_eq "$(q "select payload::text from wqrun.jobs where queue = 'piro2' and key = 'u1'")" '{"v": 3}' \
    "which takes the new payload"
expect_eq "$(q "select wqrun.remove('piro2', 'u1')")" removed "u1 removed again"
# Outcomes.
run add --db "$DB" q e1 '{"mode":"err"}'
run add --db "$DB" q f1 '{"mode":"fail"}'
run add --db "$DB" q r1 '{"mode":"requeue"}'

# ---- the runner ---------------------------------------------------------------
t_start=$(now)
pg_bg r1 --quiet --serve --runner-name basic1 --db "$DB" "$LUA/pg_basic.lua" "$LOG"
R1=$BG_PID
check "the runner drains prio" wait_for "$LOG" "run prio" 4 15
expect_eq "$(awk '$1 == "run" && $2 == "prio" { printf "%s ", $3 }' "$LOG")" "p5 p2 p0a p0b " \
    "priorities: higher first, FIFO within a level"
run add --db "$DB" prio p9 --priority -7
expect_rc 0 "add --priority -7 to a queue a runner defined"
expect_not_in "$ERR" "warning" "no warning for a queue a runner defined (its items all ran)"
check "p9 ran" wait_for "$LOG" "run prio p9" 1 10
run add --db "$DB" piro typo
expect_rc 0 "add to a misspelled queue: exit 0"
expect_eq "$OUT" queued "it is queued"
expect_in "$ERR" "warning: no runner has defined queue 'piro'" "and warned about"
expect_eq "$(q "select count(*) from wqrun.jobs where queue = 'piro' and key = 'typo'")" 1 \
    "the row waits in the database"
expect_eq "$(q "select wqrun.remove('piro', 'typo')")" removed "removed again"
check "lua1 (added from Lua) ran" wait_for "$LOG" "end q lua1 " 1 10
expect_eq "$(grep '^run q lua1 ' "$LOG" | awk '{ print $6 }')" '{"from":"lua","mode":"ok"}' "lua1's payload"
check "k ran" wait_for "$LOG" "end q k " 1 10
expect_eq "$(grep -c '^run q k ' "$LOG")" 1 "k, added twice while queued, ran once"
expect_eq "$(grep '^run q k ' "$LOG" | awk '{ print $6 }')" '{"a":"1"}' "k's payload"
check "k2 ran" wait_for "$LOG" "end q k2 " 1 10
check "a ran" wait_for "$LOG" "end q a " 1 10
pg_wait "$DB" "select count(*) from wqrun.dead where key = 'e1'" 1 15
DEAD_E1=$(q "select attempts || '|' || error from wqrun.dead where key = 'e1'")
expect_re "$DEAD_E1" '^3\|.*boom e1' "e1's dead letter: attempts = max_retries + 1 = 3, the error text"
expect_eq "$(awk '$1 == "run" && $3 == "e1" { printf "%s ", $4 }' "$LOG")" "1 2 3 " "e1: job.attempt 1, 2, 3"
pg_wait "$DB" "select count(*) from wqrun.dead where key = 'f1'" 1 10
expect_re "$(q "select attempts || '|' || error from wqrun.dead where key = 'f1'")" '^1\|.*permanent f1' \
    "wq.fail: dead at once with attempts 1 and its message"
expect_eq "$(grep -c '^run q f1 ' "$LOG")" 1 "wq.fail: no retry"
check "r1 ran with the new payload" wait_for "$LOG" "end q r1 " 1 10
expect_eq "$(awk '$1 == "run" && $3 == "r1" { printf "%s:%s ", $4, $6 }' "$LOG")" \
    '1:{"mode":"requeue"} 2:{"mode":"requeue"} 1:{"mode":"requeue","new":"yes"} ' \
    "r1: fails once, requeues with a new payload, runs again with it and a cleared failure count"

# The follow-up rule: an add from another process while the key runs.
run add --db "$DB" q slow '{"mode":"slow","s":3}'
check "slow started" wait_for "$LOG" "run q slow " 1 10
run add --db "$DB" q slow
expect_eq "$OUT" follow-up "wqrun add of a running key prints follow-up"
run add --db "$DB" q slow
expect_eq "$OUT" deduplicated "a second add while it runs is deduplicated"
expect_eq "$(q "select state || '|' || dirty from wqrun.items where key = 'slow'")" "processing|true" "items shows it processing and dirty"
check "slow ran again" wait_for "$LOG" "end q slow " 2 15
sleep 0.5
expect_eq "$(grep -c '^run q slow ' "$LOG")" 2 "the follow-up: exactly one more run"
# (Before bbef053 the follow-up run's outcome was never written: the row
# stayed 'processing', dirty false, until the runner exited.)
pg_wait "$DB" "select coalesce(string_agg(state || '|' || dirty || '|' || token, ','), 'gone') from wqrun.items where key = 'slow'" gone 5
st=$?
check "slow's row is gone after its follow-up run ended (state|dirty|token: $PG_GOT)" [ "$st" = 0 ]

# A delay is not run before its time.
t_add=$(now)
run add --db "$DB" q dly --after 2
expect_eq "$OUT" delayed "wqrun add --after prints delayed"
check "dly ran" wait_for "$LOG" "end q dly " 1 10
t_run=$(awk '$1 == "run" && $3 == "dly" { print $5 }' "$LOG")
expect_between "$(awk -v a="$t_add" -v b="$t_run" 'BEGIN { printf "%.3f", b - a }')" 1.95 3.5 "dly ran 2 s after its add"

# ---- status and runners while it runs ---------------------------------------
run runners --db "$DB"
expect_rc 0 "wqrun runners"
expect_re "$OUT" "^[0-9]+ +basic1 +[^ ]+ +$R1 " "wqrun runners lists basic1 with its pid"
expect_eq "$(q "select name || '|' || pid from wqrun.runners")" "basic1|$R1" "the runners table"
pg_wait "$DB" "select count(*) from wqrun.jobs" 1 10
expect_eq "$(q "select key || '|' || state from wqrun.items")" "b|waiting" "only the hour-delayed b is left"
expect_eq "$(q "select count(*) from wqrun.failures")" 0 "no failure counts left (r1's was cleared)"
expect_eq "$(q "select string_agg(key, ',' order by key) from wqrun.dead")" "e1,f1" "the dead letters"
run status --db "$DB"
expect_rc 0 "wqrun status"
expect_re "$OUT" '^q +f +0 +0 +1 +0 +2 ' "status: q (not paused) has 1 waiting and 2 dead"
expect_in "$OUT" basic1 "status lists the runner"
# Every run appears once as run (with a matching end for the successful ones).
expect_eq "$(grep -c '^run q ' "$LOG")" "$(($(grep -c '^end q ' "$LOG") + 3 + 1 + 2))" \
    "runs = successful ends + e1's 3 + f1's 1 + r1's failure and requeue"

kill -TERM "$R1"
wait_exit "$R1" 15
expect_rc 0 "the runner exits 0 on SIGTERM"
expect_eq "$(q "select count(*) from wqrun.runners")" 0 "it removed its runners row"

# ---- bad input ----------------------------------------------------------------
t0=$(now)
run --db "postgresql://nobody:sekret@127.0.0.1:1/x" "$LUA/pg_basic.lua" "$LOG"
expect_rc 1 "an unreachable database"
expect_between "$(since "$t0")" 0 15 "it gives up within 15 s"
expect_in "$ERR" "127.0.0.1" "the message names the host"
expect_re "$ERR" '(port|:)1([^0-9]|$)' "the message names port 1"
expect_not_in "$ERR$OUT" sekret "never the password"
# A server that accepts the connection and never answers: given up after 10 s.
SILENT_PORT=$(rand_port)
python3 -c '
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(50)
print("listening", flush=True)
held = []
while True:
    held.append(s.accept()[0])
' "$SILENT_PORT" >"$TMP/silent.out" 2>&1 &
SILENT_PID=$!
PIDS+=("$SILENT_PID")
wait_for "$TMP/silent.out" listening 1 5
t0=$(now)
run --db "postgresql://nobody:sekret@127.0.0.1:$SILENT_PORT/x" "$LUA/pg_basic.lua" "$LOG"
t_silent=$(since "$t0")
expect_rc 1 "a server that never answers"
expect_between "$t_silent" 5 15 "it gives up after about 10 s"
expect_in "$ERR" "127.0.0.1" "the message names the host"
expect_in "$ERR" "$SILENT_PORT" "the message names the port"
expect_not_in "$ERR$OUT" sekret "never the password"
kill "$SILENT_PID" 2>/dev/null
wait "$SILENT_PID" 2>/dev/null
run --virtual-time --db "$DB" "$LUA/pg_basic.lua" "$LOG"
expect_rc 2 "--virtual-time with PostgreSQL"

# A foreign schema named wqrun: refused, untouched.
DB2=$(pg_fresh_db)
pg_psql "$DB2" "create schema wqrun; create table wqrun.t (v text); insert into wqrun.t values ('mine')" >/dev/null
run migrate --db "$DB2"
expect_rc 1 "migrate on a foreign wqrun schema"
expect_in "$ERR" "not a wqrun schema" "migrate says it is not a wqrun schema"
run --quiet --db "$DB2" "$LUA/pg_basic.lua" "$LOG"
expect_rc 1 "a runner on a foreign wqrun schema"
expect_in "$ERR" "not a wqrun schema" "the runner says it is not a wqrun schema"
expect_eq "$(pg_psql "$DB2" "select string_agg(c.relname, ',' order by c.relname) from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'wqrun'")" \
    t "the foreign schema still holds only its table"
expect_eq "$(pg_psql "$DB2" "select string_agg(v, ',') from wqrun.t")" mine "and its row"

# A newer schema: refused, version named.
pg_psql "$DB" "update wqrun.meta set value = '99' where key = 'schema_version'" >/dev/null
run migrate --db "$DB"
expect_rc 1 "migrate on a newer schema"
expect_in "$ERR" "version 99" "migrate names the version"
run --quiet --db "$DB" "$LUA/pg_basic.lua" "$LOG"
expect_rc 1 "a runner on a newer schema"
expect_in "$ERR" "version 99" "the runner names the version"
run add --db "$DB" q newer
expect_rc 1 "wqrun add on a newer schema"
expect_eq "$(q "select count(*) from wqrun.jobs where key = 'newer'")" 0 "nothing added to the newer schema"

# --pg-schema other
DB3=$(pg_fresh_db)
run migrate --db "$DB3" --pg-schema other
expect_eq "$OUT" 'schema "other" created (version 13)' "migrate --pg-schema other"
run add --db "$DB3" --pg-schema other q o1
expect_eq "$OUT" queued "wqrun add --pg-schema other"
run --quiet --pg-schema other --db "$DB3" "$LUA/pg_basic.lua" "$LOG"
expect_rc 0 "a runner with --pg-schema other drains and exits"
expect_eq "$(grep -c '^end q o1 ' "$LOG")" 1 "o1 ran from schema other"
expect_eq "$(pg_psql "$DB3" "select count(*) from pg_namespace where nspname = 'wqrun'")" 0 "no schema wqrun was made"
expect_eq "$(pg_psql "$DB3" "select count(*) from other.jobs")|$(pg_psql "$DB3" "select value from other.meta")" "0|13" \
    "schema other holds the tables"

# Concurrent starts on a database without the schema: migrate three times
# at once (one creates it), and `wqrun add` four times at once (each makes
# sure of the schema first).
DB4=$(pg_fresh_db)
bgs=()
for i in 1 2 3; do
    "$WQRUN" migrate --db "$DB4" >"$TMP/mig.$i" 2>&1 &
    bgs+=($!)
done
wait "${bgs[@]}"
LAST_CMD="3 x wqrun migrate at once" OUT=$(cat "$TMP"/mig.*) ERR=""
expect_eq "$(grep -c 'created (version 13)' "$TMP"/mig.* | awk -F: '{ n += $2 } END { print n }')|$(grep -c 'is up to date (version 13)' "$TMP"/mig.* | awk -F: '{ n += $2 } END { print n }')" \
    "1|2" "three migrates at once: one created, two up to date"
DB5=$(pg_fresh_db)
bgs=()
for i in 1 2 3 4; do
    # (stderr apart: each may warn that no runner has defined q)
    ("$WQRUN" add --db "$DB5" q "c$i" >"$TMP/cadd.$i" 2>"$TMP/cadd-err.$i"
        echo "rc=$?" >>"$TMP/cadd.$i") &
    bgs+=($!)
done
wait "${bgs[@]}"
LAST_CMD="4 x wqrun add at once on a database without the schema" OUT=$(cat "$TMP"/cadd.*) ERR=$(cat "$TMP"/cadd-err.*)
expect_eq "$(cat "$TMP"/cadd.* | sort | uniq -c | awk '{ printf "%s %s,", $1, $2 }')" "4 queued,4 rc=0," "four adds at once: all queued, exit 0"
expect_eq "$(pg_psql "$DB5" "select string_agg(key, ',' order by key) from wqrun.jobs")|$(pg_psql "$DB5" "select value from wqrun.meta")" \
    "c1,c2,c3,c4|13" "one schema, four rows"

[ "$FAILED" -gt 0 ] && { echo "--- runs:"; cat "$LOG"; echo "--- runner stderr:"; cat "$TMP/r1.err"; } >&2
finish

