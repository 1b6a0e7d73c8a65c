#!/usr/bin/env bash
# wq.http benchmark (issue 18): GET /healthz with keep-alive against a local
# server, from three clients in the same run, interleaved (ROUNDS rounds of:
# wrk -t1, wrk -t2, wq.http, exec-curl), each for DURATION seconds:
#   wrk -t1 -c64 and wrk -t2 -c64 (-s bench/wrk_done.lua: plain GETs), the
#     practical limit of a client on this machine;
#   wq.http: bench/wqhttp.lua http, a queue with WORKERS handler workers, one
#     wq.http GET per handler, keys topped up every millisecond;
#   exec-curl: the same with wq.exec{"curl", "-s", URL} per handler.
# The server is nginx (SERVER=nginx, the default: one process, no master, 1
# worker, access log off, `return 200 "ok\n"` for /healthz) or a second
# wqrun --serve --listen (SERVER=wqrun, its own GET /healthz). Server and
# client share the machine's cores: each run's line says the CPU of the
# client (its children included: the curl processes), of the server and of
# the whole machine (other processes included), and the client's CPU per
# request (wrk: user + system from /usr/bin/time over its run / its requests;
# wqhttp.lua: its own CPU in its window, curl children included / the
# requests of the window): a figure less moved by the machine's other load
# than requests/s.
# Then the memory per in-flight request: RSS of a runner with N (HOLD_N: 0,
# 1,000, 5,000) wq.http requests in flight to a listener that never answers
# (python3: 4 SO_REUSEPORT sockets on 0.0.0.0:PORT, listen(4096), no accept),
# each request to a loopback address of its own (hold: N connections), all
# to 127.0.0.1 (hold1: libcurl's PIPEWAIT holds them behind the first
# connection, which never answers), and of the same N handlers doing wq.sleep
# instead (sleep: the coroutines' share).
# Prints every run on a `#` line, then `<name> <value> <unit>` lines: the
# medians per client, the ratios wq.http / wrk (-t1) and wq.http / exec-curl
# per round and of the medians, with the bars of the issue (>= 0.5 of wrk,
# >= 50x exec-curl), and the memory per request. Exits 0 when it ran (bars
# met or not), 1 on a real error. Environment (all optional):
#   WQRUN     wqrun binary (default: build-bench/wqrun, built Release here)
#   SERVER    nginx | wqrun (nginx)     ROUNDS   rounds (3; 0: the memory part only)
#   DURATION  seconds per run (10)      WORKERS  workers and wrk connections (64)
#   HOLD_N    in-flight counts ("0 1000 5000"; "": no memory part)
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

server=${SERVER:-nginx}
rounds=${ROUNDS:-3}
duration=${DURATION:-10}
workers=${WORKERS:-64}
read -r -a hold_ns <<<"${HOLD_N-0 1000 5000}"
bar_wrk=0.5
bar_exec=50

for tool in wrk curl python3 ss; do
  command -v "$tool" >/dev/null || {
    echo "SKIP bench_wqhttp ($tool not installed; scripts/deps.sh installs it)"
    exit 0
  }
done
case $server in
nginx)
  nginx=$(command -v nginx || echo /usr/sbin/nginx)
  [[ -x $nginx ]] || {
    echo "SKIP bench_wqhttp (nginx not installed; scripts/deps.sh installs it)"
    exit 0
  }
  ;;
wqrun) ;;
*)
  echo "bench_wqhttp: SERVER must be nginx or wqrun" >&2
  exit 1
  ;;
esac

. bench/lib/release.sh
if [[ -z ${WQRUN:-} ]]; then
  release_build bench_wqhttp wqrun
  WQRUN=build-bench/wqrun
