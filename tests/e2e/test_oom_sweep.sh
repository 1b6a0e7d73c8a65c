#!/usr/bin/env bash
# Allocation failures never abort wqrun. tests/e2e/lua/oom_run.lua is one
# short run with HTTP posts to its own listener, timers, sleeps, delayed
# adds, retries and dead letters, wq.exec, inbox rows and the restore of a
# state file; this test runs it with WQ_TEST_FAIL_ALLOC=N (the Nth
# allocation, Lua's or the engine's, fails; see src/lua/runtime.c) for every
# N in 1..300 and a stratified sample of the rest of the run (the N are the
# same each time: a fixed seed). Each run must exit 0 having done all its
# work, or exit 1 with a "wqrun: ..." line saying why: never a signal (abort,
# segfault), a sanitizer report, a hang, or the panic handler (an
# "unprotected Lua error" means some Lua call ran outside a protected call).
#
# Knobs: WQ_SWEEP_FIRST (every N up to it, default 300), WQ_SWEEP_RUNS (runs
# in all, default 600), WQ_SWEEP_SEED (of the sample, default 1),
# WQ_SWEEP_N="N N ..." (just those, to reproduce a failure), WQ_SWEEP_ALL=1
# (every N: ~2000 runs), WQ_SWEEP_LIMIT (seconds the script waits for its
# work, default 3).
. "$(dirname "$0")/lib.sh"

SCRIPT=$E2E_DIR/lua/oom_run.lua
FIRST=${WQ_SWEEP_FIRST:-300}
RUNS=${WQ_SWEEP_RUNS:-600}
SEED=${WQ_SWEEP_SEED:-1}
LIMIT=${WQ_SWEEP_LIMIT:-3}
PER_RUN=60 # seconds before a run counts as hung

for tool in curl timeout; do
    if ! command -v "$tool" >/dev/null; then
        echo "FAIL: $NAME needs $tool" >&2
        exit 1
    fi
done

# Listening ports below the kernel's ephemeral range: the curl clients of
# earlier runs hold ports there.
PORT_LO=20000
PORT_HI=$(awk '{ print $1 - 1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32767)
if [ "$PORT_HI" -lt $((PORT_LO + 1000)) ]; then PORT_HI=60000; fi

# oom_run N: one run with the Nth allocation failing (N = 0: none), on a
# copy of $TMP/seed.db when there is one; retries on another port when the
# random one is taken. Sets RC, OUT, ERR, TRIES.
oom_run() {
    local n=$1 port db=$TMP/state.db
    TRIES=0
    while :; do
        TRIES=$((TRIES + 1))
        port=$((PORT_LO + (RANDOM * 32768 + RANDOM) % (PORT_HI - PORT_LO + 1)))
        rm -f "$db" "$db-wal" "$db-shm"
        if [ -f "$TMP/seed.db" ]; then cp "$TMP/seed.db" "$db"; fi
        if [ -f "$TMP/seed.db-wal" ]; then cp "$TMP/seed.db-wal" "$db-wal"; fi
        WQRUN=$WQRUN WQ_TEST_FAIL_ALLOC=$n WQ_TEST_COUNT_ALLOC=1 timeout -s KILL "$PER_RUN" \
            "$WQRUN" --quiet --db "$db" --listen "127.0.0.1:$port" "$SCRIPT" "$port" "$db" \
            "$LIMIT" >"$TMP/out" 2>"$TMP/err" </dev/null
        RC=$?
        OUT=$(cat "$TMP/out")
        ERR=$(cat "$TMP/err")
        LAST_CMD="WQ_TEST_FAIL_ALLOC=$n wqrun --quiet --db DB --listen 127.0.0.1:$port oom_run.lua $port DB $LIMIT"
        if [ "$RC" = 1 ] && printf '%s' "$ERR" | grep -q 'cannot listen there' && [ "$TRIES" -lt 10 ]; then
            continue
        fi
        return
    done
}

# What is wrong with the last run, or nothing.
verdict() {
    case $RC in
    0 | 1) ;;
    137) echo "hung (killed after ${PER_RUN}s)" && return ;;
    134) echo "aborted (exit status 134: abort() or a sanitizer report)" && return ;;
    *) echo "exit status $RC" && return ;;
    esac
    if printf '%s' "$ERR" | grep -qE 'Sanitizer|runtime error'; then
        echo "sanitizer report"
    elif printf '%s' "$ERR" | grep -q 'unprotected Lua error'; then
        echo "the panic handler ran (a Lua call outside a protected call)"
    elif printf '%s' "$ERR" | grep -q 'cannot listen there'; then
        echo "no free port found"
    elif printf '%s' "$ERR" | grep -q 'LOST'; then
        echo "state lost without a word (restore)"
    elif [ "$RC" = 0 ] && ! printf '%s' "$OUT" | grep -q '^oom_run: ok .* restored '; then
        echo "exit 0 without finishing the work (or restoring the state)"
    elif [ "$RC" = 1 ] && ! printf '%s' "$ERR" | grep -v '^wqrun: test: ' |
        grep -v ' wqrun: wqrun stopped after ' | grep -qE '^(.* (ERROR|WARN|INFO) )?wqrun: '; then
        echo "exit 1 without a 'wqrun: ...' line saying why"
    fi
}

