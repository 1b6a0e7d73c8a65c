-- Payloads: nil, strings and JSON-representable tables; one payload per
-- pending key, replaced by the last add/add_after/add_rate_limited that
-- gives one, kept by calls without one, dropped when nothing is pending.
local t = require "wqtest"

local q = wq.queue("payloads")

-- add, get, done: the payload the key came out with
local function roundtrip(v)
    t.eq(q:add("rt", v), true)
    local k, p = q:get()
    t.eq(k, "rt")
    q:done("rt")
    t.eq(q:stats().processing, 0)
    return p
end

do -- strings, any bytes
    t.eq(roundtrip("hello"), "hello", "string payload")
    t.eq(roundtrip(""), "", "empty string payload")
    t.eq(roundtrip("a\0b\1\255\n\"\\"), "a\0b\1\255\n\"\\", "binary string payload")
    t.eq(roundtrip('{"a":1}'), '{"a":1}', "a string that looks like JSON stays a string")
    t.eq(roundtrip("null"), "null", "the string 'null' stays a string")
    t.eq(roundtrip("123"), "123", "a numeric string stays a string")
    local big = string.rep("0123456789", 100000)
    t.eq(roundtrip(big) == big, true, "1 MB string payload")
    t.eq(roundtrip(nil), nil, "nil payload")
end

