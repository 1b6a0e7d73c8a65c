#!/usr/bin/env bash
# The test command: installs what is missing, checks formatting, builds, runs
# every test with ctest, then builds again with ASan+UBSan and runs the same
# tests there (with Lua GC stress). Benchmarks (label "bench") are skipped.
# Both passes share one throwaway PostgreSQL cluster (scripts/pg.sh), started
# first and stopped at the end (also on failure or interrupt); the tests see
# it through the exported WQ_TEST_PG_URL, WQ_PG_DIR, PGHOST... variables.
# Ends with one line "N passed, N failed" summing both ctest passes; exits
# non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."

passed=0
failed=0
problems=()

step() { printf '\n==> %s\n' "$*"; }

# Runs ctest in build dir $1 and adds its counts to passed/failed.
run_ctest() {
  local dir=$1 log rc=0
  log=$(mktemp)
  # Three at a time on CI's two cores: most tests wait on processes, sockets and timers.
  ctest --test-dir "$dir" --output-on-failure -j3 -LE bench 2>&1 | tee "$log" || rc=$?
  # "100% tests passed, 0 tests failed out of 12"
  local line
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n1 || true)
  if [[ -n $line ]]; then
    local nfail total
    nfail=$(sed -E 's/.*tests passed, ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
    total=$(sed -E 's/.*tests passed, ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
    passed=$((passed + total - nfail))
    failed=$((failed + nfail))
    ((nfail == 0)) || problems+=("$nfail test(s) failed in $dir")
  elif grep -q 'No tests were found' "$log"; then
    echo "(no tests in $dir)"
  else
    problems+=("ctest in $dir produced no summary")
  fi
  ((rc == 0)) || problems+=("ctest in $dir exited with status $rc")
  rm -f "$log"
}

bash scripts/deps.sh

step "PostgreSQL for the tests (scripts/pg.sh)"
# This run's own cluster, never one the caller had exported: pg_dir is set
# only once it started. The EXIT trap is only a safety net (failure,
# interrupt): the normal path stops it before the summary, the last line.
pg_dir=""
# shellcheck disable=SC2317 # called by the trap
pg_cleanup() {
  if [[ -n $pg_dir && -e $pg_dir ]]; then
    bash scripts/pg.sh stop "$pg_dir" >/dev/null 2>&1 || true
  fi
}
trap pg_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
unset WQ_TEST_PG_URL WQ_PG_DIR PGHOST PGPORT PGUSER PGDATABASE
if pg_env=$(bash scripts/pg.sh start); then
  eval "$pg_env"
  pg_dir=$WQ_PG_DIR
else
  problems+=("PostgreSQL for the tests did not start (scripts/pg.sh start)")
fi

step "format check"
if command -v clang-format >/dev/null 2>&1; then
  mapfile -d '' files < <(find src tests bench -type f \( -name '*.c' -o -name '*.h' \) -print0 2>/dev/null | sort -z)
  if ((${#files[@]} == 0)); then
    echo "no C sources to check"
  elif clang-format --dry-run --Werror "${files[@]}" 2>&1; then
    echo "ok (${#files[@]} files)"
  else
    problems+=("format check (run scripts/format.sh)")
  fi
else
  echo "clang-format not installed: skipping the format check"
fi

step "build (build/)"
if bash scripts/build.sh; then
  step "ctest (build/)"
  run_ctest build
else
  problems+=("build in build/ failed")
fi

step "build with ASan+UBSan (build-asan/)"
if bash scripts/build.sh --sanitize; then
  step "ctest under ASan+UBSan (build-asan/)"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # Lua tests inherit it from ctest: collect garbage before every resume.
  export WQ_TEST_GCSTRESS=1
  run_ctest build-asan
else
  problems+=("build in build-asan/ failed")
fi

if [[ -n $pg_dir ]]; then
  step "stop PostgreSQL"
  bash scripts/pg.sh stop "$pg_dir" || problems+=("scripts/pg.sh stop $pg_dir failed")
fi

echo
status=0
if ((${#problems[@]})); then
  status=1
  for p in "${problems[@]}"; do echo "FAILED: $p"; done
fi
echo "$passed passed, $failed failed"
exit $status
