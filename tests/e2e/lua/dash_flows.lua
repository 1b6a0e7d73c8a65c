-- The runner of tests/e2e/test_dashboard_flows.sh: parts and joins that run at once, and
-- "slow" whose handler waits for an hour (its nodes stay pending while a test looks).
wq.queue("parts", {workers = 4, handler = function(key, payload)
    return {part = key, n = payload and payload.n}
end})
wq.queue("joins", {handler = function(key, payload, job)
    local sum = 0
    for _, d in ipairs(job.deps) do
        sum = sum + ((d.result and d.result.n) or 0)
    end
    return {sum = sum}
end})
wq.queue("slow", {workers = 8, handler = function()
    wq.sleep(3600)
end})
