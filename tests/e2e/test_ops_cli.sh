#!/usr/bin/env bash
# Operating a queue from the command line (SPEC 7.5), with real processes
# and the sqlite3 shell:
#   - on a file no runner holds: pause/resume (queues.paused), remove,
#     cancel (refused), retry KEY/--all, purge-dead, items, each applied at
#     once with SQL, bad usage (2), unknown queue or key (1);
#   - a paused queue stays paused in the next run: nothing is handed out,
#     and its items keep nothing alive;
#   - on a file a --serve runner holds: the same commands go through the
#     commands table, applied within 100 ms; cancel kills the handler's
#     wq.exec child and neither retries nor dead-letters the key;
#   - garbage rows in commands are logged once and marked failed;
#   - kill -9 between reading a command and committing it: after a restart
#     the command is applied exactly once (by the new runner, or by the
#     waiting command line itself when the runner is gone).
. "$(dirname "$0")/lib.sh"

if ! command -v sqlite3 >/dev/null; then
    echo "FAIL: test_ops_cli needs the sqlite3 shell (apt-get install sqlite3)" >&2
    exit 1
fi

sql() {
    sqlite3 -batch -separator ' ' -cmd '.timeout 5000' "$@"
}

DB=$TMP/ops.db
fill=$(script fill.lua <<'LUA'
local mail = wq.queue("mail", {max_retries = 0, handler = function(key)
    error("smtp down for " .. key)
end})
mail:add("bad1", {to = "ada"})
mail:add("bad2")
mail:add("bad3")
wq.sleep(0.05)
local idle = wq.queue("idle")
idle:add("a/b", {x = 1})
idle:add("sp ace")
idle:add("\u{e9}t\u{e9}")
idle:add_after("later", 3600)
LUA
)
run --quiet --db "$DB" "$fill"
expect_rc 3 "fill the state file (three keys dead-lettered: 3)"
expect_eq "$(sql "$DB" "SELECT count(*) FROM dead; SELECT count(*) FROM items WHERE queue = 'idle'")" \
    "3
4" "three dead letters, four idle items"

# ====================================================== no runner: applied directly
run items --db "$DB" idle
expect_rc 0 "items"
expect_re "$OUT" '^KEY +STATE +PRIORITY +ATTEMPT' "items prints a header"
expect_re "$OUT" '^a/b +queued +0 +1 .*\{"x":1\}' "items shows key, state, priority, attempt, payload"
expect_re "$OUT" '^later +waiting ' "and the delayed item"
run items --db "$DB" idle --state waiting --json
expect_rc 0 "items --json"
expect_in "$OUT" '"key":"later","payload":null,"state":"waiting"' "--json: one object per item"
expect_not_in "$OUT" '"a/b"' "--state filters"
expect_in "$OUT" '"attempt":1,"last_error":null' "--json: no last_error for a key that never failed"
run items --db "$DB" idle --limit 1
expect_in "$OUT" "more (--limit 1" "--limit says there is more"

# A failed key waiting for its retry: items shows the attempt to come and the last error (its
# first line in the table, the whole message in --json); a restarted runner has them back.
FDB=$TMP/flaky.db
flaky=$(script flaky.lua <<'LUA'
local q = wq.queue("flaky", {limiter = wq.limiter.exponential(3600, 3600), handler = function()
    error("disk full on /var\nsecond line", 0)
end})
q:add("f1", {n = 1})
q:add("f2")
wq.sleep(0.05)
wq.exit(0)
LUA
)
run --quiet --db "$FDB" "$flaky"
expect_rc 0 "a run whose two keys fail once and wait an hour"
run items --db "$FDB" flaky
expect_rc 0 "items of flaky"
expect_re "$OUT" '^KEY +STATE +PRIORITY +ATTEMPT +READY AT \(UTC\) +LAST ERROR +PAYLOAD$' \
    "items: a LAST ERROR column"
