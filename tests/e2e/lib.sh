# Helpers for the end-to-end tests (sourced by tests/e2e/test_*.sh).
# Needs WQRUN (the binary) and WQ_SOURCE_DIR (the source tree) from ctest;
# falls back to build/wqrun and this checkout when run by hand.

set -u

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WQ_SOURCE_DIR=${WQ_SOURCE_DIR:-$(cd "$E2E_DIR/../.." && pwd)}
WQRUN=${WQRUN:-$WQ_SOURCE_DIR/build/wqrun}
case $WQRUN in /*) ;; *) WQRUN=$PWD/$WQRUN ;; esac
if [ ! -x "$WQRUN" ]; then
    echo "FAIL: WQRUN=$WQRUN is not an executable" >&2
    exit 1
fi

# The test helper module (require "wqtest") lives with the Lua tests.
export LUA_PATH="$WQ_SOURCE_DIR/tests/lua/?.lua;;"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/wqrun-e2e.XXXXXX")
# Background processes a test starts (PIDS+=(...)) are killed at exit; $TMP is
# removed then, unless WQ_E2E_KEEP is set (it is named on stderr).
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; [ -n "${WQ_E2E_KEEP:-}" ] && echo "kept $TMP" >&2 || rm -rf "$TMP"' EXIT

CHECKS=0
FAILED=0
NAME=$(basename "$0" .sh)

fail() {
    FAILED=$((FAILED + 1))
    echo "FAIL [$NAME:${BASH_LINENO[1]:-?}] $*" >&2
}

pass() {
    CHECKS=$((CHECKS + 1))
}

# check COND_DESCRIPTION CMD...: runs CMD, passes if it succeeds
check() {
    local what=$1
    shift
    CHECKS=$((CHECKS + 1))
    if ! "$@"; then
        FAILED=$((FAILED + 1))
        echo "FAIL [$NAME:${BASH_LINENO[0]}] $what" >&2
        show_last
    fi
}

# Writes a script to $TMP/NAME and prints its path.
script() {
    local path="$TMP/$1"
    cat >"$path"
    echo "$path"
}

# run [wqrun args...]: runs wqrun (with a 60 s safety timeout); sets RC, OUT, ERR, ELAPSED
run() {
    local t0 t1
    t0=$(date +%s.%N)
    timeout -s KILL 60 "$WQRUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    RC=$?
    t1=$(date +%s.%N)
    OUT=$(cat "$TMP/out")
    ERR=$(cat "$TMP/err")
    ELAPSED=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    LAST_CMD="wqrun $*"
}

show_last() {
    {
        echo "     command: ${LAST_CMD:-?}"
        echo "     status:  ${RC:-?}  elapsed: ${ELAPSED:-?}s"
        echo "     stdout:  $(printf '%s' "${OUT:-}" | head -c 1500 | sed '2,$s/^/              /')"
        echo "     stderr:  $(printf '%s' "${ERR:-}" | head -c 1500 | sed '2,$s/^/              /')"
    } >&2
}

expect_rc() {
    CHECKS=$((CHECKS + 1))
    if [ "$RC" != "$1" ]; then
        FAILED=$((FAILED + 1))
        echo "FAIL [$NAME:${BASH_LINENO[0]}] ${2:-exit status}: expected $1, got $RC" >&2
        show_last
    fi
}

# expect_in VAR_CONTENT TEXT [what]: TEXT (fixed string) occurs in the content
expect_in() {
    CHECKS=$((CHECKS + 1))
    if ! printf '%s' "$1" | grep -qF -- "$2"; then
        FAILED=$((FAILED + 1))
        echo "FAIL [$NAME:${BASH_LINENO[0]}] ${3:-output}: expected to contain '$2'" >&2
        show_last
    fi
}

# expect_re CONTENT REGEX [what]: an extended regex matches a line
expect_re() {
    CHECKS=$((CHECKS + 1))
    if ! printf '%s' "$1" | grep -qE -- "$2"; then
        FAILED=$((FAILED + 1))
        echo "FAIL [$NAME:${BASH_LINENO[0]}] ${3:-output}: expected to match /$2/" >&2
        show_last
    fi
}

expect_not_in() {
    CHECKS=$((CHECKS + 1))
    if printf '%s' "$1" | grep -qF -- "$2"; then
        FAILED=$((FAILED + 1))
        echo "FAIL [$NAME:${BASH_LINENO[0]}] ${3:-output}: did not expect '$2'" >&2
        show_last
    fi
}

# expect_count CONTENT TEXT N [what]: TEXT occurs on exactly N lines
expect_count() {
    local n
    n=$(printf '%s\n' "$1" | grep -cF -- "$2")
    CHECKS=$((CHECKS + 1))
    if [ "$n" != "$3" ]; then
        FAILED=$((FAILED + 1))
        echo "FAIL [$NAME:${BASH_LINENO[0]}] ${4:-count of '$2'}: expected $3, got $n" >&2
        show_last
    fi
}

# expect_between VALUE LO HI [what]: LO <= VALUE <= HI (decimals allowed)
expect_between() {
    CHECKS=$((CHECKS + 1))
    if ! awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v >= lo && v <= hi) }'; then
        FAILED=$((FAILED + 1))
        echo "FAIL [$NAME:${BASH_LINENO[0]}] ${4:-value}: $1 not in [$2, $3]" >&2
        show_last
    fi
}

now() {
    date +%s.%N
}

since() {
    awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'
}

# wait_for FILE TEXT COUNT TIMEOUT: waits until TEXT occurs COUNT times in FILE
wait_for() {
    local deadline
    deadline=$(awk -v t="$4" -v n="$(date +%s.%N)" 'BEGIN { printf "%.3f", n + t }')
    while :; do
        if [ "$(grep -cF -- "$2" "$1" 2>/dev/null)" -ge "$3" ]; then
            return 0
        fi
        if awk -v d="$deadline" -v n="$(date +%s.%N)" 'BEGIN { exit !(n > d) }'; then
            return 1
        fi
        sleep 0.02
    done
}

# wait_exit PID TIMEOUT: waits up to TIMEOUT seconds for the background
# process PID to end; sets RC to its status, or to "timeout" after killing it.
wait_exit() {
    local pid=$1 limit i=0
    limit=$(awk -v t="$2" 'BEGIN { printf "%d", t * 50 }')
    while kill -0 "$pid" 2>/dev/null && [ "$i" -lt "$limit" ]; do
        sleep 0.02
        i=$((i + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        RC=timeout
    else
        wait "$pid"
        RC=$?
    fi
}

# expect_eq ACTUAL EXPECTED what: exact comparison, both shown on failure
expect_eq() {
    CHECKS=$((CHECKS + 1))
    if [ "$1" != "$2" ]; then
        FAILED=$((FAILED + 1))
        echo "FAIL [$NAME:${BASH_LINENO[0]}] $3" >&2
        echo "     expected: $(printf '%s' "$2" | sed '2,$s/^/               /')" >&2
        echo "     got:      $(printf '%s' "$1" | sed '2,$s/^/               /')" >&2
        show_last
    fi
}

# rand_port: a random TCP port for a test's listener, below the kernel's
# ephemeral range (the local ports of the many client connections the
# parallel tests make would otherwise take it now and then: "cannot listen").
# Leaves room for PORT+1 and PORT+2.
rand_port() {
    local lo
    lo=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
    case $lo in '' | *[!0-9]*) lo=32768 ;; esac
    [ "$lo" -gt 12000 ] || lo=61000
    echo $((10000 + (RANDOM * 32768 + RANDOM) % (lo - 10000 - 3)))
}

# listens_on PID PORT: whether process PID holds the listening TCP socket on PORT
# (matched by the socket's inode in /proc/net/tcp and PID's descriptors).
listens_on() {
    local hex inode
    hex=$(printf '%04X' "$2")
    for inode in $(awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { print $10 }' /proc/net/tcp); do
        ls -l "/proc/$1/fd" 2>/dev/null | grep -q "socket:\[$inode\]" && return 0
    done
    return 1
}

# listen_start [PREFIX...] -- ARGS...: starts `PREFIX wqrun --quiet --listen
# 127.0.0.1:PORT ARGS` in the background on a random port (another one when
# that is taken) and waits until /healthz answers. PREFIX is a command that
# runs the rest (env VAR=x, bash -c '... exec "$@"' _), or nothing. Sets PID,
# PORT, BASE, OUTF and ERRF (the runner's stdout and stderr).
listen_start() {
    local prefix=() i try
    while [ "$1" != -- ]; do prefix+=("$1"); shift; done
    shift
    for try in 1 2 3 4 5 6; do
        PORT=$(rand_port)
        BASE=http://127.0.0.1:$PORT
        OUTF=$TMP/listen.$try.out
        ERRF=$TMP/listen.$try.err
        "${prefix[@]}" "$WQRUN" --quiet --listen "127.0.0.1:$PORT" "$@" >"$OUTF" 2>"$ERRF" </dev/null &
        PID=$!
        PIDS+=("$PID")
        for ((i = 0; i < 100; i++)); do
            kill -0 "$PID" 2>/dev/null || break
            # the answer must be this runner's: another test's runner may hold the port
            # (this one then fails with "cannot listen", perhaps only after the answer)
            [ "$(curl -s -m 1 "$BASE/healthz")" = ok ] && listens_on "$PID" "$PORT" && return 0
            sleep 0.05
        done
        kill -9 "$PID" 2>/dev/null
        wait "$PID" 2>/dev/null
        grep -q "cannot listen" "$ERRF" || break
    done
    fail "runner did not start: $(cat "$ERRF")"
    return 1
}

finish() {
    if [ "$FAILED" -gt 0 ] || [ "$CHECKS" -eq 0 ]; then
        echo "$NAME: $FAILED of $CHECKS checks FAILED" >&2
        exit 1
    fi
    echo "$NAME: $CHECKS checks passed"
    exit 0
}

# ---- PostgreSQL --------------------------------------------------------------------
# scripts/test.sh starts one throwaway cluster per run (scripts/pg.sh) and
# exports WQ_TEST_PG_URL, WQ_PG_DIR, PGHOST... to every test; by hand:
# eval "$(scripts/pg.sh start)". Tests share it, so each makes a database of
# its own and never restarts it (start a private one with scripts/pg.sh).

# pg_abort MESSAGE: fails the test's whole script at once, also when called
# from within $(...) (the subshell ends the test's shell too; its EXIT trap
# still runs). PostgreSQL tests never skip.
pg_abort() {
    echo "FAIL [$NAME:${BASH_LINENO[1]:-?}] $*" >&2
    if [ "$BASHPID" != "$$" ]; then
        kill -TERM "$$"
    fi
    exit 1
}

# pg_fresh_db: creates a new, uniquely named database (t_<test>_<pid>_<hex>)
# in the run's cluster and prints its URL: postgresql://postgres@127.0.0.1:PORT/NAME
# (TCP, the host and port of WQ_TEST_PG_URL). Use: DB=$(pg_fresh_db)
pg_fresh_db() {
    local base db url
    if [ -z "${WQ_TEST_PG_URL:-}" ] || [ -z "${WQ_PG_DIR:-}" ]; then
        pg_abort "pg_fresh_db: no PostgreSQL: WQ_TEST_PG_URL and WQ_PG_DIR are not set (run scripts/test.sh, or first: eval \"\$(scripts/pg.sh start)\")"
    fi
    base=$(printf '%s' "$NAME" | tr '[:upper:]' '[:lower:]' | tr -c 'a-z0-9_' '_' | cut -c1-32)
    db="t_${base}_$$_$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
    url=$(bash "$WQ_SOURCE_DIR/scripts/pg.sh" createdb "$db") ||
        pg_abort "pg_fresh_db: could not create database $db in the cluster in $WQ_PG_DIR"
    echo "$url"
}

# pg_psql URL SQL: runs SQL through psql (no psqlrc, unaligned, tuples only,
# stops at the first error); prints the rows and returns psql's status. A URL
# that is not postgresql:// is refused (psql would fall back to PGHOST...).
pg_psql() {
    case ${1:-} in
    postgresql://* | postgres://*) ;;
    *)
        echo "pg_psql: not a postgresql:// URL: '${1:-}'" >&2
        return 2
        ;;
    esac
    local psql=psql
    [ -x "${WQ_PG_BIN:-}/psql" ] && psql=$WQ_PG_BIN/psql
    "$psql" -X -A -t -v ON_ERROR_STOP=1 "$1" -c "$2"
}

# ---- PostgreSQL runners (tests/e2e/test_pg_*.sh) -------------------------------------

# pg_bg NAME WQRUN-ARGS...: starts wqrun in the background (stdout in
# $TMP/NAME.out, stderr in $TMP/NAME.err); its pid in BG_PID (killed at exit).
pg_bg() {
    local name=$1
    shift
    "$WQRUN" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" </dev/null &
    BG_PID=$!
    PIDS+=("$BG_PID")
}

# pg_wait URL SQL WANT TIMEOUT: polls until pg_psql URL SQL prints WANT;
# returns 1 after TIMEOUT seconds. PG_GOT holds the last answer.
pg_wait() {
    local deadline
    deadline=$(awk -v t="$4" -v n="$(date +%s.%N)" 'BEGIN { printf "%.3f", n + t }')
    while :; do
        PG_GOT=$(pg_psql "$1" "$2" 2>&1)
        [ "$PG_GOT" = "$3" ] && return 0
        if awk -v d="$deadline" -v n="$(date +%s.%N)" 'BEGIN { exit !(n > d) }'; then
            return 1
        fi
        sleep 0.1
    done
}

# reader_begin URL NAME: the reader, a psql session fed through a FIFO (fd 9) that holds a
# REPEATABLE READ snapshot, idle in its transaction until `echo "commit;" >&9`; its output in
# $TMP/NAME.out.
reader_begin() {
    mkfifo "$TMP/$2"
    "${WQ_PG_BIN:-/usr/lib/postgresql/15/bin}/psql" -X -q -A -t "$1" <"$TMP/$2" >"$TMP/$2.out" 2>&1 &
    PIDS+=($!)
    exec 9>"$TMP/$2"
    echo "begin isolation level repeatable read; select count(*) from wqrun.jobs;" >&9
    check "the reader holds its snapshot" pg_wait "$1" \
        "select count(*) from pg_stat_activity where state = 'idle in transaction'" 1 10
}

# pg_need: fails the test at once when no PostgreSQL cluster is exported.
pg_need() {
    if [ -z "${WQ_TEST_PG_URL:-}" ] || [ -z "${WQ_PG_DIR:-}" ]; then
        pg_abort "no PostgreSQL: WQ_TEST_PG_URL and WQ_PG_DIR are not set (run scripts/test.sh, or first: eval \"\$(scripts/pg.sh start)\")"
    fi
    command -v "${WQ_PG_BIN:-/usr/lib/postgresql/15/bin}/psql" >/dev/null || command -v psql >/dev/null ||
        pg_abort "no psql: install postgresql-client (bash scripts/deps.sh)"
}
