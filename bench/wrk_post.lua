-- wrk script for bench/bench_http.sh: every request POSTs a JSON item with a
-- key unique over the whole run ("t<thread>-<counter>"), so each one is a
-- real enqueue (no dedup). done() prints machine-readable lines:
--   wrk_requests N / wrk_rps R / wrk_p50_us / wrk_p99_us / wrk_p999_us /
--   wrk_non2xx N / wrk_socket_errors N
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

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("wrk_requests %d\n", summary.requests))
  io.write(string.format("wrk_rps %.0f\n", summary.requests / (summary.duration / 1e6)))
  io.write(string.format("wrk_p50_us %d\n", latency:percentile(50)))
  io.write(string.format("wrk_p99_us %d\n", latency:percentile(99)))
  io.write(string.format("wrk_p999_us %d\n", latency:percentile(99.9)))
  io.write(string.format("wrk_non2xx %d\n", e.status))
  io.write(string.format("wrk_socket_errors %d\n", e.connect + e.read + e.write + e.timeout))
end
