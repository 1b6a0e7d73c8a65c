#!/usr/bin/env bash
# The command line end to end: --version/--help, usage errors (status 2),
# Lua errors with file:line and a traceback (status 1), wq.exit codes, the
# idle exit rule, arg, module paths, wq.log; an unknown subcommand (named,
# with the list of commands), `wqrun add --priority` and its warning for a
# queue the state file has never seen; `wqrun add --unique`.
. "$(dirname "$0")/lib.sh"

if ! command -v sqlite3 >/dev/null; then
    echo "FAIL: test_cli needs the sqlite3 shell (apt-get install sqlite3)" >&2
    exit 1
fi

# ---- --version, --help -------------------------------------------------------
run --version
expect_rc 0 "--version"
expect_re "$OUT" '^wqrun [0-9]+\.[0-9]+' "--version prints 'wqrun X.Y'"
run -v
expect_rc 0 "-v"
run --help
expect_rc 0 "--help"
expect_in "$OUT" "usage: wqrun" "--help prints the usage on stdout"
for opt in --db --listen --grace --sync --serve --quiet --virtual-time; do
    expect_in "$OUT" "$opt" "--help mentions $opt"
done
run -h
expect_rc 0 "-h"

# ---- usage errors: status 2 ------------------------------------------------------
run --no-such-option x.lua
expect_rc 2 "unknown option"
expect_in "$ERR" "--no-such-option" "the message names the unknown option"
expect_in "$ERR" "(wqrun --help lists the commands and options)" "and says where the usage is"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" 1 "in one line (not the whole help)"
run
expect_rc 2 "no script"
expect_in "$ERR" "SCRIPT" "missing script is explained"
run --quiet
expect_rc 2 "options but no script"
run --grace
expect_rc 2 "--grace without a value"
run --grace abc x.lua
expect_rc 2 "--grace abc"
run --grace=-1 x.lua
expect_rc 2 "--grace=-1"
run --sync sometimes x.lua
expect_rc 2 "--sync sometimes"
# every malformed --listen value is a usage error naming --listen (checked
# before the script is loaded: x.lua does not exist)
for v in nocolon 127.0.0.1:abc 127.0.0.1: 127.0.0.1:99999 127.0.0.1:0 127.0.0.1:-1 \
    127.0.0.1:+80 127.0.0.1:8080x :8080 ::1:8080 '[::1:8080' '[]:8080' ''; do
    run --listen "$v" x.lua
    expect_rc 2 "--listen '$v'"
    expect_in "$ERR" "--listen '$v'" "the message for '$v' names --listen and the value"
    expect_in "$ERR" "wqrun --help" "and says where the usage is, for '$v'"
done
run --listen=127.0.0.1:0 x.lua
expect_rc 2 "--listen=127.0.0.1:0"
expect_in "$ERR" "1 to 65535" "port 0 is refused with the valid range"
run --listen :8080 x.lua
expect_in "$ERR" "0.0.0.0:PORT" "':8080' says how to name every interface"

# a script path that does not exist: an error naming it (not a crash)
run --quiet "$TMP/does-not-exist.lua"
check "missing script file: non-zero status" test "$RC" -ne 0
expect_in "$ERR" "does-not-exist.lua" "the message names the missing file"

