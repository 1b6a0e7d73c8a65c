-- bench/pg: a no-op handler on queue "noop" (workers from WORKERS, default 500).
wq.queue("noop", {workers = tonumber(os.getenv("WORKERS") or "500"), handler = function() end})
