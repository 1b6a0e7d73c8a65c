#!/usr/bin/env bash
# The dashboard updates from GET /events (SPEC 11): in headless Chromium
# (tests/e2e/dashboard_live.py), with the page's own refresh made a minute
# long (?refresh=60), a pause, a resume, a cancel of a running item and a
# retry of a dead letter made through the HTTP API show on the page within
# 500 ms, and a job's progress shows while it runs; the time from the API
# call to the change in the page is printed. Also: a runner without /events
# is polled with nothing said, and a stream that drops is opened again. On
# both backends: a state file, then a fresh PostgreSQL database. Not skipped
# when the browser or the database is missing.
. "$(dirname "$0")/lib.sh"
pg_need

PY=/usr/bin/python3
for f in "$PY" /usr/bin/chromium /usr/bin/chromedriver; do
    if [ ! -x "$f" ]; then
        fail "$f is missing: run scripts/deps.sh (chromium chromium-driver python3-selenium)"
        finish
    fi
done

# live: three items that run an hour (slow-N), three that are dead letters
# after their first run and run an hour when retried (dead-N); prog-N,
# added by the test, report 25, 50, then a table. other: paused on the
# overview.
LUA=$(script live.lua <<'EOF'
local failed = {}
local live = wq.queue("live", {
    workers = 16,
    handler = function(key, _, job)
        if key:find("^dead") and not failed[key] then
            failed[key] = true
            return wq.fail("dead on its first run")
        end
        if key:find("^prog") then
            job:progress(25)
            wq.sleep(1.5)
            job:progress(50)
            wq.sleep(1.5)
            job:progress({stage = "upload", files = 3})
        end
        wq.sleep(3600)
    end,
})
for i = 1, 3 do
    live:add("slow-" .. i)
    live:add("dead-" .. i)
end
wq.queue("other")
EOF
)

browse() {
    setsid "$PY" "$E2E_DIR/dashboard_live.py" "$BASE" &
    local d=$!
    PIDS+=("-$d")
    wait_exit "$d" 120
    kill -9 -- "-$d" 2>/dev/null
    expect_eq "$RC" 0 "$1 (tests/e2e/dashboard_live.py; its output is above)"
}

listen_start -- --serve --db "$TMP/live.db" "$LUA" || finish
browse "the dashboard's live updates in headless Chromium, on a state file"
kill -TERM "$PID"
wait_exit "$PID" 10

listen_start -- --serve --db "$(pg_fresh_db)" "$LUA" || finish
browse "the dashboard's live updates in headless Chromium, on PostgreSQL"
kill -TERM "$PID"
wait_exit "$PID" 10
finish
