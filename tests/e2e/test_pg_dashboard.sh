#!/usr/bin/env bash
# The dashboard of runners sharing a PostgreSQL database, in headless
# Chromium (tests/e2e/dashboard_pg.py): two runners of
# tests/e2e/lua/pg_dash.lua on one database, dash-a with --listen and a
# feed of jobs, dash-b without; the page shows the database's numbers and
# both runners, and its pause reaches every runner. Not skipped when the
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
