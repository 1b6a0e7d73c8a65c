-- Graceful SIGTERM (tests/e2e/test_persist.sh): 2 workers, handlers sleep.
--   persist_sigterm.lua SECONDS [seed]   seed: add k01..k10 and a delayed 'later' first
local secs = tonumber(arg[1]) or 0.5
local q = wq.queue("term", {workers = 2, handler = function(key)
    print("started " .. key)
    io.stdout:flush()
    wq.sleep(secs)
    print("finished " .. key)
    io.stdout:flush()
end})
if arg[2] == "seed" then
    for i = 1, 10 do q:add(string.format("k%02d", i)) end
    q:add_after("later", 1.5) -- still waiting at the signal: it stays in the file
end
