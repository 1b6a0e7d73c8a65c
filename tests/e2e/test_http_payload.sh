#!/usr/bin/env bash
# HTTP bodies whose JSON cannot reach a handler exactly are refused, with
# curl against a real runner (issue 9, item 9):
#   - an object key holding \u0000 (json-c keeps keys as C strings: it would
#     be cut at the NUL, so "key\u0000x" read as "key");
#   - a key given twice in one object (the last one would win silently);
#   - a lone UTF-16 surrogate (\ud800 alone would become U+FFFD);
# each answered 400 with a JSON error naming the problem and where it is,
# and nothing added. Bodies that are fine (NUL inside string values, a
# surrogate pair, ':' in keys, the same key in different objects) arrive
# exactly.
. "$(dirname "$0")/lib.sh"

command -v curl >/dev/null || { echo "FAIL: test_http_payload needs curl" >&2; exit 1; }

# post PATH BODY: sets CODE and BODY (the answer)
post() {
    CODE=$(curl -sS -m 10 -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "$2" "$BASE$1" 2>"$TMP/curl.err") || CODE="curl failed: $(cat "$TMP/curl.err")"
    BODY=$(cat "$TMP/body" 2>/dev/null)
    OUT=$BODY
    LAST_CMD="curl -X POST $1 --data-binary '$2'"
    RC=$CODE
}
get() {
    BODY=$(curl -sS -m 10 "$BASE$1" 2>&1)
}
# refused BODY TEXT [PATH]: 400 with TEXT in the JSON error
refused() {
    post "${3:-/queues/held/items}" "$1"
    expect_eq "$CODE" 400 "status of $1 (answer: ${BODY:0:200})"
    expect_in "$BODY" '{"error":"' "a JSON error body for $1"
    expect_in "$BODY" "$2" "the error names the problem for $1"
}

LOG=$TMP/seen.log
: >"$LOG"
srv=$(script srv.lua <<'LUA'
local log = io.open(arg[1], "a")
wq.queue("held") -- no handler: what is posted stays listed
wq.queue("seen", {handler = function(key, payload)
    local names = {}
    for k in pairs(payload) do names[#names + 1] = k end
    table.sort(names)
    local parts = {}
    for _, k in ipairs(names) do parts[#parts + 1] = k .. "=" .. wq.json.encode(payload[k]) end
    log:write(key, " ", table.concat(parts, " "), "\n")
    log:flush()
end})
LUA
)
listen_start -- --serve "$srv" "$LOG" || finish

# ---- a NUL byte in an object key: refused, never cut
refused '{"key":"k","payload":{"a\u0000b":1,"a\u0000c":2}}' \
    'NUL byte in object key at $.payload[\"a\\u0000b\"]'
refused '{"key":"k","key\u0000x":"n2"}' 'NUL byte in object key at $[\"key\\u0000x\"]'
refused '{"key":"k","payload":[{"ok":1},{"\u0000":2}]}' \
    'NUL byte in object key at $.payload[1][\"\\u0000\"]'

# ---- a key twice in one object: refused (also at the top level)
refused '{"key":"k","payload":{"a":1,"a":2}}' 'duplicate object key at $.payload.a'
refused '{"key":"k","key":"k2"}' 'duplicate object key at $.key'
refused '{"key":"k","payload":{"ab":1,"\u0061b":2}}' \
    'duplicate object key at $.payload[\"\\u0061b\"]' # the same key, escaped
refused '{"key":"k","payload":{"x":{"a":1},"x":{"a":1}}}' 'duplicate object key at $.payload.x'

# ---- a lone surrogate: refused, never turned into U+FFFD
refused '{"key":"k","payload":"\ud800"}' 'lone surrogate \\ud800 at $.payload'
refused '{"key":"k","payload":{"s":["x\uDBFFy"]}}' 'lone surrogate \\uDBFF at $.payload.s[0]'
refused '{"key":"k","payload":"\ud800\u0041"}' 'lone surrogate \\ud800 at $.payload'
refused '{"key":"k","payload":"\udc00"}' 'lone surrogate \\udc00 at $.payload'
refused '{"key":"k","payload":"\ud83d\ude00\ude00"}' 'lone surrogate \\ude00 at $.payload'
refused '{"key":"k","payload":{"\ud800":1}}' 'lone surrogate \\ud800 at $.payload[\"\\ud800\"]'

# ---- a batch: the whole body is refused, no item of it is added
refused '[{"key":"b1"},{"key":"b2","payload":{"x":[1,{"y":1,"y":2}]}}]' \
    'duplicate object key at $[1].payload.x[1].y' /queues/held/items:batch
refused '[{"key":"b1"},{"key":"b3","payload":"\udfff"}]' 'lone surrogate \\udfff at $[1].payload' \
    /queues/held/items:batch

# ---- nothing was added by any of them
get /queues/held/items
expect_eq "$BODY" '{"items":[],"next_after_key":null}' "no item added by a refused body"

# ---- what is fine arrives exactly
post /queues/seen/items '{"key":"fine","payload":{"a:b":"x\u0000y","e":"\ud83d\ude00","n":{"a":1},"m":{"a":2},"\u0063":"c"}}'
expect_eq "$CODE" 202 "a body with NUL in values, a surrogate pair, the same key in two objects"
post /queues/seen/items '{"key":"dup-free-batch","payload":[{"a":1},{"a":1}]}'
expect_eq "$CODE" 202 "equal keys in sibling objects"
check "both handled" wait_for "$LOG" "" 2 10
SEEN=$(cat "$LOG")
expect_in "$SEEN" 'fine a:b="x\u0000y" c="c" e="😀" m={"a":2} n={"a":1}' "payload as posted"
expect_in "$SEEN" 'dup-free-batch 1={"a":1} 2={"a":1}'

kill -TERM "$PID"
wait_exit "$PID" 10
expect_rc 0 "the runner stops cleanly"

finish