expect_re "$OUT" '^f1 +waiting +0 +2 +[0-9]{4}-[0-9-]+ [0-9:]+ +disk full on /var +\{"n":1\}$' \
    "items: f1 waits for attempt 2, with the first line of its error"
expect_re "$OUT" '^f2 +waiting +0 +2 .* +disk full on /var +-$' "items: f2 likewise"
expect_not_in "$OUT" "second line" "items: the table shows the first line only"
run items --db "$FDB" flaky --json
expect_in "$OUT" '"key":"f1","payload":{"n":1},"state":"waiting"' "items --json: f1"
expect_in "$OUT" '"attempt":2,"last_error":"disk full on /var\nsecond line"}' \
    "items --json: attempt 2 and the whole message"
relist=$(script relist.lua <<'LUA'
local q = wq.queue("flaky", {limiter = wq.limiter.exponential(3600, 3600), handler = function() end})
for _, it in ipairs(q:items()) do
    print(it.key, it.state, it.attempt, (it.last_error:gsub("\n", "|")))
end
wq.exit(0)
LUA
)
run --quiet --db "$FDB" "$relist"
expect_eq "$OUT" "$(printf 'f1\twaiting\t2\tdisk full on /var|second line\nf2\twaiting\t2\tdisk full on /var|second line')" \
    "restarted: q:items has the attempt and the last error back"

run pause --db "$DB" idle
expect_rc 0 "pause"
expect_eq "$OUT" "paused queue 'idle'" "pause says what it did"
expect_eq "$(sql "$DB" "SELECT paused FROM queues WHERE name = 'idle'")" "1" "queues.paused is 1"
run pause --db "$DB" idle
expect_rc 0 "pause again"
expect_eq "$OUT" "queue 'idle' was paused already" "pausing twice says so"
run remove --db "$DB" idle "sp ace"
expect_rc 0 "remove"
expect_eq "$OUT" "removed 'sp ace' from queue 'idle'" "remove says what it did"
expect_eq "$(sql "$DB" "SELECT count(*) FROM items WHERE key = 'sp ace'")" "0" "the row is gone"
run remove --db "$DB" idle "sp ace"
expect_rc 1 "remove of a key that is not there"
expect_in "$ERR" "no queued or delayed item 'sp ace' in queue 'idle'" "names key and queue"
run remove --db "$DB" nope k
expect_rc 1 "unknown queue"
expect_in "$ERR" "no queue 'nope'" "names the queue"
run cancel --db "$DB" idle a/b
expect_rc 1 "cancel without a runner"
expect_in "$ERR" "'a/b' is not processing" "nothing runs without a runner"
run retry --db "$DB" mail bad1
expect_rc 0 "retry one"
expect_eq "$OUT" "re-queued dead letter 'bad1' of queue 'mail'" "retry says what it did"
expect_eq "$(sql "$DB" "SELECT state, payload FROM items WHERE key = 'bad1';
                        SELECT count(*) FROM dead WHERE key = 'bad1';
                        SELECT count(*) FROM failures WHERE key = 'bad1'")" 'queued {"to":"ada"}
0
0' "the dead letter is queued again with its payload and a clean failure count"
run retry --db "$DB" mail bad1
expect_rc 1 "retry of a key that is not dead"
expect_in "$ERR" "no dead letter 'bad1' in queue 'mail'"
run retry --db "$DB" mail --all
expect_rc 0 "retry --all"
expect_eq "$OUT" "re-queued 2 dead letters of queue 'mail'" "retry --all counts"
expect_eq "$(sql "$DB" "SELECT group_concat(key) FROM (SELECT key FROM items WHERE queue = 'mail'
                        ORDER BY seq)")" "bad1,bad2,bad3" "retried in their order, after the earlier one"
run purge-dead --db "$DB" mail
expect_rc 0 "purge-dead"
expect_eq "$OUT" "purged 0 dead letters of queue 'mail'" "nothing left to purge"
expect_eq "$(sql "$DB" "SELECT count(*) FROM commands")" "0" "applied directly: no command rows"

