-- backends: all
-- Flows (SPEC 9): a join runs once after every part, with job.deps in after's order;
-- a blocked node stays blocked whatever adds it meets; dead dependencies kill down the
-- graph unless ignored; retrying the dead part resumes the flow; a handler appends nodes
-- (dynamic fan-out) and a retried handler appends nothing twice; the whole-table form;
-- a bad flow is refused naming the node and adds nothing; an operator's remove of a
-- blocked node kills what waits for it. On the engine's own flow set (lua_test_flows)
-- and PostgreSQL's (lua_pg_test_flows).
local t = require "wqtest"
t.watchdog(90)

local runs = {} -- "queue/key" -> number of runs
local order = {}
local function ran(q, key)
    local k = q .. "/" .. key
    runs[k] = (runs[k] or 0) + 1
    order[#order + 1] = k
end

local fail_once = {} -- keys whose first run fails for good (wq.fail), until repaired
local parts = wq.queue("parts", {workers = 4, max_retries = 0, handler = function(key, payload, job)
    ran("parts", key)
    if fail_once[key] then
        return wq.fail("part " .. key .. " broke")
    end
    wq.sleep(0.01 * ((payload and payload.n) or 1))
    return {part = key, n = payload and payload.n}
end})

local seen = {} -- key -> job.deps, job.flow.id as the join saw them
local joins = wq.queue("joins", {handler = function(key, payload, job)
    ran("joins", key)
    seen[key] = {deps = job.deps, flow = job.flow and job.flow.id, payload = payload}
    return "joined " .. key
end})

do -- a fan-in: the join runs once, after every part, seeing their results in after's order
    local f = wq.flow("fan-1")
    t.eq(f.id, "fan-1", "the flow's id")
    local ps = {}
    for i = 1, 5 do
        ps[i] = f:add(parts, "a" .. i, {n = 6 - i})
    end
    local j = f:add(joins, "join-1", {report = true}, {after = ps})
    t.eq(j.queue, "joins", "a handle names its queue")
    t.eq(j.key, "join-1", "and its key")
    t.eq(joins:item("join-1"), nil, "nothing is visible before commit")
    t.eq(f:commit(), "fan-1", "commit returns the id")
    local it = joins:item("join-1")
    t.ok(it and it.state == "blocked", "the join is blocked")
    t.eq(it and it.waits, 5, "waiting for 5 parts")
    t.eq(it and it.flow, "fan-1", "of its flow")
    t.ok(t.wait_until(function() return runs["joins/join-1"] ~= nil end, 20), "the join ran")
    wq.sleep(0.2)
    t.eq(runs["joins/join-1"], 1, "once")
    for i = 1, 5 do
        t.eq(runs["parts/a" .. i], 1, "part a" .. i .. " ran once")
    end
    local last_part = 0
    for i, k in ipairs(order) do
        if k:match("^parts/a") then
            last_part = i
        elseif k == "joins/join-1" then
            t.ok(i > last_part, "the join ran after every part")
        end
    end
    local s = seen["join-1"]
    t.eq(s.flow, "fan-1", "job.flow.id")
    t.eq(s.payload, {report = true}, "the join's payload")
    t.eq(#s.deps, 5, "job.deps has every dependency")
    for i = 1, 5 do
        local d = s.deps[i]
        t.eq({d.queue, d.key, d.state}, {"parts", "a" .. i, "done"}, "dependency " .. i .. " in order")
        t.eq(d.result, {part = "a" .. i, n = 6 - i}, "with its result")
    end
end

do -- an add of a blocked key leaves it blocked; its payload is replaced
    local f = wq.flow("hold")
    parts:pause()
    local p = f:add(parts, "h1")
    f:add(joins, "held-join", {v = 1}, {after = {p}})
    f:commit()
    local ok, why = joins:add("held-join", {v = 2})
    t.eq(ok, false, "an add of a blocked key is refused")
    t.eq(why, "blocked", "saying blocked")
    local it = joins:item("held-join")
    t.eq(it.state, "blocked", "still blocked")
    t.eq(it.payload, {v = 2}, "its payload replaced")
    wq.sleep(0.1)
    t.eq(runs["joins/held-join"], nil, "it did not run")
    parts:resume()
    t.ok(t.wait_until(function() return runs["joins/held-join"] == 1 end, 10),
        "it runs once its dependency is done")
    t.eq(seen["held-join"].payload, {v = 2}, "with the new payload")
end

do -- death down the graph; ignore_dead; repair by retrying the dead part
    fail_once.bad = true
    local f = wq.flow("dead-1")
    local good = f:add(parts, "good")
    local bad = f:add(parts, "bad")
    local mid = f:add(joins, "mid", nil, {after = {good, bad}})
    f:add(joins, "end", nil, {after = {mid}})
    f:add(joins, "sweeper", nil, {after = {bad, good}, ignore_dead = true})
    f:commit()
    t.ok(t.wait_until(function() return runs["joins/sweeper"] == 1 end, 20),
        "the node that ignores dead dependencies runs")
    local d = seen.sweeper.deps
    t.eq({d[1].key, d[1].state}, {"bad", "dead"}, "it sees the dead one")
    t.matches(d[1].error, "part bad broke", "with its error")
    t.eq({d[2].key, d[2].state}, {"good", "done"}, "and the done one")
    local m = joins:item("mid")
    t.eq(m and m.state, "dead", "a node waiting for the dead part is dead")
    t.matches(m and m.error or "", "dependency parts/bad is dead: part bad broke", "saying why")
    local e = joins:item("end")
    t.eq(e and e.state, "dead", "and so is what waits for it")
    t.matches(e and e.error or "", "dependency joins/mid is dead", "naming its own dependency")
    t.eq(runs["joins/mid"], nil, "mid never ran")
    -- repair: the part is fixed and retried; the nodes that died of it wait again
    fail_once.bad = nil
    t.eq(parts:retry_dead("bad"), true, "the dead part is retried")
    t.ok(t.wait_until(function() return runs["joins/end"] == 1 end, 20), "the flow resumes")
    t.eq(runs["joins/mid"], 1, "mid ran once")
    t.eq(runs["parts/bad"], 2, "the part ran again")
    t.eq(runs["joins/sweeper"], 1, "the sweeper did not run again")
end

do -- dynamic fan-out: a splitter appends parts and a join; a retried splitter adds nothing twice
    local tries = 0
    local split = wq.queue("split", {max_retries = 3, limiter = wq.limiter.exponential(0.01, 0.01),
        handler = function(key, payload, job)
            tries = tries + 1
            local hs = {}
            for i = 1, payload.n do
                hs[i] = job.flow:add(parts, key .. "-part" .. i, {n = 1})
            end
            job.flow:add(joins, key .. "-join", nil, {after = hs})
            job.flow:commit()
            if tries == 1 then
                error("the splitter fails after its commit")
            end
        end})
    local id = wq.flow{id = "dyn-1", nodes = {{queue = split, key = "s1", payload = {n = 4}}}}
    t.eq(id, "dyn-1", "the whole-table form commits and returns the id")
    t.ok(t.wait_until(function() return runs["joins/s1-join"] == 1 end, 20), "the join ran")
    wq.sleep(0.2)
    t.eq(tries, 2, "the splitter ran twice")
    for i = 1, 4 do
        t.eq(runs["parts/s1-part" .. i], 1, "part " .. i .. " ran once")
    end
    t.eq(runs["joins/s1-join"], 1, "the join once")
    t.eq(#seen["s1-join"].deps, 4, "it waited for the four parts")
end

do -- refused flows name the node; nothing is added
    local function refused(build, text, msg)
        local ok, err = pcall(build)
        t.eq(ok, false, msg .. ": refused")
        t.matches(tostring(err), text, msg .. ": the error names the node")
    end
    refused(function()
        local f = wq.flow("bad-1")
        f:add(parts, "x1")
        f:add(parts, "x1")
        f:commit()
    end, "flow bad-1: node parts/x1 is added twice", "a duplicate node")
    refused(function()
        local f = wq.flow("bad-2")
        f:add(parts, "x2", nil, {after = {{queue = "parts", key = "nope"}}})
        f:commit()
    end, "flow bad-2: node parts/x2 waits for parts/nope, which is no node of the flow",
        "an unknown dependency")
    refused(function()
        wq.flow{id = "bad-3", nodes = {
            {queue = "parts", key = "c1", after = {{queue = "parts", key = "c3"}}},
            {queue = "parts", key = "c2", after = {{queue = "parts", key = "c1"}}},
            {queue = "parts", key = "c3", after = {{queue = "parts", key = "c2"}}},
        }}
    end, "is in a cycle", "a cycle")
    refused(function()
        wq.flow{id = "bad-4", nodes = {{queue = "no where", key = "n1"}}}
    end, "flow bad-4: node no where/n1: no queue named no where", "a queue that cannot exist")
    parts:pause()
    parts:add("busy")
    refused(function()
        wq.flow{id = "bad-5", nodes = {{queue = "parts", key = "fresh"}, {queue = "parts", key = "busy"}}}
    end, "flow bad-5: node parts/busy is already pending outside the flow", "a key pending elsewhere")
    t.eq(parts:item("fresh"), nil, "nothing of a refused flow was added")
    t.eq(parts:item("x1"), nil, "nothing of the duplicate flow either")
    parts:remove("busy")
    parts:resume()
    t.raises(function() wq.flow("f"):add(parts, "k", nil, {after = "x"}) end, "after",
        "after must be a table of handles")
    t.raises(function() wq.flow("f"):add(parts, "k", nil, {bogus = 1}) end, "bogus",
        "an unknown option is named")
    t.raises(function() wq.flow("f"):add(42, "k") end, "queue", "the queue argument is checked")
end

do -- removing a blocked node kills what waits for it
    parts:pause()
    local f = wq.flow("rm-1")
    local p = f:add(parts, "r1")
    local j = f:add(joins, "rm-join", nil, {after = {p}})
    f:add(joins, "rm-end", nil, {after = {j}})
    f:commit()
    t.eq(joins:remove("rm-join"), true, "a blocked node can be removed")
    local e = joins:item("rm-end")
    t.eq(e and e.state, "dead", "what waited for it is dead")
    t.matches(e and e.error or "", "dependency joins/rm-join is dead: removed", "saying why")
    parts:resume()
    t.ok(t.wait_until(function() return runs["parts/r1"] == 1 end, 10), "the part still runs")
    wq.sleep(0.1)
    t.eq(runs["joins/rm-end"], nil, "the dead node never runs")
end

t.done()
