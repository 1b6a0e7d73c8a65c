#!/usr/bin/env bash
# The HTTP operator routes (SPEC 7.5) against a real runner, with curl and
# the sqlite3 shell:
#   - pause/resume, items (filters, paging, every JSON field), remove,
#     cancel (the wq.exec child killed, no retry, no dead letter), dead
#     letters listed, retried, purged;
#   - keys with '/', '%', spaces, '+', non-ASCII bytes, percent-decoded;
#   - unknown queue or key 404, cancel of a key not processing 409,
#     remove of a processing key 409, wrong method 405, bad query 400;
#   - GET items/KEY: a key in every state (queued, processing, waiting,
#     done with its result, dead with its error), 404, encoded keys;
#   - --token: every route but /healthz needs it;
#   - acknowledged means durable: kill -9 right after each answer, the
#     state file has the change.
. "$(dirname "$0")/lib.sh"

for tool in curl sqlite3; do
    command -v "$tool" >/dev/null || { echo "FAIL: test_ops_http needs $tool" >&2; exit 1; }
done

sql() {
    sqlite3 -batch -separator ' ' -cmd '.timeout 5000' "$@"
}

# call METHOD PATH [curl args...]: sets CODE and BODY
call() {
    local m=$1 p=$2
    shift 2
    CODE=$(curl -sS -m 10 -X "$m" -o "$TMP/body" -w '%{http_code}' "${AUTH[@]}" "$@" "$BASE$p" \
        2>"$TMP/curl.err") || CODE="curl failed: $(cat "$TMP/curl.err")"
    BODY=$(cat "$TMP/body" 2>/dev/null)
    OUT=$BODY
    LAST_CMD="curl -X $m $p"
    RC=$CODE
}
# expect_call CODE METHOD PATH [TEXT]: the status, and TEXT in the body
expect_call() {
    local want=$1 m=$2 p=$3 text=${4:-}
    call "$m" "$p"
    expect_eq "$CODE" "$want" "$m $p: status (body: ${BODY:0:200})"
    [ -n "$text" ] && expect_in "$BODY" "$text" "$m $p: body"
}
AUTH=()

DB=$TMP/http.db
srv=$(script srv.lua <<'LUA'
local log = io.open(arg[1], "a")
local function note(...) log:write(table.concat({...}, " "), "\n"); log:flush() end
local jobs = wq.queue("jobs", {max_retries = 0, workers = 4, handler = function(key)
    note("ran", key)
    if key:match("^slow") then
        local r = wq.exec({"sleep", "32.75"})
        note("exec returned", key)
    elseif key:match("^bad") then
        error("bad " .. key)
    end
end})
local idle = wq.queue("idle")
local flaky = wq.queue("flaky", {limiter = wq.limiter.exponential(3600, 3600), handler = function()
    error("db timed out\nafter 30 s", 0)
end})
if arg[2] == "fill" then -- the first start only: the restarts find it all in the state file
    for _, k in ipairs({"a/b", "100% done", "sp ace", "1+1", "\u{e9}t\u{e9}", "z"}) do
        idle:add(k, {k = k})
    end
    idle:add_after("later", 3600, "x", {priority = 3})
    jobs:add("bad1", {n = 1})
    jobs:add("bad2")
    flaky:add("f1", {n = 1})
end
note("started")
LUA
)
LOG=$TMP/srv.log
: >"$LOG"
listen_start -- --db "$DB" "$srv" "$LOG" fill || finish
wait_for "$LOG" "ran bad2" 1 5

# ---- items ----
expect_call 200 GET /queues/idle/items '"next_after_key":null'
expect_in "$BODY" '{"key":"100% done","payload":{"k":"100% done"},"state":"queued","priority":0,"group":null,"ready_at":null,"attempt":1,"last_error":null}' \
    "an item with every field"
expect_in "$BODY" '"key":"later","payload":"x","state":"waiting","priority":3,"group":null,"ready_at":1' \
    "a delayed item: state waiting, ready_at"
