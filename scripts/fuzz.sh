#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and
# runs them:
#   fuzz_json  the JSON decoder of bodies and payloads, one body at a time
#              and bodies in sequence (state carried from one to the next);
#   fuzz_http  raw requests through the real HTTP server (routes, limits,
#              libevent's own answers), every error answer checked as JSON.
#
#   scripts/fuzz.sh                    every target for 10 minutes
#   scripts/fuzz.sh -t 3600 fuzz_http  one target for an hour
#   scripts/fuzz.sh -c DIR             the grown corpora in DIR/TARGET
#                                      (default build-fuzz/corpus/TARGET)
#   scripts/fuzz.sh --ci               the bounded pass ctest runs: 12 s per
#                                      target, corpora in a temporary directory
#   --build-dir DIR                    where to build (default build-fuzz)
#
# The seeds in tests/fuzz/corpus/TARGET are read, never written. A finding
# (crash-*, timeout-*, leak-*) is written to BUILD/findings and the script
# exits 1; replay one with BUILD/TARGET FILE. Exits 77 (skipped) when clang
# or its libFuzzer runtime is missing: scripts/deps.sh installs them
# (Debian: clang, libclang-rt-dev).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

secs=600 ci=0 build=$ROOT/build-fuzz corpus= targets=()
while (($#)); do
  case $1 in
  -t) secs=$2; shift ;;
  -c) corpus=$2; shift ;;
  --ci) ci=1 secs=12 ;;
  --build-dir) build=$2; shift ;;
  -h | --help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  fuzz_json | fuzz_http) targets+=("$1") ;;
  *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
((${#targets[@]})) || targets=(fuzz_json fuzz_http)

CLANG=${CLANG:-$(command -v clang || true)}
if [[ -z $CLANG ]]; then
  echo "SKIP fuzz.sh: clang is not installed (scripts/deps.sh installs it)"
  exit 77
fi
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
  "$CLANG" -x c -fsanitize=fuzzer,address,undefined -o /dev/null - 2>/dev/null; then
  echo "SKIP fuzz.sh: $CLANG cannot link libFuzzer (Debian package libclang-rt-dev; scripts/deps.sh)"
  exit 77
fi

mkdir -p "$build"
log=$build/build.log
if ! { cmake -S "$ROOT" -B "$build" -DCMAKE_C_COMPILER="$CLANG" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DWQ_FUZZ=ON -DWQ_TESTS=OFF -DWQ_BENCH=OFF &&
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "fuzz.sh: the build failed (all of it in $log)" >&2
  exit 1
fi

if ((ci)); then
  work=$(mktemp -d "${TMPDIR:-/tmp}/wq-fuzz.XXXXXX")
  trap 'rm -rf "$work"' EXIT
else
  work=${corpus:-$build/corpus}
fi
findings=$build/findings
mkdir -p "$findings"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

status=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  seeds=$ROOT/tests/fuzz/corpus/${t#fuzz_}
  dict=$ROOT/tests/fuzz/${t#fuzz_}.dict
  out=$build/$t.log
  echo "fuzz.sh: $t for ${secs}s (corpus $work/$t, seeds $seeds)"
  "$build/tests/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -error_exitcode=1 -timeout_exitcode=1 \
    -print_final_stats=1 -artifact_prefix="$findings/$t-" -dict="$dict" \
    "$work/$t" "$seeds" >"$out" 2>&1
  rc=$?
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+ +DONE' "$out" | sed "s/^/  $t: /"
  if ((rc != 0)); then
    status=1
    grep -E 'ERROR|fuzz_(json|http):|SUMMARY|Test unit written|==[0-9]+==' "$out" | head -n 20 >&2
    echo "fuzz.sh: $t FAILED (exit $rc); its output: $out; findings in $findings" >&2
  fi
done
((status == 0)) && echo "fuzz.sh: no findings"
exit $status
