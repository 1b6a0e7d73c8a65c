-- wrk script for bench/bench_http.sh: every request POSTs a JSON item with a
-- key unique over the whole run ("t<thread>-<counter>"), so each one is a
-- real enqueue (no dedup). done() (bench/wrk_done.lua; wrk runs from the
-- repository's root) prints machine-readable lines.
local threads = {}

function setup(thread)
  threads[#threads + 1] = thread
  thread:set("tid", #threads)
end

function init(args)
  prefix = "t" .. tostring(tid) .. "-"
  counter = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  counter = counter + 1
  local body = string.format('{"key":"%s%d","payload":{"n":%d,"src":"wrk"}}', prefix, counter,
                             counter)
  return wrk.format(nil, nil, nil, body)
end

dofile("bench/wrk_done.lua")
