#!/usr/bin/env bash
# End-to-end tests of the HTTP API (SPEC sections 5 and 6) against the real
# wqrun binary, with curl and raw sockets (bash's /dev/tcp):
#   - every route and status code, request validation, body size limit;
#   - token on/off (--token, WQRUN_TOKEN);
#   - posted items are processed (payload round trip, `after`, priority);
#   - metric values after a known sequence, histogram consistency, promtool;
#   - malformed HTTP (garbage, huge Content-Length, truncated bodies, big
#     headers, slow and stalled clients, connection storms) changes nothing;
#   - --db: posted items are in the state file and survive a restart;
#   - SIGTERM ends the process with status 0.
# Run by ctest with WQRUN (the binary) and WQ_SOURCE_DIR (the repository).
# Needs curl, lua5.4 with cjson (both in scripts/deps.sh); sqlite3 and
# promtool are used when installed.
set -uo pipefail

: "${WQRUN:?set WQRUN to the wqrun binary}"
: "${WQ_SOURCE_DIR:?set WQ_SOURCE_DIR to the repository root}"
LUADIR=$WQ_SOURCE_DIR/tests/e2e/lua
JSON=(lua5.4 "$LUADIR/http_json.lua")
unset WQRUN_TOKEN

TMP=$(mktemp -d "${TMPDIR:-/tmp}/wq-e2e-http.XXXXXX")
RUN_PID=
BG_PIDS=()
cleanup() {
  local p
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [[ -n $RUN_PID ]] && kill -9 "$RUN_PID" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  if [[ -n ${LOG:-} && -s ${LOG:-} ]]; then
    echo "--- runner stderr (last 30 lines of $LOG) ---" >&2
    tail -n 30 "$LOG" >&2
  fi
  exit 1
}
pass() { echo "ok - $*"; }

for tool in curl lua5.4; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/deps.sh installs it)"
done
echo '{}' | "${JSON[@]}" >/dev/null 2>&1 || fail "lua5.4 cannot load cjson (package lua-cjson)"
[[ -x $WQRUN ]] || fail "WQRUN=$WQRUN is not an executable"

# ---------------------------------------------------------------- helpers

# start_runner TAG [wqrun options...] -- SCRIPT [args...]
# Starts wqrun --quiet --listen 127.0.0.1:PORT on a random free port (retrying
# when the port is taken) and waits until /healthz answers. Sets RUN_PID,
# PORT, BASE, LOG (stderr) and OUT (stdout).
start_runner() {
  local tag=$1 attempt i
  shift
  local opts=() rest
  while (($#)) && [[ $1 != -- ]]; do
    opts+=("$1")
    shift
  done
  shift
  rest=("$@")
  for attempt in 1 2 3 4 5 6 7 8; do
    PORT=$((10000 + (RANDOM * 32768 + RANDOM) % 22000)) # below the ephemeral ports (32768-)
    BASE=http://127.0.0.1:$PORT
    LOG=$TMP/$tag.$attempt.err
    OUT=$TMP/$tag.$attempt.out
    "$WQRUN" --quiet --listen "127.0.0.1:$PORT" "${opts[@]}" "${rest[@]}" >"$OUT" 2>"$LOG" &
    RUN_PID=$!
    for ((i = 0; i < 100; i++)); do
      if ! kill -0 "$RUN_PID" 2>/dev/null; then break; fi
      if [[ $(curl -s -m 1 "$BASE/healthz" 2>/dev/null) == ok* ]] && kill -0 "$RUN_PID" 2>/dev/null; then
        return 0
      fi
      sleep 0.05
    done
    if kill -0 "$RUN_PID" 2>/dev/null; then
      fail "$tag: wqrun did not answer GET /healthz on port $PORT within 5 s"
    fi
    wait "$RUN_PID"
    local rc=$?
    RUN_PID=
    grep -q "cannot listen" "$LOG" && continue # port taken: try another
    fail "$tag: wqrun exited with status $rc at start-up"
  done
  fail "$tag: no free port found after 8 attempts"
}

# stop_runner TAG: SIGTERM, then the exit status must be 0 within 15 s.
stop_runner() {
  local tag=$1 i rc
  kill -TERM "$RUN_PID" || fail "$tag: runner already gone before SIGTERM"
  for ((i = 0; i < 300; i++)); do
    kill -0 "$RUN_PID" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$RUN_PID" 2>/dev/null && fail "$tag: still running 15 s after SIGTERM"
  wait "$RUN_PID"
  rc=$?
  RUN_PID=
  ((rc == 0)) || fail "$tag: exit status $rc after SIGTERM, want 0"
  if grep -qE "AddressSanitizer|LeakSanitizer|runtime error" "$LOG"; then
    fail "$tag: sanitizer report in the runner's stderr"
  fi
  pass "$tag: SIGTERM ends the process with status 0"
}

# http METHOD PATH [curl args...]: sets CODE, BODY and HDRS (a file).
HDRS=$TMP/headers
http() {
  local m=$1 p=$2
  shift 2
  local mopt=(-X "$m")
  [[ $m == HEAD ]] && mopt=(-I)
  [[ $m == GET ]] && mopt=()
  CODE=$(curl -sS -m 10 "${mopt[@]}" -D "$HDRS" -o "$TMP/body" -w '%{http_code}' "$@" "$BASE$p" 2>"$TMP/curl.err") ||
    CODE="curl-failed($(head -c 200 "$TMP/curl.err"))"
  BODY=$(cat "$TMP/body" 2>/dev/null)
}

# expect WANT METHOD PATH [curl args...]
expect() {
  local want=$1
  shift
  http "$@"
  [[ $CODE == "$want" ]] || fail "$1 $2 ${*:3}: status $CODE, want $want; body: ${BODY:0:300}"
}

# post PATH JSON [curl args...]  /  expect_post WANT PATH JSON [curl args...]
post() {
  local p=$1 d=$2
  shift 2
  http POST "$p" -H 'Content-Type: application/json' --data-binary "$d" "$@"
}
expect_post() {
  local want=$1 p=$2 d=$3
  shift 3
  post "$p" "$d" "$@"
  [[ $CODE == "$want" ]] || fail "POST $p ${d:0:200}: status $CODE, want $want; body: ${BODY:0:300}"
}

header() { tr -d '\r' <"$HDRS" | awk -v h="$1" 'tolower($1) == tolower(h) ":" { sub(/^[^:]*: */, ""); print; exit }'; }

# snap: every queue's stats, one "queue.field value" line each.
AUTH=() # curl arguments the helpers below send (the token, while a runner wants one)
# (without the last minute's done count and window, which move with the clock)
snap() {
  curl -sS -m 10 "${AUTH[@]}" "$BASE/queues" | "${JSON[@]}" queues |
    grep -vE '^[^ ]+\.done_(last_minute|window) ' || fail "GET /queues: not a JSON array of queues"
}
# qstat QUEUE FIELD
qstat() { snap | awk -v k="$1.$2" '$1 == k { print $2 }'; }

# scrape: GET /metrics into $TMP/metrics; mval SERIES prints a sample's value.
scrape() {
  curl -sS -m 10 -o "$TMP/metrics" "$BASE/metrics" || fail "GET /metrics failed"
}
mval() { awk -v n="$1" '$1 == n { print $2 }' "$TMP/metrics"; }
expect_metric() {
  local got
  got=$(mval "$1")
  [[ $got == "$2" ]] || fail "metric $1 = '${got}', want $2"
}

# wait_for DESCRIPTION SECONDS COMMAND...: polls every 50 ms.
wait_for() {
  local what=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs * 20; i++)); do
    "$@" && return 0
    sleep 0.05
  done
  fail "timed out after ${secs}s waiting for: $what"
}
qstat_is() { [[ $(qstat "$1" "$2") == "$3" ]]; }

