#!/usr/bin/env bash
# The runnable examples do what their header comments (and the README's table
# of examples) promise: examples/checksum.lua (demo mode, a given directory
# with flaky first attempts, a file that keeps failing, Ctrl-C with --db and
# the resumed run), examples/controller.lua and examples/periodic.lua (each in
# real time and under --virtual-time). examples/crawler.lua is covered by
# test_groups.sh and test_example_webhooks.sh, examples/webhooks.lua by
# test_example_webhooks.sh.
. "$(dirname "$0")/lib.sh"

for tool in sqlite3 sha256sum gzip cmp; do
    command -v "$tool" >/dev/null || { echo "FAIL: needs $tool" >&2; exit 1; }
done
sql() { sqlite3 -batch -cmd '.timeout 5000' "$@"; }
EX=$WQ_SOURCE_DIR/examples
REAL_GZIP=$(command -v gzip)

# Seconds of the day of a wq.log line's time stamp ("2026-01-02 03:04:05.678 ...").
log_seconds() {
    awk '{ split($2, t, ":"); printf "%.3f\n", t[1] * 3600 + t[2] * 60 + t[3] }'
}

# The two examples that take seconds of real time run in the background
# while the rest of the test runs; they are checked at the end.
# run_bg NAME ARGS...: wqrun ARGS in the background; its stdout, stderr,
# and wall time go to $TMP/NAME.{out,err,time}. Sets BG_PID.
run_bg() {
    local name=$1
    shift
    "$WQRUN" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" </dev/null &
    BG_PID=$!
    PIDS+=("$BG_PID")
    (
        t0=$(date +%s.%N)
        while kill -0 "$BG_PID" 2>/dev/null; do sleep 0.02; done
        awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }' >"$TMP/$name.time"
    ) &
    PIDS+=("$!")
}
# bg_result NAME PID: waits for it; sets RC, OUT, ERR, ELAPSED as run does
bg_result() {
    wait_exit "$2" 30
    for ((i = 0; i < 100; i++)); do [ -s "$TMP/$1.time" ] && break; sleep 0.02; done
    OUT=$(cat "$TMP/$1.out") ERR=$(cat "$TMP/$1.err") ELAPSED=$(cat "$TMP/$1.time")
    LAST_CMD="wqrun examples/$1.lua (real time, in the background)"
}
run_bg periodic "$EX/periodic.lua"
periodic_pid=$BG_PID
run_bg controller "$EX/controller.lua"
controller_pid=$BG_PID

# ============================================================ checksum.lua
# A gzip in front of the real one (wq.exec finds programs on PATH): it
# records each file it is run on (NUL-terminated, to $GZ_LOG), can be slowed
# down ($GZ_DELAY seconds) and fails for one file ($GZ_FAIL).
mkdir -p "$TMP/bin"
cat >"$TMP/bin/gzip" <<EOF
#!/bin/sh
# argv: gzip -c -n -- FILE
if [ -n "\${GZ_LOG:-}" ]; then printf '%s\0' "\$4" >>"\$GZ_LOG"; fi
if [ -n "\${GZ_DELAY:-}" ]; then sleep "\$GZ_DELAY"; fi
if [ "\$4" = "\${GZ_FAIL:-}" ]; then echo "gzip: injected failure" >&2; exit 1; fi
exec "$REAL_GZIP" "\$@"
EOF
chmod +x "$TMP/bin/gzip"
WPATH=$TMP/bin:$PATH

# The input: 30 files, some in subdirectories, text and binary, an empty one,
# names with a space and with a newline (the example promises any name works).
IN=$TMP/in
mkdir -p "$IN/sub/deeper"
for i in $(seq 1 24); do
    case $((i % 4)) in
    0) head -c $((i * 700)) /dev/urandom >"$IN/sub/blob-$i.bin" ;;
    1) seq $((i * 150)) >"$IN/numbers $i.txt" ;;
    2) seq $((i * 90)) >"$IN/sub/deeper/n-$i.txt" ;;
    3) seq $((i * 40)) | tr 0-9 a-j >"$IN/letters-$i" ;;
    esac
