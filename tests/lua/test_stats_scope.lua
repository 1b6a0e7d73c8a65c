-- backends: all
-- q:len() and q:stats() count the queue's items wherever they are: on
-- PostgreSQL the database's (every runner's, claimed or not), with this
-- runner's counters of runs (adds, done, failures...) beside them.
local t = require "wqtest"

local release = false
local q = wq.queue("st", {workers = 1, handler = function()
    while not release do wq.sleep(0.01) end
end})
q:pause() -- nothing is handed out: every item stays where the database keeps it
q:add("a")
q:add("b")
q:add_after("c", 30)
t.eq(q:len(), 2, "q:len() counts the queued items")
local s = q:stats()
t.eq({s.queued, s.waiting, s.processing, s.paused}, {2, 1, 0, true},
    "q:stats(): queued, waiting, processing, paused")
q:remove("c")
q:resume()
t.wait_until(function() local x = q:stats() return x.processing == 1 and x.queued == 1 end, 5)
t.eq(q:len(), 1, "one queued, one running")
s = q:stats()
t.eq(s.paused, false, "resumed")
release = true
t.wait_until(function() local x = q:stats() return x.processing == 0 and x.queued == 0 end, 5)
t.eq(q:len(), 0, "all done")

do -- dead letters; this runner's counters of runs beside them
    local told = false
    local d = wq.queue("std", {max_retries = 0, handler = function() error("no") end,
        on_dead = function() told = true end})
    d:add("bad")
    t.wait_until(function() return told end, 5)
    -- read your own writes: the outcome this runner just had is what the database shows
    local x = d:stats()
    t.eq(x.dead, 1, "the dead letter is counted as soon as on_dead runs")
    t.eq(#d:dead(), 1, "and listed")
    t.eq({x.failures, x.done, x.queued, x.processing}, {1, 1, 0, 0}, "one failed run, dead-lettered")
end

do -- group limits: the items held back count as queued and throttled
    local gate = false
    local g = wq.queue("stg", {workers = 4, group_limit = {concurrency = 1}, handler = function()
        while not gate do wq.sleep(0.01) end
    end})
    for i = 1, 3 do g:add("k" .. i, nil, {group = "one"}) end
    t.wait_until(function()
        local x = g:stats()
        return x.processing == 1 and x.throttled == 2
    end, 5)
    local x = g:stats()
    t.eq({x.queued, x.throttled, x.groups}, {2, 2, 1}, "two held back in one group")
    gate = true
    t.wait_until(function() return g:stats().processing + g:len() == 0 end, 5)
end
t.done()
