#!/usr/bin/env bash
# remote_worker.sh: a remote worker for examples/remote.lua's "thumbs" queue
# in bash with curl (SPEC 10.2): one photo at a time, a long poll for the
# next. It picks the fields out of the answer with sed, which is enough for
# this queue's keys (no quote or backslash in them); for any JSON use jq.
#
#   bash examples/remote_worker.sh [URL]      (WQRUN_TOKEN=T for --token)
set -u
URL=${1:-http://127.0.0.1:8080}/queues/thumbs
auth=()
[ -n "${WQRUN_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $WQRUN_TOKEN")
trap 'exit 0' INT TERM
field() { sed -n "s/.*\"$1\":\\([^,}]*\\).*/\\1/p" <<<"$2" | tr -d '"'; }
echo "working on thumbs at ${URL%/queues/thumbs} (Ctrl-C to stop)"
while :; do
    item=$(curl -sf "${auth[@]}" -X POST "$URL/claim" -d '{"max": 1, "wait": 2, "lease": 30}') ||
        { sleep 1; continue; }
    [ "$item" = "[]" ] && continue
    key=$(field key "$item") token=$(field token "$item") attempt=$(field attempt "$item")
    w=$(field w "$item") h=$(field h "$item")
    path=$URL/items/$(printf '%s' "$key" | sed 's/%/%25/g; s|/|%2F|g; s/ /%20/g')
    if [ -z "$w" ] || [ -z "$h" ]; then
        body="{\"token\": \"$token\", \"error\": \"no size for $key: nothing to scale\", \"permanent\": true}"
        curl -sf "${auth[@]}" -X POST "$path/fail" -d "$body" >/dev/null
    elif [ $((w * h)) -gt 100000000 ] && [ "$attempt" = 1 ]; then
        body="{\"token\": \"$token\", \"error\": \"${w}x$h: too big for now\", \"retry_in\": 1}"
        curl -sf "${auth[@]}" -X POST "$path/fail" -d "$body" >/dev/null
    else
        read -r tw th < <(awk -v w="$w" -v h="$h" 'BEGIN { s = 256 / (w > h ? w : h); if (s > 1) s = 1
            tw = int(w * s + 0.5); th = int(h * s + 0.5); print (tw < 1 ? 1 : tw), (th < 1 ? 1 : th) }')
        echo "$key ${w}x$h -> ${tw}x$th (attempt $attempt)"
        curl -sf "${auth[@]}" -X POST "$path/done" -d "{\"token\": \"$token\", \"result\": {\"w\": $tw, \"h\": $th}}" >/dev/null
    fi
done
