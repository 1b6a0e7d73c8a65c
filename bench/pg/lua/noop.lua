-- bench/pg: a no-op handler on queue "noop" (workers from WORKERS, default 500; the history
-- option from HISTORY, default a day as the queue's own default).
wq.queue("noop", {workers = tonumber(os.getenv("WORKERS") or "500"),
    history = tonumber(os.getenv("HISTORY") or "86400"), handler = function() end})
