#!/usr/bin/env bash
# The short form of scripts/crash-test.sh: kill -9 at random moments while
# a producer feeds the inbox; every key runs, nothing is lost; and again with
# keep_done, every key fed twice: a finished key never runs again.
set -euo pipefail
cd "${WQ_SOURCE_DIR:?}"
WQRUN=${WQRUN:?} bash scripts/crash-test.sh --short
WQRUN=${WQRUN:?} bash scripts/crash-test.sh --short --keep-done