done
: >"$IN/empty"
printf 'line one\nline two\n' >"$IN/new
line.txt"
for i in 1 2 3 4; do seq $((i * 1000)) >"$IN/sub/extra-$i.log"; done
NFILES=$(find "$IN" -type f -printf . | wc -c)
[ "$NFILES" = 30 ] || { echo "FAIL: the test input has $NFILES files, not 30" >&2; exit 1; }
find "$IN" -type f -printf '%P\0' | sort -z >"$TMP/all.names"

# manifest_ok IN OUT: (cd IN && sha256sum -c OUT/SHA256SUMS) passes
manifest_ok() {
    (cd "$1" && sha256sum --quiet -c "$2/SHA256SUMS" >"$TMP/sha.out" 2>&1) || {
        sed 's/^/     sha256sum: /' "$TMP/sha.out" | head -5 >&2
        return 1
    }
}

# gz_ok IN OUT: every file of IN has an OUT/FILE.gz that decompresses to it
gz_ok() {
    local rel bad=0
    while IFS= read -r -d '' rel; do
        if ! "$REAL_GZIP" -dc <"$2/$rel.gz" 2>/dev/null | cmp -s - "$1/$rel"; then
            echo "     $rel.gz does not decompress to $rel" >&2
            bad=$((bad + 1))
        fi
    done < <(find "$1" -type f -printf '%P\0')
    [ "$bad" = 0 ]
}

# Rows of the report table (each ends with 16 hex digits of the sha256).
table_rows() {
    printf '%s\n' "$1" | grep -cE ' [0-9]+  [0-9a-f]{16}$'
}

# NUL-terminated entries of a file
count0() {
    if [ -f "$1" ]; then tr -cd '\0' <"$1" | wc -c; else echo 0; fi
}

# ---------------------------------------------------- demo mode (no arguments)
# It generates its input and output directories under /tmp and leaves them;
# the test removes the two it names (other runs may be using others).
run "$EX/checksum.lua"
demo_in=$(printf '%s\n' "$OUT" | sed -n 's/^demo input: \(.*\) (36 generated files)$/\1/p')
demo_out=$(printf '%s\n' "$OUT" | sed -n 's/^output: \([^ ]*\) (check: .*/\1/p')
expect_rc 0 "demo mode: a run without arguments succeeds"
expect_re "$OUT" "^36 files, .*; ([0-9]+) needed a retry \(\1 failed runs\); 0 failed$" \
    "demo mode: 36 generated files, the simulated failures were retried"
case $demo_in in /tmp/wqrun-checksum-in.??????) ;; *) demo_in= ;; esac
case $demo_out in /tmp/wqrun-checksum-out.??????) ;; *) demo_out= ;; esac
check "demo mode: it names the input and output directories it made under /tmp ('$demo_in', '$demo_out')" \
    test -d "$demo_in" -a -d "$demo_out"
check "demo mode: the generated input holds 36 files" \
    test "$(find "${demo_in:-/nonexistent}" -type f 2>/dev/null | wc -l)" = 36
check "demo mode: sha256sum -c passes on its manifest" manifest_ok "${demo_in:-/nonexistent}" "$demo_out"
check "demo mode: every FILE.gz decompresses to FILE" gz_ok "${demo_in:-/nonexistent}" "$demo_out"
[ -n "$demo_in" ] && rm -rf "$demo_in"
[ -n "$demo_out" ] && rm -rf "$demo_out"

# ------------------------------ a given directory, half the first attempts fail
PATH=$WPATH CHECKSUM_FLAKY=0.5 run "$EX/checksum.lua" "$IN" "$TMP/out1/new"
expect_rc 0 "flaky run: every file succeeds in the end"
expect_re "$OUT" "^30 files, .*; ([1-9][0-9]*) needed a retry \(\1 failed runs\); 0 failed$" \
    "flaky run: 30 files, the failed first attempts are reported as retries"
