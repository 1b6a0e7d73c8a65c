-- Known queue contents for tests/e2e/test_dashboard.sh:
--   jobs: one dead letter (a key with <, &, quotes, /, %, a space and
--         non-ASCII bytes), one failed once ("flaky", queued again for attempt
--         2 with its last error), one processing item ("slow", sleeps an
--         hour), five queued items p1..p5 behind it (one worker) and one
--         delayed ("later");
--   idle: 120 queued items, no handler (paging);
--   fast: a steady trickle of short jobs (the done/min rate and sparkline);
--   mail: groups limited to one item at a time, every grouped item running an
--         hour: "acme" runs 1 and holds 4 back, "globex" runs 1 and holds 1;
--         two schedules: "digest" (*/5 * * * *, key "daily-digest") and
--         "beat" (@every 1s, a job that ends at once: a last run soon).
local jobs = wq.queue("jobs", {
    workers = 1,
    handler = function(key)
        if key:find("^bad") then
            return wq.fail('exploded: <b>bold</b> & "quotes"')
        end
        if key == "flaky" then
            error('flaky: <i>no route</i> & "host"\nsecond line', 0)
        end
        if key == "slow" then
            wq.sleep(3600)
        end
    end,
})
jobs:add("bad <&\"'/% ü key", {why = "<script>alert(1)</script>"})
jobs:add("flaky")
jobs:add("slow")
for i = 1, 5 do
    jobs:add("p" .. i, {n = i})
end
jobs:add_after("later", 3600)

local idle = wq.queue("idle")
for i = 1, 120 do
    idle:add(string.format("k%03d", i))
end

local fast = wq.queue("fast", {
    workers = 2,
    handler = function()
        wq.sleep(0.01)
    end,
})
local n = 0
wq.every(0.25, function()
    for _ = 1, 2 do
        n = n + 1
        fast:add("f" .. n)
    end
end)

local mail = wq.queue("mail", {
    workers = 4,
    group_limit = {concurrency = 1},
    handler = function(key)
        if key:find("-") then
            wq.sleep(3600)
        end
    end,
})
for i = 1, 5 do
    mail:add("acme-" .. i, nil, {group = "acme"})
end
for i = 1, 2 do
    mail:add("globex-" .. i, nil, {group = "globex"})
end
mail:schedule("digest", "*/5 * * * *", {key = "daily-digest"})
mail:schedule("beat", "@every 1s")
