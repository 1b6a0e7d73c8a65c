-- bench/pg fleet: this runner adds N (env) items with add_after delays spread over
-- 1-5 s, each carrying its due time; the handler prints the lateness (start - due, ms)
-- of every item it runs, whoever added it. Serves until the test stops it.
io.stdout:setvbuf("line")
local q = wq.queue("late", {workers = 50, handler = function(_, p)
    io.stdout:write(string.format("%.3f\n", (wq.time() - p.due) * 1000))
end})
local n = tonumber(os.getenv("N") or "500")
wq.spawn(function()
    wq.sleep(1) -- every runner is up
    local name = os.getenv("RUNNER") or "r"
    for i = 1, n do
        local d = 1 + 4 * (i - 1) / n
        q:add_after(name .. i, d, {due = wq.time() + d})
        if i % 50 == 0 then wq.sleep(0.01) end
    end
end)
