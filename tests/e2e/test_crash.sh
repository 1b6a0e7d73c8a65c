#!/usr/bin/env bash
# The CI form of scripts/crash-test.sh (issue 9): kill -9 at random moments
# while HTTP, `wqrun add` and inbox producers feed the runner, with --sync
# normal and --sync full (30 kills each; 10 under ASan, which is slower):
# every acknowledged key runs, re-runs stay within what was in flight; and
# with keep_done, every key fed again: a finished key never runs again.
# Each run prints its summary line (kills, acknowledged, lost, re-runs).
set -euo pipefail
cd "${WQ_SOURCE_DIR:?}"
export WQRUN=${WQRUN:?}
kills=()
grep -a -q -F "__asan_init" "$WQRUN" && kills=(--kills 10)
bash scripts/crash-test.sh --short "${kills[@]}" --sync normal
bash scripts/crash-test.sh --short "${kills[@]}" --sync full
bash scripts/crash-test.sh --kills 10 --keep-done
