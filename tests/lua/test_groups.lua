-- Group limits from Lua (SPEC 7.4): options and their errors, opts.group,
-- group_of, q:set_group_limit / q:group_limit, stats().groups/.throttled,
-- get obeying the limits, handler workers never passing a group's
-- concurrency while other groups go on.
local t = require "wqtest"

do -- bad arguments name the function and the parameter
    t.raises(function() wq.queue("g1", {group_limit = 5}) end, "queue: bad argument 'group_limit' (table expected, got number)")
    t.raises(function() wq.queue("g2", {group_limit = {concurency = 1}}) end, "unknown field 'concurency'")
    t.raises(function() wq.queue("g3", {group_limit = {concurrency = 0}}) end, "concurrency: integer >= 1 expected")
    t.raises(function() wq.queue("g4", {group_limit = {rate = -1}}) end, "queue: bad argument 'group_limit.rate'")
    t.raises(function() wq.queue("g5", {group_limit = {burst = 3}}) end, "burst needs a rate")
    t.raises(function() wq.queue("g6", {group_of = "host"}) end, "queue: bad argument 'group_of' (function expected, got string)")
    t.raises(function() wq.queue("g7", {rate = 10}) end, "queue: bad argument 'rate' (table {per_second, burst} expected")
    t.raises(function() wq.queue("g8", {rate = {0}}) end, "queue: bad argument 'rate[1] (per_second)'")
    local q = wq.queue("args")
    t.raises(function() q:add("k", nil, {group = 5}) end, "add: bad argument 'group' (string expected, got number)")
    t.raises(function() q:add_after("k", 1, nil, {group = {}}) end, "add_after: bad argument 'group' (string expected, got table)")
    t.raises(function() q:add("k", nil, {group = ("g"):rep(1025)}) end, "add: bad argument 'group' (longer than 1024 bytes)")
    t.no_error(function() q:add("k", nil, {group = ("g"):rep(1024)}) end, "1024 bytes are fine")
    t.raises(function() q:set_group_limit(nil, {}) end, "set_group_limit: bad argument 'group' (string expected, got nil)")
    t.raises(function() q:set_group_limit("g", 3) end, "set_group_limit: bad argument 'limit' (table expected, got number)")
    t.raises(function() q.set_group_limit("g", {}) end, "q:set_group_limit: bad argument 'self'")
end

do -- a group_of that raises fails the add and changes nothing
    local q = wq.queue("raising", {group_of = function(key)
        if key == "bad" then error("cannot group " .. key) end
        if key == "num" then return 42 end
        return key:sub(1, 1)
    end})
    t.raises(function() q:add("bad") end, "cannot group bad")
    t.raises(function() q:add("num") end, "add: group_of must return a string or nil, got number")
    t.eq(q:len(), 0, "nothing was added")
    t.eq(q:add("abc"), true)
    t.eq(q:add("xyz", nil, {group = "given"}), true, "opts.group wins over group_of")
    t.eq(q:stats().groups, 2)
end

do -- get obeys the limits; throttled counts what they hold back
    local q = wq.queue("gets", {group_limit = {concurrency = 1}})
    q:add("a1", nil, {group = "a"})
    q:add("a2", nil, {group = "a"})
    q:add("b1", nil, {group = "b"})
    q:add("n1")
    t.eq(q:stats().groups, 2)
    t.eq(select(1, q:get()), "a1")
    t.eq(q:stats().throttled, 1, "a2 is held back")
    t.eq(select(1, q:get()), "b1", "b is not blocked by a")
    t.eq(select(1, q:get()), "n1")
    t.eq(q:len(), 1, "a2 stays queued")
    local lim, own = q:group_limit("a")
    t.deep_eq(lim, {concurrency = 1})
    t.eq(own, false)
    q:set_group_limit("a", {concurrency = 2})
    t.eq(select(2, q:group_limit("a")), true)
    t.eq(select(1, q:get()), "a2", "raising a's limit lets a2 go")
    q:set_group_limit("a", nil)
    t.eq(select(2, q:group_limit("a")), false, "nil restores the default")
end

do -- workers: at most 2 per group at once; all groups progress together
    local running, most, total_most, total = {}, {}, 0, 0
    local q = wq.queue("workers", {
        workers = 12,
        group_limit = {concurrency = 2},
        handler = function(key, _, job)
            local g = job.group
            running[g] = (running[g] or 0) + 1
            total = total + 1
            most[g] = math.max(most[g] or 0, running[g])
            total_most = math.max(total_most, total)
            wq.sleep(0.005)
            running[g] = running[g] - 1
            total = total - 1
        end,
    })
    for i = 1, 20 do
        for _, g in ipairs {"x", "y", "z"} do
            q:add(g .. i, nil, {group = g})
        end
    end
    t.wait_until(function() return q:len() == 0 and q:stats().processing == 0 end, 10)
    t.deep_eq(most, {x = 2, y = 2, z = 2}, "never more than 2 of a group")
    t.eq(total_most, 6, "but 3 groups x 2 ran at once")
end

do -- the queue-wide rate
    local q = wq.queue("paced", {rate = {100, 1}})
    for i = 1, 5 do q:add("k" .. i) end
    local t0 = wq.now()
    for _ = 1, 5 do q:get() end
    t.ok(wq.now() - t0 >= 0.035, "5 gets at 100/s take at least 40 ms")
end

t.done()