run retry --db "$DB" mail
expect_rc 2 "retry without KEY or --all"
run pause --db "$DB"
expect_rc 2 "pause without QUEUE"
run items --db "$DB" idle --state bogus
expect_rc 2 "items --state bogus"
run remove --db "$TMP/missing.db" q k
expect_rc 1 "a missing state file"
expect_in "$ERR" "no state file at"

# A paused queue stays paused: a run hands nothing out, and its items keep nothing alive.
run remove --db "$DB" idle later
expect_eq "$OUT" "removed 'later' from queue 'idle'" "remove of a delayed item"
paused=$(script paused.lua <<'LUA'
local ran = 0
local q = wq.queue("idle", {handler = function() ran = ran + 1 end})
print(("paused %s %s"):format(q:paused(), q:stats().paused))
wq.sleep(0.2)
print("ran " .. ran)
LUA
)
run --quiet --db "$DB" "$paused"
expect_rc 0 "a run on the paused queue exits"
expect_in "$OUT" "paused true true" "q:paused() and stats().paused say so"
expect_in "$OUT" "ran 0" "nothing was handed out"
run resume --db "$DB" idle
expect_eq "$OUT" "resumed queue 'idle'" "resume"
run --quiet --db "$DB" "$paused"
expect_in "$OUT" "ran 2" "resumed: both queued items ran"

# ====================================================== with a runner: the commands table
serve=$(script serve.lua <<'LUA'
local log = io.open(arg[1], "a")
local function note(...) log:write(table.concat({...}, " "), "\n"); log:flush() end
local mail = wq.queue("mail", {max_retries = 0, handler = function(key)
    note("ran", key)
    if key:match("^slow") then
        local r = wq.exec({"sleep", "31.25"})
        note("exec returned", key, tostring(r.status))
    elseif key:match("^bad") then
        error("bad " .. key)
    end
end})
local idle = wq.queue("idle")
note("started")
LUA
)
LOG=$TMP/serve.log
: >"$LOG"
"$WQRUN" --quiet --serve --db "$DB" "$serve" "$LOG" 2>"$TMP/serve.err" &
SPID=$!
PIDS+=("$SPID")
wait_for "$LOG" started 1 5 || fail "runner did not start"

run pause --db "$DB" mail
expect_rc 0 "pause through the runner"
expect_eq "$OUT" "paused queue 'mail'" "the runner's answer"
expect_between "$ELAPSED" 0 1.5 "answered within the tick (100 ms) plus start-up"
run add --db "$DB" mail m1
sleep 0.4
expect_eq "$(grep -c 'ran m1' "$LOG")" "0" "paused: the added item is not handed out"
run items --db "$DB" mail
expect_re "$OUT" '^m1 +queued' "items shows it queued"
run resume --db "$DB" mail
expect_rc 0 "resume through the runner"
wait_for "$LOG" "ran m1" 1 3
check "resumed: the item runs" grep -q "ran m1" "$LOG"

run add --db "$DB" idle d1 --after 3600
sleep 0.2
run remove --db "$DB" idle d1
expect_rc 0 "remove of a delayed item through the runner"
expect_eq "$OUT" "removed 'd1' from queue 'idle'" "what it prints"
expect_eq "$(sql "$DB" "SELECT count(*) FROM items WHERE key = 'd1'")" "0" "its row is gone"
run remove --db "$DB" idle d1
expect_rc 1 "remove again"
expect_in "$ERR" "no queued or delayed item 'd1'"
run pause --db "$DB" nope
expect_rc 1 "a queue the runner does not define"
expect_in "$ERR" "no such queue 'nope'"