# Handler records (JSON lines written by tests/e2e/lua/http_api.lua).
# record_line QUEUE KEY [ATTEMPT]: the first such record as "field value" lines.
record_line() { "${JSON[@]}" record "$@" <"$RECS"; }
has_record() { record_line "$@" >/dev/null; }

fdcount() { ls "/proc/$RUN_PID/fd" 2>/dev/null | wc -l; }

# Raw sockets. raw_ask SECONDS: sends stdin on a new connection and prints
# what the server answers until it closes or SECONDS pass. raw_send: sends
# stdin, then closes the connection without reading.
raw_ask() {
  local secs=$1
  (
    trap '' PIPE
    exec 3<>"/dev/tcp/127.0.0.1/$PORT" || exit 9
    cat >&3 2>/dev/null
    timeout "$secs" cat <&3 2>/dev/null
    exit 0
  )
}
raw_send() {
  (
    trap '' PIPE
    exec 3<>"/dev/tcp/127.0.0.1/$PORT" || exit 9
    cat >&3 2>/dev/null
    exit 0
  )
}
status_line() { head -n 1 | tr -d '\r'; }
# check_answer FILE WANT [nobody]: FILE holds one raw HTTP answer (what came
# back before the server closed): status WANT, Content-Type application/json,
# a Content-Length that matches the body, and the body {"error": "..."}
# (with nobody: the Content-Length and no body, as for HEAD). Prints why not.
check_answer() {
  lua5.4 - "$@" <<'LUA'

    local f, want, nobody = io.open(arg[1], "rb"), arg[2], arg[3] == "nobody"
    local s = f:read("a")
    local head, body = s:match("^(.-)\r\n\r\n(.*)$")
    if not head then print("no complete answer: " .. s:sub(1, 200)) os.exit(1) end
    local status = head:match("^HTTP/1%.1 (%d+) [^\r\n]+")
    if status ~= want then print("status line: " .. head:match("^[^\r\n]*")) os.exit(1) end
    local h = {}
    for k, v in head:gmatch("\r\n([^:\r\n]+): ([^\r\n]*)") do h[k:lower()] = v end
    if h["content-type"] ~= "application/json" then print("Content-Type: " .. tostring(h["content-type"])) os.exit(1) end
    local n = tonumber(h["content-length"])
    if not n then print("no Content-Length") os.exit(1) end
    if nobody then
      if #body ~= 0 then print("a body after a HEAD answer: " .. body:sub(1, 100)) os.exit(1) end
      os.exit(0)
    end
    if #body ~= n then print(("Content-Length %d, body %d bytes: %s"):format(n, #body, body:sub(1, 200))) os.exit(1) end
    local ok, v = pcall(require("cjson").decode, body)
    local keys = 0
    for _ in pairs(ok and type(v) == "table" and v or {}) do keys = keys + 1 end
    if not ok or keys ~= 1 or type(v.error) ~= "string" or v.error == "" then print("body: " .. body) os.exit(1) end
    print(v.error)
LUA
}
# raw_error WANT REQUEST [nobody]: sends REQUEST (printf format) on a new
# connection; the answer must pass check_answer.
raw_error() {
  local want=$1 req=$2 why
  printf "$req" | raw_ask 3 >"$TMP/answer"
  why=$(check_answer "$TMP/answer" "$want" "${3:-}") || fail "${req:0:80}...: want a $want JSON error: $why"
}

# ================================================================ runner A
RECS=$TMP/records.jsonl
: >"$RECS"
start_runner api -- "$LUADIR/http_api.lua" "$RECS"

