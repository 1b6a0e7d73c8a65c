#!/usr/bin/env bash
# No orphaned wq.exec children (issue 18): when the runner dies by any signal
# (SIGKILL, SIGSEGV, SIGTERM with --grace 0), every process a handler started
# through wq.exec is gone within a second — the program itself, what it
# started (`sh -c 'sleep & wait'`), a grandchild that ignores SIGTERM and
# SIGHUP, and a background process left behind by an exec that already
# returned. With --db, a restart after kill -9 runs the key again with no
# old copy alive. The keeper (wqrun-keeper) holds none of the runner's
# descriptors and does not outlive a runner that ends normally.
. "$(dirname "$0")/lib.sh"

command -v sqlite3 >/dev/null || { echo "FAIL: needs sqlite3" >&2; exit 1; }
ulimit -c 0 # the SIGSEGV case writes no core file

# Every child carries WQ_ORPHAN_MARK=<this test's pid>-<case> in its
# environment; the EXIT trap kills whatever a failing run left behind.
MARK_BASE="orphans-$$"
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    for p in $(marked ""); do kill -9 "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

# alive PID: the process exists and is not a zombie.
alive() {
    local state
    [ -n "$1" ] || return 1
    state=$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null)
    [ -n "$state" ] && [ "$state" != Z ]
}

# ended_within PID SECONDS: the process ends (or is a zombie) within SECONDS.
ended_within() {
    local i
    for ((i = 0; ; i++)); do
        alive "$1" || return 0
        [ "$i" -ge $(($2 * 50)) ] && return 1
        sleep 0.02
    done
}

# marked CASE: pids of live (not zombie) processes whose environment holds
# WQ_ORPHAN_MARK=$MARK_BASE-CASE (every case of this test with CASE "").
marked() {
    local f pid
    for f in $(grep -lsxz -E "WQ_ORPHAN_MARK=$MARK_BASE-${1:-.*}" /proc/[0-9]*/environ 2>/dev/null); do
        pid=${f#/proc/}
        pid=${pid%/environ}
        alive "$pid" && echo "$pid"
    done
}

# wait_marked CASE N TIMEOUT: waits until at least N marked processes run.
wait_marked() {
    local i limit
    limit=$(awk -v t="$3" 'BEGIN { printf "%d", t * 20 }')
    for ((i = 0; i < limit; i++)); do
        [ "$(marked "$1" | wc -l)" -ge "$2" ] && return 0
        sleep 0.05
    done
    echo "     marked processes: $(marked "$1" | tr '\n' ' ')" >&2
    return 1
}

# gone_within CASE SECONDS: waits until no marked process is left; sets GONE_AFTER.
gone_within() {
    local t0 left
    t0=$(now)
    while :; do
        left=$(marked "$1")
        GONE_AFTER=$(since "$t0")
        [ -z "$left" ] && return 0
        if awk -v e="$GONE_AFTER" -v s="$2" 'BEGIN { exit !(e > s) }'; then
            echo "     still running after ${GONE_AFTER}s: $(for p in $left; do
                printf '%s(%s) ' "$p" "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
            done)" >&2
            return 1
        fi
        sleep 0.01
    done
}

# keeper_of PID: the runner's keeper process (a child named wqrun-keeper).
keeper_of() {
    local i k
    for ((i = 0; i < 100; i++)); do
        k=$(pgrep -P "$1" -x wqrun-keeper | head -1)
        [ -n "$k" ] && { echo "$k"; return 0; }
        sleep 0.02
    done
    return 1
}

# Four handlers, each leaving processes that a kill of the runner must take:
#   a: the program itself;  b: sh and its sleep;
#   c: sh and a sleep that ignore SIGTERM, SIGHUP and SIGINT;
#   d: an exec that returned, leaving a background sleep in its group.
family_lua=$(script family.lua <<'EOF'
local mark = arg[1]
local env = {WQ_ORPHAN_MARK = mark}
local q = wq.queue("family", {workers = 4, handler = function(key)
    if key == "a" then
        wq.exec({"sleep", "100"}, {env = env})
    elseif key == "b" then
        wq.exec({"sh", "-c", "sleep 100 & wait"}, {env = env})
    elseif key == "c" then
        wq.exec({"sh", "-c", "trap '' TERM HUP INT; sleep 100 & wait"}, {env = env})
    else
        local r = wq.exec({"sh", "-c", "sleep 100 >/dev/null 2>&1 </dev/null &"}, {env = env})
        print("d returned " .. tostring(r.status))
        io.stdout:flush()
        wq.sleep(100)
    end
end})
for _, k in ipairs({"a", "b", "c", "d"}) do q:add(k) end
EOF
)
FAMILY=6 # a: 1, b: 2, c: 2, d: 1