t0=$(now)

# A first run leaves state in the file; every later run starts from it (and
# so restores it). The second one, with allocations counted, says how far
# the sweep goes.
WORK='^oom_run: ok jobs 14 flaky dead 1 succeeded 1 runs 5 slow dead 2 timeouts 2 requeued 2 succeeded 1 burst 40'
oom_run 0
expect_rc 0 "a first run without injected failures"
expect_re "$OUT" "$WORK fresh " "all the work done"
cp "$TMP/state.db" "$TMP/seed.db"
if [ -f "$TMP/state.db-wal" ]; then cp "$TMP/state.db-wal" "$TMP/seed.db-wal"; fi
oom_run 0
expect_rc 0 "a second run, from the first one's state"
expect_re "$OUT" "$WORK restored " "all the work done, the state restored"
TOTAL=$(printf '%s\n' "$ERR" | sed -n 's/^wqrun: test: \([0-9]*\) allocations.*/\1/p')
if [ -z "$TOTAL" ] || [ "$FAILED" -gt 0 ]; then
    fail "no allocation count from the run without failures"
    finish
fi

END=$((TOTAL + TOTAL / 10))
if [ -n "${WQ_SWEEP_N:-}" ]; then
    read -r -a NS <<<"$WQ_SWEEP_N"
    DESC="the N given"
elif [ "${WQ_SWEEP_ALL:-0}" = 1 ]; then
    NS=()
    for ((n = 1; n <= END; n++)); do NS+=("$n"); done
    DESC="N = 1..$END"
else
    # Every N up to FIRST (start-up), then one N drawn in each of the
    # remaining strata of FIRST+1..END (a fixed seed: the same N each time).
    NS=()
    for ((n = 1; n <= FIRST; n++)); do NS+=("$n"); done
    STRATA=$((RUNS - FIRST))
    if [ "$STRATA" -gt $((END - FIRST)) ]; then STRATA=$((END - FIRST)); fi
    rnd=$SEED
    for ((i = 0; i < STRATA; i++)); do
        lo=$((FIRST + 1 + (END - FIRST) * i / STRATA))
        hi=$((FIRST + (END - FIRST) * (i + 1) / STRATA))
        rnd=$(((rnd * 1103515245 + 12345) % 2147483648))
        NS+=($((lo + rnd % (hi - lo + 1))))
    done
    DESC="N = 1..$FIRST and $STRATA more in $((FIRST + 1))..$END (seed $SEED)"
fi

exits0=0
exits1=0
retries=0
beyond=0
BROKE=()
for n in "${NS[@]}"; do
    oom_run "$n"
    retries=$((retries + TRIES - 1))
    what=$(verdict)
    CHECKS=$((CHECKS + 1))
    if [ -n "$what" ]; then
        FAILED=$((FAILED + 1))
        BROKE+=("$n")
        if [ "${#BROKE[@]}" -le 5 ]; then
            echo "FAIL [$NAME] N=$n: $what" >&2
            show_last
        fi
        continue
    fi
    if [ "$RC" = 0 ]; then exits0=$((exits0 + 1)); else exits1=$((exits1 + 1)); fi
    if printf '%s' "$ERR" | grep -q '^wqrun: test: .*not injected'; then
        beyond=$((beyond + 1))
    fi
done

echo "$NAME: ${#NS[@]} runs ($DESC; a run makes ~$TOTAL allocations): $exits0 exits 0, $exits1 exits 1, $beyond past the end, $retries port retries, $(since "$t0")s"
if [ "${#BROKE[@]}" -gt 0 ]; then
    echo "$NAME: broke at N = ${BROKE[*]} (reproduce: WQ_SWEEP_N=\"${BROKE[*]:0:5}\")" >&2
fi
finish
