-- Delayed items keep their absolute ready time (tests/e2e/test_persist.sh).
--   persist_delay.lua add   add_after("later", 3), add_after("soon", 0.3); print wq.time(); exit
--   persist_delay.lua run   a handler prints each key with wq.time() when it runs
local mode = arg[1]
if mode == "add" then
    local q = wq.queue("delay")
    q:add_after("later", 3, {n = 3})
    q:add_after("soon", 0.3)
    print(string.format("added %.3f", wq.time()))
    wq.exit(0)
else
    print(string.format("start %.3f", wq.time()))
    io.stdout:flush()
    wq.queue("delay", {handler = function(key, p)
        print(string.format("ran %s %.3f %s", key, wq.time(), tostring(p and p.n)))
        io.stdout:flush()
    end})
end