do -- tables: nested objects and arrays, integers stay integers
    local v = {
        name = "job",
        n = 3,
        neg = -17,
        zero = 0,
        big = 99999999999999, -- 14 digits
        f = 1.5,
        small = 0.25,
        yes = true,
        no = false,
        list = {1, 2, 3},
        nested = {{1, {2, {3, {}}}}, {a = {b = {c = "deep"}}}},
        empty = {},
        utf8 = "héllo ☃",
    }
    local p = roundtrip(v)
    t.eq(p, v, "nested table round trip")
    t.eq(math.type(p.n), "integer", "integer field comes back as an integer")
    t.eq(math.type(p.neg), "integer")
    t.eq(math.type(p.big), "integer", "14-digit integer")
    t.eq(math.type(p.list[2]), "integer", "array elements are integers")
    t.eq(math.type(p.nested[1][2][2][1]), "integer", "deeply nested integer")
    t.eq(math.type(p.f), "float", "1.5 stays a float")
    t.eq(p.nested[1][2][2][2], {}, "empty table inside arrays")
    t.eq(#p.list, 3, "arrays are sequences")

    local arr = roundtrip({{1, 2}, {3, {4, 5}}, {}, {"x"}})
    t.eq(arr, {{1, 2}, {3, {4, 5}}, {}, {"x"}}, "array of arrays")
    t.eq(roundtrip({}), {}, "empty table payload")
    t.eq(roundtrip({-3, 0, 7}), {-3, 0, 7})
end

do -- a table given is copied: changing it afterwards changes nothing
    local v = {a = 1}
    q:add("copy", v)
    v.a = 2
    v.b = 3
    local _, p = q:get()
    q:done("copy")
    t.eq(p, {a = 1}, "payload is taken at add time")
    p.a = 100
    q:add("copy2", {x = {1}})
    local _, p1 = q:get()
    p1.x[1] = 9
    q:done("copy2")
end

do -- replacement: a later payload replaces an earlier one, while queued
    q:add("r", "first")
    q:add("r", "second")
    t.eq(q:len(), 1)
    local _, p = q:get()
    t.eq(p, "second", "later payload replaces earlier while queued")
    q:done("r")
end

do -- keeping: an add without a payload keeps the current one
    q:add("keep", {v = 1})
    q:add("keep")
    q:add("keep", nil)
    local _, p = q:get()
    t.eq(p, {v = 1}, "add without a payload keeps it")
    q:done("keep")
end

do -- while processing: a re-add replaces the payload for the next run, or keeps it
    q:add("proc", "run1")
    local _, p = q:get()
    t.eq(p, "run1")
    q:add("proc", "run2")
    q:done("proc")
    _, p = q:get()
    t.eq(p, "run2", "payload given while processing is used by the next run")
    q:add("proc") -- no payload: the next run keeps run2
    q:done("proc")
    _, p = q:get()
    t.eq(p, "run2", "re-add without payload while processing keeps it")
    q:done("proc")
end

do -- dropping: once nothing is pending, the payload is gone
    q:add("drop", "old")
    q:get()
    q:done("drop")
    q:add("drop")
    local _, p = q:get()
    t.eq(p, nil, "payload dropped once nothing was pending")
    q:done("drop")
end

do -- string <-> table replacement
    q:add("st", "a string")
    q:add("st", {now = "a table"})
    local _, p = q:get()
    t.eq(p, {now = "a table"})
    q:add("st", "string again")
    q:done("st")
    _, p = q:get()
    t.eq(p, "string again")
    q:done("st")
end

do -- add_after carries a payload; a queued key takes it too (one record per key)
    local d = wq.queue("payloads-delayed")
    d:add_after("k", 0.02, {n = 1})
    t.eq(d:len(), 0)
    wq.sleep(0.04)
    local _, p = d:get()
    t.eq(p, {n = 1}, "add_after payload")
    d:done("k")

    d:add("j", "queued")
    d:add_after("j", 0.02, "delayed")
    local _, pj = d:get()
    t.eq(pj, "delayed", "the last payload given wins, even by add_after")
    d:done("j")
    wq.sleep(0.04)
    _, pj = d:get()
    t.eq(pj, "delayed", "the delayed add runs with it")
    d:done("j")

    d:add_after("w", 0.02, "w1")
    d:add_after("w", 0.01) -- earlier, no payload: keeps w1
    wq.sleep(0.04)
    local _, pw = d:get()
    t.eq(pw, "w1", "add_after without a payload keeps the payload")
    d:done("w")
    d:add_after("w", 0.01)
    wq.sleep(0.03)
    _, pw = d:get()
    t.eq(pw, nil, "dropped after the delayed run finished")
    d:done("w")

    d:add_rate_limited("rl", {rl = true})
    t.ok(wq.sleep(0.02) == nil, "sleep returns nothing")
    local k, prl = d:get()
    t.eq(k, "rl")
    t.eq(prl, {rl = true}, "add_rate_limited carries a payload")
    d:done("rl")
end

do -- a raising add changes nothing
    q:add("safe", "kept")
    t.raises(function()
        q:add("safe", function() end)
    end, "add: bad argument 'payload' (function not allowed)")
    t.raises(function()
        q:add("safe", {f = print})
    end, "add: bad argument 'payload'")
    t.raises(function()
        q:add("new-key", coroutine.create(print))
    end, "add: bad argument 'payload'")
    t.raises(function()
        q:add("safe", "x", {priority = "high"})
    end, "add: bad argument 'priority'")
    t.eq(q:len(), 1, "the raising adds added nothing")
    local k, p = q:get()
    t.eq(k, "safe")
    t.eq(p, "kept", "and replaced no payload")
    q:done("safe")
    t.eq(q:len(), 0)
end

do -- payloads reach handlers, retries keep them
    local seen = {}
    local h
    h = wq.queue("payloads-handler", {
        limiter = wq.limiter.exponential(0, 0),
        handler = function(key, payload)
            seen[#seen + 1] = payload
            if #seen == 1 then
                error("fail once")
            end
        end,
    })
    h:add("k", {list = {1, 2}, s = "x"})
    t.ok(t.wait_until(function()
        return #seen == 2
    end), "handler ran twice")
    t.eq(seen[1], {list = {1, 2}, s = "x"}, "handler gets the payload")
    t.eq(seen[2], {list = {1, 2}, s = "x"}, "the retry keeps the payload")
    t.eq(math.type(seen[2].list[1]), "integer")
end

t.done()
