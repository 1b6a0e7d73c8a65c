#!/usr/bin/env bash
# Error texts that name their cause (issue 31): a misspelled option is one line
# with the option meant; a 400 names the field or where the JSON breaks; an
# unknown queue has one 404 text on every route; an error raised as a table
# shows as JSON; an error starting with a newline logs its message; a type
# error says what it got.
. "$(dirname "$0")/lib.sh"

ok=$(script ok.lua <<'LUA'
wq.queue("q", {handler = function() end})
LUA
)

run --dbb x.db "$ok"
expect_rc 2 "--dbb is a usage error"
expect_eq "$ERR" "wqrun: unknown option '--dbb'; did you mean --db? (wqrun --help lists the commands and options)" \
    "one line, with the option meant and where the rest is"
run --serv "$ok"
expect_in "$ERR" "did you mean --serve?" "--serv: --serve"
run --frobnicate "$ok"
expect_eq "$ERR" "wqrun: unknown option '--frobnicate' (wqrun --help lists the commands and options)" \
    "nothing near: no guess"

jobs=$(script jobs.lua <<'LUA'
local q = wq.queue("jobs", {max_retries = 0, handler = function(key)
    if key == "table" then error({code = 5}) end
    if key == "gzip" then error("\ngzip: in.gz: not in gzip format\n", 0) end
    if key == "pos" then error("\nsecond line") end
end})
for _, k in ipairs({"table", "gzip", "pos"}) do q:add(k) end
q:wait_idle()
for _, d in ipairs(q:dead()) do print(d.key .. "=" .. d.error) end
local ok, err = pcall(wq.queue, "w", {workers = "4"})
print(err)
ok, err = pcall(wq.queue, "w", {workers = 0})
print(err)
wq.exit(0)
LUA
)
run "$jobs"
expect_rc 0 "the run"
expect_in "$ERR" "'table' failed 1 time, dead-lettered: {\"code\":5}" \
    "a table raised as an error is logged as JSON"
expect_in "$OUT" 'table={"code":5}' "and kept so in the dead letter"
expect_in "$ERR" "'gzip' failed 1 time, dead-lettered: gzip: in.gz: not in gzip format" \
    "an error starting with a newline logs its first line with something on it"
expect_in "$ERR" "'pos' failed 1 time, dead-lettered: $TMP/jobs.lua:4: second line" \
    "a position alone on its line is joined with the message under it"
expect_in "$OUT" "queue: bad argument 'workers' (integer > 0 expected, got '4')" "a string where a number goes: got '4'"
expect_in "$OUT" "queue: bad argument 'workers' (integer > 0 expected, got 0)" "a number out of range shows itself"

listen_start -- --serve "$ok" || { finish; }
post() { curl -s -m 10 -X POST -d "$1" "$BASE$2"; }
expect_eq "$(post 'not json' /queues/q/items)" \
    '{"error":"body is not JSON: null expected at line 1, column 1 (near '"'not json'"')"}' \
    "a body that is not JSON: where, and what is there"
expect_eq "$(post $'{\n  "key": "a",\n  "after": 1x\n}' /queues/q/items)" \
    '{"error":"body is not JSON: number expected at line 3, column 12 (near '"'1x'"')"}' \
    "the line and column of a broken value"
expect_eq "$(post '{"key":"a",}' /queues/q/items)" \
    '{"error":"body is not JSON: unexpected character at line 1, column 12 (near '"'}'"')"}' \
    "a trailing comma"
expect_eq "$(post '{"key":' /queues/q/items)" \
    '{"error":"body is not JSON: unexpected end of data at the end (line 1, column 8)"}' \
    "a body cut short"
expect_eq "$(post '{"key":7}' /queues/q/items)" '{"error":"key must be a string, got int"}' "a field of the wrong type: what it got"
expect_eq "$(post '{"key":"a","after":"soon"}' /queues/q/items)" '{"error":"after must be a number of seconds, got string"}' \
    "after"
expect_eq "$(post '{"key":"a"}' /queues/nope/items)" "{\"error\":\"no such queue 'nope' in this runner\"}" \
    "POST to an unknown queue"
expect_eq "$(curl -s -m 10 "$BASE/queues/nope/items")" "{\"error\":\"no such queue 'nope' in this runner\"}" \
    "GET of an unknown queue's items: the same text"
expect_eq "$(curl -s -m 10 "$BASE/queues/nope")" "{\"error\":\"no such queue 'nope' in this runner\"}" \
    "GET of an unknown queue: the same text"
kill -TERM "$PID"
wait_exit "$PID" 20
finish