expect_in "$BODY" '"key":"été"' "a non-ASCII key as it is"
keys=$(printf '%s' "$BODY" | grep -o '"key":"[^"]*"' | tr '\n' ' ')
expect_eq "$keys" '"key":"1+1" "key":"100% done" "key":"a/b" "key":"later" "key":"sp ace" "key":"z" "key":"été" ' \
    "every item, in key (byte) order"
expect_call 200 GET /queues/flaky/items '"key":"f1","payload":{"n":1},"state":"waiting"'
expect_in "$BODY" '"attempt":2,"last_error":"db timed out\nafter 30 s"}' \
    "a failed key waiting for its retry: the attempt to come and the last error"
expect_call 200 "GET" "/queues/idle/items?limit=2" '"next_after_key":"100% done"'
expect_call 200 "GET" "/queues/idle/items?limit=2&after_key=1%2B1" '"next_after_key":"a/b"'
expect_in "$BODY" '"items":[{"key":"100% done"' "the page starts after 1+1 (%2B decodes to +)"
expect_call 200 "GET" "/queues/idle/items?state=waiting" '"key":"later"'
expect_not_in "$BODY" '"a/b"' "state filters"
expect_call 400 GET "/queues/idle/items?state=bogus" "state must be"
expect_call 400 GET "/queues/idle/items?limit=0" "limit must be"
expect_call 400 GET "/queues/idle/items?limit=1001"
expect_call 400 GET "/queues/idle/items?colour=red" "unknown parameter"
expect_call 404 GET /queues/nope/items "no such queue"
expect_call 200 GET /queues/idle '"paused":false'

# ---- remove, with keys that need percent-encoding ----
for enc in "a%2Fb" "100%25%20done" "sp%20ace" "%C3%A9t%C3%A9"; do
    expect_call 200 DELETE "/queues/idle/items/$enc" '{"removed":true}'
    kill -9 "$PID" # acknowledged means durable
    wait "$PID" 2>/dev/null
    listen_start -- --db "$DB" "$srv" "$LOG" || finish
done
expect_eq "$(sql "$DB" "SELECT group_concat(key, '|') FROM (SELECT key FROM items WHERE queue = 'idle' ORDER BY key)")" \
    "1+1|later|z" "each acknowledged remove survived a kill -9 right after the answer"
expect_call 404 DELETE "/queues/idle/items/a%2Fb" "no queued or delayed item 'a/b' in queue 'idle'"
expect_call 404 DELETE "/queues/nope/items/x" "no such queue"
expect_call 200 GET "/queues/idle/items/z" '"state":"queued"'
expect_call 405 PUT "/queues/idle/items/z"
expect_call 200 DELETE "/queues/idle/items/1+1" '{"removed":true}'
expect_call 200 DELETE "/queues/idle/items/later" '{"removed":true}'

# ---- pause and resume ----
expect_call 200 POST /queues/jobs/pause '{"paused":true,"changed":true}'
kill -9 "$PID"
wait "$PID" 2>/dev/null
listen_start -- --db "$DB" "$srv" "$LOG" || finish
expect_call 200 GET /queues/jobs '"paused":true'
expect_in "$BODY" '"paused":true' "the pause survived a kill -9 right after the answer"
expect_call 200 POST /queues/jobs/pause '"changed":false'
call POST /queues/jobs/items -d '{"key":"p1"}'
sleep 0.3
expect_eq "$(grep -c 'ran p1' "$LOG")" "0" "paused: a posted item is not handed out"
expect_call 200 GET "/queues/jobs/items?state=queued" '"key":"p1"'
expect_call 200 POST /queues/jobs/resume '{"paused":false,"changed":true}'
wait_for "$LOG" "ran p1" 1 3
check "resumed: the item ran" grep -q "ran p1" "$LOG"
expect_call 405 GET /queues/jobs/pause
expect_call 404 POST /queues/nope/pause

