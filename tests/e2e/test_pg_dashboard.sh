#!/usr/bin/env bash
# The dashboard of runners sharing a PostgreSQL database, in headless
# Chromium (tests/e2e/dashboard_pg.py): two runners of
# tests/e2e/lua/pg_dash.lua on one database, dash-a with --listen and a
# feed of jobs, dash-b without; the page shows the database's numbers, both
# runners, a queue's schedules and the groups held back the most across the
# runners, and its pause reaches every runner. Not skipped when the
# browser is missing: scripts/deps.sh installs it.
. "$(dirname "$0")/lib.sh"
pg_need

PY=/usr/bin/python3
for f in "$PY" /usr/bin/chromium /usr/bin/chromedriver; do
    if [ ! -x "$f" ]; then
        fail "$f is missing: run scripts/deps.sh (chromium chromium-driver python3-selenium)"
        finish
    fi
done
LUA=$E2E_DIR/lua
DB=$(pg_fresh_db)
run migrate --db "$DB"
pg_psql "$DB" "select wqrun.add_many(jsonb_agg(jsonb_build_object('queue', 'idle', 'key', 'i' || i)))
  from generate_series(1, 30) i;
  select wqrun.add('w', 'slow1'), wqrun.add('w', 'slow2');
  insert into wqrun.schedules (queue, name, spec, key) values ('mail', 'orphan', '@hourly', 'orphan-key');
  insert into wqrun.dead (queue, key, error, attempts) values ('w', 'd1', 'e', 1), ('w', 'd2', 'e', 1),
    ('w', 'd3', 'e', 1)" >/dev/null
listen_start -- --serve --db "$DB" --runner-name dash-a "$LUA/pg_dash.lua" feed || finish
pg_bg dash-b --quiet --serve --db "$DB" --runner-name dash-b "$LUA/pg_dash.lua"
B=$BG_PID
check "both runners registered" pg_wait "$DB" "select count(*) from wqrun.runners" 2 10
check "the slow items run" pg_wait "$DB" "select count(*) from wqrun.jobs where key like 'slow%' and running" 2 10

# The HTTP side the page reads: the database's numbers.
for i in $(seq 50); do
    D=$(curl -s "$BASE/queues" | python3 -c 'import json,sys; q={x["name"]: x for x in json.load(sys.stdin)}; print(q["idle"]["depth"], q["idle"].get("scope"), q["w"]["dead"])' 2>/dev/null)
    [ "$D" = "30 database 3" ] && break
    sleep 0.1
done
expect_eq "$D" "30 database 3" "GET /queues shows the database's numbers (idle depth, w dead) with scope database"
M=$(curl -s "$BASE/metrics")
expect_in "$M" 'wqrun_db_queue_items{queue="idle",state="queued"} 30' "/metrics: the database's queued items"
expect_in "$M" 'wqrun_db_runners 2' "/metrics: two runners"
expect_in "$M" 'wqrun_db_queue_dead{queue="w"} 3' "/metrics: the database's dead letters"
expect_in "$M" 'wqrun_pg_claim_duration_seconds_count' "/metrics: the claim round trips"

# The routes of a queue's schedules and held-back groups answer from the database.
J='import json,sys; d=json.load(sys.stdin)'
code() { curl -s -o "$TMP/body" -w '%{http_code}' "$@"; }
check "mail's groups hold 5 items back in the database" \
    pg_wait "$DB" "select count(*) from wqrun.jobs where queue = 'mail' and held" 5 10
G=$(curl -s "$BASE/queues/mail/groups" | python3 -c "$J"'; print(d["total"], *["%s:%d/%d/%d/%s" % (g["group"], g["held"], g["queued"], g["running"], g["concurrency"]) for g in d["groups"]])')
expect_eq "$G" "2 acme:4/4/1/1 globex:1/1/1/1" \
    "GET /queues/mail/groups: the database's groups (held/queued/running on every runner/concurrency)"
expect_eq "$(curl -s "$BASE/queues/mail/groups?limit=1" | python3 -c "$J"'; print(d["total"], [g["group"] for g in d["groups"]], d["groups"][0]["own"], d["groups"][0]["rate"])')" \
    "2 ['acme'] False None" "?limit=1: the most held group only, the total still 2"
expect_eq "$(curl -s "$BASE/queues/idle/groups")" '{"groups":[],"total":0}' "a queue without groups: none held"
expect_eq "$(code "$BASE/queues/mail/groups?limit=0")" 400 "groups?limit=0 answers 400"
expect_eq "$(code "$BASE/queues/nope/groups")" 404 "groups of an unknown queue: 404"
expect_in "$(cat "$TMP/body")" "no such queue 'nope'" "the 404 names the queue"
S=$(curl -s "$BASE/queues/mail/schedules")
expect_eq "$(printf '%s' "$S" | python3 -c "$J"'
for s in d["schedules"]:
    print(s["name"], s["spec"], s["key"], s["tz"], s["catch_up"], s["payload"], s["defined"])')" \
    "beat @every 1s beat utc once None True
digest */5 * * * * daily-digest utc once None True
orphan @hourly orphan-key utc once None False" \
    "GET /queues/mail/schedules: the database's schedules by name (orphan: in the table, defined by no runner's script)"
expect_eq "$(printf '%s' "$S" | python3 -c "$J"'; print("%d" % [s["next_at"] for s in d["schedules"] if s["name"] == "digest"][0])')" \
    "$(pg_psql "$DB" "select extract(epoch from next_at)::bigint from wqrun.schedules where queue = 'mail' and name = 'digest'")" \
    "digest's next_at is the database's"
expect_eq "$(code "$BASE/queues/mail/schedules?x=1")" 400 "schedules?x=1 answers 400"
expect_eq "$(code "$BASE/queues/nope/schedules")" 404 "schedules of an unknown queue: 404"

setsid "$PY" "$E2E_DIR/dashboard_pg.py" "$BASE" "$DB" dash-b &
DPID=$!
PIDS+=("-$DPID")
wait_exit "$DPID" 90
kill -9 -- "-$DPID" 2>/dev/null
expect_eq "$RC" 0 "the dashboard in headless Chromium against two runners (tests/e2e/dashboard_pg.py; its output is above)"

kill -TERM "$PID" "$B"
wait_exit "$PID" 10
wait_exit "$B" 10
finish
