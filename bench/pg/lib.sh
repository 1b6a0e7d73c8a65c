# Sourced by bench/pg's scripts: what the rotations (run.sh, fleet.sh) and the
# measures (wqrun_bench.sh, fleet_bench.sh) share.
pgbin=${WQ_PG_BIN:-/usr/lib/postgresql/15/bin}

# ---- a measure, on the database of DATABASE_URL ----
psql() { "$pgbin/psql" -qXAt -v ON_ERROR_STOP=1 "$DATABASE_URL" "$@"; }
now() { date +%s.%N; }

# load QUEUE N [GROUPS]: N items k1..kN through wqrun.add_many in batches of 10,000 (in
# group g(i mod GROUPS) when GROUPS > 0), after `wqrun migrate`.
load_items() {
  local queue=$1 n=$2 groups=${3:-0} b=10000 i
  "$WQRUN" migrate --db "$DATABASE_URL" >/dev/null
  for ((i = 0; i < n; i += b)); do
    psql -c "select wqrun.add_many((select jsonb_agg(jsonb_build_object('queue', '$queue', 'key', 'k' || g)
               || case when $groups > 0 then jsonb_build_object('group', 'g' || (g % greatest($groups, 1))) else '{}' end)
               from generate_series($i + 1, least($i + $b, $n)) g))" >/dev/null
  done
}

# ---- a rotation: needs log (the output file) and pgsh (scripts/pg.sh) ----
say() { echo "$@" | tee -a "$log"; }

# start_rotation LOG: a throwaway cluster (scripts/pg.sh at $pgsh, stopped and removed at exit)
# whose variables are exported; LOG, emptied, becomes the rotation's output file $log.
start_rotation() {
  eval "$("$pgsh" start)"
  trap '"$pgsh" stop' EXIT
  export PGOPTIONS='-c client_min_messages=warning'
  log=$1
  : >"$log"
}

# say_machine: the header line on the machine (cores, CPU model, memory, load).
say_machine() {
  say "# machine: nproc $(nproc), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)," \
    "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

# cpu_jiffies: "<total> <idle+iowait>" of all CPUs, from /proc/stat.
cpu_jiffies() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $5 + $6 }' /proc/stat; }

# measure_on DB COMMAND...: runs COMMAND with DATABASE_URL set to a fresh database named
# DB, its output into the log (and how busy the whole machine was), then drops the database.
measure_on() {
  local name=$1 url
  shift
  url=$("$pgsh" createdb "$name")
  say "# -- $name (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  local s0 s1
  s0=$(cpu_jiffies)
  if ! DATABASE_URL=$url "$@" 2>&1 | tee -a "$log"; then
    echo "${0##*/}: $name failed" >&2
    exit 1
  fi
  s1=$(cpu_jiffies)
  # How busy the whole machine was (every process, ours and others').
  say "# $name: machine CPU busy $(awk -v a="$s0" -v b="$s1" 'BEGIN {
    split(a, x, " "); split(b, y, " "); t = y[1] - x[1]; if (t <= 0) t = 1
    printf "%.0f%% of %d CPUs", 100 * (1 - (y[2] - x[2]) / t), '"$(nproc)"' }')"
  "$pgbin/psql" -qX -c "DROP DATABASE \"$name\"" postgres
}
