-- Run with --virtual-time: retry, requeue, delay and limiter timings are
-- exact to the nanosecond.
local t = require "wqtest"
t.watchdog(10 * 86400)

t.eq(t.virtual, true, "this script must run with --virtual-time")

local function idle(q)
    return function()
        local s = q:stats()
        return s.depth == 0 and s.processing == 0 and s.waiting == 0
    end
end

local function wait_idle(q)
    return t.ok(t.wait_until(idle(q), 100000, 0.25), "queue " .. q:name() .. " finished")
end

do -- exponential(1, 100): retries after exactly 1, 2, 4 s; then dead
    local t0 = wq.now()
    local times = {}
    local q = wq.queue("exp", {
        limiter = wq.limiter.exponential(1, 100),
        max_retries = 3,
        handler = function(key, payload)
            times[#times + 1] = wq.now() - t0
            error("fail #" .. #times)
        end,
    })
    q:add("k", {n = 1})
    wait_idle(q)
    t.eq(#times, 4, "1 run + 3 retries")
    local want = {0, 1, 3, 7}
    for i = 1, 4 do
        t.near(times[i] or -1, want[i], 1e-9, "run " .. i .. " at " .. want[i] .. " s")
    end
    local d = q:dead()[1] or {}
    t.eq(d.attempts, 4, "attempts = failures + 1")
    t.matches(d.error, "fail #4$", "last error")
    t.eq(d.payload, {n = 1})
end

do -- the default limiter through a queue: 5 ms, 10 ms, 20 ms ...
    local t0 = wq.now()
    local times = {}
    local q = wq.queue("default-lim", {
        max_retries = 4,
        handler = function()
            times[#times + 1] = wq.now() - t0
            return nil, "nope"
        end,
    })
    q:add("k")
    wait_idle(q)
    local want = {0, 0.005, 0.015, 0.035, 0.075}
    t.eq(#times, 5)
    for i = 1, 5 do
        t.near(times[i] or -1, want[i], 1e-9, "default limiter run " .. i)
    end
    t.eq(q:dead()[1] and q:dead()[1].error, "nope", "return nil, err")
end

do -- fast_slow through a queue
    local t0 = wq.now()
    local times = {}
    local q = wq.queue("fast-slow", {
        limiter = wq.limiter.fast_slow(1, 60, 2),
        max_retries = 4,
        handler = function()
            times[#times + 1] = wq.now() - t0
            return false
        end,
    })
    q:add("k")
    wait_idle(q)
    local want = {0, 1, 2, 62, 122}
    for i = 1, 5 do
        t.near(times[i] or -1, want[i], 1e-9, "fast_slow run " .. i)
    end
end

do -- wq.requeue(3600): exactly an hour later, payload kept, not a failure
    local t0 = wq.now()
    local runs = {}
    local q = wq.queue("requeue", {
        max_retries = 0,
        handler = function(key, payload)
            runs[#runs + 1] = {wq.now() - t0, payload}
            if #runs < 3 then
                return wq.requeue(3600)
            end
        end,
    })
    q:add("k", "pl")
    wait_idle(q)
    t.eq(#runs, 3)
    for i = 1, 3 do
        t.near(runs[i] and runs[i][1] or -1, (i - 1) * 3600, 1e-9, "requeue run " .. i)
        t.eq(runs[i] and runs[i][2], "pl", "payload kept")
    end
    t.eq(q:stats().failures, 0)
    t.eq(q:stats().requeued, 2)
end

do -- add_after: earliest wins, no dedup with queued, exact times
    local t0 = wq.now()
    local q = wq.queue("delays")
    q:add_after("x", 3600)
    q:add_after("x", 7200) -- later: ignored
    q:add_after("x", 1800) -- earlier: wins
    q:add("x") -- queued now as well
    local k = q:get()
    t.eq(k, "x")
    t.eq(wq.now(), t0, "the queued one at once")
    q:done("x")
    k = q:get()
    t.eq(k, "x")
    t.near(wq.now() - t0, 1800, 1e-9, "the delayed one at the earliest time")
    q:done("x")
    t.eq(q:stats().waiting, 0, "only one delayed entry was kept")
    -- ties fire in insertion order
    q:add_after("b", 10)
    q:add_after("a", 10)
    q:add_after("c", 5)
    local order = {}
    for _ = 1, 3 do
        local key = q:get()
        order[#order + 1] = key .. "@" .. string.format("%.9f", wq.now() - t0 - 1800)
        q:done(key)
    end
    t.eq(order, {"c@5.000000000", "b@10.000000000", "a@10.000000000"}, "ascending time, ties in insertion order")
end

do -- the token bucket through a queue: (10 qps, burst 100)
    local q = wq.queue("bucket", {limiter = wq.limiter.bucket(10, 100)})
    local t0 = wq.now()
    for i = 1, 105 do
        q:add_rate_limited("k" .. i)
    end
    t.eq(q:len(), 100, "the burst is queued at once")
    t.eq(q:stats().waiting, 5, "5 wait for tokens")
    for _ = 1, 100 do
        q:done((q:get()))
    end
    local times = {}
    for i = 1, 5 do
        local key = q:get()
        times[i] = wq.now() - t0
        q:done(key)
        t.eq(key, "k" .. (100 + i), "in order")
    end
    for i = 1, 5 do
        t.near(times[i], i / 10, 1e-9, "item " .. (100 + i) .. " after " .. (i / 10) .. " s")
    end
end

do -- bucket(3, 1) delays are truncated to whole ns
    local l = wq.limiter.bucket(3, 1)
    local r = {l:when("a"), l:when("a"), l:when("a"), l:when("a")}
    t.eq(r, {0.0, 0.333333333, 0.666666666, 1.0}, "bucket(3, 1)")
    wq.sleep(0.25)
    t.near(l:when("a"), 1.083333333, 1e-9, "250 ms later")
end

do -- shutdown_with_drain waits exactly as long as the running handler
    local q = wq.queue("drain", {
        workers = 2,
        handler = function(key)
            wq.sleep(tonumber(key))
        end,
    })
    q:add("5")
    q:add("9")
    q:add("1") -- queued behind: still handed out after shutdown
    wq.sleep(0)
    local t0 = wq.now()
    q:shutdown_with_drain()
    t.near(wq.now() - t0, 9, 1e-9, "drain returned when the last handler finished")
    t.eq(q:stats().done, 3, "the queued item was drained too")
end

do -- handler timeouts with retries: exact
    local t0 = wq.now()
    local starts = {}
    local q = wq.queue("timeout-retry", {
        timeout = 10,
        max_retries = 2,
        limiter = wq.limiter.exponential(5, 100),
        handler = function()
            starts[#starts + 1] = wq.now() - t0
            wq.sleep(1000)
        end,
    })
    q:add("k")
    wait_idle(q)
    local want = {0, 15, 35} -- run 10 s, wait 5; run 10 s, wait 10
    for i = 1, 3 do
        t.near(starts[i] or -1, want[i], 1e-9, "timed-out run " .. i)
    end
    t.eq(q:dead()[1] and q:dead()[1].error, "timeout")
    t.eq(q:stats().timeouts, 3)
end

t.done()
