-- backends: all
-- Unique adds ({unique = true}): "if this key is pending or running, do
-- nothing" — no follow-up run, payload and time unchanged — with the reason
-- as the second result; keep_done's skip answers "done"; the default stays
-- client-go's follow-up rule.
local t = require "wqtest"
local release, running = false, false
local q = wq.queue("u", {keep_done = 60, handler = function(key)
    running = true
    while not release do wq.sleep(0.01) end
end})
q:pause() -- nothing is handed out: "a" stays queued while we look
t.eq({q:add("a", {n = 1})}, {true})
t.eq({q:add("a", {n = 2}, {unique = true})}, {false, "pending"}, "queued: left alone")
t.eq(q:items()[1].payload, {n = 1}, "payload unchanged")
q:resume()
t.wait_until(function() return running end, 5)
t.eq({q:add("a", nil, {unique = true})}, {false, "processing"}, "running: no follow-up")
t.eq({q:add_after("b", 10, nil, {unique = true})}, {true})
t.eq({q:add_after("b", 1, nil, {unique = true})}, {false, "pending"}, "waiting: the earlier time is not taken either")
release = true
t.wait_until(function() return q:done_info("a") ~= nil end, 5)
t.eq({q:add("a", nil, {unique = true})}, {false, "done"}, "finished within keep_done")
t.raises(function() q:add("c", nil, {unique = 1}) end, "add: bad argument 'unique' (boolean expected, got 1)")
q:remove("b")

do -- without unique: client-go's rule, a follow-up run with the new payload
    local seen = {}
    local gate = false
    local f = wq.queue("follow", {handler = function(key, p)
        seen[#seen + 1] = p.n
        while not gate do wq.sleep(0.01) end
    end})
    f:add("k", {n = 1})
    wq.sleep(0.02)
    t.eq({f:add("k", {n = 2})}, {true}, "re-added while running: queued for once more")
    gate = true
    t.wait_until(function() return #seen == 2 end, 2)
    t.eq(seen, {1, 2}, "the follow-up ran with the new payload")
end
do -- the queue option unique = true: every add is unique unless it says unique = false
    local gate, runs = false, {}
    local u = wq.queue("uq", {unique = true, handler = function(key, p)
        runs[#runs + 1] = p and p.n
        while not gate do wq.sleep(0.01) end
    end})
    t.eq({u:add("k", {n = 1})}, {true})
    t.wait_until(function() return #runs == 1 end, 5)
    t.eq({u:add("k", {n = 2})}, {false, "processing"}, "running: no follow-up by default")
    t.eq({u:add_after("k", 0.01, {n = 3})}, {false, "processing"}, "add_after too")
    t.eq({u:add("k", {n = 4}, {unique = false})}, {true}, "unique = false: the follow-up rule")
    t.eq({u:add("k", {n = 5})}, {false, "processing"}, "a follow-up is due: left alone")
    gate = true
    t.eq(u:wait_idle(5), true)
    t.eq(runs, {1, 4}, "the first run and the one follow-up asked for")
    t.raises(function() wq.queue("uq2", {unique = "yes"}) end,
             "queue: bad argument 'unique' (boolean expected, got string)")
end
t.done()
