-- bench/pg: queue "noop" whose handler fails the first attempt of every 50th key (k50,
-- k100, ...), so that most outcome batches hold a retry beside the successes (workers
-- from WORKERS, default 500; the retry comes after the default limiter's 5 ms).
wq.queue("noop", {
    workers = tonumber(os.getenv("WORKERS") or "500"),
    handler = function(key, _, job)
        if job.attempt == 1 and tonumber(key:sub(2)) % 50 == 0 then error("flaky") end
    end,
})
