-- backends: all
-- Completed-job memory (SPEC 7.2): with keep_done, a key that succeeded is
-- skipped by later adds until it is forgotten, forced, or the memory expires.
local t = require "wqtest"
t.watchdog(30)

local runs = {}
local q = wq.queue("once", {keep_done = 3600, handler = function(key, payload)
    runs[key] = (runs[key] or 0) + 1
    if key == "rich" then
        return {size = 42, name = "é"}
    elseif key == "text" then
        return "ok"
    elseif key == "reentrant" and runs[key] == 1 then
        q:add("reentrant") -- re-added while processing: runs once more after, as always
        wq.sleep(0.01)
    end
end})

local before = wq.time()
for _, k in ipairs({"plain", "rich", "text", "reentrant"}) do
    q:add(k)
end
wq.sleep(0.05)
t.eq(runs, {plain = 1, rich = 1, text = 1, reentrant = 2}, "each ran (reentrant twice)")

t.eq(q:add("plain"), false, "a finished key is skipped")
t.eq(q:add_after("plain", 0.01), false, "add_after too")
t.eq(q:add_rate_limited("plain"), false, "add_rate_limited too")
wq.sleep(0.05)
t.eq(runs.plain, 1, "it did not run again")

local info = q:done_info("rich")
t.between(info.finished_at, before, wq.time(), "finished_at")
t.eq(info.result, {size = 42, name = "é"}, "a returned table is the result")
t.eq(q:done_info("text").result, "ok", "a returned string is the result")
t.eq(q:done_info("plain").result, nil, "no result when the handler returned nothing")
t.eq(q:done_info("never"), nil, "nil for a key that never finished")

t.eq(q:add("plain", nil, {force = true}), true, "force adds anyway")
wq.sleep(0.02)
t.eq(runs.plain, 2, "and it runs")

t.eq(q:forget_done("text"), true, "forget_done")
t.eq(q:forget_done("text"), false, "twice: nothing left")
t.eq(q:add("text"), true, "a forgotten key is added again")
wq.sleep(0.02)
t.eq(runs.text, 2)

t.raises(function() q:add("x", nil, {force = 1}) end, "add: bad argument 'force' (boolean expected, got 1)")
t.raises(function() wq.queue("bad", {keep_done = -1}) end, "queue: bad argument 'keep_done' (must be >= 0)")

do -- the memory expires after keep_done
    local n = 0
    local short = wq.queue("short", {keep_done = 0.5, handler = function() n = n + 1 end})
    short:add("k")
    -- finished and its memory committed (PostgreSQL: done_info reads the database)
    t.wait_until(function() return short:done_info("k") ~= nil end, 5)
    t.eq(short:add("k"), false, "remembered at first")
    wq.sleep(0.6)
    t.eq(short:done_info("k"), nil, "forgotten after keep_done")
    t.eq(short:add("k"), true, "then added again")
    t.wait_until(function() return n == 2 end, 5)
    t.eq(n, 2)
end

do -- without keep_done a finished key is forgotten at once (client-go)
    local n = 0
    local plain = wq.queue("plain", {handler = function() n = n + 1 end})
    plain:add("k")
    wq.sleep(0.01)
    t.eq(plain:add("k"), true)
    wq.sleep(0.01)
    t.eq(n, 2)
    t.eq(plain:done_info("k"), nil)
end

t.done()
