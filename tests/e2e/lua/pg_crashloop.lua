-- The PostgreSQL kill -9 loop (tests/e2e/test_pg_crashloop.sh): queue "c"
-- (8 workers); every run appends two lines to the log arg[1] (one file per
-- runner process; RUNNER is arg[2], N counts this process's runs), each
-- written and flushed at once so a kill -9 loses nothing already written:
--   S RUNNER KEY N TIME     when the handler starts (wq.time(), Unix seconds)
--   E RUNNER KEY N TIME     when it ends
-- It sleeps 0-20 ms, and 300-600 ms for one key in ten (keys ending in 0), so
-- that most kills cut a run in flight even when the producers are slow (a
-- machine busy with the sanitizers' build: CI saw 1 run cut of 30 kills).
local log = assert(io.open(arg[1], "a"))
local me = assert(arg[2])
local n = 0
math.randomseed(os.time() + #me * 7919 + math.floor(wq.time() * 1000) % 100000)

local function line(...)
    log:write(string.format(...))
    log:flush()
end

wq.queue("c", {
    workers = 8,
    handler = function(key)
        n = n + 1
        local id = n
        line("S %s %s %d %.6f\n", me, key, id, wq.time())
        if key:sub(-1) == "0" then
            wq.sleep(0.3 + math.random() * 0.3)
        else
            wq.sleep(math.random() * 0.02)
        end
        line("E %s %s %d %.6f\n", me, key, id, wq.time())
    end,
})
