#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster for the tests, the benchmarks and by hand.
#
#   eval "$(scripts/pg.sh start)"        # start one, export its variables
#   scripts/pg.sh createdb t_mytest_42   # a fresh database; prints its URL
#   scripts/pg.sh stop                   # stop it and remove its directory
#
# Subcommands (DIR defaults to $WQ_PG_DIR, except for start):
#
#   start [DIR]        initdb a new cluster in DIR (default: a new
#                      mktemp -d /tmp/wqrun-pg.XXXXXX; an existing DIR must be
#                      empty) and start it. It listens only on a Unix socket in
#                      DIR and on 127.0.0.1 at a free random port in
#                      20000-45000 (another one when that is taken), never on
#                      5432. Prints the export lines below on stdout (also
#                      written to DIR/env); everything else goes to stderr.
#   stop [DIR]         pg_ctl stop -m fast (immediate, then SIGKILL, if that
#                      fails), then removes DIR. Succeeds when DIR is gone
#                      already; refuses a DIR that pg.sh did not make.
#   restart [DIR]      pg_ctl restart -m immediate -w: a crash and recovery,
#                      same port and socket (for tests that restart
#                      PostgreSQL in the middle of work).
#   env [DIR]          prints the export lines of a running cluster.
#   createdb NAME [DIR]
#                      creates database NAME ([a-z_][a-z0-9_]*, at most 63
#                      characters) and prints its URL (TCP, like WQ_TEST_PG_URL).
#   psql [DIR] [-- ARGS...]
#                      psql -X connected to the cluster's postgres database.
#
# The export lines:
#   PGHOST=DIR  PGPORT=<port>  PGUSER=postgres  PGDATABASE=postgres
#   WQ_PG_DIR=DIR  WQ_PG_BIN=/usr/lib/postgresql/15/bin
#   WQ_TEST_PG_URL=postgresql://postgres@127.0.0.1:<port>/postgres
#
# DIR holds data/ (PGDATA), log (the server's log), env, port, bin and the
# socket. The server runs as the owner of DIR/data: the postgres OS user when
# started by root (initdb and pg_ctl refuse root), yourself otherwise. Trust
# authentication, superuser "postgres". Settings suited to tests that crash
# it: fsync and synchronous_commit stay on; max_connections=200,
# shared_buffers=128MB, log_min_messages=warning. Several processes may run
# pg.sh at once on different DIRs. WQ_PG_BIN chooses other binaries.
# Missing binaries (scripts/deps.sh installs them) are an error, never a skip.
set -euo pipefail

prog=pg.sh
die() {
  echo "$prog: $*" >&2
  exit 1
}
usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
  exit 2
}

# The libpq variables of another cluster (ours, exported) must not steer the
# commands below: every one of them gets its host, port, user and database.
unset PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGDATA PGOPTIONS PGSERVICE \
  PGSERVICEFILE PGPASSWORD PGPASSFILE PGSSLMODE PGTARGETSESSIONATTRS

default_bin=/usr/lib/postgresql/15/bin
BIN=${WQ_PG_BIN:-$default_bin}

need_bins() { # need_bins BINDIR NAME...
  local dir=$1 b
  shift
  for b in "$@"; do
    [[ -x $dir/$b ]] || die "PostgreSQL binary $dir/$b not found: install the Debian packages postgresql, postgresql-client (bash scripts/deps.sh) or set WQ_PG_BIN"
  done
}

