-- backends: all
-- q:cancel_after(key) (a wqrun extra): cancels the pending delayed add of a
-- key — an add_after, a retry waiting for its backoff, a delayed re-add
-- while the key runs — and answers whether there was one; a queued or
-- running item itself is not affected. On PostgreSQL the database decides,
-- for every runner.
local t = require "wqtest"

local runs = {}
local gate = {}
local q = wq.queue("ca", {
    workers = 4,
    max_retries = 3,
    limiter = wq.limiter.exponential(0.3, 0.3),
    handler = function(key)
        runs[key] = (runs[key] or 0) + 1
        while gate[key] do wq.sleep(0.01) end
        if key == "flaky" then error("boom") end
    end,
})

-- a delayed add: cancelled, never runs
q:add_after("later", 0.3)
t.eq(q:cancel_after("later"), true, "a pending delayed add was cancelled")
t.eq(q:cancel_after("later"), false, "nothing left to cancel")
t.eq(q:item("later"), nil, "the key is gone")

-- a queued item is not a delayed add: left alone
q:pause()
q:add("now")
t.eq(q:cancel_after("now"), false, "a queued item is not affected")
t.eq(q:item("now").state, "queued", "and still queued")
-- ... but a delayed add beside it is
q:add("both")
q:add_after("both", 30)
t.eq(q:cancel_after("both"), true, "the delayed add beside a queued item was cancelled")
t.eq(q:item("both").state, "queued", "the queued item stays")
t.eq(q:cancel_after("both"), false, "and nothing is left to cancel")
q:resume()
t.wait_until(function() return runs.now == 1 and runs.both == 1 end, 5)

-- a delayed re-add while the key runs: cancelled, no run after
gate.busy = true
q:add("busy")
t.wait_until(function() return runs.busy == 1 end, 5)
q:add_after("busy", 0.05)
t.eq(q:cancel_after("busy"), true, "the delayed re-add of a running key was cancelled")
t.eq(q:item("busy").state, "processing", "the running item itself goes on")
gate.busy = nil

-- a retry waiting for its backoff: cancelled, not retried
q:add("flaky")
t.wait_until(function()
    local it = q:item("flaky")
    return runs.flaky == 1 and it and it.state == "waiting"
end, 5)
t.eq(q:cancel_after("flaky"), true, "the waiting retry was cancelled")

wq.sleep(0.6)
t.eq(runs.later, nil, "the cancelled add never ran")
t.eq(runs.busy, 1, "no run after the cancelled re-add")
t.eq(runs.flaky, 1, "the cancelled retry never ran")
t.eq(runs.both, 1, "both ran once")
if os.getenv("WQ_BACKEND") == "pg" then -- the database keeps its history (SPEC 11)
    t.eq(q:item("busy").state, "done", "busy is finished (its last run)")
else
    t.eq(q:item("busy"), nil, "busy is finished")
end
t.raises(function() q:cancel_after() end, "cancel_after")
t.done()