retried=$(printf '%s\n' "$OUT" | sed -n 's/.*; \([0-9]*\) needed a retry.*/\1/p')
expect_eq "$(printf '%s\n' "$OUT" | grep -cE ' 2  [0-9a-f]{16}$')" "$retried" \
    "flaky run: the table's try column shows 2 for each retried file"
expect_eq "$(table_rows "$OUT")" 30 "flaky run: the table has a row per file"
expect_in "$OUT" "output: $TMP/out1/new (check: cd $IN && sha256sum -c $TMP/out1/new/SHA256SUMS)" \
    "flaky run: the output directory was created and is named"
expect_eq "$(wc -l <"$TMP/out1/new/SHA256SUMS")" 30 "flaky run: the manifest has a line per file"
check "flaky run: (cd DIR && sha256sum -c OUTDIR/SHA256SUMS) passes" manifest_ok "$IN" "$TMP/out1/new"
check "flaky run: every FILE.gz decompresses to FILE" gz_ok "$IN" "$TMP/out1/new"
expect_eq "$(find "$TMP/out1/new" -type f -name '*.gz' -printf . | wc -c)" 30 "flaky run: one .gz per file"

# ------------------------------------ a file that always fails is dead-lettered
SMALL=$TMP/small
mkdir -p "$SMALL"
seq 10 >"$SMALL/a.txt"
seq 20 >"$SMALL/b.txt"
seq 30 >"$SMALL/c.txt"
PATH=$WPATH GZ_FAIL=b.txt run "$EX/checksum.lua" "$SMALL" "$TMP/out2"
expect_rc 1 "a file that could not be processed makes the exit status 1"
expect_re "$OUT" "^  FAILED b.txt after 4 attempts: .*gzip: injected failure$" \
    "it is reported with its attempts (1 run + 3 retries) and the tool's message"
expect_re "$OUT" "^2 files, .*; 0 needed a retry \(4 failed runs\); 1 failed$" "the summary counts it"
expect_eq "$(wc -l <"$TMP/out2/SHA256SUMS")" 2 "the manifest lists the two files that were processed"
check "and it checks out" manifest_ok "$SMALL" "$TMP/out2"
check "no b.txt.gz was written" test ! -e "$TMP/out2/b.txt.gz"

# An OUTDIR inside DIR: a second run does not take the first run's output as input.
run "$EX/checksum.lua" "$SMALL" "$SMALL/out"
run "$EX/checksum.lua" "$SMALL" "$SMALL/out"
expect_rc 0 "OUTDIR inside DIR, second run"
expect_re "$OUT" "^3 files, " "OUTDIR inside DIR: what the first run wrote there is not input"

# -------------------------------------- Ctrl-C with --db: the report is written
# gzip takes 0.4 s a file, four at a time: SIGINT goes in once six files were
# started, so some are still running when it arrives. The report must wait
# for them (they finish, and are done in the state file) and cover them.
DB=$TMP/checksum.db
OUT3=$TMP/out3
PATH=$WPATH GZ_LOG=$TMP/gz1.log GZ_DELAY=0.4 \
    "$WQRUN" --grace 5 --db "$DB" "$EX/checksum.lua" "$IN" "$OUT3" >"$TMP/int.out" 2>"$TMP/int.err" </dev/null &
