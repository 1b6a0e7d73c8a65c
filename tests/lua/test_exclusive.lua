-- Per-key exclusivity with several workers: a key is never processed twice
-- at once; a key added while it runs (from its own handler or from another
-- task) runs exactly once more after done.
local t = require "wqtest"

math.randomseed(7)

local function idle(q)
    return function()
        local s = q:stats()
        return s.depth == 0 and s.processing == 0 and s.waiting == 0
    end
end

do -- re-added from inside its own handler: runs once more, after the first run ends
    local runs, spans = 0, {}
    local q
    q = wq.queue("ex-self", {
        workers = 4,
        handler = function(key)
            runs = runs + 1
            local start = wq.now()
            if runs == 1 then
                q:add(key)
                q:add(key, "with payload")
                q:add(key)
                t.eq(q:len(), 0, "re-added while processing: not queued")
                t.eq(q:stats().depth, 1, "but dirty once")
            end
            wq.sleep(0.01)
            spans[#spans + 1] = {start, wq.now()}
        end,
    })
    q:add("a")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 2, "three re-adds while running -> exactly one more run")
    if #spans == 2 then
        t.ok(spans[2][1] >= spans[1][2], "the second run started after the first ended")
    end
end

do -- re-added from another task while it runs (the first run holds until released: no timing)
    local runs, active, overlap, release = 0, 0, false, false
    local q = wq.queue("ex-other", {
        workers = 8,
        handler = function()
            runs = runs + 1
            active = active + 1
            if active > 1 then
                overlap = true
            end
            while not release do
                wq.sleep(0.001)
            end
            active = active - 1
        end,
    })
    q:add("b")
    t.ok(t.wait_until(function() return q:stats().processing == 1 end), "b is running")
    for _ = 1, 5 do
        q:add("b")
        wq.sleep(0.001)
    end
    t.eq(q:stats().processing, 1, "still one run of b, though 7 workers are free")
    t.eq(runs, 1, "and it is the first run")
    release = true
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 2, "one more run after done")
    t.eq(overlap, false, "never two runs of b at once")
end

do -- stress: many workers, many keys, adds from several tasks and handlers
    local nkeys = 10
    local running = {} -- key -> number of runs in progress
    local max_per_key, max_total, total_active = 0, 0, 0
    local runs, readds = 0, 0
    local q
    q = wq.queue("ex-stress", {
        workers = 8,
        handler = function(key)
            running[key] = (running[key] or 0) + 1
            total_active = total_active + 1
            runs = runs + 1
            if running[key] > max_per_key then
                max_per_key = running[key]
            end
            if total_active > max_total then
                max_total = total_active
            end
            if math.random() < 0.3 and readds < 50 then
                readds = readds + 1
                q:add(key) -- own key, while running
            end
            if math.random() < 0.3 then
                q:add("k" .. math.random(nkeys)) -- maybe another running key
            end
            wq.sleep(math.random() * 0.003)
            running[key] = running[key] - 1
            total_active = total_active - 1
        end,
    })
    local producers = 0
    for p = 1, 3 do
        producers = producers + 1
        wq.spawn(function()
            for _ = 1, 60 do
                q:add("k" .. math.random(nkeys), {from = p})
                if math.random() < 0.5 then
                    wq.sleep(math.random() * 0.002)
                end
            end
            producers = producers - 1
        end)
    end
    t.ok(t.wait_until(function()
        return producers == 0 and idle(q)()
    end, 20), "processed")
    t.eq(max_per_key, 1, "a key never ran twice at once")
    t.ok(max_total > 1, "keys did run in parallel (max " .. max_total .. ")")
    t.ok(max_total <= 8, "never more than workers at once")
    t.ok(runs >= nkeys / 2, "ran (" .. runs .. " runs)")
    local s = q:stats()
    t.eq(s.done, runs, "every run done")
    t.eq(s.adds, runs, "each add that made a key dirty produced exactly one run")
end

do -- with plain tasks as workers (get/done by hand), the same guarantee
    local q = wq.queue("ex-manual")
    local active, max_active, processed = {}, 0, 0
    for _ = 1, 4 do
        wq.spawn(function()
            while true do
                local k = q:get()
                if not k then
                    return
                end
                active[k] = (active[k] or 0) + 1
                if active[k] > max_active then
                    max_active = active[k]
                end
                wq.sleep(0.002)
                active[k] = active[k] - 1
                processed = processed + 1
                q:done(k)
            end
        end)
    end
    for i = 1, 30 do
        q:add("m" .. (i % 3))
        wq.sleep(0.001)
    end
    t.ok(t.wait_until(function()
        return q:len() == 0 and q:stats().processing == 0
    end), "drained")
    q:shutdown()
    t.eq(max_active, 1, "get never hands out a processing key")
    t.ok(processed >= 3, "processed " .. processed)
end

t.done()
