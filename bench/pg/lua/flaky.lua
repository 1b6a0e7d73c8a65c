-- bench/pg: queue "noop" whose handler fails the first attempt of every 50th key (k50,
-- k100, ...), so that most outcome batches hold a retry beside the successes (workers
-- from WORKERS, default 500; the retry comes after 5 ms: a per-key limiter, since the
-- default one's bucket, 10 retries a second for the queue, would be all the benchmark
-- measured).
wq.queue("noop", {
    workers = tonumber(os.getenv("WORKERS") or "500"),
    limiter = wq.limiter.exponential(0.005, 0.005),
    handler = function(key, _, job)
        if job.attempt == 1 and tonumber(key:sub(2)) % 50 == 0 then error("flaky") end
    end,
})
