#!/usr/bin/env python3
# The no-op pool worker of bench/pool.lua: reads each job as JSON and
# answers success with no result, one line per job.
import json
import sys

out = sys.stdout
for line in sys.stdin:
    json.loads(line)
    out.write('{"result":null}\n')
    out.flush()
