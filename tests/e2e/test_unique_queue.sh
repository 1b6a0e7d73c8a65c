#!/usr/bin/env bash
# The queue option unique = true (SPEC 12, issue 31): every add — HTTP, `wqrun add`,
# Lua — is unique unless it says otherwise ("unique": false, --no-unique): a POST
# repeated while its job runs does not run it again. On the state file and on
# PostgreSQL (where `wqrun add` asks the database, which holds the definition).
. "$(dirname "$0")/lib.sh"
pg_need

jobs=$(script jobs.lua <<'LUA'
local dir = os.getenv("OUT_DIR")
wq.queue("intake", {unique = true, handler = function(key, payload)
    local f = assert(io.open(dir .. "/runs", "a"))
    f:write(key, " ", payload and payload.n or "-", "\n")
    f:close()
    -- each run waits for its gate file
    while not io.open(dir .. "/gate-" .. (payload and payload.n or "-")) do wq.sleep(0.02) end
end})
LUA
)

wait_sql() { # wait_sql DB SQL WANT TIMEOUT: until sqlite3 prints WANT
    local i
    for ((i = 0; i < $4 * 20; i++)); do
        [ "$(sqlite3 "$1" "$2" 2>/dev/null)" = "$3" ] && return 0
        sleep 0.05
    done
    return 1
}

post() { # post JSON: prints the answer's body
    curl -s -m 10 -X POST -H 'Content-Type: application/json' -d "$1" "$BASE/queues/intake/items"
}

# backend_case NAME DB: the runner on DB; HTTP adds, then `wqrun add`
backend_case() {
    local name=$1 db=$2 dir=$TMP/$1
    mkdir -p "$dir"
    listen_start env OUT_DIR="$dir" -- --serve --db "$db" "$jobs" || return
    expect_eq "$(post '{"key":"k","payload":{"n":1}}')" '{"queued":true}' "$name: the first POST queues"
    check "$name: the run started" wait_for "$dir/runs" "k 1" 1 10
    expect_eq "$(post '{"key":"k","payload":{"n":2}}')" '{"queued":false,"reason":"processing"}' \
        "$name: the same POST while it runs is left alone (no second run)"
    expect_eq "$(post '{"key":"k","payload":{"n":3},"unique":false}')" '{"queued":true}' \
        "$name: \"unique\": false asks for the follow-up run"
    run add --db "$db" intake k '{"n":4}'
    expect_rc 0 "$name: wqrun add of the running key"
    if [ "$name" = sqlite ]; then # taken from the inbox while the key still runs
        check "$name: the runner took the inbox row" wait_sql "$db" "SELECT count(*) FROM inbox" 0 10
    fi
    if [ "$name" = pg ]; then
        expect_eq "$OUT" "skipped: processing" "$name: wqrun add is unique by the queue's definition"
        run add --db "$db" intake k '{"n":5}' --no-unique
        expect_eq "$OUT" "deduplicated" \
            "$name: --no-unique: the follow-up rule (one is due already: its payload is replaced)"
    fi
    touch "$dir/gate-1"
    local last=3
    [ "$name" = pg ] && last=5
    check "$name: the follow-up ran" wait_for "$dir/runs" "k $last" 1 10
    touch "$dir/gate-$last"
    sleep 0.5
    expect_eq "$(cat "$dir/runs")" "k 1
k $last" "$name: two runs in all: the first and the one follow-up asked for"
    kill -TERM "$PID"
    wait_exit "$PID" 20
    expect_eq "$RC" 0 "$name: the runner stops cleanly"
}

backend_case sqlite "$TMP/state.db"
# the state file's inbox keeps what `wqrun add` said: 1, 0 (--no-unique) or nothing
run add --db "$TMP/state.db" intake x --no-unique
run add --db "$TMP/state.db" intake y --unique
run add --db "$TMP/state.db" intake z
expect_eq "$(sqlite3 "$TMP/state.db" "SELECT key, coalesce(unique_add, 'null') FROM inbox ORDER BY id")" "x|0
y|1
z|null" "the inbox rows say unique, not unique, or nothing"

DB=$(pg_fresh_db)
backend_case pg "$DB"
expect_eq "$(pg_psql "$DB" "select unique_adds from wqrun.queues where name = 'intake'")" t \
    "pg: the definition is in wqrun.queues"
finish
