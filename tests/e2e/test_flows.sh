#!/usr/bin/env bash
# Flows on a state file (SPEC 9, docs/flows.md) with real processes, curl,
# python3 and the sqlite3 shell:
#   - kill -9 in the middle of a fan-in (20 parts, 3 workers, one join):
#     restarted on the same file without adding anything, every part's node
#     is done, a part done in the file never runs again, one that was
#     running runs again once, the join runs exactly once after every part
#     and sees the 20 results in job.deps, the flow is finished;
#   - kill -9 while the join runs: the restart runs the join once more (and
#     no part again), the flow ends done;
#   - the command line: add-flow with no runner (kept in the commands table,
#     added and run by the next runner; a refused one marked failed there),
#     add-flow through a --serve runner ("added flow ID", a generated id), a
#     refused document (the runner's error, exit 1, nothing added), flows
#     [--state] [--limit] [--json], flow show [--json], flow cancel through
#     the runner and on a file no runner holds;
#   - HTTP: POST /flows (202, it runs, results in GET /flows/ID), GET /flows
#     and its filters, 400 naming the node or field (cycle, unknown after,
#     duplicate, unknown queue, malformed JSON, unknown field), 404, 405,
#     POST /flows/ID/cancel on a paused queue's flow (durable through a
#     kill -9 right after the answer), and a flow acknowledged by 202 that
#     survives a kill -9 right after the answer.
. "$(dirname "$0")/lib.sh"

for tool in curl sqlite3 python3; do
    command -v "$tool" >/dev/null || { echo "FAIL: test_flows needs $tool" >&2; exit 1; }
done

sql() {
    sqlite3 -batch -separator ' ' -cmd '.timeout 5000' "$@"
}

# bg NAME WQRUN-ARGS...: wqrun in the background (stdout/stderr in $TMP/NAME.out/.err); BG_PID
bg() {
    local name=$1
    shift
    "$WQRUN" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" </dev/null &
    BG_PID=$!
    PIDS+=("$BG_PID")
}

# kill9 PID: kill -9 and reap, quietly
kill9() {
    { kill -9 "$1" && wait "$1"; } 2>/dev/null
    return 0
}

