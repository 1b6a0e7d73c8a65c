-- bench/pg: queue "slow", 50 workers; each job logs "<runner> <key> <start>" and sleeps.
io.stdout:setvbuf("line")
local name = os.getenv("RUNNER") or "?"
wq.queue("slow", {workers = 50, handler = function(key)
    io.stdout:write(name, " ", key, " ", string.format("%.6f", wq.time()), "\n")
    wq.sleep(tonumber(os.getenv("SLEEP") or "30"))
end})