# ---- a script that works -------------------------------------------------------------
ok=$(script ok.lua <<'EOF'
print("hello from", arg[0], select("#", ...), ...)
print("arg", arg[1], arg[2], #arg)
EOF
)
run --quiet "$ok" one "two words"
expect_rc 0 "a plain script"
expect_in "$OUT" "hello from	$ok	2	one	two words" "arg[0] and ... like lua"
expect_in "$OUT" "arg	one	two words	2" "the global arg"
run --quiet -- "$ok" --not-an-option
expect_rc 0 "'--' ends the options"
expect_in "$OUT" "arg	--not-an-option" "arguments after the script are the script's"
# a well-formed --listen address that cannot be bound is a runtime failure
# (status 1), not a usage error (192.0.2.1 is TEST-NET-1: never local)
run --quiet --listen 192.0.2.1:8080 "$ok"
expect_rc 1 "--listen on an address that is not local"
expect_in "$ERR" "cannot listen" "the message says it cannot listen there"
run --quiet "$ok" --grace 5
expect_rc 0 "options after the script belong to it"
expect_in "$OUT" "arg	--grace	5" "passed through"

# ---- syntax error: status 1 with file:line -----------------------------------------
syn=$(script syntax.lua <<'EOF'
local x = 1
local y = = 2
EOF
)
run --quiet "$syn"
expect_rc 1 "syntax error"
expect_in "$ERR" "syntax.lua:2:" "syntax error names file:line"

# ---- runtime error in the main chunk: status 1, file:line, traceback ----------------
rte=$(script runtime.lua <<'EOF'
local function inner()
    error("main chunk failed")
end
local function outer()
    inner()
end
print("before")
outer()
print("not reached")
EOF
)
run --quiet "$rte"
expect_rc 1 "runtime error in the main chunk"
expect_in "$ERR" "runtime.lua:2: main chunk failed" "message with file:line"
expect_in "$ERR" "stack traceback" "a traceback"
expect_in "$ERR" "runtime.lua:5" "the traceback names the calling line"
expect_in "$OUT" "before" "output before the error is there"
expect_not_in "$OUT" "not reached" "nothing runs after the error"

# an error after a wait (the main chunk resumed by the loop)
rte2=$(script runtime2.lua <<'EOF'
wq.sleep(0.01)
local t = nil
print(t.field)
EOF
)
run --quiet "$rte2"
expect_rc 1 "runtime error after a sleep"
expect_in "$ERR" "runtime2.lua:3:" "file:line after a resume"
expect_in "$ERR" "stack traceback" "traceback after a resume"

# a non-string error object
rte3=$(script runtime3.lua <<'EOF'
error({code = 1})
EOF
)
run --quiet "$rte3"
expect_rc 1 "a table error object"
check "a table error object: some message" test -n "$ERR"

# an error object whose __tostring fails: still status 1 and a message, no Lua panic
rte4=$(script runtime4.lua <<'EOF'
error(setmetatable({}, {__tostring = function() error("broken too") end}))
EOF
)
run --quiet "$rte4"
expect_rc 1 "an error object with a failing __tostring"
expect_in "$ERR" "error object is a table value" "a failing __tostring: the error is named by its type"
expect_in "$ERR" "runtime4.lua:1" "a failing __tostring: the traceback has file:line"

# ---- errors in spawned tasks and timer callbacks end the process with 1 -------------
task=$(script task.lua <<'EOF'
wq.spawn(function()
    wq.sleep(0.01)
    error("task blew up")
end)
wq.sleep(1)
print("main went on")
EOF
)
run --quiet "$task"
expect_rc 1 "error in a spawned task"
expect_in "$ERR" "task.lua:3: task blew up" "task error with file:line"
expect_in "$ERR" "stack traceback" "task error traceback"
expect_not_in "$OUT" "main went on" "the process ended at the error"
check "task error: ended at once, not after the main chunk's sleep" \
    awk -v e="$ELAPSED" 'BEGIN { exit !(e < 0.9) }'

timer=$(script timer.lua <<'EOF'
wq.after(0.01, function()
    local x = {}
    x.y.z = 1
end)
wq.sleep(1)
print("main went on")
EOF
)
run --quiet "$timer"
expect_rc 1 "error in a timer callback"
expect_in "$ERR" "timer.lua:3:" "timer error with file:line"
expect_in "$ERR" "stack traceback" "timer error traceback"
expect_not_in "$OUT" "main went on" "the process ended at the timer error"

every=$(script every.lua <<'EOF'
local n = 0
wq.every(0.01, function()
    n = n + 1
    if n == 3 then error("third tick") end
end)
EOF
)
run --quiet "$every"
expect_rc 1 "error in a periodic callback"
expect_in "$ERR" "every.lua:4: third tick" "periodic callback error"

# ---- an error in a handler is a job failure, not a crash ---------------------------
hand=$(script handler.lua <<'EOF'
local q = wq.queue("h", {max_retries = 0, handler = function(k)
    error("handler failed for " .. k)
end})
q:add("x")
wq.sleep(0.05)
print("alive", q:stats().dead)
EOF
)
run --quiet "$hand"
expect_rc 3 "handler errors do not end the process (exit 3 at the end: a key was dead-lettered)"
expect_in "$OUT" "alive	1" "the job is dead, the process alive"
expect_in "$ERR" "handler.lua:2: handler failed for x" "the dead-letter log names the error"

# ---- wq.exit -------------------------------------------------------------------------
for spec in "3:3" "0:0" ":0" "true:0" "false:1" "255:255"; do
    arg=${spec%%:*}
    want=${spec#*:}
    ex=$(script "exit_$want.lua" <<EOF
print("before")
wq.exit($arg)
print("after exit")
EOF
)
    run --quiet "$ex"
    expect_rc "$want" "wq.exit($arg)"
    expect_not_in "$OUT" "after exit" "wq.exit($arg) ends at once"
done

exitt=$(script exit_task.lua <<'EOF'
local q = wq.queue("q", {handler = function(k)
    if k == "stop" then wq.exit(4) end
end})
q:add("a")
q:add("stop")
wq.sleep(100)
EOF
)
run --quiet "$exitt"
expect_rc 4 "wq.exit from a handler"
check "wq.exit from a handler ends at once" awk -v e="$ELAPSED" 'BEGIN { exit !(e < 5) }'

exitt2=$(script exit_timer.lua <<'EOF'
wq.after(0.01, function() wq.exit(5) end)
wq.spawn(function() wq.sleep(100) end)
wq.sleep(100)
EOF
)
run --quiet "$exitt2"
expect_rc 5 "wq.exit from a timer callback, other tasks sleeping"

exitc=$(script exit_children.lua <<'EOF'
wq.spawn(function() wq.exec({"sleep", "30"}) end)
wq.sleep(0.1)
wq.exit(6)
EOF
)
run --quiet "$exitc"
expect_rc 6 "wq.exit while a child runs"
check "wq.exit does not wait for the child" awk -v e="$ELAPSED" 'BEGIN { exit !(e < 10) }'

# ---- idle exit -------------------------------------------------------------------------
idle1=$(script idle_handler.lua <<'EOF'
local q = wq.queue("work", {workers = 2, handler = function(k)
    wq.sleep(0.01)
    print("processed " .. k)
end})
for i = 1, 10 do q:add(i) end
q:add_after("late", 0.2)
-- the main chunk ends here; the process must finish the work, then exit
EOF
)
run --quiet "$idle1"
expect_rc 0 "idle exit after the handler queue is processed"
expect_count "$OUT" "processed " 11 "every item was processed before exiting"
expect_in "$OUT" "processed late" "including the delayed one"
check "idle exit: no lingering" awk -v e="$ELAPSED" 'BEGIN { exit !(e < 10) }'

idle2=$(script idle_nohandler.lua <<'EOF'
local q = wq.queue("store-only")
q:add("a")
q:add("b")
print("added", q:len())
EOF
)
run --quiet "$idle2"
expect_rc 0 "a queue without a handler does not keep the process alive"
expect_in "$OUT" "added	2"
check "exits at once" awk -v e="$ELAPSED" 'BEGIN { exit !(e < 5) }'

idle3=$(script idle_get.lua <<'EOF'
local q = wq.queue("empty")
wq.spawn(function()
    print("waiting in get")
    local k = q:get()
    print("get returned", k)
end)
print("main done")
EOF
)
run --quiet "$idle3"
expect_rc 0 "a task blocked in get does not keep the process alive"
expect_in "$OUT" "waiting in get"
expect_not_in "$OUT" "get returned" "the get never returned"
check "exits at once" awk -v e="$ELAPSED" 'BEGIN { exit !(e < 5) }'

idle4=$(script idle_main_get.lua <<'EOF'
local q = wq.queue("empty")
print("main waits")
q:get()
print("never")
EOF
)
run --quiet "$idle4"
expect_rc 0 "the main chunk blocked in get: idle, exit 0"
expect_not_in "$OUT" "never"

idle5=$(script idle_timer.lua <<'EOF'
wq.after(0.3, function() print("timer fired") end)
local tm = wq.after(100, function() print("cancelled timer fired") end)
tm:cancel()
EOF
)
run --quiet "$idle5"
expect_rc 0 "pending timer"
expect_in "$OUT" "timer fired" "a pending timer keeps the process alive until it fires"
expect_not_in "$OUT" "cancelled timer fired" "a cancelled timer does not"
check "and a cancelled one does not hold it" awk -v e="$ELAPSED" 'BEGIN { exit !(e < 5) }'

idle6=$(script idle_exec.lua <<'EOF'
wq.spawn(function()
    local r = wq.exec({"sh", "-c", "sleep 0.3; echo child done"})
    io.write(r.stdout)
end)
EOF
)
run --quiet "$idle6"
expect_rc 0 "running child"
expect_in "$OUT" "child done" "a running child keeps the process alive"

idle7=$(script idle_grandchild.lua <<'EOF'
local r = wq.exec({"sh", "-c", "(sleep 0.3; echo grandchild) & echo child"})
io.write(r.stdout)
print("exec finished")
EOF
)
run --quiet "$idle7"
expect_rc 0 "exec waiting for a grandchild's output"
expect_in "$OUT" "exec finished" "an unfinished exec (pipes still open) keeps the process alive"
expect_in "$OUT" "grandchild"

idle8=$(script idle_every.lua <<'EOF'
local n = 0
local tm
tm = wq.every(0.01, function()
    n = n + 1
    if n == 5 then tm:cancel(); print("ticks", n) end
end)
EOF
)
run --quiet "$idle8"
expect_rc 0 "periodic timer cancelled after 5 ticks"
expect_in "$OUT" "ticks	5"

# ---- modules: next to the script and in the project's lua/ directory ----------------
mkdir -p "$TMP/proj/sub"
cat >"$TMP/proj/helper.lua" <<'EOF'
return { answer = 42 }
EOF
cat >"$TMP/proj/sub/init.lua" <<'EOF'
return { name = "sub" }
EOF
cat >"$TMP/proj/main.lua" <<'EOF'
local h = require "helper"
local s = require "sub"
local t = require "wqtest"
print("modules", h.answer, s.name, type(t.eq))
t.ok(true)
t.done()
EOF
(cd / && timeout 30 "$WQRUN" --quiet "$TMP/proj/main.lua" >"$TMP/mod.out" 2>"$TMP/mod.err")
RC=$?
OUT=$(cat "$TMP/mod.out")
ERR=$(cat "$TMP/mod.err")
LAST_CMD="(cd / && wqrun --quiet $TMP/proj/main.lua)"
expect_rc 0 "modules next to the script, from another directory"
expect_in "$OUT" "modules	42	sub	function" "script dir, dir/init.lua and the project's lua/ dir"
LAST_CMD="(cd $TMP/proj && wqrun --quiet main.lua)"
(cd "$TMP/proj" && timeout 30 "$WQRUN" --quiet main.lua >"$TMP/mod.out" 2>"$TMP/mod.err")
RC=$?
OUT=$(cat "$TMP/mod.out")
ERR=$(cat "$TMP/mod.err")
expect_rc 0 "a relative script path"
expect_in "$OUT" "modules	42	sub	function"

# ---- wq.log: timestamped lines on stderr ----------------------------------------------
logs=$(script log.lua <<'EOF'
wq.log("hello %s %d", "world", 7)
wq.log("single")
print("stdout line")
EOF
)
run --quiet "$logs"
expect_rc 0 "wq.log"
expect_re "$ERR" '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{2}:[0-9]{2} INFO hello world 7$' \
    "wq.log: timestamp with the time zone's offset, level and formatted message"
expect_re "$ERR" ' single$' "wq.log with one argument"
expect_not_in "$OUT" "hello world" "wq.log does not write to stdout"

# ---- --quiet and a non-TTY stderr: no progress escape codes --------------------------
run "$idle1"
expect_rc 0 "without --quiet"
expect_not_in "$ERR" $'\r' "no progress line when stderr is not a TTY"
expect_not_in "$ERR" $'\033[' "no escape codes when stderr is not a TTY"

# ---- require "wq" ----------------------------------------------------------------------
req=$(script req.lua <<'EOF'
local w = require "wq"
print("same", w == wq, type(w.queue), type(w.limiter.default), type(w.backoff))
EOF
)
run --quiet "$req"
expect_rc 0 'require "wq"'
expect_in "$OUT" "same	true	function	function	function"

# ---- subcommands: an unknown one is named, with the list (issue 19) -------------------
run paus --db "$TMP/cmd.db" webhooks
expect_rc 2 "an unknown command"
expect_in "$ERR" "wqrun: unknown command 'paus'" "the message names the unknown command"
expect_in "$ERR" "commands: add status pause resume remove cancel retry purge-dead items show dead" \
    "and lists the commands"
expect_not_in "$ERR" "cannot open" "not taken for a script"
check "an unknown command writes no file" test ! -e "$TMP/cmd.db"
run --quiet statsu
expect_rc 2 "an unknown command after options"
expect_in "$ERR" "unknown command 'statsu'" "named after options too"
run --quiet add --db "$TMP/cmd.db" q k
expect_rc 2 "a command after an option"
expect_in "$ERR" "the command 'add' comes first" "says where a command goes"
# a script path without .lua that exists still runs; a missing .lua path is still a script
noext=$(script runme <<'EOF'
print("no extension ran")
EOF
)
run --quiet "$noext"
expect_rc 0 "a script without .lua that exists"
expect_in "$OUT" "no extension ran" "it runs"
run --quiet "$TMP/missing.lua"
check "a missing .lua script: non-zero status" test "$RC" -ne 0
expect_not_in "$ERR" "unknown command" "a .lua path is a script, not a command"

# ---- wqrun add --priority and a queue the file has never seen (issue 19) -----------------
run add --help
expect_rc 0 "add --help"
expect_in "$OUT" "--priority N" "add --help shows --priority"
run --help
expect_in "$OUT" "--priority N" "--help shows add --priority"
DB=$TMP/prio.db
for bad in abc 1.5 2147483648 -2147483649 ''; do
    run add --db "$DB" jobs k --priority "$bad"
    expect_rc 2 "--priority '$bad'"
    expect_in "$ERR" "bad argument '--priority' (32-bit integer expected, got '$bad')" \
        "--priority '$bad': the message names the option and the value"
done
check "refused adds create no file" test ! -e "$DB"
run add --db "$DB" jobs low1
expect_rc 0 "add to a queue the file has never seen: still exit 0"
expect_in "$ERR" "warning: no runner has defined queue 'jobs' in $DB" "warns on stderr"
run add --db "$DB" jobs low2 --priority -1
expect_rc 0 "add --priority -1"
run add --db "$DB" jobs high --priority=2147483647
expect_rc 0 "add --priority=2147483647"
run add --db "$DB" jobs mid '{"m":1}' --priority 5
expect_rc 0 "add --priority 5 with a payload"
expect_eq "$(sqlite3 "$DB" "SELECT key, coalesce(priority, 'none') FROM inbox ORDER BY id")" \
    "low1|none
low2|-1
high|2147483647
mid|5" "the rows wait in the inbox with their priorities"
order=$(script order.lua <<'EOF'
wq.queue("jobs", {workers = 1, handler = function(key) print("ran " .. key) end})
EOF
)
run --quiet --db "$DB" "$order"
expect_rc 0 "a script that defines the queue runs the rows"
expect_eq "$(printf '%s\n' "$OUT" | grep '^ran ')" "ran high
ran mid
ran low1
ran low2" "the highest priority runs first, then FIFO within a priority"
expect_eq "$(sqlite3 "$DB" "SELECT count(*) FROM inbox")" "0" "the inbox is empty after the run"
run add --db "$DB" jobs again
expect_rc 0 "add to a queue a runner has defined"
expect_not_in "$ERR" "warning" "no warning for a known queue"
run add --db "$DB" jbos typo
expect_rc 0 "add to a misspelled queue"
expect_in "$ERR" "queue 'jbos'" "the warning names the misspelled queue"
# an inbox row whose priority is not a 32-bit integer stays, reported once; the others run
sqlite3 "$DB" "INSERT INTO inbox(queue, key, priority) VALUES ('jobs', 'badp', 1.5),
  ('jobs', 'bigp', 4294967296), ('jobs', 'textp', 'high'), ('jobs', 'okp', '-3')"
run --quiet --db "$DB" "$order"
expect_rc 0 "a run with bad inbox priorities"
expect_eq "$(printf '%s\n' "$OUT" | grep '^ran ' | sort)" "ran again
ran okp" "the rows with a good priority ran"
expect_count "$ERR" "inbox rows for queue 'jobs' stay in the inbox: a priority that is not a 32-bit integer" 1 \
    "the bad priorities are reported once"
expect_eq "$(sqlite3 "$DB" "SELECT key FROM inbox WHERE queue = 'jobs' ORDER BY id")" "badp
bigp
textp" "and their rows stay in the inbox"
# a version-2 file has no inbox.priority: --priority says so and leaves the file alone
V2=$TMP/v2.db
sqlite3 "$V2" "PRAGMA application_id = 2003923573; PRAGMA user_version = 2;
  CREATE TABLE queues(name TEXT PRIMARY KEY, seen_at REAL);
  CREATE TABLE items(queue TEXT, key TEXT); CREATE TABLE dead(queue TEXT, key TEXT);
  CREATE TABLE inbox(id INTEGER PRIMARY KEY, queue TEXT, key TEXT, payload TEXT, after REAL,
    created_at REAL, grp TEXT)"
run add --db "$V2" jobs k --priority 3
expect_rc 1 "--priority on a version-2 file"
expect_in "$ERR" "--priority needs a state file of version 3; $V2 is of version 2" \
    "says which version --priority needs"
expect_eq "$(sqlite3 "$V2" "SELECT count(*) FROM inbox; PRAGMA user_version")" "0
2" "no row, still version 2"

# ---- wqrun add --unique: a key pending or processing is left alone ------------------------
U=$TMP/unique.db
uniq=$(script unique.lua <<EOF
-- While each key runs, its handler adds it again through the command line (with --unique
-- for "u", without for "f") and waits for the runner to take the row from the inbox.
wq.queue("jobs", {workers = 2, handler = function(key, payload)
    print("ran " .. key .. " " .. tostring(payload and payload.v))
    if payload and payload.v == 1 and key ~= "p" then
        local args = {"add", "--db", "$U", "jobs", key, '{"v":2}'}
        if key == "u" then args[#args + 1] = "--unique" end
        assert(wq.exec({"$WQRUN", table.unpack(args)}).status == 0)
        wq.sleep(0.6)
    end
end})
EOF
)
run add --db "$U" jobs u '{"v":1}'
expect_rc 0 "add u"
run add --db "$U" jobs f '{"v":1}'
expect_rc 0 "add f"
run add --db "$U" jobs p '{"v":1}'
run add --db "$U" jobs p '{"v":3}' --unique
expect_rc 0 "add --unique p while p is queued in the inbox"
expect_eq "$(sqlite3 "$U" "SELECT key || '=' || coalesce(unique_add, '-') FROM inbox ORDER BY id")" "u=-
f=-
p=-
p=1" "sqlite3 reads unique_add = 1 on the --unique row only"
run --quiet --db "$U" "$uniq"
expect_rc 0 "the runner takes the unique rows"
expect_eq "$(printf '%s\n' "$OUT" | grep '^ran ' | sort)" "ran f 1
ran f 2
ran p 1
ran u 1" "--unique while processing: no follow-up (u); without it, the follow-up (f); while queued: the payload is kept (p)"
expect_eq "$(sqlite3 "$U" "SELECT count(*) FROM inbox")" 0 "every unique row was taken (and left the key alone)"
# an older file cannot hold --unique: it says so and leaves the file alone
V3=$TMP/v3.db
sqlite3 "$V3" "PRAGMA application_id = 2003923573; PRAGMA user_version = 3;
  CREATE TABLE queues(name TEXT PRIMARY KEY, seen_at REAL);
  CREATE TABLE items(queue TEXT, key TEXT); CREATE TABLE dead(queue TEXT, key TEXT);
  CREATE TABLE inbox(id INTEGER PRIMARY KEY, queue TEXT, key TEXT, payload TEXT, after REAL,
    created_at REAL, grp TEXT, priority INTEGER)"
run add --db "$V3" jobs k --unique
expect_rc 1 "--unique on a version-3 file"
expect_in "$ERR" "--unique needs a state file of version 4; $V3 is of version 3" \
    "says which version --unique needs"
expect_eq "$(sqlite3 "$V3" "SELECT count(*) FROM inbox; PRAGMA user_version")" "0
3" "no row, still version 3"
run add --help
expect_in "$OUT" "[--unique|--no-unique]" "add --help lists --unique and --no-unique"

finish
