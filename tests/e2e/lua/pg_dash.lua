-- The dashboard on PostgreSQL (tests/e2e/test_pg_dashboard.sh): every runner
-- runs this script. Queue "w" (2 workers): keys "slow*" wait an hour, others
-- 50 ms; "idle" has no handler (its items wait in the database); with
-- arg[1] == "feed", a task adds a job to "w" every 50 ms (the jobs/s).
-- "mail": groups of concurrency 1 across the runners, grouped keys run an
-- hour; the feed runner adds acme-1..5 and globex-1..2 (so 4 and 1 held
-- back); schedules "digest" (*/5 * * * *, key "daily-digest") and "beat"
-- (@every 1s), defined by every runner, fired once a time by the first.
local q = wq.queue("w", {workers = 2, max_retries = 0, handler = function(key)
    wq.sleep(key:match("^slow") and 3600 or 0.05)
end})
wq.queue("idle")
local mail = wq.queue("mail", {workers = 2, group_limit = {concurrency = 1}, handler = function(key)
    if key:find("-") then
        wq.sleep(3600)
    end
end})
mail:schedule("digest", "*/5 * * * *", {key = "daily-digest"})
mail:schedule("beat", "@every 1s")
if arg[1] == "feed" then
    for i = 1, 5 do
        mail:add("acme-" .. i, nil, {group = "acme"})
    end
    for i = 1, 2 do
        mail:add("globex-" .. i, nil, {group = "globex"})
    end
    wq.spawn(function()
        local i = 0
        while true do
            i = i + 1
            q:add("f" .. i)
            wq.sleep(0.05)
        end
    end)
end