# ---- cancel ----
call POST /queues/jobs/items -d '{"key":"slow/1 %x"}'
wait_for "$LOG" "ran slow/1 %x" 1 3
check "the handler's child runs" bash -c 'pgrep -f "^sleep 32.75" >/dev/null'
expect_call 409 DELETE "/queues/jobs/items/slow%2F1%20%25x" "is processing"
expect_call 200 POST "/queues/jobs/items/slow%2F1%20%25x/cancel" '{"cancelled":true}'
kill -9 "$PID"
wait "$PID" 2>/dev/null
check "the handler's wq.exec child was killed" bash -c '! pgrep -f "^sleep 32.75" >/dev/null'
expect_eq "$(grep -c 'exec returned' "$LOG")" "0" "the handler got an error at its yield"
expect_eq "$(sql "$DB" "SELECT count(*) FROM items WHERE key = 'slow/1 %x';
                        SELECT count(*) FROM dead WHERE key = 'slow/1 %x'")" "0
0" "cancelled, committed before the answer: neither retried nor dead-lettered"
listen_start -- --db "$DB" "$srv" "$LOG" || finish
expect_call 404 POST "/queues/jobs/items/slow%2F1%20%25x/cancel" "no item"
expect_call 200 POST /queues/idle/pause
call POST /queues/idle/items -d '{"key":"q/1"}'
expect_call 409 POST "/queues/idle/items/q%2F1/cancel" "'q/1' is not processing"
expect_call 405 GET "/queues/idle/items/q%2F1/cancel"

# ---- dead letters ----
wait_for "$LOG" "ran bad2" 2 3
sleep 0.2
expect_call 200 GET /queues/jobs/dead '"total":2'
expect_in "$BODY" '{"key":"bad1","payload":{"n":1},"error":' "a dead letter with its payload"
expect_in "$BODY" '"attempts":1,"failed_at":1' "attempts and failed_at"
expect_call 200 "GET" "/queues/jobs/dead?limit=1" '"total":2'
expect_not_in "$BODY" '"bad2"' "limit"
expect_call 400 GET "/queues/jobs/dead?limit=x"
expect_call 200 POST /queues/jobs/pause '"changed":true' # so the retried key stays queued
expect_call 200 POST /queues/jobs/dead/bad1/retry '{"retried":true}'
kill -9 "$PID"
wait "$PID" 2>/dev/null
expect_eq "$(sql "$DB" "SELECT count(*) FROM dead WHERE key = 'bad1'; SELECT state, payload FROM items WHERE key = 'bad1'")" '0
queued {"n":1}' "the acknowledged retry is in the file"
listen_start -- --db "$DB" "$srv" "$LOG" || finish
expect_call 200 POST /queues/jobs/resume '"changed":true'
wait_for "$LOG" "ran bad1" 2 3
check "the retried key ran again" test "$(grep -c 'ran bad1' "$LOG")" -ge 2
sleep 0.2
expect_call 404 POST /queues/jobs/dead/nope/retry "no dead letter 'nope' in queue 'jobs'"
expect_call 405 GET /queues/jobs/dead/bad1/retry
expect_call 200 DELETE /queues/jobs/dead '{"purged":'
kill -9 "$PID"
wait "$PID" 2>/dev/null
expect_eq "$(sql "$DB" "SELECT count(*) FROM dead WHERE queue = 'jobs'")" "0" "the purge is in the file"

# ---- the token ----
listen_start -- --token s3cr3t --db "$DB" "$srv" "$LOG" || finish
for route in "GET /queues" "GET /metrics" "GET /queues/idle/items" "GET /queues/jobs/dead" \
    "POST /queues/idle/resume" "DELETE /queues/idle/items/z" "POST /queues/jobs/items/x/cancel" \
    "POST /queues/jobs/dead/x/retry" "DELETE /queues/jobs/dead" "GET /nope"; do
    set -- $route
    expect_call 401 "$1" "$2" "missing or wrong bearer token"
done
AUTH=(-H "Authorization: Bearer wrong")
expect_call 401 POST /queues/idle/resume
AUTH=()
expect_call 200 GET /healthz "ok"
expect_eq "$(sql "$DB" "SELECT paused FROM queues WHERE name = 'idle'")" "1" "a 401 changed nothing"
AUTH=(-H "Authorization: Bearer s3cr3t")
expect_call 200 POST /queues/idle/resume '"changed":true'
expect_call 200 GET /queues/idle/items '"key":"z"'
kill -TERM "$PID"
wait_exit "$PID" 10
expect_eq "$RC" "0" "SIGTERM"

