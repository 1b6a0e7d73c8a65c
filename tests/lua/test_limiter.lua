-- wq.limiter.* and wq.backoff with the numbers of WORKQUEUE.md. Per-key
-- limiters do not depend on time and are checked exactly; the token bucket
-- is exact under --virtual-time and within a few ms in real time.
local t = require "wqtest"

local function seq(l, key, count)
    local r = {}
    for i = 1, count do
        r[i] = l:when(key)
    end
    return r
end

local function near_list(got, want, eps, msg)
    t.eq(#got, #want, msg .. " (length)")
    for i = 1, math.max(#got, #want) do
        t.near(got[i], want[i], eps, msg .. " [" .. i .. "]")
    end
end

do -- exponential(1ms, 1s): 1, 2, 4, 8, 16 ms; num_requeues 5
    local l = wq.limiter.exponential(0.001, 1)
    near_list(seq(l, "k", 5), {0.001, 0.002, 0.004, 0.008, 0.016}, 1e-12, "exponential(1ms, 1s)")
    t.eq(l:num_requeues("k"), 5, "num_requeues after 5 calls")
    t.eq(math.type(l:num_requeues("k")), "integer")
    t.eq(l:num_requeues("other"), 0, "per key")
    t.near(l:when("other"), 0.001, 1e-12, "another key starts at base")
    l:forget("k")
    t.eq(l:num_requeues("k"), 0, "forget")
    t.near(l:when("k"), 0.001, 1e-12, "after forget: base again")
    t.eq(type(l:when(5)), "number", "number keys")
    t.eq(l:num_requeues("5"), 1, "number key 5 is key '5'")
end

do -- default controller values (5 ms, 1000 s): 655.36 s at call 18, 1000 s from call 19
    local l = wq.limiter.exponential(0.005, 1000)
    local r = seq(l, "k", 20)
    t.near(r[1], 0.005, 1e-12, "call 1")
    t.near(r[17], 327.68, 1e-6, "call 17")
    t.near(r[18], 655.36, 1e-6, "call 18")
    t.eq(r[19], 1000.0, "call 19 capped")
    t.eq(r[20], 1000.0, "call 20 capped")
    for _ = 1, 100 do
        l:when("k")
    end
    t.eq(l:when("k"), 1000.0, "no overflow after many calls")
    t.eq(l:num_requeues("k"), 121)
end

do -- base > max: always max; base 0: always 0
    local l = wq.limiter.exponential(5, 2)
    t.eq(seq(l, "k", 3), {2.0, 2.0, 2.0}, "base > max -> max")
    l = wq.limiter.exponential(0, 10)
    t.eq(seq(l, "k", 3), {0.0, 0.0, 0.0}, "base 0 -> 0")
    t.eq(l:num_requeues("k"), 3, "still counted")
end

do -- fast_slow(5ms, 10s, 3): 5, 5, 5 ms, 10 s, 10 s
    local l = wq.limiter.fast_slow(0.005, 10, 3)
    near_list(seq(l, "k", 5), {0.005, 0.005, 0.005, 10, 10}, 1e-12, "fast_slow")
    t.eq(l:num_requeues("k"), 5)
    l:forget("k")
    t.near(l:when("k"), 0.005, 1e-12, "fast again after forget")
    local z = wq.limiter.fast_slow(0.001, 1, 0)
    t.eq(z:when("k"), 1.0, "max_fast 0: slow at once")
end

do -- max_of: calls every limiter, largest wins; num_requeues = max; forget = all
    local a = wq.limiter.exponential(0.001, 1)
    local b = wq.limiter.fast_slow(0.003, 5, 2)
    local m = wq.limiter.max_of(a, b)
    near_list(seq(m, "k", 4), {0.003, 0.003, 5, 5}, 1e-12, "max_of")
    t.eq(a:num_requeues("k"), 4, "every child was called")
    t.eq(b:num_requeues("k"), 4)
    t.eq(m:num_requeues("k"), 4)
    a:forget("k")
    a:when("k")
    t.eq(m:num_requeues("k"), 4, "num_requeues is the max of the children")
    m:forget("k")
    t.eq(a:num_requeues("k"), 0, "forget reaches every child")
    t.eq(b:num_requeues("k"), 0)
    local none = wq.limiter.max_of()
    t.eq(none:when("k"), 0.0, "max_of() -> 0")
    t.eq(none:num_requeues("k"), 0)
    -- children stay alive through the composite
    local m2 = wq.limiter.max_of(wq.limiter.exponential(0.002, 1), wq.limiter.exponential(0.001, 1))
    collectgarbage()
    collectgarbage()
    t.near(m2:when("g"), 0.002, 1e-12, "children of max_of survive a collection")
end

do -- with_max_wait(l, max) = min(l:when, max)
    local l = wq.limiter.with_max_wait(wq.limiter.exponential(0.001, 100), 0.004)
    near_list(seq(l, "k", 5), {0.001, 0.002, 0.004, 0.004, 0.004}, 1e-12, "with_max_wait")
    t.eq(l:num_requeues("k"), 5, "counts come from the inner limiter")
    l:forget("k")
    t.eq(l:num_requeues("k"), 0)
    local inner = wq.limiter.with_max_wait(wq.limiter.fast_slow(1, 2, 1), 10)
    collectgarbage()
    t.eq(inner:when("x"), 1.0, "inner limiter survives a collection")
end

-- The bucket uses the runner's clock: exact under --virtual-time, and in
-- real time a call made a little later finds a little more refilled.
local eps = t.virtual and 1e-9 or 0.01

do -- bucket(10, 100) at one instant: 1-100 -> 0; 101 -> 0.1; 102 -> 0.2; 105 -> 0.5
    local l = wq.limiter.bucket(10, 100)
    local t0 = wq.now()
    local r = seq(l, "any", 105)
    local zeros = 0
    for i = 1, 100 do
        if r[i] == 0 then
            zeros = zeros + 1
        end
    end
    t.eq(zeros, 100, "the first 100 calls (the burst) get 0")
    t.near(r[101], 0.1, eps, "call 101")
    t.near(r[102], 0.2, eps, "call 102")
    t.near(r[105], 0.5, eps, "call 105")
    t.eq(l:num_requeues("any"), 0, "a bucket counts nothing")
    l:forget("any") -- does nothing
    t.near(l:when("other key"), 0.6, eps, "shared by all keys; forget does nothing")
    wq.sleep(0.25)
    -- 106 calls: 6 tokens owed; 250 ms repay 2.5; the next call owes 4.5 -> 0.45 s
    -- (in real time the sleep may overrun: what the elapsed time repaid counts)
    local elapsed = wq.now() - t0
    t.near(l:when("x"), 0.7 - elapsed, eps, "after 250 ms the 107th call waits 0.45")
end

do -- the 250 ms example of WORKQUEUE.md: 105 calls, 250 ms, the next -> 0.35
    local l = wq.limiter.bucket(10, 100)
    local t0 = wq.now()
    seq(l, "k", 105)
    wq.sleep(0.25)
    t.near(l:when("k"), 0.6 - (wq.now() - t0), eps, "250 ms later the next -> 0.35")
end

do -- bucket(3, 1): 0, 0.333333333, 0.666666666, 1.0 (truncated to whole ns)
    local l = wq.limiter.bucket(3, 1)
    local r = seq(l, "k", 4)
    t.eq(r[1], 0.0, "first call takes the one token")
    if t.virtual then
        t.eq(r[2], 0.333333333, "1/3 s truncated to ns")
        t.eq(r[3], 0.666666666, "2/3 s truncated to ns")
        t.eq(r[4], 1.0)
    else
        t.near(r[2], 1 / 3, eps)
        t.near(r[3], 2 / 3, eps)
        t.near(r[4], 1, eps)
    end
end

do -- qps 0: burst calls get 0, then never; burst 0 with finite qps: never
    local l = wq.limiter.bucket(0, 2)
    t.eq(l:when("k"), 0.0)
    t.eq(l:when("k"), 0.0)
    t.eq(l:when("k"), math.huge, "qps 0: never once the burst is used")
    l = wq.limiter.bucket(0, 0)
    t.eq(l:when("k"), math.huge, "qps 0, burst 0: never")
    l = wq.limiter.bucket(5, 0)
    t.eq(l:when("k"), math.huge, "burst 0: never")
end

do -- default() = max_of(exponential(0.005, 1000), bucket(10, 100))
    local l = wq.limiter.default()
    near_list(seq(l, "k", 3), {0.005, 0.01, 0.02}, 1e-12, "default: per-key exponential")
    t.eq(l:num_requeues("k"), 3)
    local r = seq(l, "spread", 97) -- 100 tokens used now
    t.near(r[1], 0.005, 1e-12)
    local d = l:when("fresh")
    t.near(d, 0.1, eps, "the 101st call overall waits for the shared bucket")
    local other = wq.limiter.default()
    t.near(other:when("k"), 0.005, 1e-12, "each default() has its own state")
end

do -- a queue with the bucket: add_rate_limited spaces items out
    local q = wq.queue("lim-bucket", {limiter = wq.limiter.bucket(100, 2)})
    local t0 = wq.now()
    for i = 1, 4 do
        q:add_rate_limited("k" .. i)
    end
    local times = {}
    for i = 1, 4 do
        local k = q:get()
        times[i] = wq.now() - t0
        q:done(k)
    end
    t.at(times[2], 0, "burst: first two at once", 0.05)
    t.at(times[3], 0.01, "third after 1/qps")
    t.at(times[4], 0.02, "fourth after 2/qps")
end

do -- wq.backoff (apimachinery wait.Backoff)
    local b = wq.backoff({duration = 1, factor = 2, steps = 3})
    t.eq({b:step(), b:step(), b:step(), b:step(), b:step()}, {1.0, 2.0, 4.0, 8.0, 8.0},
        "{1, x2, steps 3} -> 1, 2, 4, then 8 forever")
    t.eq(b.steps, 0, "steps used up")
    t.eq(b.duration, 8.0, "duration field")
    b = wq.backoff({duration = 1, factor = 2, steps = 3, cap = 3})
    t.eq({b:step(), b:step(), b:step(), b:step()}, {1.0, 2.0, 3.0, 3.0}, "{1, x2, steps 3, cap 3} -> 1, 2, 3, 3")
    b = wq.backoff({duration = 0.5})
    t.eq({b:step(), b:step(), b:step()}, {0.5, 0.5, 0.5}, "steps < 1: duration forever")
    b = wq.backoff({duration = 2, factor = 0, steps = 5})
    t.eq({b:step(), b:step()}, {2.0, 2.0}, "factor 0: constant")
    b = wq.backoff({duration = 1, factor = 1.5, steps = 10})
    t.eq({b:step(), b:step(), b:step()}, {1.0, 1.5, 2.25}, "factor 1.5")
    b = wq.backoff({})
    t.eq(b:step(), 0.0, "all defaults: 0")
    -- jitter: d + random[0,1) * jitter * d, and never fed into the next value
    b = wq.backoff({duration = 1, factor = 2, steps = 10, jitter = 0.5})
    local j1, j2, j3 = b:step(), b:step(), b:step()
    t.between(j1, 1, 1.5, "jittered 1")
    t.between(j2, 2, 3, "jittered 2 (jitter not fed into the next)")
    t.between(j3, 4, 6, "jittered 4")
    local distinct = {}
    local bj = wq.backoff({duration = 1, jitter = 1})
    for _ = 1, 20 do
        local v = bj:step()
        t.ok(v >= 1 and v < 2, "jitter 1 in [1, 2): " .. v)
        distinct[v] = true
    end
    local nd = 0
    for _ in pairs(distinct) do
        nd = nd + 1
    end
    t.ok(nd > 1, "jitter varies")
end

t.done()
