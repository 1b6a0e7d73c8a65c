#!/usr/bin/env bash
# Running a schedule now (issue 31): `wqrun trigger --db DB QUEUE SCHEDULE` and
# POST /queues/Q/schedules/NAME/trigger add the schedule's key and payload at
# once, through dedup, and leave its next run where it was — on the state file
# (with and without a runner) and on PostgreSQL.
. "$(dirname "$0")/lib.sh"
pg_need

jobs=$(script jobs.lua <<'LUA'
local dir = os.getenv("OUT_DIR")
local q = wq.queue("reports", {handler = function(key, payload)
    local f = assert(io.open(dir .. "/runs", "a"))
    f:write(key, " ", payload.n, "\n")
    f:close()
end})
q:schedule("nightly", "0 3 * * *", {key = "report", payload = {n = 7}})
LUA
)
post() { curl -s -m 10 -o "$TMP/body" -w '%{http_code}' -X POST "$BASE$1"; }

# backend_case NAME DB NEXT_AT_SQL: the runner on DB; HTTP and CLI triggers
backend_case() {
    local name=$1 db=$2 next_sql=$3 dir=$TMP/$1 before
    mkdir -p "$dir"
    listen_start env OUT_DIR="$dir" -- --serve --db "$db" "$jobs" || return
    before=$($next_sql)
    check "$name: the schedule has a next run ($before)" test -n "$before"
    expect_eq "$(post /queues/reports/schedules/nightly/trigger)" 202 "$name: POST trigger: 202"
    expect_eq "$(cat "$TMP/body")" '{"queued":true}' "$name: the key was queued"
    check "$name: the schedule's key ran with its payload" wait_for "$dir/runs" "report 7" 1 10
    expect_eq "$($next_sql)" "$before" "$name: the next run is where it was"
    expect_eq "$(post /queues/reports/schedules/weekly/trigger)" 404 "$name: an unknown schedule: 404"
    expect_eq "$(cat "$TMP/body")" "{\"error\":\"no such schedule 'weekly' in queue 'reports'\"}" \
        "$name: named in the answer"
    expect_eq "$(post /queues/nope/schedules/nightly/trigger)" 404 "$name: an unknown queue: 404"
    expect_eq "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$BASE/queues/reports/schedules/nightly/trigger")" 405 \
        "$name: GET is not allowed"
    run trigger --db "$db" reports nightly
    expect_rc 0 "$name: wqrun trigger"
    check "$name: ... and the key ran again" wait_for "$dir/runs" "report 7" 2 10
    expect_eq "$($next_sql)" "$before" "$name: the next run is still where it was"
    run trigger --db "$db" reports weekly
    expect_rc 1 "$name: wqrun trigger of an unknown schedule: 1"
    expect_in "$ERR" "no schedule 'weekly' of queue 'reports'" "$name: named"
    kill -TERM "$PID"
    wait_exit "$PID" 20
}

sqlite_next() { sqlite3 "$TMP/state.db" "SELECT next_at FROM schedules WHERE name = 'nightly'"; }
backend_case sqlite "$TMP/state.db" sqlite_next
# without a runner: the add waits in the inbox for the next start
run trigger --db "$TMP/state.db" reports nightly
expect_rc 0 "trigger with no runner"
expect_eq "$OUT" "queued 'report' of schedule 'nightly' (queue 'reports') in the inbox of $TMP/state.db" \
    "it says where the add waits"
expect_eq "$(sqlite3 "$TMP/state.db" "SELECT queue, key, payload FROM inbox")" 'reports|report|{"n":7}' \
    "the inbox row: the schedule's key and payload"
run trigger --db "$TMP/state.db" reports
expect_rc 2 "trigger without SCHEDULE is a usage error"

DB=$(pg_fresh_db)
pg_next() { pg_psql "$DB" "select extract(epoch from next_at) from wqrun.schedules where name = 'nightly'"; }
backend_case pg "$DB" pg_next
run trigger --db "$DB" reports nightly
expect_eq "$OUT" "queued 'report' of schedule 'nightly'" "pg, no runner: the database's answer"
expect_eq "$(pg_psql "$DB" "select key, payload from wqrun.items where queue = 'reports'")" 'report|{"n": 7}' \
    "pg: the item waits in the database"
run trigger --db "$DB" reports nightly
expect_eq "$OUT" "deduplicated 'report' of schedule 'nightly'" "pg: through dedup"
finish
