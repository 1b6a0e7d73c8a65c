-- The events benchmark's runner (bench/bench_events.sh): N no-op jobs on a
-- queue with 8 workers, added once GO exists (the stream clients are on by
-- then); prints jobs/s from the first add to idle, and exits.
local n = tonumber(arg[1]) or 100000
local go = arg[2]
local fast = wq.queue("fast", {workers = 8, handler = function() end})
wq.queue("other", {handler = function() end})
while not io.open(go) do wq.sleep(0.02) end
local t0 = wq.now()
for i = 1, n do fast:add("f" .. i) end
fast:wait_idle()
local dt = wq.now() - t0
print(string.format("events_jobs %d jobs/s (%d jobs in %.3f s)", math.floor(n / dt), n, dt))
wq.exit(0)
