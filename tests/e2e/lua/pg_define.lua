-- Shared queue options (tests/e2e/test_pg_ops.sh): queue "dq" with
-- max_retries = arg[1] and a handler that always fails at once (no delay
-- between retries), serving until stopped.
wq.queue("dq", {
    max_retries = tonumber(arg[1]),
    limiter = wq.limiter.exponential(0, 0),
    handler = function(key) error("always " .. key) end,
})
