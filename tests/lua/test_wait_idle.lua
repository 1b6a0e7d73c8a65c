-- backends: all
-- q:wait_idle([timeout]) / wq.wait_idle([timeout]) (SPEC section 12): true
-- once the queue (every queue) has nothing queued, waiting or processing,
-- false at the timeout; the task waits without polling.
local t = require "wqtest"

local gate = false
local runs = {}
local q = wq.queue("wi", {workers = 2, max_retries = 1,
    limiter = wq.limiter.exponential(0.05, 0.05), handler = function(key)
    runs[#runs + 1] = key
    while not gate do wq.sleep(0.01) end
    if key == "flaky" and #runs < 4 then error("first run fails") end
end})
local other = wq.queue("wi_other", {handler = function() wq.sleep(0.1) end})

t.eq(q:wait_idle(), true, "an empty queue is idle at once")
t.eq(wq.wait_idle(5), true, "every queue idle")
t.eq(wq.wait_idle(0), true, "a timeout of 0 only looks")

q:add("a")
q:add("flaky")
local t0 = wq.now()
t.eq(q:wait_idle(0.1), false, "running items: false at the timeout")
t.between(wq.now() - t0, 0.099, 2, "waited for the timeout")
t.eq(q:wait_idle(0), false, "a timeout of 0 only looks")

wq.spawn(function() wq.sleep(0.2); q:add("a") end) -- a follow-up while "a" runs
wq.spawn(function() wq.sleep(0.3); gate = true end)
t0 = wq.now()
t.eq(q:wait_idle(10), true, "idle after the runs, the follow-up and the retry")
t.ok(wq.now() - t0 >= 0.3, "not before the gate opened")
table.sort(runs)
t.eq(runs, {"a", "a", "flaky", "flaky"}, "the follow-up and the retry ran before idle")
t.eq(q:stats().processing, 0)

-- a delayed item is waiting: not idle until it ran
q:add_after("later", 0.2)
t0 = wq.now()
t.eq(q:wait_idle(5), true)
t.ok(wq.now() - t0 >= 0.19, "waited for the delayed item")

-- a paused queue's items stay queued: never idle
q:pause()
q:add("held")
t.eq(q:wait_idle(0.05), false, "queued in a paused queue")
q:resume()
t.eq(q:wait_idle(5), true, "idle once resumed and run")

-- wq.wait_idle waits for every queue
other:add("x")
q:add("y")
t0 = wq.now()
t.eq(q:wait_idle(5), true)
t.eq(wq.wait_idle(5), true, "and the other queue too")
t.ok(wq.now() - t0 >= 0.09, "the other queue's run took its time")
t.eq(other:stats().processing, 0)

-- two tasks wait at once, one with a timeout that fires first
gate = false
q:add("z")
local results = {}
wq.spawn(function() results.short = q:wait_idle(0.05) end)
wq.spawn(function() results.long = wq.wait_idle(5) end)
wq.sleep(0.1)
gate = true
t.eq(q:wait_idle(5), true)
wq.sleep(0) -- the spawned waiters run
t.eq(results, {short = false, long = true})

-- bad arguments and places
t.raises(function() q:wait_idle("soon") end, "wait_idle: bad argument 'timeout'")
t.raises(function() q:wait_idle(-1) end, "wait_idle: bad argument 'timeout'")
t.raises(function() wq.wait_idle({}) end, "wait_idle: bad argument 'timeout'")
t.raises(function() q.wait_idle(1) end, "wait_idle: bad argument 'self'")
q:add("co")
local co = coroutine.wrap(function() return q:wait_idle() end)
t.raises(co, "wait_idle: cannot wait here")
t.eq(q:wait_idle(5), true)
t.done()