# ======================================================================================
# 1. kill -9 in the middle of a fan-in
# ======================================================================================
# fan.lua LOG [add] [JOIN_SLEEP]: 20 parts (p01..p20, payload n = i) into one join.
# A part logs "part KEY", sleeps 0.2 s and returns {n = n}; the join logs "join-start",
# sleeps JOIN_SLEEP, then logs "join KEY deps=N done=D sum=S" from job.deps.
FAN=$(script fan.lua <<'LUA'
local log = assert(io.open(arg[1], "a"))
local function note(s) log:write(s, "\n"); log:flush() end
local jsleep = tonumber(arg[3] or "0")
local parts = wq.queue("parts", {workers = 3, handler = function(key, payload)
    note("part " .. key)
    wq.sleep(0.2)
    return {n = payload.n}
end})
local joins = wq.queue("joins", {handler = function(key, payload, job)
    note("join-start " .. key)
    if jsleep > 0 then wq.sleep(jsleep) end
    local sum, done = 0, 0
    for i, d in ipairs(job.deps) do
        assert(d.queue == "parts" and d.key == string.format("p%02d", i), "deps in after's order")
        if d.state == "done" and type(d.result) == "table" then
            sum = sum + d.result.n
            done = done + 1
        end
    end
    note(string.format("join %s deps=%d done=%d sum=%d", key, #job.deps, done, sum))
    return {sum = sum}
end})
if arg[2] == "add" then
    local f = wq.flow("fan")
    local ps = {}
    for i = 1, 20 do ps[i] = f:add(parts, string.format("p%02d", i), {n = i}) end
    f:add(joins, "j", nil, {after = ps})
    f:commit()
end
LUA
)

# ---- 1a. killed while the parts run -------------------------------------------------
DB=$TMP/fan1.db
LOG=$TMP/fan1.log
: >"$LOG"
bg fan1 --quiet --db "$DB" "$FAN" "$LOG" add
check "the first run starts 7 parts" wait_for "$LOG" "part " 7 15
kill9 "$BG_PID"
cp "$LOG" "$TMP/fan1.before"
expect_eq "$(grep -c '^join' "$LOG")" 0 "killed before the join"
expect_eq "$(sql "$DB" "SELECT state FROM flow_nodes WHERE key = 'j'; SELECT count(*) FROM flows WHERE id = 'fan' AND finished_at IS NULL")" \
    "blocked
1" "after the kill: the join blocked, the flow unfinished"
run show --db "$DB" joins j
expect_re "$OUT" "^state +blocked$" "wqrun show: the join is blocked"
expect_re "$OUT" "^waits for +[0-9]+ dependencies$" "wqrun show: how many dependencies it waits for"
expect_re "$OUT" "^flow +fan$" "wqrun show: its flow"
DONE1=$(sql "$DB" "SELECT key FROM flow_nodes WHERE flow = 'fan' AND queue = 'parts' AND state = 'done' ORDER BY key")
NDONE1=$(printf '%s' "$DONE1" | grep -c .)
STARTED1=$(grep '^part ' "$LOG" | awk '{ print $2 }' | sort -u)
expect_between "$NDONE1" 1 19 "some parts (not all) done in the file at the kill (got $NDONE1)"
expect_eq "$(comm -23 <(printf '%s\n' "$DONE1") <(printf '%s\n' "$STARTED1"))" "" "a part done in the file was started"
expect_eq "$(sql "$DB" "SELECT count(*) FROM flow_nodes WHERE flow = 'fan' AND queue = 'parts' AND state = 'pending'")" \
    $((20 - NDONE1)) "the other parts pending"

run --quiet --db "$DB" "$FAN" "$LOG"
expect_rc 0 "the restart (nothing added) runs the rest and exits"
expect_eq "$(grep '^part ' "$LOG" | awk '{ print $2 }' | sort -u | tr '\n' ' ')" \
    "$(for i in $(seq 1 20); do printf 'p%02d ' "$i"; done)" "every part ran"
# a part done in the file at the kill never runs again; one that was started but not
# done runs again exactly once; one not started runs once
bad=""
for i in $(seq 1 20); do
    k=$(printf 'p%02d' "$i")
    n=$(grep -cx "part $k" "$LOG")
    if printf '%s\n' "$DONE1" | grep -qx "$k"; then
        want=1
    elif printf '%s\n' "$STARTED1" | grep -qx "$k"; then
        want=2
    else
        want=1
    fi
    [ "$n" = "$want" ] || bad="$bad $k:$n(want $want)"
done
expect_eq "$bad" "" "each part ran once, plus once again only if it was running at the kill"
expect_eq "$(grep -c '^join-start j$' "$LOG")|$(grep -c '^join j ' "$LOG")" "1|1" "the join ran exactly once"
expect_eq "$(grep '^join j ' "$LOG")" "join j deps=20 done=20 sum=210" "job.deps had the 20 parts' results"
LASTPART=$(grep -n '^part ' "$LOG" | tail -1 | cut -d: -f1)
JOINAT=$(grep -n '^join-start' "$LOG" | cut -d: -f1)
check "the join started after the last part" test "${JOINAT:-0}" -gt "${LASTPART:-999}"
expect_eq "$(sql "$DB" "SELECT state, count(*) FROM flow_nodes WHERE flow = 'fan' GROUP BY state")" "done 21" \
    "every node done in the file"
expect_eq "$(sql "$DB" "SELECT unfinished, cancelled, finished_at IS NOT NULL, finished_at >= created_at FROM flows WHERE id = 'fan'")" \
    "0 0 1 1" "flows: unfinished 0, finished_at set"
expect_eq "$(sql "$DB" "SELECT result FROM flow_nodes WHERE key = 'j'; SELECT result FROM flow_nodes WHERE key = 'p07'")" \
    '{"sum":210}
{"n":7}' "the results are kept with the flow"
expect_eq "$(sql "$DB" "SELECT count(*) FROM items WHERE queue IN ('parts', 'joins')")" 0 "no item left"
echo "kill -9 during the parts: $NDONE1 parts done at the kill, $(grep -c '^part ' "$LOG") part runs in all"

# ---- 1b. killed while the join runs -------------------------------------------------
DB=$TMP/fan2.db
LOG=$TMP/fan2.log
: >"$LOG"
bg fan2 --quiet --db "$DB" "$FAN" "$LOG" add 2
check "the join starts" wait_for "$LOG" "join-start j" 1 20
sleep 0.3 # inside the join's 2 s sleep
kill9 "$BG_PID"
expect_eq "$(grep -c '^join j ' "$LOG")|$(grep -c '^part ' "$LOG")" "0|20" "killed in the join, after 20 part runs"
expect_eq "$(sql "$DB" "SELECT queue, state, count(*) FROM flow_nodes WHERE flow = 'fan' GROUP BY queue, state ORDER BY queue")" \
    "joins pending 1
parts done 20" "at the kill: 20 parts done, the join released (pending)"
expect_eq "$(sql "$DB" "SELECT state FROM items WHERE queue = 'joins' AND key = 'j'; SELECT finished_at IS NULL FROM flows")" \
    "processing
1" "the join's item processing, the flow unfinished"
run --quiet --db "$DB" "$FAN" "$LOG" "" 0
expect_rc 0 "the restart runs the join again and exits"
expect_eq "$(grep -c '^join-start j$' "$LOG")|$(grep -c '^join j ' "$LOG")|$(grep -c '^part ' "$LOG")" "2|1|20" \
    "the join started once more and ended once; no part ran again"
expect_eq "$(grep '^join j ' "$LOG")" "join j deps=20 done=20 sum=210" "the re-run join saw the 20 results"
expect_eq "$(sql "$DB" "SELECT state, count(*) FROM flow_nodes WHERE flow = 'fan' GROUP BY state;
                        SELECT unfinished, finished_at IS NOT NULL FROM flows WHERE id = 'fan';
                        SELECT result FROM flow_nodes WHERE key = 'j'")" "done 21
0 1
{\"sum\":210}" "the flow ends done"

# ======================================================================================
# 2. the command line
# ======================================================================================
Q=$(script q.lua <<'LUA'
-- parts log "part KEY" and return {n = payload.n}; joins log "join KEY #deps sum" and return
-- "sum S"; "started" once the queues are defined
local log = assert(io.open(arg[1], "a"))
local function note(s) log:write(s, "\n"); log:flush() end
wq.queue("parts", {workers = 2, handler = function(key, payload)
    note("part " .. key)
    return {n = type(payload) == "table" and payload.n or 0}
end})
wq.queue("joins", {handler = function(key, payload, job)
    local sum = 0
    for _, d in ipairs(job.deps or {}) do
        sum = sum + (type(d.result) == "table" and d.result.n or 0)
    end
    note("join " .. key .. " " .. #(job.deps or {}) .. " " .. sum)
    return "sum " .. sum
end})
note("started")
LUA
)
CDB=$TMP/cli.db
CLOG=$TMP/cli.log
: >"$CLOG"
J=$TMP/json
mkdir -p "$J"
cat >"$J/cli1.json" <<'EOF'
{"id": "cli1", "nodes": [
  {"queue": "parts", "key": "a", "payload": {"n": 1}},
  {"queue": "parts", "key": "b", "payload": {"n": 2}},
  {"queue": "joins", "key": "j1", "after": [{"queue": "parts", "key": "a"}, {"queue": "parts", "key": "b"}]}]}
EOF
cat >"$J/cli2.json" <<'EOF'
{"id": "cli2", "keep": 3600, "nodes": [
  {"queue": "parts", "key": "c", "payload": {"n": 5}},
  {"queue": "joins", "key": "j2", "after": [{"queue": "parts", "key": "c"}]}]}
EOF
cat >"$J/dup.json" <<'EOF'
{"id": "dup", "nodes": [{"queue": "parts", "key": "x"}, {"queue": "parts", "key": "y"}, {"queue": "parts", "key": "x"}]}
EOF
cat >"$J/cyc.json" <<'EOF'
{"id": "cyc", "nodes": [{"queue": "parts", "key": "x", "after": [{"queue": "parts", "key": "y"}]},
                        {"queue": "parts", "key": "y", "after": [{"queue": "parts", "key": "x"}]}]}
EOF
cat >"$J/dup2.json" <<'EOF'
{"id": "dup2", "nodes": [{"queue": "parts", "key": "q"}, {"queue": "parts", "key": "q"}]}
EOF
# cx, cy: two parts, a join waiting for both, and a last node waiting for the join
for f in cx cy; do
    cat >"$J/$f.json" <<EOF
{"id": "$f", "nodes": [{"queue": "parts", "key": "${f}1"}, {"queue": "parts", "key": "${f}2"},
  {"queue": "joins", "key": "${f}j", "after": [{"queue": "parts", "key": "${f}1"}, {"queue": "parts", "key": "${f}2"}]},
  {"queue": "joins", "key": "${f}z", "after": [{"queue": "joins", "key": "${f}j"}]}]}
EOF
done

run --quiet --db "$CDB" "$Q" "$CLOG"
expect_rc 0 "a first runner makes the state file"

# ---- add-flow with no runner: kept for the next runner ----
run add-flow --db "$CDB" "$J/cli1.json"
expect_rc 0 "add-flow with no runner"
expect_in "$OUT$ERR" "no runner holds $CDB: the flow is kept in its commands table" "says it is kept for the next runner"
run add-flow --db "$CDB" "$J/dup2.json"
expect_rc 0 "add-flow of a refused document with no runner (checked by the next runner)"
expect_eq "$(sql "$CDB" "SELECT count(*) FROM flows; SELECT op, state FROM commands WHERE key LIKE '%\"cli1\"%'")" "0
add_flow new" "not in flows yet; in the commands table"
run --quiet --db "$CDB" "$Q" "$CLOG"
expect_rc 0 "the next runner"
expect_in "$ERR" "added flow cli1" "the next runner says it added the flow"
expect_in "$ERR" "flow dup2: node parts/q is added twice" "and why it refused the other one"
expect_eq "$(grep -c '^part [ab]$' "$CLOG")|$(grep -c '^join j1 2 3$' "$CLOG")" "2|1" "it ran the flow: 2 parts, the join with both results"
expect_eq "$(sql "$CDB" "SELECT state, result FROM commands WHERE key LIKE '%\"cli1\"%'")" "done added flow cli1" \
    "the command row: done"
expect_eq "$(sql "$CDB" "SELECT state FROM commands WHERE key LIKE '%\"dup2\"%'")" "failed" "the refused one: failed"
expect_eq "$(sql "$CDB" "SELECT group_concat(key || ':' || state, ',') FROM (SELECT key, state FROM flow_nodes WHERE flow = 'cli1' ORDER BY id);
                         SELECT finished_at IS NOT NULL FROM flows WHERE id = 'cli1';
                         SELECT count(*) FROM flow_nodes WHERE flow = 'dup2'")" "a:done,b:done,j1:done
1
0" "cli1 done and finished, nothing of dup2"
run add-flow --db "$CDB" "$J/cli1.json"
run --quiet --db "$CDB" "$Q" "$CLOG"
expect_eq "$(grep -c '^part a$' "$CLOG")|$(sql "$CDB" "SELECT count(*) FROM flow_nodes WHERE flow = 'cli1'")" "1|3" \
    "the same flow sent again adds nothing"

# ---- a runner holds the file ----
bg serve --quiet --serve --db "$CDB" "$Q" "$CLOG"
SERVE=$BG_PID
check "the --serve runner started" wait_for "$CLOG" "started" 4 10
run add-flow --db "$CDB" "$J/cli2.json"
expect_rc 0 "add-flow through the runner"
expect_eq "$OUT" "added flow cli2" "prints added flow ID"
check "cli2 ran" wait_for "$CLOG" "join j2 1 5" 1 10
run add-flow --db "$CDB" "$J/dup.json"
expect_rc 1 "a document with a node added twice is refused"
expect_in "$ERR" "flow dup: node parts/x is added twice" "the runner's error, naming the node"
run add-flow --db "$CDB" "$J/cyc.json"
expect_rc 1 "a cycle is refused"
expect_in "$ERR" "flow cyc: node parts/" "the runner's error"
expect_in "$ERR" "is in a cycle" "the runner's error says cycle"
printf '{"id": "broken", "nodes": [{"queue": "parts"' >"$J/broken.json"
run add-flow --db "$CDB" "$J/broken.json"
expect_rc 1 "malformed JSON is refused"
expect_in "$ERR" "not a JSON object" "says why"
printf '{"nodes": [{"queue": "parts", "key": "anon", "payload": {"n": 9}}]}' >"$J/anon.json"
run add-flow --db "$CDB" "$J/anon.json"
expect_rc 0 "a flow without an id"
expect_re "$OUT" '^added flow f-[0-9a-f]{16}$' "gets a generated id"
ANON=${OUT#added flow }
check "the anonymous flow ran" wait_for "$CLOG" "part anon" 1 10
sleep 0.2
expect_eq "$(sql "$CDB" "SELECT count(*) FROM flow_nodes WHERE flow IN ('dup', 'cyc', 'broken'); SELECT count(*) FROM flows WHERE id IN ('dup', 'cyc', 'broken')")" \
    "0
0" "nothing of the refused documents is in flow_nodes or flows"
expect_eq "$(grep -c '^part [xy]$' "$CLOG")" 0 "no node of the refused documents ran"
expect_eq "$(sql "$CDB" "SELECT state FROM flow_nodes WHERE flow = '$ANON'")" "done" "the anonymous flow's node is done"

# ---- flows, flow show ----
run flows --db "$CDB"
expect_rc 0 "flows"
expect_re "$OUT" '^ID +STATE +NODES +BLOCKED +PENDING +DONE +DEAD +CREATED +FINISHED$' "flows: the header"
expect_re "$OUT" '^cli1 +finished +3 +0 +0 +3 +0 +[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} +[0-9]{4}-' "flows: cli1 finished, 3 done"
expect_re "$OUT" '^cli2 +finished +2 +0 +0 +2 +0 ' "flows: cli2"
expect_eq "$(printf '%s\n' "$OUT" | grep -c .)" 4 "flows: a header and 3 flows"
run flows --db "$CDB" --limit 1
expect_eq "$(printf '%s\n' "$OUT" | grep -c .)" 2 "flows --limit 1: one flow"
run flows --db "$CDB" --state running
expect_eq "$(printf '%s\n' "$OUT" | grep -c .)" 1 "flows --state running: none"
run flows --db "$CDB" --state finished --json
expect_rc 0 "flows --json"
expect_eq "$(printf '%s' "$OUT" | python3 -c '
import json, sys
fl = {f["id"]: f for f in json.load(sys.stdin)}
c1, c2 = fl["cli1"], fl["cli2"]
print(len(fl), c1["nodes"], c1["done"], c1["blocked"], c1["pending"], c1["dead"], c1["cancelled"],
      c1["finished_at"] >= c1["created_at"] > 1.7e9, c1["keep"], c2["keep"], c2["nodes"])' 2>&1)" \
    "3 3 3 0 0 0 False True 604800.0 3600.0 2" "flows --json: the counts, keep, times"
run flow show --db "$CDB" cli1
expect_rc 0 "flow show"
expect_re "$OUT" '^cli1 +finished +3 ' "flow show: the summary"
expect_re "$OUT" '^QUEUE +KEY +STATE +WAITS +ATTEMPT +AFTER +RESULT / ERROR$' "flow show: the nodes' header"
expect_re "$OUT" '^parts +a +done +- +- +- +\{"n":1\}$' "flow show: a part with its result"
expect_re "$OUT" '^joins +j1 +done +- +- +parts/a, parts/b +"sum 3"$' "flow show: the join, its dependencies and result"
run flow show --db "$CDB" cli1 --json
expect_rc 0 "flow show --json"
expect_eq "$(printf '%s' "$OUT" | python3 -c '
import json, sys
f = json.load(sys.stdin)
n = {x["key"]: x for x in f["nodes"]}
print(f["id"], f["done"], f["cancelled"], f["finished_at"] is not None, [x["key"] for x in f["nodes"]],
      n["a"]["result"], n["j1"]["result"], n["j1"]["state"], n["j1"]["after"], n["a"]["after"], n["j1"]["ignore_dead"])' 2>&1)" \
    "cli1 3 False True ['a', 'b', 'j1'] {'n': 1} sum 3 done [{'queue': 'parts', 'key': 'a'}, {'queue': 'parts', 'key': 'b'}] [] False" \
    "flow show --json: the nodes, results and after"
run flow show --db "$CDB" nope
expect_rc 1 "flow show of no flow"
expect_in "$ERR" "no flow 'nope'" "says so"

# ---- flow cancel through the runner ----
run pause --db "$CDB" parts
expect_rc 0 "pause parts (through the runner)"
run add-flow --db "$CDB" "$J/cx.json"
expect_eq "$OUT" "added flow cx" "add cx to a paused queue"
run flow show --db "$CDB" cx --json
expect_eq "$(printf '%s' "$OUT" | python3 -c '
import json, sys
f = json.load(sys.stdin)
print(",".join("%s:%s:%s" % (x["key"], x["state"], x["waits"]) for x in f["nodes"]))' 2>&1)" \
    "cx1:pending:None,cx2:pending:None,cxj:blocked:2,cxz:blocked:1" "cx: parts pending (paused), the others blocked"
run flow cancel --db "$CDB" cx
expect_rc 0 "flow cancel through the runner"
expect_eq "$OUT" "cancelled flow 'cx': 4 unfinished nodes" "says how many"
expect_eq "$(sql "$CDB" "SELECT group_concat(key || ':' || state || ':' || error, ',') FROM (SELECT * FROM flow_nodes WHERE flow = 'cx' ORDER BY id);
                         SELECT cancelled, unfinished, finished_at IS NOT NULL FROM flows WHERE id = 'cx';
                         SELECT count(*) FROM items WHERE key LIKE 'cx%'")" \
    "cx1:dead:flow cancelled,cx2:dead:flow cancelled,cxj:dead:flow cancelled,cxz:dead:flow cancelled
1 0 1
0" "every node dead 'flow cancelled', the flow cancelled and finished, no item left"
run flows --db "$CDB"
expect_re "$OUT" '^cx +cancelled +4 +0 +0 +0 +4 ' "flows: cx cancelled, 4 dead"
run flow cancel --db "$CDB" nope
expect_rc 1 "flow cancel of no flow"
expect_in "$ERR" "no flow 'nope'" "says so"
run add-flow --db "$CDB" "$J/cy.json"
expect_eq "$OUT" "added flow cy" "add cy (parts paused)"
kill -TERM "$SERVE"
wait_exit "$SERVE" 10
expect_eq "$RC" 0 "the runner stops"

# ---- flow cancel with no runner ----
expect_eq "$(sql "$CDB" "SELECT group_concat(key || ':' || state, ',') FROM (SELECT * FROM flow_nodes WHERE flow = 'cy' ORDER BY id)")" \
    "cy1:pending,cy2:pending,cyj:blocked,cyz:blocked" "cy unstarted in the file"
run flow cancel --db "$CDB" cy
expect_rc 0 "flow cancel with no runner"
expect_eq "$OUT" "cancelled flow 'cy': 4 unfinished nodes" "says how many"
expect_eq "$(sql "$CDB" "SELECT group_concat(key || ':' || state || ':' || error, ',') FROM (SELECT * FROM flow_nodes WHERE flow = 'cy' ORDER BY id);
                         SELECT cancelled, unfinished, finished_at IS NOT NULL FROM flows WHERE id = 'cy';
                         SELECT count(*) FROM items WHERE key LIKE 'cy%'")" \
    "cy1:dead:flow cancelled,cy2:dead:flow cancelled,cyj:dead:flow cancelled,cyz:dead:flow cancelled
1 0 1
0" "applied to the file: every node dead 'flow cancelled', no item left"
run resume --db "$CDB" parts
expect_rc 0 "resume parts (no runner)"
run --quiet --db "$CDB" "$Q" "$CLOG"
expect_rc 0 "a runner after the cancel"
expect_eq "$(grep -c '^part c[xy]\|^join c[xy]' "$CLOG")" 0 "no node of a cancelled flow ever ran"
run flow show --db "$CDB" cy --json
expect_eq "$(printf '%s' "$OUT" | python3 -c '
import json, sys
f = json.load(sys.stdin)
print(f["cancelled"], f["dead"], f["blocked"], f["pending"], sorted(set(x["error"] for x in f["nodes"])))' 2>&1)" \
    "True 4 0 0 ['flow cancelled']" "the next runner keeps cy cancelled"

# ======================================================================================
# 3. HTTP
# ======================================================================================
HDB=$TMP/http.db
HLOG=$TMP/http.log
: >"$HLOG"
# call METHOD PATH [curl args...]: sets CODE and BODY
call() {
    local m=$1 p=$2
    shift 2
    CODE=$(curl -sS -m 10 -X "$m" -o "$TMP/body" -w '%{http_code}' "$@" "$BASE$p" 2>"$TMP/curl.err") ||
        CODE="curl failed: $(cat "$TMP/curl.err")"
    BODY=$(cat "$TMP/body" 2>/dev/null)
    OUT=$BODY ERR="" RC=$CODE LAST_CMD="curl -X $m $p"
}
# post_flow JSON: POST /flows
post_flow() {
    call POST /flows -H 'Content-Type: application/json' --data-binary "$1"
}
# jq_py EXPR: evaluates EXPR with f = the JSON body
jq_py() {
    printf '%s' "$BODY" | python3 -c "import json, sys; f = json.load(sys.stdin); print($1)" 2>&1
}
# flow_finished ID: waits (10 s) until GET /flows/ID has a finished_at (a handler logs
# before its outcome is written)
flow_finished() {
    for _ in $(seq 200); do
        call GET "/flows/$1"
        [ "$CODE" = 200 ] && [ "$(jq_py 'f.get("finished_at") is not None')" = True ] && return 0
        sleep 0.05
    done
    return 1
}
listen_start -- --db "$HDB" "$Q" "$HLOG" || finish
H1='{"id": "h1", "nodes": [
  {"queue": "parts", "key": "h-1", "payload": {"n": 1}}, {"queue": "parts", "key": "h-2", "payload": {"n": 2}},
  {"queue": "parts", "key": "h-3", "payload": {"n": 3}}, {"queue": "parts", "key": "h-4", "payload": {"n": 4}},
  {"queue": "parts", "key": "h-5", "payload": {"n": 5}, "priority": 3},
  {"queue": "joins", "key": "hj", "payload": {"report": true},
   "after": [{"queue": "parts", "key": "h-1"}, {"queue": "parts", "key": "h-2"}, {"queue": "parts", "key": "h-3"},
             {"queue": "parts", "key": "h-4"}, {"queue": "parts", "key": "h-5"}]}]}'
post_flow "$H1"
expect_eq "$CODE|$BODY" '202|{"id":"h1"}' "POST /flows: 202 with the id"
check "the posted flow's join ran" wait_for "$HLOG" "join hj 5 15" 1 10
flow_finished h1 || fail "h1 did not finish: $BODY"
call GET /flows/h1
expect_eq "$CODE" 200 "GET /flows/h1"
expect_eq "$(jq_py '[(x["key"], x["state"], x.get("result")) for x in f["nodes"]], f["done"], f["blocked"], f["pending"], f["dead"], f["cancelled"], f.get("finished_at") is not None')" \
    "[('h-1', 'done', {'n': 1}), ('h-2', 'done', {'n': 2}), ('h-3', 'done', {'n': 3}), ('h-4', 'done', {'n': 4}), ('h-5', 'done', {'n': 5}), ('hj', 'done', 'sum 15')] 6 0 0 0 False True" \
    "GET /flows/h1: every node done with its result"
expect_eq "$(jq_py '[(a["queue"], a["key"]) for a in f["nodes"][5]["after"]]')" \
    "[('parts', 'h-1'), ('parts', 'h-2'), ('parts', 'h-3'), ('parts', 'h-4'), ('parts', 'h-5')]" "the join's after, in order"
post_flow '{"nodes": [{"queue": "parts", "key": "h-anon"}]}'
expect_eq "$CODE" 202 "POST /flows without an id"
ANON=$(jq_py 'f["id"]')
expect_re "$ANON" '^f-' "a generated id"
check "it ran" wait_for "$HLOG" "part h-anon" 1 10
flow_finished "$ANON" || fail "$ANON did not finish: $BODY"
call GET /flows
expect_eq "$CODE" 200 "GET /flows"
expect_eq "$(jq_py 'sorted((x["id"], x["nodes"], x["done"]) for x in f["flows"])')" \
    "$(python3 -c "print(sorted([('h1', 6, 6), ('$ANON', 1, 1)]))")" "GET /flows: both flows with their counts"
call GET "/flows?state=finished&limit=1"
expect_eq "$CODE|$(jq_py 'len(f["flows"])')" "200|1" "GET /flows?state=finished&limit=1"
call GET "/flows?state=running"
expect_eq "$CODE|$BODY" '200|{"flows":[]}' "GET /flows?state=running: none"
call GET "/flows?state=bogus"
expect_eq "$CODE" 400 "GET /flows?state=bogus"
expect_in "$BODY" "state must be running or finished" "says why"
call GET "/flows?limit=0"
expect_eq "$CODE" 400 "GET /flows?limit=0"
call GET "/flows?colour=red"
expect_eq "$CODE" 400 "GET /flows?colour=red"

# ---- refusals: 400 naming the node or the field; nothing added ----
post_flow '{"id": "h2", "nodes": [{"queue": "parts", "key": "x0"},
  {"queue": "parts", "key": "x1", "after": [{"queue": "parts", "key": "x0"}, {"queue": "parts", "key": "x2"}]},
  {"queue": "parts", "key": "x2", "after": [{"queue": "parts", "key": "x1"}]}]}'
expect_eq "$CODE" 400 "a cycle: 400"
expect_re "$BODY" '^\{"error":"flow h2: node parts/x[12] is in a cycle"\}$' "a cycle: names a node on it"
post_flow '{"id": "h3", "nodes": [{"queue": "parts", "key": "x0"}, {"queue": "joins", "key": "xj", "after": [{"queue": "parts", "key": "x0"}, {"queue": "parts", "key": "zz"}]}]}'
expect_eq "$CODE|$BODY" '400|{"error":"flow h3: node joins/xj waits for parts/zz, which is no node of the flow"}' "an unknown after"
post_flow '{"id": "h4", "nodes": [{"queue": "parts", "key": "x0"}, {"queue": "parts", "key": "x0"}]}'
expect_eq "$CODE|$BODY" '400|{"error":"flow h4: node parts/x0 is added twice"}' "a duplicate node"
post_flow '{"id": "h5", "nodes": [{"queue": "parts", "key": "x0"}, {"queue": "nosuch", "key": "x9"}]}'
expect_eq "$CODE|$BODY" '400|{"error":"flow h5: node nosuch/x9: no queue named nosuch"}' "an unknown queue"
post_flow '{"id": "h6", "nodes": [{"queue": "parts", "key": "x0"'
expect_eq "$CODE" 400 "malformed JSON: 400"
expect_in "$BODY" "the document is not JSON" "malformed JSON: says so"
post_flow '{"id": "h7", "nodes": [{"queue": "parts", "key": "x0"}, {"queue": "parts", "key": "x1", "colour": "red"}]}'
expect_eq "$CODE" 400 "an unknown node field: 400"
expect_in "$BODY" "nodes[1]: unknown field 'colour'" "names the node and the field"
post_flow '{"id": "h8", "color": 1, "nodes": [{"queue": "parts", "key": "x0"}]}'
expect_eq "$CODE" 400 "an unknown top-level field: 400"
expect_in "$BODY" "unknown field 'color'" "names the field"
post_flow '{"id": "h9", "nodes": [{"queue": "parts", "key": "x0", "after": [{"queue": "parts", "key": "h-1", "x": 1}]}]}'
expect_eq "$CODE" 400 "an unknown field in after: 400"
expect_in "$BODY" "nodes[0].after: unknown field 'x'" "names it"
post_flow '[1, 2]'
expect_eq "$CODE" 400 "not an object: 400"
sleep 0.2
expect_eq "$(sql "$HDB" "SELECT count(*) FROM flows WHERE id IN ('h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'h7', 'h8', 'h9'); SELECT count(*) FROM flow_nodes WHERE key LIKE 'x%'")" "1
0" "the refused flows added nothing"
expect_eq "$(grep -c '^part x' "$HLOG")" 0 "nothing of them ran"

# ---- 404, 405 ----
call GET /flows/nope
expect_eq "$CODE|$BODY" '404|{"error":"no such flow"}' "GET /flows/nope"
call POST /flows/nope/cancel
expect_eq "$CODE" 404 "POST /flows/nope/cancel"
for mp in "DELETE /flows" "PUT /flows" "POST /flows/h1" "DELETE /flows/h1" "PUT /flows/h1" "GET /flows/h1/cancel" "DELETE /flows/h1/cancel"; do
    set -- $mp
    call "$1" "$2"
    expect_eq "$CODE" 405 "$1 $2: 405"
done

# ---- cancel a flow whose parts are on a paused queue; durable through kill -9 ----
call POST /queues/parts/pause
expect_eq "$CODE" 200 "pause parts"
post_flow '{"id": "hc", "nodes": [{"queue": "parts", "key": "hc1"}, {"queue": "parts", "key": "hc2"},
  {"queue": "joins", "key": "hcj", "after": [{"queue": "parts", "key": "hc1"}, {"queue": "parts", "key": "hc2"}]},
  {"queue": "joins", "key": "hcz", "after": [{"queue": "joins", "key": "hcj"}]}]}'
