#!/usr/bin/env bash
# The short form of scripts/crash-test.sh: kill -9 at random moments while
# a producer feeds the inbox; every key runs, nothing is lost.
set -euo pipefail
cd "${WQ_SOURCE_DIR:?}"
WQRUN=${WQRUN:?} bash scripts/crash-test.sh --short
