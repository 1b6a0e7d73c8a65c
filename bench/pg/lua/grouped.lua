-- bench/pg fleet: no-op jobs of queue "grouped"; with GROUPED=1 every group may run
-- one item at a time across all runners (group_limit concurrency 1), else no limit.
local limited = os.getenv("GROUPED") == "1"
wq.queue("grouped", {
    workers = tonumber(os.getenv("WORKERS") or "500"),
    group_limit = limited and {concurrency = 1} or nil,
    handler = function() end,
})
