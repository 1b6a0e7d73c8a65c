-- Job-runner state across restarts (SPEC 7.1-7.3), driven by arg[1]:
--   first:  adds "e" (no handler yet: it stays), runs "a" (keep_done),
--           defines schedules, and exits
--   second: handles "e" (prints job.enqueued_at), re-adds "a" (skipped: it
--           finished), and lets the schedules catch up
local step = arg[1]
local handled = wq.queue("handled", {keep_done = 3600, max_retries = 5,
    limiter = wq.limiter.exponential(0.001, 0.001),
    handler = function(key, payload, job)
        print(("ran %s attempt %d"):format(key, job.attempt))
        return {key = key}
    end})
local later = wq.queue("later", step == "second" and {handler = function(key, payload, job)
    print(("later %s enqueued_at %.6f"):format(key, job.enqueued_at))
end} or nil)
local ticks = wq.queue("ticks", {handler = function(key)
    print("tick " .. key)
end})
if step == "first" then
    later:add("e")
    print(("enqueued e at about %.6f"):format(wq.time()))
    handled:add("a")
    ticks:schedule("once", "@every 2s")
    ticks:schedule("skipped", "@every 2s", {catch_up = "skip"})
    repeat wq.sleep(0.01) until handled:stats().succeeded == 1
    print("first done")
else
    ticks:schedule("once", "@every 2s")
    ticks:schedule("skipped", "@every 2s", {catch_up = "skip"})
    print(("re-add a: %s"):format(tostring(handled:add("a"))))
    local info = handled:done_info("a")
    print(("a result %s"):format(info and info.result and info.result.key or "none"))
    wq.sleep(0.5)
    print("second done")
    wq.exit(0)
end
