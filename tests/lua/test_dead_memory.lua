-- backends: all
-- Dead letters and the runner's memory (issue 32). 2,000 keys fail for good. Without a
-- database shared by runners the runner keeps them (q:dead() lists them from memory: with a
-- state file or without one). On PostgreSQL (WQ_BACKEND=pg) the database keeps them and
-- answers for them: the runner keeps no copy, so a steady stream of dead letters does not
-- make it grow (before, each one stayed in its memory for as long as it ran).
local t = require "wqtest"
t.watchdog(60)

local shared = os.getenv("WQ_BACKEND") == "pg"
local n = 2000
local q = wq.queue("dm", {
    workers = 50,
    max_retries = 0,
    handler = function(key) error("dead on purpose: " .. key .. string.rep(".", 200), 0) end,
})
-- one warm-up dead letter first: the queue's tables and the log's buffers exist
q:add("warm")
t.wait_until(function() return q:stats().dead == 1 end, 10)
collectgarbage("collect")
collectgarbage("collect")
local before = collectgarbage("count")
for i = 1, n do q:add("k" .. i) end
t.wait_until(function() return q:stats().dead == n + 1 end, 30)
collectgarbage("collect")
collectgarbage("collect")
local grew = collectgarbage("count") - before
print(string.format("test_dead_memory: the Lua heap grew %.0f KiB for %d dead letters (%s)", grew, n,
    shared and "PostgreSQL" or "in the runner"))
t.eq(#q:dead(), n + 1, "every dead letter is listed")
if shared then
    t.ok(grew < 150, string.format("the Lua heap grew %.0f KiB for %d dead letters the database keeps", grew, n))
else
    t.ok(grew > 300, string.format("the Lua heap grew %.0f KiB: the %d dead letters are kept in memory", grew, n))
end
t.done()