expect_eq "$CODE" 202 "POST /flows hc"
call GET /flows/hc
expect_eq "$(jq_py 'f["pending"], f["blocked"], f["done"], f["dead"], [(x["key"], x["state"], x.get("waits")) for x in f["nodes"]]')" \
    "2 2 0 0 [('hc1', 'pending', None), ('hc2', 'pending', None), ('hcj', 'blocked', 2), ('hcz', 'blocked', 1)]" \
    "hc unstarted: 2 pending, 2 blocked with their waits"
call POST /flows/hc/cancel
expect_eq "$CODE|$BODY" '200|{"cancelled":4}' "POST /flows/hc/cancel: 4 nodes"
kill9 "$PID"
expect_eq "$(sql "$HDB" "SELECT group_concat(key || ':' || state || ':' || error, ',') FROM (SELECT * FROM flow_nodes WHERE flow = 'hc' ORDER BY id);
                         SELECT cancelled, finished_at IS NOT NULL FROM flows WHERE id = 'hc';
                         SELECT count(*) FROM items WHERE key LIKE 'hc%'")" \
    "hc1:dead:flow cancelled,hc2:dead:flow cancelled,hcj:dead:flow cancelled,hcz:dead:flow cancelled
1 1
0" "the acknowledged cancel is in the file after a kill -9 right after the answer"
listen_start -- --db "$HDB" "$Q" "$HLOG" || finish
call GET /flows/hc
expect_eq "$(jq_py 'f["dead"], f["cancelled"], sorted(set(x.get("error") for x in f["nodes"]))')" "4 True ['flow cancelled']" \
    "GET /flows/hc after the restart: 4 dead, 'flow cancelled'"
