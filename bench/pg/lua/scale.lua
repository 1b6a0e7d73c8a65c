-- bench/pg fleet: queue "scale", WORKERS workers (default 50); each job waits 50 ms
-- (wq.sleep: the handler of a job that calls out and waits). Exits when the queue is empty.
wq.queue("scale", {workers = tonumber(os.getenv("WORKERS") or "50"), handler = function()
    wq.sleep(0.05)
end})