pid=$!
PIDS+=("$pid")
for ((i = 0; i < 1000; i++)); do
    [ "$(count0 "$TMP/gz1.log")" -ge 6 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
done
check "six files were started within 10 s" test "$(count0 "$TMP/gz1.log")" -ge 6
t_int=$(now)
kill -INT "$pid"
wait_exit "$pid" 5
waited=$(since "$t_int")
OUT=$(cat "$TMP/int.out") ERR=$(cat "$TMP/int.err") ELAPSED=$waited LAST_CMD="wqrun --grace 5 --db $DB checksum.lua (SIGINT)"
expect_rc 0 "SIGINT: the running files drain and the process exits 0 within the grace period"
expect_between "$waited" 0 4 "SIGINT: it exits once the running files are done (--grace 5)"
expect_in "$ERR" "SIGINT received" "SIGINT: the runner reports the signal"
expect_in "$OUT" "interrupted: the report covers the files finished so far" "SIGINT: the on_shutdown report runs"
expect_re "$OUT" "^file +size +gzip +ratio try  sha256$" "SIGINT: the report has its table"
done1=$(sql "$DB" "SELECT count(*) FROM done WHERE queue = 'files'")
started1=$(count0 "$TMP/gz1.log")
check "SIGINT: some but not all files were finished ($done1 of 30)" test "$done1" -ge 4 -a "$done1" -lt 30
expect_eq "$done1" "$started1" "SIGINT: every file that was started finished (drained within the grace period)"
expect_eq "$(sql "$DB" "SELECT count(*) FROM items WHERE queue = 'files'")" $((30 - done1)) \
    "SIGINT: the rest stays queued in the state file"
expect_re "$OUT" "^$done1 files, .*; 0 failed$" "SIGINT: the report counts every file that was finished"
expect_eq "$(table_rows "$OUT")" "$done1" "SIGINT: the table has a row per finished file"
expect_eq "$(wc -l <"$OUT3/SHA256SUMS" 2>/dev/null)" "$done1" \
    "SIGINT: the manifest lists every file that was finished"
check "SIGINT: the partial manifest checks out" manifest_ok "$IN" "$OUT3"

# ------------------------------------ the same command again finishes the rest
PATH=$WPATH GZ_LOG=$TMP/gz2.log run --db "$DB" "$EX/checksum.lua" "$IN" "$OUT3"
expect_rc 0 "resumed run"
expect_in "$OUT" "$done1 files were finished by an earlier run" "resumed run: it says how many it skips"
expect_eq "$(count0 "$TMP/gz2.log")" $((30 - done1)) "resumed run: it processes only the rest"
sort -z "$TMP/gz1.log" >"$TMP/gz1.sorted"
sort -z "$TMP/gz2.log" >"$TMP/gz2.sorted"
expect_eq "$(comm -z -12 "$TMP/gz1.sorted" "$TMP/gz2.sorted" | tr '\0' '\n')" "" \
    "resumed run: no file finished by the interrupted run is done again"
check "resumed run: between them the two runs processed every file" \
    cmp -s <(sort -z "$TMP/gz1.log" "$TMP/gz2.log") "$TMP/all.names"
expect_re "$OUT" "^30 files, .*; 0 failed$" "resumed run: the report covers all 30 files"
expect_eq "$(table_rows "$OUT")" 30 "resumed run: with a row each"
expect_eq "$(wc -l <"$OUT3/SHA256SUMS")" 30 "resumed run: the manifest covers every file"
check "resumed run: (cd DIR && sha256sum -c OUTDIR/SHA256SUMS) passes" manifest_ok "$IN" "$OUT3"
check "resumed run: every FILE.gz decompresses to FILE" gz_ok "$IN" "$OUT3"
expect_eq "$(sql "$DB" "SELECT count(*) FROM done WHERE queue = 'files'") $(sql "$DB" "SELECT count(*) FROM items")" \
    "30 0" "resumed run: the state file has every file done and nothing pending"
PATH=$WPATH GZ_LOG=$TMP/gz3.log run --db "$DB" "$EX/checksum.lua" "$IN" "$OUT3"
expect_in "$OUT" "30 files were finished by an earlier run" "a third run skips every file"
expect_eq "$(count0 "$TMP/gz3.log")" 0 "a third run runs gzip on nothing"
expect_re "$OUT" "^30 files, " "and still reports all 30 (keep_done keeps the results)"

# ========================================================== controller.lua
CONTROLLER_TABLE="name      desired   actual
api             4        4
web             3        3
worker          1        1
cache           0        0
search          3        3
billing         1        1
auth            3        3"

# check_controller: the controller run in OUT/ERR converged and says so
check_controller() {
    local summary calls failed retries logged dropped
    expect_rc 0 "controller ($1): exits 0 after shutdown_with_drain"
    expect_eq "$(printf '%s\n' "$OUT" | head -8)" "$CONTROLLER_TABLE" \
        "controller ($1): every deployment has its desired replicas; the deleted one is gone"
    summary=$(printf '%s\n' "$OUT" | tail -1)
    expect_re "$summary" "^[0-9]+ API calls, [1-9][0-9]* failed; [0-9]+ adds, [0-9]+ rate-limited retries; converged: true$" \
        "controller ($1): the summary line"
    calls=$(printf '%s' "$summary" | awk '{ print $1 }')
    failed=$(printf '%s' "$summary" | awk '{ print $4 }')
    retries=$(printf '%s' "$summary" | awk '{ print $8 }')
    logged=$(printf '%s\n' "$ERR" | grep -cE ' worker [1-3]: .* \(retry #[1-5]\)$')
    dropped=$(printf '%s\n' "$ERR" | grep -c ' dropped after 5 retries: ')
    expect_eq "$retries" "$logged" "controller ($1): each rate-limited retry is logged with its worker and number"
    expect_eq "$failed" $((logged + dropped)) "controller ($1): each failed API call was retried or dropped"
    expect_eq "$(printf '%s\n' "$ERR" | grep -c ' scaled to ')" $((calls - failed)) \
        "controller ($1): each successful API call is logged"
    expect_re "$(printf '%s\n' "$ERR" | grep ' web  ' | grep ' scaled to ' | tail -1)" "scaled to 3 \(want 3\)$" \
        "controller ($1): web was scaled back to 3 last"
}

run --virtual-time "$EX/controller.lua"
check_controller "--virtual-time"
expect_between "$ELAPSED" 0 2 "controller: under --virtual-time it runs instantly"
virtual_out=$OUT
run --virtual-time "$EX/controller.lua" 1
expect_eq "$OUT" "$virtual_out" "controller: SEED 1 is the default, and a seed gives the same run"

# ============================================================ periodic.lua
# check_periodic WHAT: the periodic run in OUT/ERR did what the header says
# check_periodic MODE SLACK: SLACK is how far (s) a gap between two timed
# lines may be off: tight under --virtual-time, wide in real time (ASan, a
# loaded CI machine: the exact timing is checked under --virtual-time).
check_periodic() {
    local t slack=$2
    expect_rc 3 "periodic ($1): exits on its own, 3 for its dead-lettered machine"
    expect_in "$ERR" "exit status 3 (1 dead-lettered)" "periodic ($1): the last line says so"
    expect_eq "$(printf '%s\n' "$ERR" | sed -n 's/.* ordered \(vm-[0-9]*\)$/\1/p' | tr '\n' ' ')" \
        "vm-01 vm-02 vm-03 vm-04 vm-05 vm-06 vm-07 vm-08 vm-09 vm-10 " "periodic ($1): ten machines ordered"
    t=$(printf '%s\n' "$ERR" | grep ' ordered vm-' | log_seconds |
        awk 'NR > 1 { d = $1 - p; if (d < lo || lo == "") lo = d; if (d > hi) hi = d } { p = $1 } END { print lo, hi }')
    expect_between "${t% *}" "$(awk -v s="$slack" 'BEGIN { print 0.4 - s }')" "$(awk -v s="$slack" 'BEGIN { print 0.4 + s }')" \
        "periodic ($1): an order every 0.4 s (shortest gap)"
    expect_between "${t#* }" "$(awk -v s="$slack" 'BEGIN { print 0.4 - s }')" "$(awk -v s="$slack" 'BEGIN { print 0.4 + s }')" \
        "periodic ($1): an order every 0.4 s (longest gap)"
    t=$(printf '%s\n' "$ERR" | grep ' status: ' | log_seconds |
        awk 'NR > 1 { d = $1 - p; if (d < lo || lo == "") lo = d; if (d > hi) hi = d } { p = $1 } END { print lo, hi }')
    expect_between "${t% *}" "$(awk -v s="$slack" 'BEGIN { print 1 - s }')" "$(awk -v s="$slack" 'BEGIN { print 1 + s }')" \
        "periodic ($1): a status line every second (shortest gap)"
    expect_between "${t#* }" "$(awk -v s="$slack" 'BEGIN { print 1 - s }')" "$(awk -v s="$slack" 'BEGIN { print 1 + s }')" \
        "periodic ($1): a status line every second (longest gap)"
    expect_re "$(printf '%s\n' "$ERR" | grep ' status: ' | tail -1)" \
        "status: 10 ordered, 9 running, 1 dead, 0 still booting$" "periodic ($1): the last status line"
    expect_eq "$(printf '%s\n' "$OUT" | awk 'NR > 1 && NR <= 11 { print $1, $2 }' | tr '\n' ' ')" \
        "vm-01 running vm-02 running vm-03 running vm-04 running vm-05 running vm-06 running vm-07 dead vm-08 running vm-09 running vm-10 running " \
        "periodic ($1): the table has every machine running but the seventh"
    expect_eq "$(printf '%s\n' "$OUT" | awk '$2 == "running" && !($4 ~ /^[1-6]\.[0-9]s$/)')" "" \
        "periodic ($1): a machine is running 1 to 6 s after its order (boots in 1-5 s, re-checked at least every second)"
    expect_re "$OUT" "^dead letter: vm-07, 3 attempts: .*vm-07 failed to boot$" \
        "periodic ($1): the seventh is dead-lettered after max_retries"
    expect_in "$ERR" "'vm-07' failed 3 times, dead-lettered" "periodic ($1): the runner logs the dead letter"
    local last polls requeued
    last=$(printf '%s\n' "$OUT" | tail -1)
    expect_re "$last" "^[0-9]+ status polls, [1-9][0-9]* delayed re-checks \(wq.requeue\)$" "periodic ($1): the summary"
    polls=$(printf '%s' "$last" | awk '{ print $1 }')
    requeued=$(printf '%s' "$last" | awk '{ print $4 }')
    expect_eq "$polls" $((requeued + 9 + 3)) \
        "periodic ($1): every poll was a re-check, a machine found running, or one of vm-07's 3 failed attempts"
}

run --virtual-time "$EX/periodic.lua"
check_periodic "--virtual-time" 0.005
expect_between "$ELAPSED" 0 2 "periodic: under --virtual-time it runs without waiting"
# Under --virtual-time the run is exact. The handler takes 0.01 s and
# re-checks after 0.25, 0.5, 1, 1, ... s, so a machine is found running 0.27,
# 0.78, 1.79, 2.80, 3.81, ... s after its order; seed 7 boots them in 1-5 s as:
expect_eq "$(printf '%s\n' "$OUT" | head -11)" "id     result
vm-01  running after 4.8s
vm-02  running after 2.8s
vm-03  running after 4.8s
vm-04  running after 2.8s
vm-05  running after 1.8s
vm-06  running after 3.8s
vm-07  dead
vm-08  running after 2.8s
vm-09  running after 3.8s
vm-10  running after 2.8s" "periodic (--virtual-time): machines are found at the points of the 0.25, 0.5, 1, 1 s backoff"
virtual_periodic=$OUT

# =============================================== the two real-time runs
bg_result controller "$controller_pid"
check_controller "real time"
expect_between "$ELAPSED" 2.5 4.5 "controller: takes about 3 seconds"

bg_result periodic "$periodic_pid"
check_periodic "real time" 0.15
expect_between "$ELAPSED" 7 10 "periodic: takes about 8 seconds"
expect_eq "$(printf '%s\n' "$OUT" | grep -c '^dead letter')" 1 "periodic: one dead letter"
expect_eq "$(printf '%s\n' "$OUT" | head -11 | awk '{ print $1, $2 }')" \
    "$(printf '%s\n' "$virtual_periodic" | head -11 | awk '{ print $1, $2 }')" \
    "periodic: the same machines come up in real time as under --virtual-time"

finish