call POST /flows/hc/cancel
expect_eq "$CODE|$BODY" '200|{"cancelled":0}' "cancelling it again: 0"

# ---- an acknowledged flow survives a kill -9 right after the 202 ----
post_flow '{"id": "hk", "nodes": [{"queue": "parts", "key": "hk1", "payload": {"n": 10}}, {"queue": "parts", "key": "hk2", "payload": {"n": 20}},
  {"queue": "joins", "key": "hkj", "after": [{"queue": "parts", "key": "hk1"}, {"queue": "parts", "key": "hk2"}]}]}'
expect_eq "$CODE|$BODY" '202|{"id":"hk"}' "POST /flows hk (parts still paused)"
kill9 "$PID"
expect_eq "$(sql "$HDB" "SELECT group_concat(key || ':' || state, ',') FROM (SELECT * FROM flow_nodes WHERE flow = 'hk' ORDER BY id);
                         SELECT count(*) FROM items WHERE key IN ('hk1', 'hk2')")" "hk1:pending,hk2:pending,hkj:blocked
2" "after a kill -9 right after the 202: the flow is in the file"
listen_start -- --db "$HDB" "$Q" "$HLOG" || finish
call POST /queues/parts/resume
expect_eq "$CODE" 200 "resume parts"
check "the acknowledged flow runs after the restart" wait_for "$HLOG" "join hkj 2 30" 1 10
flow_finished hk || fail "hk did not finish: $BODY"
sleep 0.2 # (no node runs again)
call GET /flows/hk
expect_eq "$(jq_py 'f["done"], f.get("finished_at") is not None, f["nodes"][2]["result"]')" "3 True sum 30" "hk done"
expect_eq "$(grep -c '^part hk' "$HLOG")|$(grep -c '^join hkj' "$HLOG")" "2|1" "each node of hk ran once"
kill -TERM "$PID"
wait_exit "$PID" 10
expect_eq "$RC" 0 "the HTTP runner stops"

finish