# Binds only the address given.
hexport=$(printf '%04X' "$PORT")
listen_lines=$(awk -v p=":$hexport" '$4 == "0A" && substr($2, length($2) - 4) == p { print $2 }' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
[[ $listen_lines == "0100007F:$hexport" ]] || fail "listening sockets on port $PORT: '$listen_lines', want only 127.0.0.1 (0100007F:$hexport)"
pass "listens on 127.0.0.1:$PORT only"

# ---------------------------------------------------------------- routes
expect 200 GET /healthz
[[ $BODY == ok || $BODY == $'ok\n' ]] || fail "GET /healthz body '$BODY', want ok"
expect 200 HEAD /healthz
expect 200 GET /metrics
[[ $(header Content-Type) == text/plain* ]] || fail "GET /metrics Content-Type '$(header Content-Type)', want text/plain"
grep -q '^# TYPE workqueue_depth gauge$' "$TMP/body" || fail "GET /metrics: no '# TYPE workqueue_depth gauge'"
expect 200 GET /queues
[[ $(header Content-Type) == application/json* ]] || fail "GET /queues Content-Type '$(header Content-Type)'"
expect 200 GET /queues/
expect 200 GET '/queues?x=1'
pass "GET /healthz, HEAD /healthz, GET /metrics, GET /queues answer 200 with the right types"

# GET /queues: one entry per queue, in creation order, with the q:stats() fields.
names=$(curl -sS "$BASE/queues" | lua5.4 -e 'local c=require"cjson"; for _,q in ipairs(c.decode(io.read("a"))) do print(q.name) end' | paste -sd, -)
[[ $names == held,misc,work,flaky,gated,ctl ]] || fail "GET /queues names '$names', want held,misc,work,flaky,gated,ctl"
for f in name depth queued processing waiting adds "done" retries failures dead succeeded requeued timeouts workers; do
  [[ -n $(qstat held "$f") ]] || fail "GET /queues: field '$f' missing for queue held"
done
[[ $(qstat work workers) == 1 && $(qstat held workers) == 0 ]] || fail "GET /queues: workers held=$(qstat held workers) work=$(qstat work workers), want 0 and 1"
pass "GET /queues lists every queue with name and the q:stats() fields"

# 405: a known path with a method it does not take.
for m in POST PUT DELETE; do
  expect 405 "$m" /healthz
  expect 405 "$m" /metrics
  expect 405 "$m" /queues
done
for m in PUT DELETE; do expect 405 "$m" /queues/held/items; done
expect 200 GET /queues/held/items # lists the pending items (SPEC 7.5)
expect 200 HEAD /queues/held/items
# Every method evhttp knows reaches the routes: 405, the route's methods in
# Allow, and the JSON error body.
is_json_error() { printf '%s' "$1" | "${JSON[@]}" error >/dev/null 2>&1; }
for spec in "/healthz GET, HEAD" "/metrics GET, HEAD" "/queues GET, HEAD" \
  "/queues/held/items GET, HEAD, POST" "/queues/held/items:batch POST" "/queues/held GET, HEAD" \
  "/queues/held/pause POST" "/queues/held/dead GET, HEAD, DELETE" "/queues/held/items/k GET, HEAD, DELETE"; do
  p=${spec%% *} allow=${spec#* }
  for m in PATCH OPTIONS TRACE PUT; do
    http "$m" "$p" -H 'Content-Type: application/json' --data-binary '{"key":"x"}'
    [[ $m == TRACE ]] && http "$m" "$p"
    [[ $CODE == 405 ]] || fail "$m $p: status $CODE, want 405; body: ${BODY:0:200}"
    [[ $(header Allow) == "$allow" ]] || fail "$m $p: Allow '$(header Allow)', want '$allow'"
    [[ $(header Content-Type) == application/json* ]] || fail "$m $p: Content-Type '$(header Content-Type)'"
    is_json_error "$BODY" || fail "$m $p: body is not {\"error\": ...}: ${BODY:0:200}"
  done
done
pass "wrong methods (PATCH, OPTIONS, TRACE, PUT, ...) get 405 with Allow and a JSON error"

# 404: unknown paths and queues (GET / is the dashboard: tests/e2e/test_dashboard.sh).
for p in /nope /index.html /metricsx /healthz/x /queues/nope /queues/held/itemsx \
  /queues//items '/queues/a%20b/items' /QUEUES/held/items; do
  expect 404 GET "$p"
  is_json_error "$BODY" || fail "GET $p: 404 body is not {\"error\": ...}: ${BODY:0:200}"
done
expect 200 GET /queues/held        # one queue's summary (SPEC 7.5)
expect 404 GET /queues/held/items/never-added # GET: a key's state; none for this one
long=$(printf 'q%.0s' {1..65})
for p in /queues/nope/items /queues/Held/items "/queues/$long/items" '/queues/a%20b/items' /queues//items; do
  expect_post 404 "$p" '{"key":"k"}'
done
pass "unknown paths and queues get 404"

# ---------------------------------------------------------------- known sequence on held
expect_post 202 /queues/held/items '{"key":"a"}'
[[ $BODY == *'"queued":true'* ]] || fail "first add of a: body '$BODY', want queued true"
expect_post 202 /queues/held/items '{"key":"b","payload":{"x":2}}'
expect_post 202 /queues/held/items '{"key":"c","payload":"text","priority":3}'
expect_post 202 /queues/held/items '{"key":"a","payload":{"x":1}}'
[[ $BODY == *'"queued":false'* ]] || fail "duplicate add of a: body '$BODY', want queued false"
scrape
expect_metric 'workqueue_adds_total{name="held"}' 3
expect_metric 'workqueue_depth{name="held"}' 3
expect_metric 'wqrun_queued_items{name="held"}' 3
expect_metric 'workqueue_retries_total{name="held"}' 0
expect_metric 'workqueue_queue_duration_seconds_count{name="held"}' 0
expect_metric 'workqueue_work_duration_seconds_count{name="held"}' 0
expect_metric 'workqueue_unfinished_work_seconds{name="held"}' 0
expect_metric 'workqueue_longest_running_processor_seconds{name="held"}' 0
for f in adds:3 depth:3 queued:3 processing:0 waiting:0 done:0 retries:0 failures:0 dead:0; do
  [[ $(qstat held "${f%%:*}") == "${f#*:}" ]] || fail "GET /queues held.${f%%:*} = $(qstat held "${f%%:*}"), want ${f#*:}"
done
pass "3 distinct keys + 1 duplicate: adds_total 3, depth 3 in /metrics and /queues"

# ---------------------------------------------------------------- accepted bodies (misc)
for body in '{"key":"k"}' \
  '{"key":"k2","payload":{"a":1,"b":[1,2]},"after":0.1,"priority":3}' \
  '{"key":"k3","priority":-5}' '{"key":"k4","after":0}' '{"key":"k5","after":-1}' \
  '{"key":"k6","payload":null}' '{"key":"k7","priority":2147483647}' '{"key":"k8","priority":-2147483648}' \
  '{"key":"k9","priority":4.0,"after":0.0}' '{"payload":[1,"x"],"key":"k10"}' \
  '  {"key" : "k11"}  ' '{"key":"k é/ \u2603"}' '{"key":"k12","payload":"s"}' '{"key":"k13","payload":7}'; do
  expect_post 202 /queues/misc/items "$body"
done
expect_post 202 '/queues/misc/items?x=1' '{"key":"k14"}'
http POST /queues/misc/items --data-binary '{"key":"k15"}' # curl's default form Content-Type
[[ $CODE == 202 ]] || fail "POST without a JSON Content-Type: status $CODE, want 202"
expect_post 202 /queues/misc/items '{"key":"k"}' # duplicate
wait_for "misc: k2 (after 0.1) to be queued" 5 qstat_is misc queued 16
# Only k2 (after 0.1) went through AddAfter: retries 1 (after <= 0 is a plain add).
[[ $(qstat misc adds) == 16 && $(qstat misc depth) == 16 && $(qstat misc waiting) == 0 && $(qstat misc retries) == 1 ]] ||
  fail "misc after 17 posts (16 keys): $(snap | grep '^misc\.' | tr '\n' ' ')"
pass "POST /queues/NAME/items: 202 for key, payload, after, priority (all forms)"

# ---------------------------------------------------------------- rejected bodies: 400, state unchanged
before=$(snap)
n400=0
while IFS= read -r body; do
  expect_post 400 /queues/misc/items "$body"
  [[ $(header Content-Type) == application/json* ]] || fail "400 for '$body' is not JSON"
  n400=$((n400 + 1))
done <<'EOF'
not json
{"key":"a"
{"key":"a"} x
{"key":"a",}
[]
["key"]
[{"key":"a"}]
"key"
42
null
true
{}
{"payload":{"x":1}}
{"key":1}
{"key":1.5}
{"key":null}
{"key":{}}
{"key":["a"]}
{"key":true}
{"key":"a","after":"1"}
{"key":"a","after":null}
{"key":"a","after":{}}
{"key":"a","after":[1]}
{"key":"a","after":true}
{"key":"a","after":1e999}
{"key":"a","after":-1e999}
{"key":"a","priority":1.5}
{"key":"a","priority":"3"}
{"key":"a","priority":null}
{"key":"a","priority":true}
{"key":"a","priority":[3]}
{"key":"a","priority":2147483648}
{"key":"a","priority":-2147483649}
{"key":"a","priority":1e999}
{"key":"a","extra":1}
{"key":"a","Key":"b"}
{"key":"a","payload":1e999}
{"key":"a","payload":{"x":[1e999]}}
EOF
expect_post 400 /queues/misc/items ''
deep=$(printf '[%.0s' {1..3000})
expect_post 400 /queues/misc/items "{\"key\":\"a\",\"payload\":$deep"
expect_post 400 /queues/misc/items "{\"key\":\"deep\",\"payload\":${deep}1$(printf ']%.0s' {1..3000})}"
expect_post 400 /queues/misc/items '{"key":"a","paylaod":{"x":1}}'
[[ $BODY == *"unknown field 'paylaod' (expected key, payload,"* ]] ||
  fail "an unknown field is not named: ${BODY:0:300}"
[[ $(snap) == "$before" ]] || fail "a rejected body changed the queues: $(diff <(echo "$before") <(snap))"
pass "$((n400 + 4)) malformed bodies (bad JSON, non-object, missing/non-string key, bad after/priority, unknown field (named), unstorable payload, deep nesting): 400, nothing changed"

# ---------------------------------------------------------------- body size: 1 MiB
mib=1048576
{
  printf '{"key":"big","payload":"'
  head -c $((mib - 30)) /dev/zero | tr '\0' b
  printf '"}'
} >"$TMP/under.json"
pad=$((mib - $(stat -c %s "$TMP/under.json")))
printf '%*s' "$pad" '' >>"$TMP/under.json" # exactly 1 MiB (trailing spaces are valid JSON)
[[ $(stat -c %s "$TMP/under.json") == "$mib" ]] || fail "test bug: under.json is not 1 MiB"
{ printf '{"key":"huge"}'; printf '%*s' $((mib + 1 - 14)) ''; } >"$TMP/over.json"
before=$(snap)
http POST /queues/misc/items --data-binary "@$TMP/over.json"
[[ $CODE == 413 ]] || fail "POST 1 MiB + 1 byte: status $CODE, want 413"
http POST /queues/misc/items -H 'Expect:' --data-binary "@$TMP/over.json"
[[ $CODE == 413 ]] || fail "POST 1 MiB + 1 byte without Expect: status $CODE, want 413"
http POST /queues/misc/items -H 'Transfer-Encoding: chunked' --data-binary "@$TMP/over.json"
[[ $CODE == 413 ]] || fail "POST 1 MiB + 1 byte chunked: status $CODE, want 413"
[[ $(snap) == "$before" ]] || fail "a 413 changed the queues"
http POST /queues/misc/items --data-binary "@$TMP/under.json"
[[ $CODE == 202 ]] || fail "POST exactly 1 MiB: status $CODE, want 202 (body: ${BODY:0:200})"
[[ $(qstat misc adds) == 17 ]] || fail "the 1 MiB item was not added"
pass "body over 1 MiB: 413 (Content-Length, Expect, chunked); exactly 1 MiB: 202"

# ---------------------------------------------------------------- items are processed
T0=$(date +%s.%N)
expect_post 202 /queues/work/items '{"key":"late","payload":{"when":"later"},"after":1.5}'
[[ $(qstat work waiting) == 1 ]] || fail "work.waiting = $(qstat work waiting) right after a post with after=1.5, want 1"
scrape
expect_metric 'wqrun_waiting_items{name="work"}' 1
has_record work late && fail "item with after=1.5 ran at once"

payload='{"x":1,"s":"é \"q\" \\ \n\t/","arr":[1,2.5,true,false,null,{"deep":[["z"]]}],"neg":-3,"f":0.125,"big":1e20,"u":"\u2603","o":{"k":"v"}}'
expect_post 202 /queues/work/items "{\"key\":\"rt\",\"payload\":$payload}"
expect_post 202 /queues/work/items '{"key":"str","payload":"plain text"}'
expect_post 202 /queues/work/items '{"key":"num","payload":42}'
expect_post 202 /queues/work/items '{"key":"none"}'
expect_post 202 /queues/work/items '{"key":"nul\u0000byte","payload":[1,"a"]}'
wait_for "work handler to record rt, str, num, none" 10 has_record work none
for k in rt str num; do wait_for "record of $k" 5 has_record work "$k"; done
want=$(printf '%s' "$payload" | "${JSON[@]}" | sed 's/^/payload./')
got=$(record_line work rt | grep '^payload\.')
[[ $got == "$want" ]] || fail "payload round trip differs:
$(diff <(echo "$want") <(echo "$got"))"
[[ $(record_line work str | grep '^payload ') == 'payload "plain text"' ]] || fail "string payload: $(record_line work str)"
[[ $(record_line work num | grep '^payload ') == 'payload 42' ]] || fail "number payload: $(record_line work num)"
record_line work none | grep -q '^payload' && fail "no payload should reach the handler as nil: $(record_line work none)"
pass "posted items are processed with their payloads (table, string, number, none) intact"

wait_for "the delayed item 'late' to run" 10 has_record work late
tl=$(record_line work late | awk '$1 == "t" { print $2 }')
awk -v a="$tl" -v b="$T0" 'BEGIN { exit !(a - b >= 1.45) }' || fail "after=1.5 ran $(awk -v a="$tl" -v b="$T0" 'BEGIN { print a - b }') s after the post"
[[ $(record_line work late | grep '^payload\.when') == 'payload.when "later"' ]] || fail "delayed payload lost"
pass "after=1.5 delays the item ($(awk -v a="$tl" -v b="$T0" 'BEGIN { printf "%.2f", a - b }') s)"

# ---------------------------------------------------------------- retries: fails twice, then succeeds
expect_post 202 /queues/flaky/items '{"key":"f1","payload":{"n":7}}'
wait_for "flaky f1 to succeed on its third run" 10 qstat_is flaky succeeded 1
scrape
expect_metric 'workqueue_adds_total{name="flaky"}' 3
expect_metric 'workqueue_retries_total{name="flaky"}' 2
expect_metric 'wqrun_failures_total{name="flaky"}' 2
expect_metric 'wqrun_done_total{name="flaky"}' 3
expect_metric 'workqueue_depth{name="flaky"}' 0
expect_metric 'wqrun_dead_letters{name="flaky"}' 0
expect_metric 'workqueue_queue_duration_seconds_count{name="flaky"}' 3
expect_metric 'workqueue_work_duration_seconds_count{name="flaky"}' 3
expect_metric 'workqueue_work_duration_seconds_bucket{name="flaky",le="+Inf"}' 3
expect_metric 'workqueue_unfinished_work_seconds{name="flaky"}' 0
expect_metric 'workqueue_longest_running_processor_seconds{name="flaky"}' 0
for a in 1 2 3; do
  [[ $(record_line flaky f1 "$a" | grep '^payload\.n') == 'payload.n 7' ]] || fail "flaky run $a lost the payload"
done
for f in retries:2 failures:2 done:3 succeeded:1 dead:0 adds:3; do
  [[ $(qstat flaky "${f%%:*}") == "${f#*:}" ]] || fail "GET /queues flaky.${f%%:*} = $(qstat flaky "${f%%:*}"), want ${f#*:}"
done
pass "fails twice then succeeds: retries_total 2, failures_total 2, adds 3, histogram counts 3"

# The work queue: 6 distinct keys ran once each; the one posted with
# after > 0 went through AddAfter, which counts as a retry (client-go, WORKQUEUE.md).
scrape
expect_metric 'workqueue_adds_total{name="work"}' 6
expect_metric 'workqueue_work_duration_seconds_count{name="work"}' 6
expect_metric 'workqueue_queue_duration_seconds_count{name="work"}' 6
expect_metric 'wqrun_done_total{name="work"}' 6
expect_metric 'workqueue_retries_total{name="work"}' 1

# ---------------------------------------------------------------- priority and processing gauges (gated)
expect_post 202 /queues/gated/items '{"key":"block"}'
wait_for "gated: block to be processing" 5 qstat_is gated processing 1
expect_post 202 /queues/gated/items '{"key":"p1","priority":1}'
expect_post 202 /queues/gated/items '{"key":"p5","priority":5}'
expect_post 202 /queues/gated/items '{"key":"p0"}'
expect_post 202 /queues/gated/items '{"key":"pm","priority":-1}'
expect_post 202 /queues/gated/items '{"key":"p1","priority":7}' # raises p1 above p5
sleep 0.1
scrape
expect_metric 'workqueue_depth{name="gated"}' 4
expect_metric 'wqrun_processing_items{name="gated"}' 1
expect_metric 'workqueue_adds_total{name="gated"}' 5
for s in workqueue_unfinished_work_seconds workqueue_longest_running_processor_seconds; do
  awk -v v="$(mval "$s{name=\"gated\"}")" 'BEGIN { exit !(v > 0) }' || fail "$s{name=\"gated\"} = $(mval "$s{name=\"gated\"}") while block runs, want > 0"
done
expect_post 202 /queues/ctl/items '{"key":"release"}'
wait_for "gated: all 5 keys to run" 10 qstat_is gated "done" 5
order=$("${JSON[@]}" order gated <"$RECS")
[[ $order == block,p1,p5,p0,pm ]] || fail "gated run order '$order', want block,p1,p5,p0,pm"
pass "priority from the body orders the queue (block,p1(7),p5,p0,pm); processing gauges > 0 while running"

# ---------------------------------------------------------------- metrics text
scrape
for fam in workqueue_depth:gauge workqueue_adds_total:counter workqueue_queue_duration_seconds:histogram \
  workqueue_work_duration_seconds:histogram workqueue_unfinished_work_seconds:gauge \
  workqueue_longest_running_processor_seconds:gauge workqueue_retries_total:counter; do
  grep -qx "# TYPE ${fam%%:*} ${fam#*:}" "$TMP/metrics" || fail "/metrics: no '# TYPE ${fam%%:*} ${fam#*:}'"
  grep -q "^# HELP ${fam%%:*} " "$TMP/metrics" || fail "/metrics: no HELP for ${fam%%:*}"
done
for q in held misc work flaky gated ctl; do
  grep -q "^workqueue_depth{name=\"$q\"} " "$TMP/metrics" || fail "/metrics: no workqueue_depth for $q"
done
awk '
  /^#/ || NF == 0 { next }
  {
    series = $1; val = $2 + 0; metric = series; labels = ""
    if (i = index(series, "{")) { metric = substr(series, 1, i - 1); labels = substr(series, i + 1); sub(/}$/, "", labels) }
    if (metric ~ /_bucket$/) {
      base = substr(metric, 1, length(metric) - 7)
      le = labels; sub(/.*le="/, "", le); sub(/".*/, "", le)
      rest = labels; sub(/,?le="[^"]*"/, "", rest)
      id = base "{" rest "}"
      if ((id in last) && val < last[id]) { print "buckets not cumulative: " $0; bad = 1 }
      last[id] = val
      if (le == "+Inf") inf[id] = val
    } else if (metric ~ /_count$/) {
      cnt[substr(metric, 1, length(metric) - 6) "{" labels "}"] = val
    }
  }
  END {
    for (id in last) if (!(id in inf)) { print "no +Inf bucket: " id; bad = 1 }
    for (id in inf) if (!(id in cnt) || cnt[id] != inf[id]) { print "+Inf bucket != _count: " id; bad = 1 }
    exit bad
  }' "$TMP/metrics" >"$TMP/hist.err" || fail "/metrics histograms: $(cat "$TMP/hist.err")"
pass "/metrics has every SPEC section 5 family with HELP and TYPE; histograms are cumulative and +Inf = _count"

if command -v promtool >/dev/null; then
  promtool check metrics <"$TMP/metrics" >"$TMP/promtool.out" 2>&1 || fail "promtool check metrics failed: $(cat "$TMP/promtool.out")"
  [[ -s $TMP/promtool.out ]] && fail "promtool check metrics reported problems: $(cat "$TMP/promtool.out")"
  pass "promtool check metrics: no errors, no warnings"
else
  echo "SKIP promtool (not installed)"
fi

# ---------------------------------------------------------------- malformed HTTP
before=$(snap)
fd0=$(fdcount)

# A stalled client (partial request, then silence) is disconnected by the server.
(
  exec 3<>"/dev/tcp/127.0.0.1/$PORT" || exit 9
  printf 'GET /hea' >&3
  s=$(date +%s.%N)
  timeout 30 cat <&3 >/dev/null
  rc=$?
  echo "$rc $(awk -v a="$(date +%s.%N)" -v b="$s" 'BEGIN { printf "%.1f", a - b }')"
) >"$TMP/stalled" 2>&1 &
stalled_pid=$!
BG_PIDS+=("$stalled_pid")

# A slow client, one byte per 100 ms, sending a request the server rejects.
slowreq=$'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{"key":1} '
(
  trap '' PIPE
  exec 3<>"/dev/tcp/127.0.0.1/$PORT" || exit 9
  for ((i = 0; i < ${#slowreq}; i++)); do
    printf '%s' "${slowreq:i:1}" >&3 2>/dev/null || { echo "server closed the slow client after $i bytes"; exit 0; }
    sleep 0.1
  done
  timeout 5 cat <&3 | status_line
) >"$TMP/slow" 2>&1 &
slow_pid=$!
BG_PIDS+=("$slow_pid")

# Garbage.
for i in 1 2 3; do
  ans=$(head -c 4096 /dev/urandom | raw_ask 3 | status_line)
  [[ -z $ans || $ans == "HTTP/1.1 4"* ]] || fail "random bytes: answer '$ans'"
done
ans=$(printf 'garbage\x00\xff\xfe\r\n\r\n' | raw_ask 3 | status_line)
[[ $ans == "HTTP/1.1 400"* ]] || fail "garbage request line: answer '$ans', want 400"
ans=$(printf '\r\n\r\n\r\n' | raw_ask 3 | status_line)
[[ -z $ans || $ans == "HTTP/1.1 4"* ]] || fail "empty lines: answer '$ans'"
ans=$(printf 'GET /healthz\r\n\r\n' | raw_ask 3 | status_line)
[[ -z $ans || $ans == "HTTP/1.1 4"* || $ans == "HTTP/1.0 4"* ]] || fail "request line without version: answer '$ans'"
ans=$(printf 'GET /healthz HTTP/9.9\r\n\r\n' | raw_ask 3 | status_line)
[[ -z $ans || $ans == "HTTP/1.1 4"* ]] || fail "HTTP/9.9: answer '$ans'"
ans=$(printf 'GET /healthz HTTP/1.0\r\n\r\n' | raw_ask 3 | status_line)
[[ $ans == "HTTP/1.0 200"* ]] || fail "HTTP/1.0 request: answer '$ans', want 200"
ans=$(printf 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{"key":"cl"}' | raw_ask 3 | status_line)
[[ $ans == "HTTP/1.1 400"* ]] || fail "Content-Length: abc: answer '$ans', want 400"
ans=$(printf 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{"key":"cl"}' | raw_ask 3 | status_line)
[[ $ans == "HTTP/1.1 400"* ]] || fail "Content-Length: -5: answer '$ans', want 400"
# A malformed chunk size is a malformed request (400), not a body too large.
for size in zz -5 '1;ext=1' 0x g1; do
  raw_error 400 "POST /queues/misc/items HTTP/1.1\\r\\nHost: x\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n$size\\r\\n{\\"key\\":\\"ch\\"}\\r\\n0\\r\\n\\r\\n"
done
raw_error 400 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"k\r\nzz\r\n"key":"ch"}\r\n0\r\n\r\n'
# A chunk over 16 MiB (declared, or adding up) is a body too large (413).
raw_error 413 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1000001\r\n{"key":"ch"}'
raw_error 413 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"k\r\nFFFFFFFFFFFF\r\n'
pass "malformed chunk sizes: 400; a chunk over the limit: 413 (JSON errors)"
# A huge Content-Length is refused before the body arrives.
ans=$(printf 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n{"key":"hc"}' | raw_ask 3 | status_line)
[[ $ans == "HTTP/1.1 413"* ]] || fail "Content-Length 99999999999: answer '$ans', want 413"
# A large (allowed) Content-Length with a short body, then the client closes.
printf 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{"key":"short"}' | raw_send
# Truncated bodies, then close.
printf 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n{"key":"trunc"' | raw_send
printf 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{"key":"chunk' | raw_send
printf 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nContent-Len' | raw_send
# Headers over 16 KiB: one big header, and many small ones.
big=$(head -c 20000 /dev/zero | tr '\0' a)
ans=$(printf 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n' "$big" | raw_ask 3 | status_line)
[[ $ans == "HTTP/1.1 4"* ]] || fail "20 KB header: answer '$ans', want 4xx"
ans=$({
  printf 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\n'
  for ((i = 0; i < 2000; i++)); do printf 'X-H%d: vvvvvvvv\r\n' "$i"; done
  printf 'Content-Length: 12\r\n\r\n{"key":"hh"}'
} | raw_ask 3 | status_line)
[[ $ans == "HTTP/1.1 4"* ]] || fail "2000 headers: answer '$ans', want 4xx"
ans=$(printf 'GET /%s HTTP/1.1\r\nHost: x\r\n\r\n' "$big" | raw_ask 3 | status_line)
[[ $ans == "HTTP/1.1 4"* ]] || fail "20 KB request line: answer '$ans', want 4xx"
# A HEAD answer has a Content-Length and no body, so the next answer on a
# keep-alive connection is read from its first byte.
ans=$(printf 'HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nHEAD /queues HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' |
  raw_ask 3 | tr -d '\r')
[[ $(grep -ac '^HTTP/1.1 200' <<<"$ans") == 3 && $(tail -n 1 <<<"$ans") == ok ]] ||
  fail "HEAD, HEAD, GET on one connection: answer '$ans'"
[[ $(grep -ac '^Content-Length: 3$' <<<"$ans") == 2 ]] || fail "HEAD /healthz: no Content-Length: 3 in '$ans'"
pass "HEAD answers carry Content-Length and no body (keep-alive, pipelined)"
# libevent's own answers (it refuses these before any route sees them) are
# JSON errors too, with a Content-Length that matches, and close the connection.
raw_error 400 'garbage\x00\xff\xfe\r\n\r\n'
raw_error 400 'GET /healthz HTTP/9.9\r\n\r\n'
raw_error 400 'GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n'
raw_error 400 'HEAD /healthz HTTP/1.1\r\nno colon here\r\n\r\n' nobody
raw_error 400 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{"key":"cl"}'
raw_error 400 "GET /healthz HTTP/1.1\\r\\nHost: x\\r\\nX-Big: $big\\r\\n\\r\\n"
raw_error 400 "GET /$big HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
raw_error 413 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n{"key":"hc"}'
raw_error 413 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 99999999999\r\n\r\n'
raw_error 417 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\nContent-Length: 12\r\n\r\n{"key":"ex"}'
raw_error 501 'BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n'
# HTTP versions: 1.2 and up are answered as 1.1; 0.x and negative ones get 505
# (evhttp took them and answered in them: "HTTP/-1.1 200 OK").
raw_error 505 'GET /healthz HTTP/0.1\r\nHost: x\r\n\r\n'
raw_error 505 'GET /healthz HTTP/-1.1\r\nHost: x\r\n\r\n'
ans=$(printf 'GET /healthz HTTP/1.2\r\nHost: x\r\nConnection: close\r\n\r\n' | raw_ask 3 | status_line)
[[ $ans == "HTTP/1.1 200 OK" ]] || fail "GET HTTP/1.2: answer '$ans', want HTTP/1.1 200 OK"
raw_error 501 'get /healthz HTTP/1.1\r\nHost: x\r\n\r\n'
# After an answer of ours on the same connection (keep-alive, pipelined).
printf 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nno colon\r\n\r\n' | raw_ask 3 >"$TMP/two"
sed -n '/^ok\r\{0,1\}$/,$p' "$TMP/two" | tail -n +2 >"$TMP/answer"
why=$(check_answer "$TMP/answer" 400) || fail "a bad request after a good one on one connection: $why ($(head -c 300 "$TMP/two"))"
# After a 100 Continue libevent sent itself.
(
  trap '' PIPE
  exec 3<>"/dev/tcp/127.0.0.1/$PORT" || exit 9
  printf 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n' >&3
  IFS= read -r -t 3 line <&3 && printf '%s\n' "$line"
  IFS= read -r -t 3 line <&3
  printf 'zz\r\n{"key":"x"}\r\n0\r\n\r\n' >&3
  timeout 3 cat <&3
) >"$TMP/cont" 2>&1
[[ $(head -n 1 "$TMP/cont") == $'HTTP/1.1 100 Continue\r' ]] || fail "Expect: 100-continue: no 100 Continue first: $(head -c 200 "$TMP/cont")"
tail -n +2 "$TMP/cont" >"$TMP/answer"
why=$(check_answer "$TMP/answer" 400) || fail "a bad chunk after a 100 Continue: $why"
pass "libevent's own errors (400, 413, 417, 501; HEAD, pipelined, after 100 Continue) are JSON with a matching Content-Length"
# Pipelined requests on one connection are all answered, in order.
ans=$(printf 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' |
  raw_ask 3 | grep -ao 'HTTP/1\.[01] [0-9]*' | awk '{ print $2 }' | paste -sd, -)
[[ $ans == 200,404,200 ]] || fail "pipelined requests: statuses '$ans', want 200,404,200"
# 200 rapid connections opened and closed, some with half a request.
for ((i = 0; i < 200; i++)); do
  if ((i % 2)); then
    exec {c}<>"/dev/tcp/127.0.0.1/$PORT" || fail "connection $i refused"
    exec {c}>&-
  else
    printf 'POST /queues/misc/items HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n{"ke' | raw_send || fail "connection $i refused"
  fi
done
# 50 connections held open at once; the server still answers others.
held_fds=()
for ((i = 0; i < 50; i++)); do
  exec {c}<>"/dev/tcp/127.0.0.1/$PORT" || fail "held connection $i refused"
  held_fds+=("$c")
done
[[ $(curl -s -m 2 "$BASE/healthz") == ok* ]] || fail "/healthz did not answer while 50 idle connections are open"
for c in "${held_fds[@]}"; do exec {c}>&-; done

# While the slow client trickles, others are served at once.
for i in 1 2 3 4 5; do
  t=$(curl -s -m 2 -o /dev/null -w '%{time_total}' "$BASE/healthz") || fail "/healthz failed while a slow client is connected"
  awk -v t="$t" 'BEGIN { exit !(t < 1) }' || fail "/healthz took ${t}s while a slow client is connected"
  sleep 0.3
done
kill -0 "$slow_pid" 2>/dev/null || fail "test bug: the slow client finished too early to overlap ($(cat "$TMP/slow"))"
wait "$slow_pid"
slow=$(cat "$TMP/slow")
[[ $slow == "HTTP/1.1 400"* || $slow == "server closed"* ]] || fail "slow client: '$slow', want a 400 (or a timeout)"
pass "slow client (1 byte/100 ms): '$slow'; /healthz answered in < 1 s meanwhile"

wait "$stalled_pid"
read -r stalled_rc stalled_s <"$TMP/stalled"
[[ $stalled_rc == 0 ]] || fail "a stalled client (partial request line, then nothing) was not disconnected within 30 s"
pass "a stalled client is disconnected after ${stalled_s}s"

kill -0 "$RUN_PID" 2>/dev/null || fail "the runner died during the malformed-HTTP tests"
[[ $(curl -s -m 2 "$BASE/healthz") == ok* ]] || fail "/healthz does not answer after the malformed-HTTP tests"
after=$(snap)
[[ $after == "$before" ]] || fail "malformed HTTP changed the queues:
$(diff <(echo "$before") <(echo "$after"))"
wait_for "the server to close every connection (fds back to $fd0, now $(fdcount))" 5 eval '(( $(fdcount) <= fd0 ))'
pass "garbage, bad Content-Length, truncated bodies, 16 KiB+ headers, pipelining, 200 connections: alive, no state change, no fd leak"

stop_runner api

# ================================================================ token
token_checks() { # token_checks TAG TOKEN
  local tag=$1 tok=$2
  expect_post 401 /queues/held/items '{"key":"t"}'
  [[ $(header WWW-Authenticate) == Bearer* ]] || fail "$tag: 401 without WWW-Authenticate: Bearer"
  expect_post 401 /queues/held/items '{"key":"t"}' -H "Authorization: Bearer wrong"
  expect_post 401 /queues/held/items '{"key":"t"}' -H "Authorization: Bearer ${tok}x"
  expect_post 401 /queues/held/items '{"key":"t"}' -H "Authorization: Bearer ${tok%?}"
  expect_post 401 /queues/held/items '{"key":"t"}' -H "Authorization: Bearer"
  expect_post 401 /queues/held/items '{"key":"t"}' -H "Authorization: $tok"
  expect_post 401 /queues/held/items '{"key":"t"}' -H "Authorization: Basic $(printf 'u:%s' "$tok" | base64)"
  expect_post 401 /queues/nope/items '{"key":"t"}' # no token: 401 before 404
  expect_post 401 /queues/held/items 'not json'  # no token: 401 before 400
  expect 401 GET /queues
  expect 401 GET /metrics
  expect 401 GET /queues/held/items
  expect 401 POST /queues/held/pause
  expect 401 GET /nope # no token: 401 before 404
  AUTH=(-H "Authorization: Bearer $tok")
  [[ $(qstat held adds) == 0 ]] || fail "$tag: a 401 added an item"
  [[ $(qstat held paused) == false ]] || fail "$tag: a 401 paused the queue"
  expect_post 202 /queues/held/items '{"key":"t"}' -H "Authorization: Bearer $tok"
  expect_post 404 /queues/nope/items '{"key":"t"}' -H "Authorization: Bearer $tok"
  expect_post 400 /queues/held/items 'not json' -H "Authorization: Bearer $tok"
  expect 200 GET /healthz
  expect 200 GET /queues -H "Authorization: Bearer $tok"
  expect 200 GET /metrics -H "Authorization: Bearer $tok"
  [[ $(qstat held adds) == 1 ]] || fail "$tag: the authorized POST did not add the item"
  AUTH=()
}
: >"$RECS"
start_runner token -- --token s3cr3t-T "$LUADIR/http_api.lua" "$RECS"
token_checks --token s3cr3t-T
stop_runner token
pass "--token: every route but /healthz needs 'Authorization: Bearer T' (401 otherwise, before 404/400)"

WQRUN_TOKEN=env-T0k start_runner token-env -- "$LUADIR/http_api.lua" "$RECS"
token_checks WQRUN_TOKEN env-T0k
stop_runner token-env
pass "WQRUN_TOKEN: same as --token"

WQRUN_TOKEN=env-T0k start_runner token-both -- --token cli-T0k "$LUADIR/http_api.lua" "$RECS"
expect_post 401 /queues/held/items '{"key":"t"}' -H "Authorization: Bearer env-T0k"
expect_post 202 /queues/held/items '{"key":"t"}' -H "Authorization: Bearer cli-T0k"
stop_runner token-both
pass "--token overrides WQRUN_TOKEN"

WQRUN_TOKEN='' start_runner token-empty -- "$LUADIR/http_api.lua" "$RECS"
expect_post 202 /queues/held/items '{"key":"t"}'
stop_runner token-empty
pass "empty WQRUN_TOKEN: no token required"

# ================================================================ --db
if command -v sqlite3 >/dev/null; then
  DB=$TMP/state.db
  start_runner db -- --db "$DB" "$LUADIR/http_api.lua" "$RECS"
  expect_post 202 /queues/held/items '{"key":"d1","payload":{"x":11}}'
  expect_post 202 /queues/held/items '{"key":"d2","payload":{"x":"two"},"priority":2}'
  expect_post 202 /queues/held/items '{"key":"d3"}'
  expect_post 202 /queues/held/items '{"key":"d4","payload":{"x":4},"after":3600}'
  expect_post 202 /queues/work/items '{"key":"w1","payload":{"x":1}}'
  expect_post 400 /queues/held/items '{"key":"bad","extra":1}'
  wait_for "work: w1 to run" 10 has_record work w1
  rows() { sqlite3 -separator ' ' "$DB" "select queue, key, json_extract(payload,'\$.x'), state from items order by queue, key"; }
  want=$'held d1 11 queued\nheld d2 two queued\nheld d3  queued\nheld d4 4 waiting'
  wait_for "the state file to hold the posted items" 5 eval '[[ $(rows 2>/dev/null) == "$want" ]]'
  ready=$(sqlite3 "$DB" "select ready_at - strftime('%s','now') from items where key = 'd4'")
  awk -v r="$ready" 'BEGIN { exit !(r > 3500 && r < 3700) }' || fail "d4 ready_at is $ready s from now, want about 3600"
  pass "--db: posted items are in the state file (queued and waiting), processed and rejected ones are not"
  stop_runner db
  [[ $(rows) == "$want" ]] || fail "items after SIGTERM: $(rows)"
  start_runner db-restart -- --db "$DB" "$LUADIR/http_api.lua" "$RECS"
  [[ $(qstat held queued) == 3 && $(qstat held waiting) == 1 ]] ||
    fail "after restart held has queued=$(qstat held queued) waiting=$(qstat held waiting), want 3 and 1"
  stop_runner db-restart
  pass "--db: posted items survive SIGTERM and a restart"
else
  echo "SKIP --db checks (sqlite3 not installed)"
fi

echo "all HTTP API tests passed"