run add --db "$DB" mail slow1
wait_for "$LOG" "ran slow1" 1 3
check "the sleep child runs" bash -c 'pgrep -f "^sleep 31.25" >/dev/null'
run remove --db "$DB" mail slow1
expect_rc 1 "remove of a processing key"
expect_in "$ERR" "'slow1' is processing"
run cancel --db "$DB" mail slow1
expect_rc 0 "cancel of the running handler"
expect_eq "$OUT" "cancelled 'slow1' in queue 'mail'" "cancel says what it did"
expect_between "$ELAPSED" 0 1.5 "cancelled at once"
sleep 0.2
check "the handler's wq.exec child was killed" bash -c '! pgrep -f "^sleep 31.25"'
expect_eq "$(grep -c 'exec returned' "$LOG")" "0" "the handler got an error at its yield"
expect_eq "$(sql "$DB" "SELECT count(*) FROM items WHERE key = 'slow1';
                        SELECT count(*) FROM dead WHERE key = 'slow1'")" "0
0" "neither retried nor dead-lettered"
run cancel --db "$DB" mail slow1
expect_rc 1 "cancel of a key that is not pending"
run add --db "$DB" mail bad9
wait_for "$LOG" "ran bad9" 1 3
sleep 0.2
run retry --db "$DB" mail bad9
expect_rc 0 "retry through the runner"
wait_for "$LOG" "ran bad9" 2 3
check "the retried key ran again" test "$(grep -c 'ran bad9' "$LOG")" -ge 2
sleep 0.2
run purge-dead --db "$DB" mail
expect_rc 0 "purge-dead through the runner"
expect_eq "$OUT" "purged 4 dead letters of queue 'mail'" \
    "bad9, and bad1-3 (retried without a runner, dead again in this one)"
expect_eq "$(sql "$DB" "SELECT count(*) FROM commands")" "0" \
    "a command line that printed the outcome deletes its row"

# Hand-written garbage: logged once, marked failed, never retried.
sql "$DB" "INSERT INTO commands(queue, op) VALUES ('mail', 'frobnicate');
           INSERT INTO commands(queue, op, key) VALUES ('mail', 'remove', NULL);
           INSERT INTO commands(queue, op, key) VALUES ('ghost', 'pause', NULL);
           INSERT INTO commands(queue, op, key) VALUES ('mail', 'retry', x'00ff');"
for _ in $(seq 200); do # the runner reads the commands table every 100 ms
    [ "$(sql "$DB" "SELECT count(*) FROM commands WHERE state = 'failed'")" = 4 ] && break
    sleep 0.05
done
expect_eq "$(sql "$DB" "SELECT op, state FROM commands ORDER BY id")" "frobnicate failed
remove failed
pause failed
retry failed" "every garbage row is marked failed"
expect_in "$(sql "$DB" "SELECT result FROM commands WHERE op = 'frobnicate'")" "unknown op 'frobnicate'"
sleep 0.4
ERR=$(cat "$TMP/serve.err")
expect_count "$ERR" "unknown op 'frobnicate'" 1 "logged once"
expect_count "$ERR" "remove needs a key" 1 "logged once"
expect_count "$ERR" "no such queue 'ghost'" 1 "logged once"
check "the runner is still running" kill -0 "$SPID"
kill -TERM "$SPID"
wait_exit "$SPID" 10
expect_eq "$RC" "0" "the runner stops on SIGTERM"

