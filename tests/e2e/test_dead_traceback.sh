#!/usr/bin/env bash
# A dead letter keeps its traceback (issue 31): written with it to the state
# file (dead.traceback, read back with sqlite3) and to PostgreSQL (psql), cut
# to 4 KiB, shown by `wqrun dead` and `wqrun show`, by GET /queues/Q/dead, and
# by q:dead() after a restart.
. "$(dirname "$0")/lib.sh"
pg_need

jobs=$(script jobs.lua <<'LUA'
local function deep(n) if n == 0 then error("smtp down") end deep(n - 1) end
-- a recursion through a function with a long name: every traceback line carries the name
-- (21 lines of over 300 bytes: over 4 KiB in all)
local name = "f" .. string.rep("x", 300)
local long = load("local function " .. name .. "(n) if n == 0 then error('long one') end "
    .. name .. "(n - 1) end return function() " .. name .. "(50) end")()
local q = wq.queue("mail", {max_retries = 0, handler = function(key)
    if key == "long" then long() end
    if key == "plain" then return nil, "returned, not raised" end
    deep(2)
end})
if os.getenv("ADD") then
    q:add("user-7", {to = "ada"})
    q:add("long")
    q:add("plain")
    q:wait_idle()
end
for _, d in ipairs(q:dead()) do
    print(d.key, d.traceback and #d.traceback or "none",
          d.traceback and d.traceback:match("in upvalue 'deep'") and "deep" or "")
end
if not os.getenv("SERVE") then wq.exit(0) end
LUA
)

check_case() { # NAME DB TRACEBACK_SQL
    local name=$1 db=$2
    ADD=1 run --db "$db" "$jobs"
    expect_rc 0 "$name: the run"
    expect_in "$OUT" "$(printf 'user-7\t')" "$name: q:dead() lists the letter"
    local n
    n=$($3 "user-7")
    check "$name: the traceback is stored with the dead letter ($n bytes)" test "${n:-0}" -gt 50
    expect_eq "$($3 plain)" "" "$name: a returned error has no traceback"
    expect_eq "$($3 long)" 4096 "$name: a long traceback is cut to 4096 bytes"
    run --db "$db" "$jobs"
    expect_re "$OUT" "user-7	[0-9]+	deep" "$name: after a restart q:dead() has the traceback"
    run dead --db "$db" mail
    expect_rc 0 "$name: wqrun dead"
    expect_in "$OUT" "    stack traceback:" "$name: dead prints the traceback under its row"
    expect_in "$OUT" "in upvalue 'deep'" "$name: ... with the handler's frames"
    run show --db "$db" mail user-7
    expect_in "$OUT" "traceback    stack traceback:" "$name: show has a traceback field"
    run show --db "$db" mail user-7 --json
    expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["traceback"].startswith("stack traceback:"), d["error"])')" \
        "True $TMP/jobs.lua:1: smtp down" "$name: show --json: traceback and error apart"
    listen_start env SERVE=1 -- --serve --db "$db" "$jobs" || return
    expect_eq "$(curl -s -m 10 "$BASE/queues/mail/dead" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sorted((x["key"], "traceback" in x) for x in d["dead"]))')" \
        "[('long', True), ('plain', False), ('user-7', True)]" "$name: GET /queues/mail/dead has the tracebacks"
    kill -TERM "$PID"
    wait_exit "$PID" 20
}

sqlite_tb() { sqlite3 "$TMP/state.db" "SELECT length(traceback) FROM dead WHERE key = '$1'"; }
check_case sqlite "$TMP/state.db" sqlite_tb

DB=$(pg_fresh_db)
pg_tb() { pg_psql "$DB" "select octet_length(traceback) from wqrun.dead where key = '$1'"; }
check_case pg "$DB" pg_tb
expect_eq "$(pg_psql "$DB" "select error from wqrun.dead where key = 'user-7'")" "$TMP/jobs.lua:1: smtp down" \
    "pg: the error column holds the message alone"
finish
