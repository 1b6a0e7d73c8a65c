-- A sqlite3 session holds the write lock while this runs
-- (tests/e2e/test_persist.sh): ticks go on while commits wait, and with arg[1]
-- == "exit" the adds come just before the end, so the last commit must wait.
local q = wq.queue("busy")
local ticks = 0
wq.spawn(function()
    for _ = 1, 10 do
        wq.sleep(0.05)
        ticks = ticks + 1
    end
end)
wq.sleep(0.3)
for i = 1, 3 do
    q:add("b" .. i)
end
if arg[1] ~= "exit" then
    wq.sleep(0.3)
end
print("ticks " .. ticks)
