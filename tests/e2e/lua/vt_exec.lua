-- Run with --virtual-time (tests/e2e/test_virtual_time.sh): while only a
-- child process can make progress, the virtual clock follows the real one to
-- the next deadline, so exec and handler timeouts fire; afterwards it jumps
-- again.
local t = require "wqtest"
t.watchdog(10 * 86400)

t.eq(t.virtual, true, "this script must run with --virtual-time")

do -- an exec timeout fires while the child runs
    local t0 = wq.now()
    local r = wq.exec({"sleep", "5"}, {timeout = 0.3})
    t.eq(r.timeout, true, "the exec timed out")
    t.near(wq.now() - t0, 0.3, 1e-6, "at its deadline on the virtual clock")
end

do -- a handler waiting on exec is stopped by its timeout
    local q = wq.queue("vt-exec", {timeout = 0.2, max_retries = 0, handler = function()
        wq.exec({"sleep", "5"})
    end})
    q:add("x")
    t.ok(t.wait_until(function() return q:stats().dead == 1 end, 10), "the handler was dead-lettered")
    t.eq(q:stats().timeouts, 1, "by its timeout")
end

do -- with no child left, the clock jumps again
    local w = os.time()
    wq.sleep(3600)
    t.ok(os.time() - w <= 2, "sleep(3600) took no real time")
end

t.done()
