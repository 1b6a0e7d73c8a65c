#!/usr/bin/env bash
# Runs one Lua test against PostgreSQL (the "pg" column of the backend matrix):
#
#   run_pg.sh WQRUN tests/lua/test_X.lua
#
# Creates a fresh database in the cluster of $WQ_PG_DIR (scripts/pg.sh
# createdb; the name comes from the test's name, this process's id and the
# time, so parallel tests and repeated runs never share one), then runs
# `WQRUN --quiet --db URL test_X.lua` from the test's directory with
# WQ_BACKEND=pg exported (a test may branch on it where the semantics
# legitimately differ). The database is dropped when the test passes and
# kept for a look when it fails. Without a cluster (WQ_PG_DIR and
# WQ_TEST_PG_URL, exported by scripts/test.sh or by
# `eval "$(bash scripts/pg.sh start)"`) this is a failure, never a skip.
set -uo pipefail

die() {
  echo "run_pg.sh: $*" >&2
  exit 1
}

(($# == 2)) || die "usage: run_pg.sh WQRUN TEST.lua"
wqrun=$1
test=$2
[[ -x $wqrun ]] || die "$wqrun is not an executable"
[[ -f $test ]] || die "no test file $test"
[[ -n ${WQ_PG_DIR:-} && -n ${WQ_TEST_PG_URL:-} ]] ||
  die "no PostgreSQL cluster: WQ_PG_DIR and WQ_TEST_PG_URL must be set (scripts/test.sh exports them; by hand: eval \"\$(bash scripts/pg.sh start)\")"

here=$(cd "$(dirname "$0")" && pwd)
pgsh=$here/../../scripts/pg.sh
[[ -f $pgsh ]] || die "scripts/pg.sh not found at $pgsh"

base=$(basename "$test" .lua)
base=${base#test_}
base=$(tr -c 'a-z0-9_\n' '_' <<<"${base,,}")
db="lua_${base:0:30}_$$_$(date +%s%N | tail -c 10)"
url=$(bash "$pgsh" createdb "$db") || die "could not create database $db (is the cluster in $WQ_PG_DIR running?)"
[[ $url == postgres* ]] || die "scripts/pg.sh createdb printed '$url', not a URL"

cd "$(dirname "$test")" || die "cannot cd to the directory of $test"
WQ_BACKEND=pg "$wqrun" --quiet --db "$url" "$(basename "$test")"
rc=$?
if ((rc == 0)); then
  # Best effort: the cluster is throwaway, this only keeps it small.
  bin=${WQ_PG_BIN:-/usr/lib/postgresql/15/bin}
  port=$(cat "$WQ_PG_DIR/port" 2>/dev/null) &&
    "$bin/dropdb" -h "$WQ_PG_DIR" -p "$port" -U postgres --if-exists "$db" >/dev/null 2>&1 || true
else
  echo "run_pg.sh: $base failed with status $rc on PostgreSQL; its database $db is kept ($url)" >&2
fi
exit "$rc"
