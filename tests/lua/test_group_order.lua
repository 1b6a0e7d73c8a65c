-- backends: all
-- Dispatch order with group limits (SPEC 7.4): the first item in priority
-- then FIFO order whose group is under its limits, also when a finished
-- item frees its group's slot (on PostgreSQL the outcome's transaction
-- claims the next items for its runner: the group's next held item must not
-- pass an older or a higher-priority item of another group).
local t = require "wqtest"

local function run_all(q, n)
    t.wait_until(function() return q:stats().done == n end, 10)
end

do -- FIFO across groups: the freed group's next item waits for an older one
    local order = {}
    local q = wq.queue("fifo", {workers = 1, group_limit = {concurrency = 1},
        handler = function(key) order[#order + 1] = key end})
    q:pause()
    q:add("a1", nil, {group = "A"})
    q:add("b1", nil, {group = "B"})
    q:add("a2", nil, {group = "A"})
    q:add("b2", nil, {group = "B"})
    q:resume()
    run_all(q, 4)
    t.eq(order, {"a1", "b1", "a2", "b2"}, "in FIFO order")
end

do -- priority: an item of higher priority added meanwhile goes before the group's next
    local order = {}
    local q
    q = wq.queue("prio", {workers = 1, group_limit = {concurrency = 1},
        handler = function(key)
            order[#order + 1] = key
            if key == "a1" then
                q:add("x", nil, {priority = 5})
                wq.sleep(0.3) -- committed before a1's outcome
            end
        end})
    q:pause()
    q:add("a1", nil, {group = "A"})
    q:add("a2", nil, {group = "A"})
    q:resume()
    run_all(q, 3)
    t.eq(order, {"a1", "x", "a2"}, "the higher priority first")
end

do -- two workers, concurrency 1: each group one at a time, in its own FIFO order
    local order, running, peak = {}, {}, 0
    local q = wq.queue("two", {workers = 2, group_limit = {concurrency = 1},
        handler = function(key)
            local g = key:sub(1, 1)
            running[g] = (running[g] or 0) + 1
            peak = math.max(peak, running[g])
            order[#order + 1] = key
            wq.sleep(0.05)
            running[g] = running[g] - 1
        end})
    q:pause()
    for i = 1, 4 do
        q:add("a" .. i, nil, {group = "a"})
        q:add("b" .. i, nil, {group = "b"})
        if i == 1 then q:add("c1", nil, {group = "c"}) end
    end
    q:resume()
    run_all(q, 9)
    t.eq(peak, 1, "never two of a group at once")
    local pos = {}
    for i, k in ipairs(order) do pos[k] = i end
    t.ok(pos.a1 < pos.a2 and pos.a2 < pos.a3 and pos.a3 < pos.a4, "group a in FIFO order: " .. table.concat(order, " "))
    t.ok(pos.b1 < pos.b2 and pos.b2 < pos.b3 and pos.b3 < pos.b4, "group b in FIFO order")
    t.ok(pos.c1 < pos.a2, "c1 (older than a2) before a2: " .. table.concat(order, " "))
end

t.done()