# ====================================================== kill -9 between reading and committing
mailq=$(script mailq.lua <<'LUA'
wq.queue("mail", {max_retries = 0, handler = function(key) error("still down: " .. key) end})
wq.queue("idle")
print("up")
io.stdout:flush()
LUA
)
CDB=$TMP/crash.db
crash_case() { # crash_case WHEN: a runner dies at WHEN on a hand-written command; the next applies it once
    local when=$1
    rm -f "$CDB" "$CDB-wal" "$CDB-shm"
    run --quiet --db "$CDB" "$fill"
    sql "$CDB" "INSERT INTO commands(queue, op, key) VALUES ('mail', 'retry', 'bad2')"
    WQ_TEST_KILL_AT_COMMAND=$when timeout -s KILL 20 "$WQRUN" --quiet --serve --db "$CDB" "$mailq" \
        >/dev/null 2>"$TMP/crash.err"
    expect_eq "$?" "137" "$when: the runner was killed (SIGKILL) at the command"
    expect_eq "$(sql "$CDB" "SELECT state FROM commands; SELECT count(*) FROM dead WHERE key = 'bad2';
                             SELECT count(*) FROM items WHERE key = 'bad2'")" "new
1
0" "$when: nothing of the command reached the file"
    run --quiet --db "$CDB" "$mailq"
    expect_rc 3 "$when: the next run (without --serve: it applies pending commands before it exits; bad2 dies again: 3)"
    expect_count "$ERR" "re-queued dead letter 'bad2'" 1 "$when: the restarted runner applies it once"
    expect_eq "$(sql "$CDB" "SELECT state, result FROM commands")" \
        "done re-queued dead letter 'bad2' of queue 'mail'" "$when: the row says so"
}
crash_case received
crash_case applied

# The command line waits while the runner dies: it applies the command itself, once.
rm -f "$CDB" "$CDB-wal" "$CDB-shm"
run --quiet --db "$CDB" "$fill"
WQ_TEST_KILL_AT_COMMAND=applied "$WQRUN" --quiet --serve --db "$CDB" "$mailq" >"$TMP/crash.out" 2>&1 &
CPID=$!
PIDS+=("$CPID")
wait_for "$TMP/crash.out" up 1 5
run retry --db "$CDB" mail --all
expect_rc 0 "the command outlives its runner"
expect_eq "$OUT" "re-queued 3 dead letters of queue 'mail'" "and is applied by the command line"
wait_exit "$CPID" 5
expect_eq "$RC" "137" "the runner died at the command"
expect_eq "$(sql "$CDB" "SELECT count(*) FROM dead; SELECT count(*) FROM items WHERE queue = 'mail';
                         SELECT count(*) FROM commands")" "0
3
0" "applied once: dead letters queued, the row gone"
run --quiet --db "$CDB" "$mailq"
expect_not_in "$ERR" "command" "the next runner finds nothing left to apply"

# ====================================================== show, dead, items --state dead
SDB=$TMP/show.db
sfill=$(script sfill.lua <<'LUA'
local s = wq.queue("s", {keep_done = 3600, max_retries = 0, handler = function(key)
    if key == "bad" then error("fatal\nsecond line", 0) end
    if key == "ok" then return {rows = 3} end
end})
s:add("ok")
s:add("bad", {n = 1})
s:add("plain")
wq.sleep(0.1)
local idle = wq.queue("si")
idle:add("a/b c", {n = 1}, {priority = 5, group = "g"})
idle:add_after("later", 3600)
LUA
)
run --quiet --db "$SDB" "$sfill"
expect_rc 3 "fill a state file with keys in every state (one dead: 3)"
run show --db "$SDB" si "a/b c"
expect_rc 0 "show of a queued key"
expect_re "$OUT" '^key +a/b c$' "show: the key"
expect_re "$OUT" '^state +queued$' "show: queued"
expect_re "$OUT" '^payload +\{"n":1\}$' "show: its payload"
expect_re "$OUT" '^priority +5$' "show: its priority"
expect_re "$OUT" '^group +g$' "show: its group"
expect_re "$OUT" '^attempt +1$' "show: attempt 1"
run show --db "$SDB" si later --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["state"], d["ready_at"] > 0, d["attempt"], d["last_error"], sorted(d))')" \
    "waiting True 1 None ['attempt', 'group', 'key', 'last_error', 'payload', 'priority', 'ready_at', 'state']" \
    "show --json of a delayed key: waiting, ready_at, the listing's fields"