# ---- GET /queues/NAME/items/KEY: one key's state -----------------------------------
AUTH=()
KDB=$TMP/key.db
ksrv=$(script ksrv.lua <<'LUA'
local s = wq.queue("s", {keep_done = 3600, max_retries = 0, handler = function(key)
    if key == "slow" then wq.sleep(60) end
    if key == "bad" then error("fatal\nsecond line", 0) end
    if key == "ok" then return {rows = 3} end
end})
s:add("ok")
s:add("bad", {n = 1})
s:add("slow")
local idle = wq.queue("si")
idle:add("a/b c%", {n = 1}, {priority = 5, group = "g"})
idle:add("x/y")
idle:add_after("later", 3600)
LUA
)
listen_start -- --serve --grace 1 --db "$KDB" "$ksrv" || finish
# j EXPR: evaluates a Python expression over the last body, parsed as d
j() { printf '%s' "$BODY" | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
check "slow is processing, ok done, bad dead" bash -c \
    "for i in \$(seq 50); do curl -s '$BASE/queues/s/items/slow' | grep -q '\"processing\"' &&
       curl -s '$BASE/queues/s/items/ok' | grep -q '\"done\"' &&
       curl -s '$BASE/queues/s/items/bad' | grep -q '\"dead\"' && exit 0; sleep 0.1; done; exit 1"
expect_call 200 GET "/queues/si/items/a%2Fb%20c%25"
expect_eq "$(j 'd["key"], d["state"], d["payload"], d["priority"], d["group"], d["attempt"], d["last_error"], d["ready_at"], sorted(d)')" \
    "a/b c% queued {'n': 1} 5 g 1 None None ['attempt', 'group', 'key', 'last_error', 'payload', 'priority', 'ready_at', 'state']" \
    "a queued key, percent-decoded: the listing's fields"
expect_call 200 GET "/queues/si/items/x/y"
expect_eq "$(j 'd["key"], d["state"]')" "x/y queued" "a key with '/' unencoded in the path"
expect_call 200 GET "/queues/si/items/later"
expect_eq "$(j 'd["state"], d["ready_at"] > 1e9')" "waiting True" "a delayed key: waiting, with ready_at"
expect_call 200 GET "/queues/s/items/slow"
expect_eq "$(j 'd["state"], d["attempt"]')" "processing 1" "a running key: processing"
expect_call 200 GET "/queues/s/items/ok"
expect_eq "$(j 'd["state"], d["result"], d["finished_at"] > 1e9, sorted(d)')" \
    "done {'rows': 3} True ['finished_at', 'key', 'result', 'state']" "a done key: finished_at and result"
expect_call 200 GET "/queues/s/items/bad"
expect_eq "$(j 'd["state"], d["payload"], repr(d["error"]), d["attempts"], d["failed_at"] > 1e9, sorted(d)')" \
    "dead {'n': 1} 'fatal\\nsecond line' 1 True ['attempts', 'error', 'failed_at', 'key', 'payload', 'state', 'traceback']" \
    "a dead key: error, attempts, failed_at"
expect_call 404 GET "/queues/s/items/nope" "no item 'nope' in queue 's'"
expect_call 404 GET "/queues/nosuch/items/k" "no such queue"
expect_call 405 PUT "/queues/s/items/ok"
expect_in "$(curl -s -D - -o /dev/null -X PUT "$BASE/queues/s/items/ok")" "GET, HEAD, DELETE" "405 names the allowed methods"
expect_call 200 DELETE "/queues/si/items/later" '"removed":true'
# no longer pending: its last run, from the history (SPEC 11)
expect_call 200 GET "/queues/si/items/later" '{"state":"removed","key":"later","attempts":0,"failed_at":'
kill -TERM "$PID"
wait_exit "$PID" 10
expect_eq "$RC" "0" "SIGTERM"

finish
