#!/usr/bin/env bash
# Configures and builds wqrun with CMake.
#   scripts/build.sh              -> build/       (RelWithDebInfo)
#   scripts/build.sh --sanitize   -> build-asan/  (Debug, ASan + UBSan)
# Warnings are errors when $CI is set (and not "false"/"0") or WQ_WERROR=1.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

sanitize=0
for a in "$@"; do
  case $a in
  --sanitize) sanitize=1 ;;
  -h | --help)
    sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "build.sh: unknown argument: $a (usage: scripts/build.sh [--sanitize])" >&2
    exit 2
    ;;
  esac
done

bash scripts/deps.sh

werror=OFF
ci=${CI:-}
if [[ ${WQ_WERROR:-} == 1 ]] || [[ -n $ci && $ci != false && $ci != 0 ]]; then
  werror=ON
fi

if ((sanitize)); then
  dir=build-asan
  args=(-DCMAKE_BUILD_TYPE=Debug -DWQ_SANITIZE=ON)
else
  dir=build
  args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DWQ_SANITIZE=OFF)
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$dir" --log-level=WARNING "${args[@]}" -DWQ_WERROR="$werror"
cmake --build "$dir" -j "$jobs"

echo "$root/$dir/wqrun"
