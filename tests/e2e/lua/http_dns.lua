-- Run with LD_PRELOAD of tests/e2e/slowdns.c (test_wq_http.sh): a name
-- ending in ".slow.test" takes 3 s to resolve. A transfer stopped during its
-- lookup (its own timeout, the handler's timeout, q:cancel) ends at once, and
-- the event loop never stands still meanwhile: a 50 ms ticker keeps ticking.
local t = require "wqtest"
t.watchdog(60)

local SLOW = "http://name.slow.test:9/"

-- the largest gap between ticks of a 50 ms ticker (a stalled loop shows here)
local last, gap = wq.now(), 0
local ticker = wq.every(0.05, function()
    local now = wq.now()
    gap = math.max(gap, now - last)
    last = now
end)

do -- the request's own timeout
    local t0 = wq.now()
    local r, err = wq.http({url = SLOW, timeout = 0.5})
    t.eq(r, nil, "no answer within the timeout")
    t.matches(err, "^http: GET " .. SLOW .. ": Resolving timed out", "timed out while resolving")
    t.between(wq.now() - t0, 0.45, 1, "at the timeout, not when the lookup ends")
end

do -- the handler's timeout, and q:cancel
    local ended = {}
    local q = wq.queue("dns", {timeout = 0.4, max_retries = 0, workers = 2, handler = function(key)
        local ok, e = pcall(wq.http, {url = SLOW, query = {k = key}, timeout = 10})
        ended[key] = {ok = ok, err = e}
    end, on_dead = function(key, _, err)
        ended[key] = {err = err}
    end})
    local t0 = wq.now()
    q:add("timeout")
    q:add("cancel")
    wq.spawn(function()
        wq.sleep(0.2)
        q:cancel("cancel")
    end)
    t.ok(t.wait_until(function() return ended.timeout and ended.cancel end, 10), "both ended")
    t.between(wq.now() - t0, 0.35, 1, "at the handler's timeout")
    t.matches(ended.timeout and ended.timeout.err, "timeout", "the handler timed out")
    t.eq(ended.cancel and ended.cancel.err, "cancelled", "the other was cancelled")
end

wq.sleep(0.2)
ticker:cancel()
print(string.format("dns: the largest gap between 50 ms ticks was %.3f s", gap))
t.between(gap, 0, 0.3, "the loop never stood still for a lookup")

t.done()
