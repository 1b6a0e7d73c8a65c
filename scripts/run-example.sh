#!/usr/bin/env bash
# Installs what is missing, builds, and runs an example end to end:
#   scripts/run-example.sh [EXAMPLE.lua] [ARGS...]
# EXAMPLE.lua defaults to examples/checksum.lua; a bare name is also looked up
# in examples/. If the example does not exist (yet), the engine benchmark
# build/bench/bench_engine runs instead.
set -euo pipefail
here=$(pwd)
cd "$(dirname "$0")/.."
root=$(pwd)

example=examples/checksum.lua
if (($# > 0)); then
  example=$1
  shift
fi

# Resolve the example relative to the caller's directory, the repository
# root or examples/, in that order.
script=
candidates=("$here/$example" "$root/$example" "$root/examples/$example")
[[ $example == /* ]] && candidates=("$example")
for c in "${candidates[@]}"; do
  if [[ -f $c ]]; then
    script=$(cd "$(dirname "$c")" && pwd)/$(basename "$c")
    break
  fi
done

bash scripts/deps.sh
bash scripts/build.sh

if [[ -n $script ]]; then
  echo "==> build/wqrun $script $*"
  exec "$root/build/wqrun" "$script" "$@"
fi

bench=$root/build/bench/bench_engine
if [[ -x $bench ]]; then
  echo "==> $example does not exist (yet): running the engine benchmark $bench instead"
  exec "$bench"
fi
echo "run-example.sh: $example does not exist and neither does $bench" >&2
exit 1
