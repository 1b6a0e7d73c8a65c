-- bench/pg/wait_latency.sh's runner: queues "on_a" and "on_b", each run only by the runner
-- it names (WHO = A or B; the other defines it without a handler): each job sleeps
-- HANDLER_MS and returns its key, so runner A can wait for what runner B runs.
local who = os.getenv("WHO")
local ms = tonumber(os.getenv("HANDLER_MS") or "10")
local function work(key)
    wq.sleep(ms / 1000)
    return key
end
wq.queue("on_a", {workers = 4, handler = who == "A" and work or nil})
wq.queue("on_b", {workers = 4, handler = who == "B" and work or nil})
