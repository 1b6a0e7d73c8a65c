#!/usr/bin/env bash
# The PostgreSQL test infrastructure. The run's shared cluster (scripts/test.sh
# starts it and exports WQ_TEST_PG_URL, WQ_PG_DIR, PGHOST...): pg_fresh_db and
# pg_psql from lib.sh, PostgreSQL 15, the test settings. scripts/pg.sh on two
# private clusters of this test, started at once (the shared one is never
# restarted: other tests use it at the same time): the export lines, the
# settings, only 127.0.0.1 and the socket, restart -m immediate (a committed
# row survives, an open transaction's row does not), stop (directory and
# processes gone, twice in a row), missing binaries. Fails, never skips,
# without PostgreSQL.
. "$(dirname "$0")/lib.sh"

PG=$WQ_SOURCE_DIR/scripts/pg.sh

if [ -z "${WQ_TEST_PG_URL:-}" ] || [ -z "${WQ_PG_DIR:-}" ]; then
    echo "FAIL [$NAME] no PostgreSQL: WQ_TEST_PG_URL and WQ_PG_DIR are not set." >&2
    echo "     Run it through scripts/test.sh, or first: eval \"\$(scripts/pg.sh start)\"" >&2
    exit 1
fi

# val NAME FILE: the value of "export NAME=..." in FILE
val() { sed -n "s/^export $1=//p" "$2"; }

# listeners PORT: the local addresses listening on TCP PORT, one a line
listeners() {
    local hex f files=()
    printf -v hex '%04X' "$1"
    for f in /proc/net/tcp /proc/net/tcp6; do [ -r "$f" ] && files+=("$f"); done
    awk -v h=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == h { print $2 }' "${files[@]}"
}

# alive PID: the process runs (a zombie does not: the postmaster's parent is
# pid 1 once pg_ctl has returned, which may reap it late)
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*[ZX]' "/proc/$1/status" 2>/dev/null; }

# settings URL: the settings a test cluster must have, one "name=value" a line
settings() {
    pg_psql "$1" "select name || '=' || setting from pg_settings where name in
        ('fsync', 'synchronous_commit', 'full_page_writes', 'max_connections',
         'log_min_messages', 'listen_addresses') order by name"
    pg_psql "$1" "select 'shared_buffers=' || current_setting('shared_buffers')"
}
want_settings="fsync=on
full_page_writes=on
listen_addresses=127.0.0.1
log_min_messages=warning
max_connections=200
synchronous_commit=on
shared_buffers=128MB"

# ---- pg_fresh_db without a cluster fails the test at once ----------------------------
OUT=$(env -u WQ_TEST_PG_URL -u WQ_PG_DIR WQRUN="$WQRUN" WQ_SOURCE_DIR="$WQ_SOURCE_DIR" \
    bash -c '. "$1/lib.sh"; DB=$(pg_fresh_db); echo "went on with DB=$DB"' _ "$E2E_DIR" 2>&1)
RC=$?
LAST_CMD="pg_fresh_db without WQ_TEST_PG_URL"
check "pg_fresh_db without a cluster fails the test (status $RC)" [ "$RC" -ne 0 ]
expect_not_in "$OUT" "went on" "the test does not go on after pg_fresh_db failed"
expect_in "$OUT" "WQ_TEST_PG_URL and WQ_PG_DIR are not set" "pg_fresh_db says why"
check "pg_psql refuses an empty URL" [ "$(pg_psql "" "select 1" 2>/dev/null; echo $?)" = 2 ]

