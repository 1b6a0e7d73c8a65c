-- The key a get or a handler receives is the key that was added, whatever
-- path made the record: the binding hands back the Lua string an add
-- received (kept per engine record id), and must never hand back a string
-- kept for an earlier record that had the same id.
local t = require "wqtest"

do -- an id freed by done and reused by a record the binding did not make
    local seen, failed = {}, false
    local q = wq.queue("reuse", {max_retries = 0, handler = function(key)
        seen[#seen + 1] = key
        if key == "y" and not failed then
            failed = true
            error("boom")
        end
    end})
    q:add("y")
    wq.sleep(0.01) -- y fails and is dead-lettered: its record goes
    t.eq(q:stats().dead, 1, "y dead-lettered")
    q:add("x") -- the same record id, now kept with the string "x"
    wq.sleep(0.01)
    -- retry_dead makes y's record again without going through q:add
    t.eq(q:retry_dead("y"), true)
    wq.sleep(0.01)
    t.eq(seen, {"y", "x", "y"}, "the handler gets y, not the string kept for x")
end

do -- ids reused in turn by Lua adds and by records made elsewhere
    local q = wq.queue("mixed")
    for round = 1, 50 do
        local k = "k" .. round
        q:add(k)
        local got = q:get()
        t.eq(got, k, "round " .. round)
        q:done(got)
    end
end

do -- numbers, long keys, NUL bytes
    local q = wq.queue("shapes")
    local long = string.rep("L", 300)
    local keys = {12, long, "a\0b", "", "é"}
    for _, k in ipairs(keys) do
        q:add(k)
    end
    t.eq(q:get(), "12", "a number key comes back as its string")
    t.eq(q:get(), long, "a long key")
    t.eq(q:get(), "a\0b", "a key with a NUL byte")
    t.eq(q:get(), "", "the empty key")
    t.eq(q:get(), "é", "a UTF-8 key")
end

do -- thousands of keys, drained, then new ones on the same ids
    local q = wq.queue("many")
    local n = 5000
    for i = 1, n do
        q:add("first-" .. i)
    end
    local ok = true
    for i = 1, n do
        local k = q:get()
        if k ~= "first-" .. i then
            ok = false
        end
        q:done(k)
    end
    t.eq(ok, true, "5000 keys in FIFO order")
    collectgarbage()
    for i = 1, n do
        q:add(("second-%d"):format(i))
    end
    ok = true
    for i = 1, n do
        local k = q:get()
        if k ~= "second-" .. i then
            ok = false
            t.eq(k, "second-" .. i)
            break
        end
        q:done(k)
    end
    t.eq(ok, true, "the new keys, not the old strings kept for those ids")
end

do -- re-added while processing, delayed, and through a handler
    local seen = {}
    local q = wq.queue("handled", {workers = 3, handler = function(key)
        seen[#seen + 1] = key
        wq.sleep(0)
    end})
    for i = 1, 20 do
        q:add("h" .. i)
    end
    q:add_after("late", 0.01)
    wq.sleep(0.05)
    table.sort(seen)
    local want = {"late"}
    for i = 1, 20 do
        want[#want + 1] = "h" .. i
    end
    table.sort(want)
    t.eq(seen, want, "every key reached the handler once, as added")
end

t.done()