run show --db "$SDB" s ok
expect_rc 0 "show of a done key"
expect_re "$OUT" '^state +done$' "show: done"
expect_re "$OUT" '^finished at +[0-9]{4}-[0-9-]+ [0-9:]+ UTC$' "show: finished at, in UTC"
expect_re "$OUT" '^result +\{"rows":3\}$' "show: its result"
run show --db "$SDB" s ok --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["state"], d["result"], d["finished_at"] > 1e9, sorted(d))')" \
    "done {'rows': 3} True ['finished_at', 'key', 'result', 'state']" "show --json of a done key"
run show --db "$SDB" s bad
expect_rc 0 "show of a dead key"
expect_re "$OUT" '^state +dead$' "show: dead"
expect_re "$OUT" '^attempts +1$' "show: its attempts"
expect_re "$OUT" '^error +fatal$' "show: its error"
expect_re "$OUT" '^ +second line$' "show: the error's next line, indented"
run show --db "$SDB" s bad --json
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["state"], d["payload"], repr(d["error"]), d["attempts"], d["failed_at"] > 1e9, sorted(d))')" \
    "dead {'n': 1} 'fatal\\nsecond line' 1 True ['attempts', 'error', 'failed_at', 'key', 'payload', 'state', 'traceback']" \
    "show --json of a dead key"
run show --db "$SDB" s nope
expect_rc 1 "show of an unknown key"
expect_eq "$ERR" "wqrun: show: no such key 'nope' in queue 's' (not pending, done or dead)" \
    "show says no such key, and nothing else"
run show --db "$SDB" nosuch k
expect_rc 1 "show in an unknown queue"
expect_in "$ERR" "no queue 'nosuch'" "show names the unknown queue"
run show --db "$SDB" s
expect_rc 2 "show without a key"
run dead --db "$SDB" s
expect_rc 0 "dead"
expect_re "$OUT" '^KEY +ATTEMPTS +FAILED AT \(UTC\) +ERROR$' "dead prints a header"
expect_re "$OUT" '^bad +1 +[0-9]{4}-[0-9-]+ [0-9:]+ +fatal$' "dead: key, attempts, failed at, the error's first line"
expect_not_in "$OUT" "second line" "dead: the first line only"
run items --db "$SDB" s --state dead --json
expect_rc 0 "items --state dead"
expect_eq "$(printf '%s' "$OUT" | python3 -c 'import json,sys; print([(d["key"], d["payload"], d["error"], d["attempts"]) for d in json.load(sys.stdin)])')" \
    "[('bad', {'n': 1}, 'fatal\\nsecond line', 1)]" "items --state dead --json lists the dead letters"
run dead --db "$SDB" si
expect_eq "$OUT" "KEY                       ATTEMPTS  FAILED AT (UTC)      ERROR" "no dead letters: the header only"
# Pending wins: a re-added dead key shows queued (with its failure count gone).
sql "$SDB" "INSERT INTO items(queue, key, payload, state, priority, seq, added_at, updated_at)
            VALUES ('s', 'bad', NULL, 'queued', 0, 999, 0, 0)"
run show --db "$SDB" s bad
expect_re "$OUT" '^state +queued$' "a key both pending and dead shows pending"
# While a runner holds the file: read from it, a running key is processing.
srun=$(script srun.lua <<'LUA'
local s = wq.queue("s", {keep_done = 3600, max_retries = 0, handler = function(key)
    if key == "slow" then wq.sleep(60) end
end})
s:add("slow")
print("up")
io.stdout:flush()
LUA
)
"$WQRUN" --quiet --serve --grace 1 --db "$SDB" "$srun" >"$TMP/srun.out" 2>&1 &
SPID=$!
PIDS+=("$SPID")
wait_for "$TMP/srun.out" up 1 5
check "the running key is processing in the file" bash -c \
    "for i in \$(seq 50); do '$WQRUN' show --db '$SDB' s slow | grep -q '^state *processing\$' && exit 0; sleep 0.1; done; exit 1"
kill -TERM "$SPID"
wait_exit "$SPID" 10

finish
