-- A service for tests/e2e/test_store_faults.sh: queue "slow" runs each key
-- for arg[1] seconds (printing "start KEY" and "end KEY"), queue "jobs" has
-- no handler, so posted items stay in the state file.
local secs = tonumber(arg[1]) or 1
wq.queue("slow", {workers = 4, handler = function(key)
    print("start " .. key)
    io.stdout:flush()
    wq.sleep(secs)
    print("end " .. key)
    io.stdout:flush()
end})
wq.queue("jobs")