# abs_dir DIR: DIR as an absolute path (it need not exist).
abs_dir() {
  local d=$1
  [[ $d == /* ]] || d=$PWD/$d
  # Drop trailing slashes and "/./"; keeps it simple for the socket path.
  d=$(realpath -m -- "$d")
  printf '%s\n' "$d"
}

# cluster_dir [DIR]: the DIR argument or $WQ_PG_DIR, absolute.
cluster_dir() {
  local d=${1:-${WQ_PG_DIR:-}}
  [[ -n $d ]] || die "no cluster directory: pass DIR or set WQ_PG_DIR (eval \"\$(scripts/pg.sh start)\")"
  abs_dir "$d"
}

is_ours() { [[ -f $1/.wqrun-pg ]]; }

# need_cluster DIR: DIR holds a cluster made by pg.sh (running or not).
need_cluster() {
  [[ -d $1 ]] || die "no cluster in $1 (stopped already?)"
  if ! is_ours "$1" || [[ ! -f $1/port ]]; then
    die "$1 is not a cluster made by pg.sh (or its start did not finish)"
  fi
}

# owner DIR: the OS user the server of DIR runs as.
owner() { stat -c %U -- "$1/data"; }

# as USER CMD...: runs CMD as USER (through runuser when that is not us).
as() {
  local u=$1
  shift
  if [[ $u == "$(id -un)" ]]; then
    "$@"
  elif [[ $(id -u) -eq 0 ]]; then
    (cd / && runuser -u "$u" -- "$@")
  else
    die "the cluster belongs to $u: run this as $u or as root"
  fi
}

# detached CMD...: runs CMD without the file descriptors above 2 that this
# script inherited, so that the server does not keep a caller's pipe open
# (a `$(pg.sh start)`, ctest's or CI's output) for as long as it runs.
detached() {
  (
    for fd in "/proc/$BASHPID/fd/"*; do
      fd=${fd##*/}
      if [[ $fd =~ ^[0-9]+$ ]] && ((fd > 2)); then eval "exec $fd>&-"; fi
    done
    "$@"
  )
}

# bin_of DIR: the binaries that made the cluster in DIR.
bin_of() {
  if [[ -f $1/bin ]]; then cat -- "$1/bin"; else printf '%s\n' "$BIN"; fi
}

port_of() {
  [[ -f $1/port ]] || die "$1 is not a cluster made by pg.sh (no $1/port)"
  cat -- "$1/port"
}

# running DIR: the server of DIR is up.
running() {
  local d=$1
  [[ -f $d/data/postmaster.pid ]] || return 1
  as "$(owner "$d")" "$(bin_of "$d")/pg_ctl" -D "$d/data" status >/dev/null 2>&1
}

