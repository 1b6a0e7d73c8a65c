#!/usr/bin/env bash
# Formats every C source and header under src/, tests/ and bench/ in place
# with the repository's .clang-format (the style scripts/test.sh checks).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang-format >/dev/null 2>&1; then
  echo "format.sh: clang-format is not installed (apt-get install clang-format)" >&2
  exit 1
fi

mapfile -d '' files < <(find src tests bench -type f \( -name '*.c' -o -name '*.h' \) -print0 2>/dev/null | sort -z)
if ((${#files[@]} == 0)); then
  echo "format.sh: no C sources found"
  exit 0
fi
clang-format -i "${files[@]}"
echo "format.sh: formatted ${#files[@]} files"
