-- wrk's done() for the bench scripts: machine-readable lines
--   wrk_requests N / wrk_rps R / wrk_p50_us / wrk_p99_us / wrk_p999_us /
--   wrk_non2xx N / wrk_socket_errors N
-- Given alone (`wrk -s bench/wrk_done.lua URL`, as bench/bench_wqhttp.sh does)
-- wrk sends its plain GETs; bench/wrk_post.lua loads it with dofile.
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
