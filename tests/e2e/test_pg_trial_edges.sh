#!/usr/bin/env bash
# Rough edges a trial found (issue 28), on PostgreSQL: a pause through a
# runner's HTTP API shows in its GET /queues/Q at once; `wqrun status` says
# which queues are paused; `wqrun items` and GET /queues/Q/items name the
# runner of a processing item; wqrun.add() from SQL to a queue nobody knows
# adds with a WARNING naming it (and `wqrun add` says it once, not twice).
. "$(dirname "$0")/lib.sh"
pg_need
DB=$(pg_fresh_db)

jobs=$(script jobs.lua <<'LUA'
wq.queue("mail", {handler = function() end})
wq.queue("slow", {handler = function() while not io.open(os.getenv("GATE")) do wq.sleep(0.05) end end})
LUA
)
listen_start env GATE="$TMP/gate" -- --serve --runner-name R1 --db "$DB" "$jobs" || { finish; }
run add --db "$DB" slow s1
check "s1 is processing" pg_wait "$DB" "select state from wqrun.items where key = 's1'" processing 10
run items --db "$DB" slow
expect_re "$OUT" "s1 +processing on R1 " "wqrun items: processing on R1"
run items --db "$DB" slow --json
expect_in "$OUT" '"runner": "R1"' "wqrun items --json: the runner"
expect_eq "$(curl -s -m 10 "$BASE/queues/slow/items" | python3 -c 'import json,sys; print([(i["key"], i.get("runner")) for i in json.load(sys.stdin)["items"]])')" \
    "[('s1', 'R1')]" "GET /queues/slow/items: the runner"
touch "$TMP/gate"
paused() { curl -s -m 10 "$BASE/queues/mail" | python3 -c 'import json,sys; print(json.load(sys.stdin)["paused"])'; }
expect_eq "$(paused)" False "running at first"
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -X POST "$BASE/queues/mail/pause")
expect_eq "$code" 200 "POST pause"
expect_eq "$(paused)" True "GET /queues/mail says paused right after (no wait for the database's signal)"
curl -s -m 10 -o /dev/null -X POST "$BASE/queues/mail/resume"
expect_eq "$(paused)" False "and running right after a resume"
curl -s -m 10 -o /dev/null -X POST "$BASE/queues/mail/pause"

run status --db "$DB"
expect_rc 0 "status"
expect_re "$OUT" "mail +t +0 " "status: mail is paused (column paused)"
curl -s -m 10 -o /dev/null -X POST "$BASE/queues/mail/resume"
run status --db "$DB"
expect_re "$OUT" "mail +f +0 " "status: mail runs again"
kill -TERM "$PID"
wait_exit "$PID" 20

# wqrun.add() to a queue nobody knows: added, with a warning naming it
psql=${WQ_PG_BIN:-/usr/lib/postgresql/15/bin}/psql
out=$("$psql" -X -At "$DB" -c "select wqrun.add('mial', 'k1')" 2>&1)
expect_in "$out" "WARNING:  wqrun.add: no runner has defined queue 'mial'" "SQL: a WARNING names the queue"
expect_in "$out" "queued" "and the item is added all the same"
out=$("$psql" -X -At "$DB" -c "select wqrun.add('mail', 'k2')" 2>&1)
expect_eq "$out" "queued" "a known queue: no warning"
out=$("$psql" -X -At "$DB" -c "select wqrun.add('mial', 'k3')" 2>&1)
expect_eq "$out" "queued" "a queue holding items is known: no warning again"
run add --db "$DB" newq k4
expect_rc 0 "wqrun add to an unknown queue"
expect_count "$ERR" "newq" 1 "wqrun add says it once (its own warning, not the server's too)"
expect_not_in "$ERR" "WARNING:" "no raw server notice"
finish
