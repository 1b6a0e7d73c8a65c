-- A processing item at a crash runs again (tests/e2e/test_persist.sh).
--   persist_crash.lua exit    add x y z, get x, wq.exit(0) while x is processing
--   persist_crash.lua hang    add x y z, get x, then sleep (the test kills it with -9)
--   persist_crash.lua check   print the keys get hands out now
local q = wq.queue("crash")
local mode = arg[1]
if mode == "exit" or mode == "hang" then
    q:add("x", {n = 1})
    q:add("y", {n = 2})
    q:add("z", {n = 3})
    local k = q:get()
    print("got " .. k)
    io.stdout:flush()
    if mode == "exit" then
        wq.exit(0)
    end
    wq.sleep(60)
else
    while q:len() > 0 do
        local k, p = q:get()
        print("item " .. k .. " " .. tostring(p and p.n))
        q:done(k)
    end
end