fi
WQRUN=$(realpath "$WQRUN")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wq-bench-wqhttp.XXXXXX")
srv_pid='' hold_pid='' run_pid=''
cleanup() {
  local p
  for p in $run_pid $hold_pid $srv_pid; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

calc() { awk "BEGIN { printf \"%.${2:-2}f\", $1 }"; }
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
    END { if (NR % 2) printf "%.6g", v[(NR + 1) / 2]; else printf "%.6g", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
free_port() { echo $((20000 + (RANDOM * 32768 + RANDOM) % 40001)); }
# CPU jiffies (user + system) of process PID; of the whole machine with no PID: "busy total".
jiffies() {
  if [[ -n ${1:-} ]]; then
    awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
  else
    awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat
  fi
}

# ---- the server ----
start_server() {
  local i
  for _ in 1 2 3 4 5 6 7 8; do
    port=$(free_port)
    url=http://127.0.0.1:$port/healthz
    if [[ $server == nginx ]]; then
      mkdir -p "$tmp/nginx"
      cat >"$tmp/nginx/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  keepalive_requests 1000000000;
  keepalive_timeout 300s;
  server {
    listen 127.0.0.1:$port backlog=4096;
    location = /healthz { default_type text/plain; return 200 "ok\n"; }
  }
}
EOF
      "$nginx" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" 2>"$tmp/server.err" &
    else
      echo '-- serves GET /healthz only' >"$tmp/serve.lua"
      "$WQRUN" --quiet --serve --listen "127.0.0.1:$port" "$tmp/serve.lua" 2>"$tmp/server.err" &
    fi
    srv_pid=$!
    for ((i = 0; i < 100; i++)); do
      kill -0 "$srv_pid" 2>/dev/null || break
      [[ $(curl -s -m 1 "$url" 2>/dev/null) == ok* ]] && return 0
      sleep 0.05
    done
    kill -9 "$srv_pid" 2>/dev/null || true
    wait "$srv_pid" 2>/dev/null || true
    srv_pid=
  done
  echo "bench_wqhttp: the $server server did not start: $(head -c 500 "$tmp/server.err" 2>/dev/null)" >&2
  exit 1
}

# ---- one run ----
all=$tmp/all # "<client> <round> <rps> <p50_ms> <p99_ms> <errors> <cpu_us_per_request>" per run

# run CLIENT ROUND COMMAND...: runs COMMAND (its output in $tmp/out) under
# /usr/bin/time and prints the CPU split of the run.
run() {
  local client=$1 round=$2
  shift 2
  local s0 s1 m0 m1
  s0=$(jiffies "$srv_pid")
  m0=$(jiffies)
  if ! /usr/bin/time -f "%e %U %S" -o "$tmp/time" "$@" >"$tmp/out" 2>"$tmp/err"; then
    echo "bench_wqhttp: $client failed: $(head -c 2000 "$tmp/err")" >&2
    exit 1
  fi
  s1=$(jiffies "$srv_pid")
  m1=$(jiffies)
  local wall user sys
  read -r wall user sys <"$tmp/time"
  v() { awk -v k="$1" '$1 == k { print $2 }' "$tmp/out"; }
  local rps p50 p99 errs cpu
  if [[ $client == wrk* ]]; then
    rps=$(v wrk_rps)
    p50=$(calc "$(v wrk_p50_us) / 1000" 3)
    p99=$(calc "$(v wrk_p99_us) / 1000" 3)
    errs=$(($(v wrk_non2xx) + $(v wrk_socket_errors)))
    cpu=$(calc "($user + $sys) * 1e6 / $(v wrk_requests)" 1)
  else
    local m=wqhttp_$client
    rps=$(v "${m}_rps")
    p50=$(v "${m}_p50_ms")
    p99=$(v "${m}_p99_ms")
    errs=$(v "${m}_errors")
    cpu=$(calc "$(v "${m}_cpu_s") * 1e6 / $(v "${m}_requests")" 1)
  fi
  [[ -n $rps && -n $p50 && -n $p99 && -n $errs && -n $cpu ]] || {
    echo "bench_wqhttp: $client printed no result: $(head -c 2000 "$tmp/out") $(head -c 1000 "$tmp/err")" >&2
    exit 1
  }
  echo "$client $round $rps $p50 $p99 $errs $cpu" >>"$all"
  local split
  split=$(awk -v w="$wall" -v u="$user" -v s="$sys" -v s0="$s0" -v s1="$s1" -v m0="$m0" -v m1="$m1" \
    -v n="$(nproc)" 'BEGIN { split(m0, a, " "); split(m1, b, " "); t = b[2] - a[2]; if (t <= 0) t = 1
      printf "client %.0f%%, server %.0f%%, machine %.0f%% of %d cores",
        100 * (u + s) / w, (s1 - s0) / w, 100 * n * (b[1] - a[1]) / t, n }')
  echo "#   round $round $client: $rps req/s, p50 $p50 ms, p99 $p99 ms, errors $errs;" \
    "client CPU $cpu us/request; CPU (% of one core over ${wall}s) $split"
}

echo "# bench_wqhttp (wq.http vs wrk vs wq.exec curl, GET /healthz, keep-alive)"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S +0000')"
echo "# machine: nproc $(nproc), cpu $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
  "ram $(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo) MiB, load $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- requests/s: ROUNDS rounds of the four clients ----
throughput() {
  start_server
  echo "# server: $server ($( [[ $server == nginx ]] && "$nginx" -v 2>&1 | sed 's/.*: //' || echo "$WQRUN --serve")), pid $srv_pid, $url"
  echo "# binary $WQRUN; $rounds rounds of wrk-t1 wrk-t2 http exec, ${duration}s each, $workers connections / workers;" \
    "wqhttp.lua warms up 1 s before its window; CPU from /usr/bin/time (client) and /proc/PID/stat (server)"

  for ((r = 1; r <= rounds; r++)); do
    run wrk1 "$r" wrk -t1 -c"$workers" -d"${duration}s" --latency -s bench/wrk_done.lua "$url"
    run wrk2 "$r" wrk -t2 -c"$workers" -d"${duration}s" --latency -s bench/wrk_done.lua "$url"
    run http "$r" "$WQRUN" --quiet bench/wqhttp.lua http "$url" "$duration" "$workers"
    run exec "$r" "$WQRUN" --quiet bench/wqhttp.lua exec "$url" "$duration" "$workers"
    get() { awk -v c="$1" -v r="$r" '$1 == c && $2 == r { print $3 }' "$all"; }
    echo "#   round $r: http / wrk1 $(calc "$(get http) / $(get wrk1)" 3)," \
      "http / exec $(calc "$(get http) / $(get exec)" 1)"
  done

  local client col i what unit vals
  declare -A med
  for client in wrk1 wrk2 http exec; do
    for col in 3:rps:req/s 4:p50:ms 5:p99:ms 6:errors:requests 7:cpu_per_request:us; do
      IFS=: read -r i what unit <<<"$col"
      mapfile -t vals < <(awk -v c="$client" -v i="$i" '$1 == c { print $i }' "$all")
      med[$client.$what]=$(median "${vals[@]}")
      echo "wqhttp_${client}_$what ${med[$client.$what]} $unit"
    done
  done
  ratio_wrk=$(calc "${med[http.rps]} / ${med[wrk1.rps]}" 3)
  ratio_exec=$(calc "${med[http.rps]} / ${med[exec.rps]}" 1)
  echo "wqhttp_http_over_wrk1 $ratio_wrk ratio"
  echo "wqhttp_http_over_wrk2 $(calc "${med[http.rps]} / ${med[wrk2.rps]}" 3) ratio"
  echo "wqhttp_http_over_exec $ratio_exec ratio"
  echo "wqhttp_http_cpu_over_wrk1_cpu $(calc "${med[http.cpu_per_request]} / ${med[wrk1.cpu_per_request]}" 2) ratio"
  verdict() { awk -v a="$1" -v b="$2" 'BEGIN { print (a >= b ? "met" : "MISSED") }'; }
  echo "# bar wq.http >= $bar_wrk x wrk -t1: $(verdict "$ratio_wrk" "$bar_wrk") (ratio of the medians $ratio_wrk)"
  echo "# bar wq.http >= $bar_exec x exec-curl: $(verdict "$ratio_exec" "$bar_exec") (ratio of the medians $ratio_exec)"
  kill -TERM "$srv_pid" 2>/dev/null || true
  wait "$srv_pid" 2>/dev/null || true
  srv_pid=
}
((rounds > 0)) && throughput

# ---- memory per in-flight request ----
((${#hold_ns[@]} > 0)) || exit 0 # HOLD_N="": no memory part
cat >"$tmp/listen.py" <<'EOF'
# A listener that never answers: 4 SO_REUSEPORT sockets on one port (every
# address: the runner connects to 127.1.x.y), each with an accept queue of
# 4096 (somaxconn), never accepted.
import socket, sys, time
port = int(sys.argv[1])
socks = []
for _ in range(4):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("0.0.0.0", port))
    s.listen(4096)
    socks.append(s)
print("listening", flush=True)
while True:
    time.sleep(3600)
EOF
for _ in 1 2 3 4 5 6 7 8; do
  hport=$(free_port)
  python3 "$tmp/listen.py" "$hport" >"$tmp/listen.out" 2>"$tmp/listen.err" &
  hold_pid=$!
  for ((i = 0; i < 100; i++)); do
    [[ -s $tmp/listen.out ]] && break
    kill -0 "$hold_pid" 2>/dev/null || break
    sleep 0.05
  done
  [[ -s $tmp/listen.out ]] && break
  kill -9 "$hold_pid" 2>/dev/null || true
  wait "$hold_pid" 2>/dev/null || true
  hold_pid=
done
[[ -n $hold_pid ]] || {
  echo "bench_wqhttp: the silent listener did not start: $(head -c 500 "$tmp/listen.err")" >&2
  exit 1
}
echo "# memory: N handlers in flight; hold = wq.http GET http://127.1.x.y:$hport/ (never answered; a host per request)," \
  "hold1 = the same to 127.0.0.1, sleep = wq.sleep (no HTTP); RSS from /proc/PID/status once every handler started (+2 s)"

# hold MODE N: sets hold_rss (the runner's RSS, KiB) and hold_conns (its established
# connections to the listener).
hold() {
  local mode=$1 n=$2 i
  local host=%s script_mode=$mode
  [[ $mode == hold1 ]] && host=127.0.0.1 script_mode=hold
  : >"$tmp/hold.out" # before the start: a line left from the last run is not this one's
  "$WQRUN" --quiet bench/wqhttp.lua "$script_mode" "http://$host:$hport/" "$n" >"$tmp/hold.out" 2>"$tmp/hold.err" &
  run_pid=$!
  for ((i = 0; i < 1200; i++)); do
    grep -q "^wqhttp_${script_mode}_ready" "$tmp/hold.out" && break
    kill -0 "$run_pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "^wqhttp_${script_mode}_ready" "$tmp/hold.out" || {
    echo "bench_wqhttp: $mode $n did not get ready: $(head -c 1000 "$tmp/hold.err")" >&2
    exit 1
  }
  hold_rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$run_pid/status")
  hold_conns=$(ss -tnpH state established "( dport = :$hport )" | grep -c "pid=$run_pid," || true)
  kill -9 "$run_pid"
  wait "$run_pid" 2>/dev/null || true
  run_pid=
}

declare -A rss
for n in "${hold_ns[@]}"; do
  for mode in hold hold1 sleep; do
    [[ $mode != hold && $n == 0 ]] && continue
    hold "$mode" "$n"
    rss[$mode.$n]=$hold_rss
    echo "#   $mode N=$n: RSS $hold_rss KiB, established connections to the listener $hold_conns"
    echo "wqhttp_rss_${mode}_$n $hold_rss KiB"
  done
done
base=${rss[hold.0]:-}
for n in "${hold_ns[@]}"; do
  ((n > 0)) || continue
  [[ -n $base ]] && echo "wqhttp_rss_per_request_$n $(calc "(${rss[hold.$n]} - $base) * 1024 / $n" 0) bytes"
  echo "wqhttp_rss_http_share_per_request_$n $(calc "(${rss[hold.$n]} - ${rss[sleep.$n]}) * 1024 / $n" 0) bytes"
  echo "wqhttp_rss_one_host_per_request_$n $(calc "(${rss[hold1.$n]} - $base) * 1024 / $n" 0) bytes"
done
kill -9 "$hold_pid"
wait "$hold_pid" 2>/dev/null || true
hold_pid=
