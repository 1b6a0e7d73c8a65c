#!/usr/bin/env bash
# Flows on the dashboard in headless Chromium (tests/e2e/dashboard_flows.py), on both
# backends: a runner of tests/e2e/lua/dash_flows.lua on a state file, then one on a fresh
# PostgreSQL database. Not skipped when the browser or the database is missing.
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

browse() {
    setsid "$PY" "$E2E_DIR/dashboard_flows.py" "$BASE" &
    local d=$!
    PIDS+=("-$d")
    wait_exit "$d" 90
    kill -9 -- "-$d" 2>/dev/null
    expect_eq "$RC" 0 "$1 (tests/e2e/dashboard_flows.py; its output is above)"
}

listen_start -- --serve --db "$TMP/state.db" "$LUA/dash_flows.lua" || finish
browse "flows on the dashboard, on a state file"
kill -TERM "$PID"
wait_exit "$PID" 10
expect_eq "$(sqlite3 "$TMP/state.db" "SELECT cancelled, unfinished FROM flows WHERE id = 'held flow <&>'")" \
    "1|0" "the state file keeps the cancelled flow"

DB=$(pg_fresh_db)
listen_start -- --serve --db "$DB" "$LUA/dash_flows.lua" || finish
browse "flows on the dashboard, on PostgreSQL"
expect_eq "$(pg_psql "$DB" "select count(*) filter (where state = 'dead'), count(*) from wqrun.flow_nodes n
    where n.flow = 'held flow <&>'")" "4|4" "the database keeps the cancelled flow's dead nodes"
kill -TERM "$PID"
wait_exit "$PID" 10
finish