# ---- the runner dies by a signal: its children's families are gone within 1 s ----------
n=0
for how in KILL:"" KILL:--virtual-time SEGV:"" TERM:--grace=0; do
    sig=${how%%:*}
    opt=${how#*:}
    n=$((n + 1))
    case_mark="$MARK_BASE-$n"
    "$WQRUN" --quiet $opt "$family_lua" "$case_mark" >"$TMP/f$n.out" 2>"$TMP/f$n.err" </dev/null &
    PID=$!
    PIDS+=("$PID")
    LAST_CMD="wqrun $opt family.lua (kill -$sig)"
    check "$sig $opt: the handlers' processes run" wait_marked "$n" "$FAMILY" 20
    check "$sig $opt: exec d returned" wait_for "$TMP/f$n.out" "d returned 0" 1 20
    keeper=$(keeper_of "$PID")
    check "$sig $opt: the runner has a keeper" test -n "$keeper"
    kill -"$sig" "$PID"
    wait_exit "$PID" 10
    OUT=$(cat "$TMP/f$n.out")
    ERR=$(cat "$TMP/f$n.err")
    check "$sig $opt: the runner ended (status $RC)" test "$RC" != timeout
    check "$sig $opt: every process a handler started is gone within 1 s" gone_within "$n" 1
    echo "kill -$sig $opt: the children were gone ${GONE_AFTER}s after the runner ended"
    check "$sig $opt: the keeper ended too" ended_within "$keeper" 2
done

# ---- the keeper holds nothing of the runner's and ends with it -------------------------
DB=$TMP/keeper.db
listen_start -- --db "$DB" "$family_lua" "$MARK_BASE-listen"
check "--listen --db: the handlers' processes run" wait_marked listen "$FAMILY" 20
keeper=$(keeper_of "$PID")
check "--listen --db: the runner has a keeper" test -n "$keeper"
if [ -n "$keeper" ]; then
    expect_eq "$(cat "/proc/$keeper/comm")" wqrun-keeper "ps shows the keeper by name"
    fds=$(for f in /proc/"$keeper"/fd/*; do printf '%s=%s\n' "${f##*/}" "$(readlink "$f")"; done)
    expect_eq "$(printf '%s\n' "$fds" | cut -d= -f1 | sort -n | tr '\n' ' ')" "0 1 2 3 " \
        "the keeper has stdin, stdout, stderr and its pipe, nothing else ($fds)"
    expect_re "$(printf '%s\n' "$fds" | grep '^3=')" '^3=pipe:' "fd 3 is the keeper's pipe"
    expect_not_in "$fds" "$DB" "the keeper does not hold the state file"
    expect_not_in "$fds" "socket:" "the keeper holds no socket (the HTTP listener)"
    check "the keeper is in a process group of its own" \
        test "$(ps -o pgid= -p "$keeper" | tr -d ' ')" = "$keeper"
    kill -INT "$keeper"
    kill -TERM "$keeper"
    kill -HUP "$keeper"
    sleep 0.2
    check "the keeper ignores SIGINT, SIGTERM and SIGHUP" alive "$keeper"
fi
kill -9 "$PID"
wait "$PID" 2>/dev/null
check "--listen --db, kill -9: every process a handler started is gone within 1 s" \
    gone_within listen 1

# ---- a runner that ends normally takes its keeper and the background process along -----
normal_lua=$(script normal.lua <<'EOF'
local env = {WQ_ORPHAN_MARK = arg[1]}
local r = wq.exec({"sh", "-c", "sleep 100 >/dev/null 2>&1 </dev/null &"}, {env = env})
print("background started " .. tostring(r.status))
io.stdout:flush()
wq.sleep(0.5)
EOF
)
"$WQRUN" --quiet "$normal_lua" "$MARK_BASE-normal" >"$TMP/normal.out" 2>"$TMP/normal.err" </dev/null &
PID=$!
PIDS+=("$PID")
keeper=$(keeper_of "$PID")
check "normal end: the runner has a keeper" test -n "$keeper"
check "normal end: the background process runs" wait_marked normal 1 20
wait_exit "$PID" 20
OUT=$(cat "$TMP/normal.out")
ERR=$(cat "$TMP/normal.err")
LAST_CMD="wqrun normal.lua"
expect_rc 0 "normal end: exit 0"
expect_in "$OUT" "background started 0" "normal end: the exec returned"
check "normal end: no wqrun-keeper is left (not even a zombie)" test ! -e "/proc/$keeper"
check "normal end: the background process is gone" gone_within normal 1

# ---- the user's story: kill -9, restart with --db, the key runs once, not twice ----------
story_lua=$(script story.lua <<'EOF'
local q = wq.queue("story", {handler = function(key)
    print("start " .. key)
    io.stdout:flush()
    wq.exec({"sleep", "20"}, {env = {WQ_ORPHAN_MARK = arg[1]}})
end})
if arg[2] == "add" then q:add("k") end
EOF
)
SDB=$TMP/story.db
"$WQRUN" --quiet --db "$SDB" "$story_lua" "$MARK_BASE-story" add >"$TMP/s1.out" 2>"$TMP/s1.err" </dev/null &
PID=$!
PIDS+=("$PID")
check "story: the first run started k" wait_for "$TMP/s1.out" "start k" 1 20
check "story: its sleep runs" wait_marked story 1 20
old=$(marked story)
# the handler's processing row must be committed before the kill
sleep 0.3
kill -9 "$PID"
wait "$PID" 2>/dev/null
"$WQRUN" --quiet --db "$SDB" "$story_lua" "$MARK_BASE-story" >"$TMP/s2.out" 2>"$TMP/s2.err" </dev/null &
PID=$!
PIDS+=("$PID")
OUT= ERR=
LAST_CMD="wqrun --db story.db story.lua (after kill -9)"
check "story: the restart runs k again" wait_for "$TMP/s2.out" "start k" 1 20
check "story: the new sleep runs" wait_marked story 1 20
sleep 0.3
now_running=$(marked story)
expect_eq "$(printf '%s\n' "$now_running" | grep -c .)" 1 \
    "story: one copy of k's program runs (old: $old, now: $(echo $now_running))"
for p in $old; do
    check "story: the killed run's sleep ($p) is gone" ended_within "$p" 0
done
kill -9 "$PID"
wait "$PID" 2>/dev/null
check "story: gone after the second kill -9 too" gone_within story 1

finish