# port_busy PORT: something listens on TCP PORT (any address, IPv4 or IPv6).
port_busy() {
  local hex files=() f
  printf -v hex '%04X' "$1"
  for f in /proc/net/tcp /proc/net/tcp6; do [[ -r $f ]] && files+=("$f"); done
  ((${#files[@]})) || return 1
  awk -v h=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == h { f = 1 } END { exit !f }' "${files[@]}"
}

random_port() {
  local r=${SRANDOM:-$((RANDOM * 32768 + RANDOM))}
  echo $((20000 + r % 25001))
}

write_conf() { # write_conf DIR PORT
  cat >"$1/data/wqrun.conf" <<EOF
# Written by scripts/pg.sh: a throwaway cluster for tests. Crash tests must be
# honest, so fsync and synchronous_commit stay on.
listen_addresses = '127.0.0.1'
port = $2
unix_socket_directories = '$1'
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 200
shared_buffers = 128MB
logging_collector = off
log_destination = 'stderr'
log_min_messages = warning
log_line_prefix = '%m [%p] %q%u@%d '
EOF
}

write_env() { # write_env DIR PORT BIN
  {
    printf 'export PGHOST=%q\n' "$1"
    printf 'export PGPORT=%q\n' "$2"
    printf 'export PGUSER=postgres\n'
    printf 'export PGDATABASE=postgres\n'
    printf 'export WQ_PG_DIR=%q\n' "$1"
    printf 'export WQ_PG_BIN=%q\n' "$3"
    printf 'export WQ_TEST_PG_URL=%q\n' "postgresql://postgres@127.0.0.1:$2/postgres"
  } >"$1/env"
}

cmd_start() {
  (($# <= 1)) || usage
  need_bins "$BIN" initdb pg_ctl postgres psql createdb
  local dir made=0 user
  if (($# == 1)); then
    dir=$(abs_dir "$1")
    if [[ -e $dir ]]; then
      [[ -d $dir ]] || die "$dir exists and is not a directory"
      [[ -z $(ls -A -- "$dir") ]] || die "$dir is not empty"
    else
      mkdir -p -- "$dir"
      made=1
    fi
  else
    dir=$(mktemp -d /tmp/wqrun-pg.XXXXXX)
    made=1
  fi
  # From here on a failure takes down what was started and made.
  START_DIR=$dir START_MADE=$made
  trap 'start_failed' EXIT
  # It goes into postgresql.conf, env lines and a socket path (107 bytes).
  [[ $dir =~ ^[A-Za-z0-9._/+-]+$ ]] || die "$dir: use a path of letters, digits and ._/+- only"
  ((${#dir} <= 90)) || die "$dir: too long for a Unix socket path (90 characters at most)"

  if [[ $(id -u) -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || die "no postgres OS user to run the server as (install the postgresql package: bash scripts/deps.sh)"
    user=postgres
  else
    user=$(id -un)
  fi

  echo "wqrun pg.sh cluster: scripts/pg.sh stop removes this directory" >"$dir/.wqrun-pg"
  printf '%s\n' "$BIN" >"$dir/bin"
  chmod 755 "$dir"
  if [[ $user != "$(id -un)" ]]; then
    chown "$user:" "$dir"
    as "$user" test -w "$dir" -a -x "$dir" ||
      die "the $user user cannot write to $dir (is a parent directory closed to it?)"
  fi

  echo "$prog: initdb in $dir/data" >&2
  as "$user" "$BIN/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C \
    --no-sync --no-instructions >/dev/null
  echo "include 'wqrun.conf'" >>"$dir/data/postgresql.conf"

  local port off
  : >"$dir/log"
  [[ $user == "$(id -un)" ]] || chown "$user:" "$dir/log"
  for _ in $(seq 1 20); do
    port=$(random_port)
    port_busy "$port" && continue
    write_conf "$dir" "$port"
    [[ $user == "$(id -un)" ]] || chown "$user:" "$dir/data/wqrun.conf"
    off=$(stat -c %s "$dir/log")
    if detached as "$user" "$BIN/pg_ctl" -D "$dir/data" -l "$dir/log" -s -w -t 30 start >&2 2>"$dir/pg_ctl.err"; then
      rm -f "$dir/pg_ctl.err"
      echo "$port" >"$dir/port"
      write_env "$dir" "$port" "$BIN"
      trap - EXIT
      echo "$prog: started in $dir, port $port (log: $dir/log)" >&2
      cat -- "$dir/env"
      return 0
    fi
    # Taken between the check and the bind (another process): next port.
    if tail -c +"$((off + 1))" "$dir/log" | grep -qE 'could not create any TCP/IP sockets|Address already in use'; then
      echo "$prog: port $port was taken, trying another" >&2
      continue
    fi
    cat "$dir/pg_ctl.err" >&2
    die "the server did not start; its log ($dir/log) ends with:
$(tail -c +"$((off + 1))" "$dir/log" | tail -n 20)"
  done
  die "no free port found in 20 tries"
}

# The EXIT trap of start: stop the server if it runs, remove what start made.
start_failed() {
  local rc=$? d=$START_DIR
  [[ $rc -ne 0 ]] || rc=1
  if [[ -f $d/data/postmaster.pid ]]; then
    as "$(owner "$d")" "$BIN/pg_ctl" -D "$d/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  if ((START_MADE)); then
    rm -rf -- "$d"
  else
    find "$d" -mindepth 1 -delete 2>/dev/null || rm -rf -- "${d:?}"/* "$d"/.[!.]* 2>/dev/null || true
  fi
  exit "$rc"
}

cmd_stop() {
  (($# <= 1)) || usage
  local dir
  dir=$(cluster_dir "${1:-}")
  [[ -e $dir ]] || return 0
  is_ours "$dir" || die "$dir was not made by pg.sh (no $dir/.wqrun-pg): not removing it"
  if [[ -f $dir/data/postmaster.pid ]]; then
    local user bin pid
    user=$(owner "$dir")
    bin=$(bin_of "$dir")
    pid=$(head -n1 "$dir/data/postmaster.pid" 2>/dev/null || true)
    if running "$dir"; then
      as "$user" "$bin/pg_ctl" -D "$dir/data" -s -m fast -w -t 60 stop >&2 ||
        as "$user" "$bin/pg_ctl" -D "$dir/data" -s -m immediate -w -t 30 stop >&2 || true
    fi
    # A postmaster that is still there (hung, or its pid file damaged): kill
    # it and its children. Its command line names the data directory, so a
    # reused pid is left alone.
    if [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] &&
      tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir/data"; then
      local procs k i alive
      mapfile -t procs < <(echo "$pid"; pgrep -P "$pid" || true)
      echo "$prog: killing postmaster $pid and its children" >&2
      kill -KILL "${procs[@]}" 2>/dev/null || true
      for ((i = 0; i < 200; i++)); do
        alive=0
        for k in "${procs[@]}"; do
          # A zombie is gone: pid 1 reaps the postmaster, maybe late.
          [[ -r /proc/$k/status ]] && ! grep -q '^State:[[:space:]]*[ZX]' "/proc/$k/status" 2>/dev/null && alive=1
        done
        ((alive)) || break
        sleep 0.05
      done
    fi
  fi
  rm -rf -- "$dir"
  echo "$prog: stopped and removed $dir" >&2
}

cmd_restart() {
  (($# <= 1)) || usage
  local dir bin
  dir=$(cluster_dir "${1:-}")
  need_cluster "$dir"
  bin=$(bin_of "$dir")
  need_bins "$bin" pg_ctl postgres
  detached as "$(owner "$dir")" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -s -m immediate -w -t 30 restart >&2 ||
    die "restart failed; see $dir/log"
}

cmd_env() {
  (($# <= 1)) || usage
  local dir
  dir=$(cluster_dir "${1:-}")
  need_cluster "$dir"
  running "$dir" || die "the cluster in $dir is not running"
  cat -- "$dir/env"
}

cmd_createdb() {
  (($# == 1 || $# == 2)) || usage
  local name=$1 dir port bin err
  [[ $name =~ ^[a-z_][a-z0-9_]*$ && ${#name} -le 63 ]] ||
    die "bad database name '$name': [a-z_][a-z0-9_]*, at most 63 characters"
  dir=$(cluster_dir "${2:-}")
  need_cluster "$dir"
  port=$(port_of "$dir")
  bin=$(bin_of "$dir")
  need_bins "$bin" createdb
  # CREATE DATABASE fails while someone else is connected to template1.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    if err=$("$bin/createdb" -h "$dir" -p "$port" -U postgres -- "$name" 2>&1); then
      echo "postgresql://postgres@127.0.0.1:$port/$name"
      return 0
    fi
    grep -q 'is being accessed by other users' <<<"$err" || break
    sleep 0.2
  done
  die "createdb $name failed: $err"
}

cmd_psql() {
  local dir="" bin port
  if (($#)) && [[ $1 != -- ]]; then
    dir=$1
    shift
  fi
  if (($#)); then
    [[ $1 == -- ]] || usage
    shift
  fi
  dir=$(cluster_dir "$dir")
  need_cluster "$dir"
  port=$(port_of "$dir")
  bin=$(bin_of "$dir")
  need_bins "$bin" psql
  exec "$bin/psql" -X -h "$dir" -p "$port" -U postgres -d postgres "$@"
}

(($#)) || usage
sub=$1
shift
case $sub in
start | stop | restart | env | createdb | psql) "cmd_$sub" "$@" ;;
-h | --help | help) usage ;;
*)
  echo "$prog: unknown subcommand '$sub'" >&2
  usage
  ;;
esac