# ---- the shared cluster: fresh databases, version, settings -------------------------
DB=$(pg_fresh_db)
hostport=${WQ_TEST_PG_URL#postgresql://postgres@}
hostport=${hostport%%/*}
expect_re "$DB" "^postgresql://postgres@${hostport//./\\.}/t_test_pg_cluster_$$_[0-9a-f]{6}\$" \
    "pg_fresh_db prints a TCP URL on the host and port of WQ_TEST_PG_URL"
OUT=$(pg_psql "$DB" "select version()")
expect_re "$OUT" '^PostgreSQL 15\.' "select version() is PostgreSQL 15"
expect_eq "$(pg_psql "$DB" "select current_database()")" "${DB##*/}" "the URL names the new database"
check "create table" pg_psql "$DB" "create table t (id int primary key, v text)"
check "insert" pg_psql "$DB" "insert into t values (1, 'one'), (2, 'two')"
expect_eq "$(pg_psql "$DB" "select string_agg(v, ',' order by id) from t")" "one,two" "rows read back"
if pg_psql "$DB" "select 1/0; insert into t values (3, 'three')" 2>/dev/null; then
    fail "pg_psql succeeded on an error"
else
    pass
fi
expect_eq "$(pg_psql "$DB" "select count(*) from t")" 2 "pg_psql stops at the first error (ON_ERROR_STOP)"
DB2=$(pg_fresh_db)
check "a second pg_fresh_db is another database" [ "$DB2" != "$DB" ]
expect_eq "$(pg_psql "$DB2" "select count(*) from pg_tables where tablename = 't'")" 0 "a fresh database is empty"
expect_eq "$(settings "$DB")" "$want_settings" "the shared cluster's settings"
# The exported libpq variables reach the same cluster over its Unix socket.
expect_eq "$("${WQ_PG_BIN:-/usr/lib/postgresql/15/bin}/psql" -X -A -t -c "select current_setting('port'), current_user, current_database(), inet_server_addr() is null")" \
    "$PGPORT|postgres|postgres|t" "psql with PGHOST, PGPORT, PGUSER, PGDATABASE only"
expect_eq "$PGHOST" "$WQ_PG_DIR" "PGHOST is the cluster's directory (its socket)"
if bash "$PG" createdb 'No-Such;Name' 2>/dev/null; then fail "createdb took a bad name"; else pass; fi

# ---- private clusters: two started at once ---------------------------------------
PRIV=()
STARTING=()
pg_private_cleanup() {
    local d
    # A start still running (the test was interrupted): its directory is
    # known once it is done.
    ((${#STARTING[@]})) && wait "${STARTING[@]}" 2>/dev/null
    d=$(val WQ_PG_DIR "$TMP/a.env" 2>/dev/null) && [ -n "$d" ] && PRIV+=("$d")
    for d in "${PRIV[@]}"; do bash "$PG" stop "$d" >/dev/null 2>&1; done
}
# Stop them at exit too, before lib.sh's own cleanup.
lib_exit=$(eval "set -- $(trap -p EXIT)" && printf '%s' "${3:-}")
trap 'pg_private_cleanup; eval "$lib_exit"' EXIT

B_DIR=/tmp/wqrun-pg-e2e.$$.b
PRIV+=("$B_DIR")
t0=$(now)
bash "$PG" start >"$TMP/a.env" 2>"$TMP/a.err" &
pa=$!
bash "$PG" start "$B_DIR" >"$TMP/b.env" 2>"$TMP/b.err" &
pb=$!
STARTING=("$pa" "$pb")
wait "$pa"
rca=$?
wait "$pb"
rcb=$?
STARTING=()
t_start=$(since "$t0")
A_DIR=$(val WQ_PG_DIR "$TMP/a.env")
LAST_CMD="scripts/pg.sh start (two at once)" RC="$rca $rcb" OUT=$(cat "$TMP/a.env" "$TMP/b.env") ERR=$(cat "$TMP/a.err" "$TMP/b.err")
check "pg.sh start, twice at once" [ "$rca/$rcb" = 0/0 ]
if [ "$rca" != 0 ] || [ "$rcb" != 0 ]; then
    finish
fi

A_PORT=$(val PGPORT "$TMP/a.env")
B_PORT=$(val PGPORT "$TMP/b.env")
A_URL=$(val WQ_TEST_PG_URL "$TMP/a.env")
expect_re "$A_DIR" '^/tmp/wqrun-pg\.[A-Za-z0-9]{6}$' "the default directory is a new /tmp/wqrun-pg.XXXXXX"
expect_eq "$(val WQ_PG_DIR "$TMP/b.env")" "$B_DIR" "start DIR uses DIR"
expect_eq "$(sed 's/=.*//' "$TMP/a.env")" "export PGHOST
export PGPORT
export PGUSER
export PGDATABASE
export WQ_PG_DIR
export WQ_PG_BIN
export WQ_TEST_PG_URL" "start prints the export lines and nothing else on stdout"
expect_eq "$(val PGHOST "$TMP/a.env")" "$A_DIR" "PGHOST is the directory"
expect_eq "$(val PGUSER "$TMP/a.env")|$(val PGDATABASE "$TMP/a.env")" "postgres|postgres" "PGUSER, PGDATABASE"
expect_eq "$(val WQ_PG_BIN "$TMP/a.env")" "${WQ_PG_BIN:-/usr/lib/postgresql/15/bin}" "WQ_PG_BIN"
expect_eq "$A_URL" "postgresql://postgres@127.0.0.1:$A_PORT/postgres" "WQ_TEST_PG_URL is a TCP URL"
expect_between "$A_PORT" 20000 45000 "the port is in 20000-45000"
expect_eq "$(printf '%s\n' "$A_PORT" "$B_PORT" "$PGPORT" | sort -u | wc -l)" 3 "three clusters, three ports"
expect_eq "$(cat "$A_DIR/env")" "$(cat "$TMP/a.env")" "DIR/env holds the export lines"
expect_eq "$(bash "$PG" env "$A_DIR")" "$(cat "$TMP/a.env")" "pg.sh env DIR prints them"
expect_eq "$(WQ_PG_DIR=$A_DIR bash "$PG" env)" "$(cat "$TMP/a.env")" "pg.sh env uses WQ_PG_DIR"
expect_eq "$(settings "$A_URL")" "$want_settings" "a private cluster's settings"
expect_eq "$(listeners "$A_PORT")" "0100007F:$(printf '%04X' "$A_PORT")" "it listens on 127.0.0.1 only"
check "its Unix socket is in DIR" [ -S "$A_DIR/.s.PGSQL.$A_PORT" ]
expect_eq "$(bash "$PG" psql "$A_DIR" -- -A -t -c "select current_setting('unix_socket_directories')")" "$A_DIR" \
    "pg.sh psql DIR connects over the socket in DIR"
expect_in "$(cat "$A_DIR/log")" "ready to accept connections" "the server logs to DIR/log"
if [ "$(id -u)" = 0 ]; then
    expect_eq "$(stat -c %U "$A_DIR/data")" postgres "started by root, the cluster belongs to postgres"
fi
expect_eq "$(bash "$PG" psql "$B_DIR" -- -A -t -c "select 42")" 42 "the other private cluster answers"

# ---- restart -m immediate: committed rows survive, an open transaction's do not -------
check "create table" pg_psql "$A_URL" "create table t (id int primary key)"
check "committed insert" pg_psql "$A_URL" "insert into t values (1)"
pg_psql "$A_URL" "begin; insert into t values (2); select pg_sleep(120)" >"$TMP/open.out" 2>&1 &
open_pid=$!
PIDS+=("$open_pid")
waited=0
for ((i = 0; i < 250; i++)); do
    if [ "$(pg_psql "$A_URL" "select count(*) from pg_stat_activity where wait_event = 'PgSleep'")" = 1 ]; then
        waited=1
        break
    fi
    sleep 0.02
done
check "the open transaction has inserted its row and sleeps" [ "$waited" = 1 ]
pm_before=$(head -n1 "$A_DIR/data/postmaster.pid")
t0=$(now)
bash "$PG" restart "$A_DIR" >"$TMP/out" 2>"$TMP/err"
RC=$?
t_restart=$(since "$t0")
LAST_CMD="pg.sh restart $A_DIR" OUT=$(cat "$TMP/out") ERR=$(cat "$TMP/err")
expect_rc 0 "pg.sh restart"
pm_after=$(head -n1 "$A_DIR/data/postmaster.pid")
check "a new postmaster ($pm_before -> $pm_after)" [ "$pm_before" != "$pm_after" ]
if alive "$pm_before"; then fail "the old postmaster $pm_before still runs"; else pass; fi
expect_in "$(cat "$A_DIR/log")" "database system was not properly shut down; automatic recovery in progress" \
    "restart is immediate (a crash, then recovery)"
expect_eq "$(pg_psql "$A_URL" "select string_agg(id::text, ',' order by id) from t")" 1 \
    "the committed row survives, the uncommitted one does not"
expect_eq "$(listeners "$A_PORT")" "0100007F:$(printf '%04X' "$A_PORT")" "same port after restart"
check "same socket after restart" [ -S "$A_DIR/.s.PGSQL.$A_PORT" ]
wait_exit "$open_pid" 10
expect_re "$RC" '^[1-9][0-9]*$' "the open transaction's psql lost its connection"
check "writes work after restart" pg_psql "$A_URL" "insert into t values (3)"

# ---- stop: directory and processes gone; twice is fine --------------------------------
mapfile -t procs < <(head -n1 "$A_DIR/data/postmaster.pid"; pgrep -P "$(head -n1 "$A_DIR/data/postmaster.pid")")
check "the server has its processes (${#procs[@]})" [ "${#procs[@]}" -ge 4 ]
t0=$(now)
bash "$PG" stop "$A_DIR" >"$TMP/out" 2>"$TMP/err"
RC=$?
t_stop=$(since "$t0")
LAST_CMD="pg.sh stop $A_DIR" OUT=$(cat "$TMP/out") ERR=$(cat "$TMP/err")
expect_rc 0 "pg.sh stop"
check "stop removes the directory" [ ! -e "$A_DIR" ]
left=""
for p in "${procs[@]}"; do alive "$p" && left="$left $p"; done
expect_eq "$left" "" "stop leaves no process of the server"
expect_eq "$(listeners "$A_PORT")" "" "nothing listens on its port"
bash "$PG" stop "$A_DIR" >"$TMP/out" 2>"$TMP/err"
RC=$?
expect_rc 0 "pg.sh stop again (already gone)"
if bash "$PG" env "$A_DIR" >/dev/null 2>&1; then fail "pg.sh env of a stopped cluster succeeded"; else pass; fi
WQ_PG_DIR=$B_DIR bash "$PG" stop >"$TMP/out" 2>"$TMP/err"
RC=$?
expect_rc 0 "pg.sh stop with WQ_PG_DIR"
check "the other private cluster's directory is gone" [ ! -e "$B_DIR" ]
expect_eq "$(listeners "$B_PORT")" "" "nothing listens on the other port"

# ---- failures are loud --------------------------------------------------------------
WQ_PG_BIN=/nonexistent bash "$PG" start >"$TMP/out" 2>"$TMP/err"
RC=$?
LAST_CMD="WQ_PG_BIN=/nonexistent pg.sh start" OUT=$(cat "$TMP/out") ERR=$(cat "$TMP/err")
expect_rc 1 "start without the binaries"
expect_in "$ERR" "/nonexistent/initdb not found" "it names the missing binary"
expect_eq "$OUT" "" "and prints no export line"
if [ "$(id -u)" = 0 ]; then
    # $TMP is root's, closed to the postgres user.
    bash "$PG" start "$TMP/closed" >"$TMP/out" 2>"$TMP/err"
    RC=$?
    LAST_CMD="pg.sh start \$TMP/closed" OUT=$(cat "$TMP/out") ERR=$(cat "$TMP/err")
    expect_rc 1 "start in a directory the postgres user cannot reach"
    expect_in "$ERR" "cannot write to $TMP/closed" "it says so"
    check "and removes the directory it made" [ ! -e "$TMP/closed" ]
fi

# ---- the shared cluster was not disturbed -------------------------------------------
expect_eq "$(pg_psql "$DB" "select count(*) from t")" 2 "the shared cluster still has the rows"

echo "pg.sh timings: two starts at once ${t_start}s, restart -m immediate ${t_restart}s, stop ${t_stop}s"
finish
