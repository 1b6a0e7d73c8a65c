-- A batch cut short by SIGTERM still writes its summary: an on_shutdown hook
-- runs while the busy handlers drain. With arg[1] == "fail", a hook raises.
local done = 0
local q = wq.queue("batch", {workers = 2, handler = function()
    wq.sleep(0.2)
    done = done + 1
end})
for i = 1, 100 do
    q:add("item" .. i)
end
wq.on_shutdown(function()
    if arg[1] == "fail" then
        error("the summary could not be written")
    end
end)
wq.on_shutdown(function()
    wq.sleep(0.3) -- the two running handlers finish meanwhile
    print(("summary: %d done, %d left"):format(done, q:stats().queued))
    io.flush()
end)
print("started")
io.flush()
