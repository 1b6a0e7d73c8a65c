-- The dashboard on PostgreSQL (tests/e2e/test_pg_dashboard.sh): every runner
-- runs this script. Queue "w" (2 workers): keys "slow*" wait an hour, others
-- 50 ms; "idle" has no handler (its items wait in the database); with
-- arg[1] == "feed", a task adds a job to "w" every 50 ms (the jobs/s).
local q = wq.queue("w", {workers = 2, max_retries = 0, handler = function(key)
    wq.sleep(key:match("^slow") and 3600 or 0.05)
end})
wq.queue("idle")
if arg[1] == "feed" then
    wq.spawn(function()
        local i = 0
        while true do
            i = i + 1
            q:add("f" .. i)
            wq.sleep(0.05)
        end
    end)
end
