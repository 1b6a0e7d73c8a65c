#!/usr/bin/env bash
# A wqrun pool worker in bash (docs/workers.md): one JSON request per line
# on stdin, one JSON reply per line on stdout. bash does not parse JSON, so
# this one only picks the key out of the request with a pattern and answers
# with the request's length; a real shell worker would hand the line to jq.
while IFS= read -r line; do
  if [[ $line =~ \"key\":\"([^\"\\]*)\" ]]; then
    key=${BASH_REMATCH[1]}
    printf '{"result":{"key":"%s","bytes":%d,"worker":"bash"}}\n' "$key" "${#line}"
  else
    printf '{"error":"no plain key in the request"}\n'
  fi
done
