-- Restart keeps order (tests/e2e/test_persist.sh).
--   persist_order.lua add   queue keys with priorities and payloads on a queue without handler
--   persist_order.lua get   print them in the order get hands them out, then done each
local q = wq.queue("jobs")
if arg[1] == "add" then
    q:add("a", {n = 1, name = "alpha"})
    q:add("b", {n = 2, tags = {"x", "y"}}, {priority = 5})
    q:add("c", "plain string", {priority = 0})
    q:add("d", {n = 4}, {priority = 5})
    q:add("e", nil, {priority = -1})
    q:add("f", {n = 6}, {priority = 10})
    q:add("c", {n = 3}, {priority = 5}) -- raised: back of level 5, new payload
    q:add("a")                          -- already queued: nothing changes
    q:add("g", "hello world")
    print("len " .. q:len())
else
    print("len " .. q:len())
    while q:len() > 0 do
        local k, p = q:get()
        local shown = p
        if type(p) == "table" then shown = tostring(p.n) end
        print("item " .. k .. " " .. tostring(shown))
        q:done(k)
    end
end
