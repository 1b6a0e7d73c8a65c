-- Payloads: nil, strings and JSON-representable tables; one payload per
-- pending key, replaced by the last add/add_after/add_rate_limited that
-- gives one, kept by calls without one, dropped when nothing is pending.
-- They travel as JSON text, exactly: 64-bit integers, doubles, any bytes.
local t = require "wqtest"
local cjson = require "cjson"

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

do -- numbers are exact: 64-bit integers stay integers, doubles round-trip
    local ints = {
        math.maxinteger, math.mininteger, (1 << 53) + 1, -(1 << 53) - 1, 123456789012345678,
        -123456789012345678, 1 << 62, 0, -1, 99999999999999999,
    }
    for _, v in ipairs(ints) do
        local p = roundtrip({v = v, list = {v, {v}}})
        t.eq(p, {v = v, list = {v, {v}}}, "integer " .. v .. " round-trips exactly")
        t.eq(math.type(p.v), "integer", "integer " .. v .. " stays an integer")
    end
    local floats = {
        1700000000.123456, 1700000000.000001, 0.1, 0.2, 0.3, 1 / 3, 2 / 3, -2.5, 123456.789,
        1e-300, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
        -1.7976931348623157e308, 1.0, -1.0, 0.0, 1e15, 1e16, 1e17, 2 ^ 53, 2 ^ 53 + 2, 2 ^ 63,
        2 ^ 64, 1e300, 3.14159265358979, 4.35, 0.1 + 0.2, 9007199254740993.0,
    }
    for _, v in ipairs(floats) do
        local p = roundtrip({v = v, list = {v}})
        local s = string.format("%.17g", v)
        t.eq(p, {v = v, list = {v}}, "float " .. s .. " round-trips exactly")
        t.eq(math.type(p.v), "float", "float " .. s .. " stays a float")
    end
    local nz = roundtrip({-0.0})[1]
    t.eq(math.type(nz), "float", "-0.0 stays a float")
    t.eq(1 / nz, -math.huge, "-0.0 keeps its sign")

    -- the case that was corrupted: a 64-bit id and a microsecond time stamp
    local p = roundtrip({id = 123456789012345678, t = 1700000000.123456})
    t.eq(p.id, 123456789012345678, "64-bit id is exact")
    t.eq(p.t, 1700000000.123456, "microsecond time stamp is exact")

    -- a table is an array (keys 1..n) or an object (string keys): anything
    -- else could not come back as given, so it is refused, naming the key
    local function refused(v, key, what)
        t.raises(function()
            q:add("nokeys", v)
        end, "add: bad argument 'payload' (number key " .. key .. " not allowed: a table is either an array (keys 1..n) or an object (string keys))", what)
    end
    refused({[1] = "a", ["1"] = "b"}, "1", "a number key next to its string form (was {\"1\":\"b\"})")
    refused({["1"] = "b", [1] = "a"}, "1", "either order")
    refused({[123456789012345678] = "id", x = 1}, "123456789012345678", "a number key in an object")
    refused({[1.5] = "half"}, "1.5", "a float key")
    refused({[-3] = "neg"}, "-3", "a negative key")
    refused({[1] = "a", [3] = "c"}, "3", "an array with a hole")
    refused({x = {y = {[2] = "b"}}}, "2", "an array with a hole, nested")
    for _, v in ipairs({{"a", "b", n = 2}, {[0] = "z", "a"}}) do
        t.raises(function()
            q:add("nokeys", v)
        end, "add: bad argument 'payload' (number key ", "a mixed table (table.pack), key 0")
    end
    t.raises(function()
        q:add_after("nokeys", 1, {list = {1, 2, [4] = 4}})
    end, "add_after: bad argument 'payload' (number key 4 not allowed", "add_after too")
    t.eq(q:len(), 0, "refused tables added nothing")
    t.eq(q:stats().waiting, 0)
    -- string keys that look like numbers are string keys
    p = roundtrip({["1"] = "a", ["-3"] = "b", ["1.5"] = "c"})
    t.eq(p, {["1"] = "a", ["-3"] = "b", ["1.5"] = "c"}, "numeric-looking string keys round-trip")
    t.eq(p[1], nil, "and stay strings")

    for _, bad in ipairs({0 / 0, math.huge, -math.huge}) do
        t.raises(function()
            q:add("nan", {x = {bad}})
        end, "add: bad argument 'payload' (inf and nan not allowed)", "no JSON for " .. tostring(bad))
    end
    t.eq(q:len(), 0, "refused payloads added nothing")
end

do -- strings: every byte, inside tables too
    local bytes = {}
    for i = 0, 255 do
        bytes[#bytes + 1] = string.char(i)
    end
    local all = table.concat(bytes)
    t.eq(roundtrip(all), all, "a string payload with all 256 bytes")
    local v = {
        all = all,
        nul = "a\0b\0",
        ctl = "\1\2\3\4\5\6\7\8\t\n\11\12\r\14\27\31\127",
        high = "\128\129\191\192\254\255",
        invalid_utf8 = "\xc3\x28 \xa0\xa1 \xe2\x28\xa1 \xf0\x28\x8c\x28 \xed\xa0\x80 \xc0\xaf \xff",
        utf8 = "h\u{e9}llo \u{2603} \u{1F600}",
        quotes = "\"\\/\\u0041 \\n",
        list = {all, "\0", "\xff\xfe", ""},
        [all:sub(2)] = "a key with every byte but NUL",
        ["\xff\x80 key"] = {["\1\n"] = "\255"},
    }
    local p = roundtrip(v)
    t.eq(p, v, "strings with NUL, control characters, bytes >= 0x80 and invalid UTF-8")
    t.eq(#p.all, 256, "no byte lost")
    t.eq(p.quotes, "\"\\/\\u0041 \\n", "escape-like text stays text")
    t.raises(function()
        q:add("nulkey", {["a\0b"] = 1})
    end, "add: bad argument 'payload' (table key with a NUL byte not allowed)")
end

do -- nesting, empty tables, cjson.null
    local deep = {}
    local c = deep
    for i = 2, 100 do
        c[1] = {i}
        c = c[1]
    end
    local p = roundtrip(deep)
    t.eq(p, deep, "tables nested 100 deep")
    c[1] = {{}} -- now 102 levels
    t.raises(function()
        q:add("deep", deep)
    end, "add: bad argument 'payload' (tables nested too deeply")
    local cyc = {a = {}}
    cyc.a.back = cyc
    t.raises(function()
        q:add("cycle", cyc)
    end, "add: bad argument 'payload' (table inside itself (a cycle))")
    t.raises(function()
        q:add("cycle", {cyc})
    end, "add: bad argument 'payload' (table inside itself (a cycle))", "a cycle below the top")

    p = roundtrip({a = {}, b = {{}, {{}}}, c = {x = {}}})
    t.eq(p, {a = {}, b = {{}, {{}}}, c = {x = {}}}, "empty tables inside tables")
    t.eq(roundtrip({}), {}, "an empty table payload")

    t.eq(type(cjson.null), "userdata", "cjson is preloaded")
    p = roundtrip({a = cjson.null, list = {1, cjson.null, 3}, o = {n = cjson.null}})
    t.eq(p.a, cjson.null, "cjson.null in an object")
    t.eq(p.list[2], cjson.null, "cjson.null in an array")
    t.eq(#p.list, 3, "an array with a null keeps its length")
    t.eq(p.list[3], 3)
    t.eq(p.o.n, cjson.null, "nested cjson.null")
    t.eq(roundtrip({cjson.null}), {cjson.null}, "an array of one null")
end

do -- values without a JSON form: argument errors naming the function and 'payload'
    t.raises(function()
        q:add("bad", {a = {b = {print}}})
    end, "add: bad argument 'payload' (function not allowed)", "a nested function")
    t.raises(function()
        q:add_after("bad", 1, {f = function() end})
    end, "add_after: bad argument 'payload' (function not allowed)")
    t.raises(function()
        q:add_rate_limited("bad", {1, 2, print})
    end, "add_rate_limited: bad argument 'payload' (function not allowed)")
    t.raises(function()
        q:add("bad", {io.stdout})
    end, "add: bad argument 'payload' (userdata not allowed)")
    t.raises(function()
        q:add("bad", {co = coroutine.create(print)})
    end, "add: bad argument 'payload' (thread not allowed)")
    t.raises(function()
        q:add("bad", {[true] = 1})
    end, "add: bad argument 'payload' (table key of type boolean not allowed)")
    t.raises(function()
        q:add("bad", {[{}] = 1})
    end, "add: bad argument 'payload' (table key of type table not allowed)")
    t.raises(function()
        q:add("bad", 42)
    end, "add: bad argument 'payload' (number not allowed)", "a number is not a payload")
    t.raises(function()
        q:add("bad", true)
    end, "add: bad argument 'payload' (boolean not allowed)")
    t.eq(q:len(), 0, "nothing was added")
    t.eq(q:stats().waiting, 0, "nothing was delayed")
end

do -- the state file keeps payloads exact across a restart (--db)
    local wqrun = os.getenv("WQRUN")
    if wqrun then
        local base = os.tmpname()
        local db, script = base .. ".db", base .. ".lua"
        local f = assert(io.open(script, "w"))
        f:write([=[
local t = require "wqtest"
local cjson = require "cjson"
local q = wq.queue("exact")
local v = {
    id = 123456789012345678, t = 1700000000.123456, max = math.maxinteger,
    min = math.mininteger, f = 0.1, tiny = 1e-300, huge = 1.7976931348623157e308,
    one = 1.0, bytes = "\0\1\31\127\128\255\xc3\x28", list = {1, cjson.null, 2.5},
}
if arg[1] == "add" then
    t.eq(q:add("k", v), true)
else
    local k, p = q:get()
    t.eq(k, "k")
    t.eq(p, v, "payload read back from the state file")
    t.eq(math.type(p.one), "float")
    q:done(k)
end
t.done()
]=])
        f:close()
        local r1 = wq.exec({wqrun, "--quiet", "--db", db, script, "add"})
        t.eq(r1.status, 0, "run 1 stores the payload: " .. r1.stderr)
        local r2 = wq.exec({wqrun, "--quiet", "--db", db, script, "get"})
        t.eq(r2.status, 0, "run 2 reads it back exactly: " .. r2.stderr)
        for _, name in ipairs({base, db, db .. "-wal", db .. "-shm", script}) do
            os.remove(name)
        end
    end
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
    local v = {list = {1, 2}, s = "x", id = 123456789012345678, t = 1700000000.123456}
    h:add("k", v)
    t.ok(t.wait_until(function()
        return #seen == 2
    end), "handler ran twice")
    t.eq(seen[1], v, "handler gets the payload, numbers exact")
    t.eq(seen[2], v, "the retry keeps the payload")
    t.eq(math.type(seen[2].list[1]), "integer")
end

do -- finalizers that re-add a key while it is being handed out (GC runs at every allocation)
    local q = wq.queue("pl-gc-readd")
    local bad = 0
    collectgarbage("incremental", 0, 1000) -- pause 0: the collector never rests
    for round = 1, 300 do
        q:add("k", string.rep("p", 64) .. round)
        for i = 1, 20 do
            setmetatable({}, {__gc = function()
                q:add("k", {round = round, i = i})
            end})
        end
        local key, payload = q:get()
        if key ~= "k" or (type(payload) ~= "string" and type(payload) ~= "table") then
            bad = bad + 1
        elseif type(payload) == "string" and not payload:match("^p+%d+$") then
            bad = bad + 1
        end
        q:done(key)
        while q:len() > 0 do
            q:done((q:get()))
        end
    end
    collectgarbage("incremental", 200, 100)
    collectgarbage()
    t.eq(bad, 0, "every payload handed out was whole (a string or a table)")
end

t.done()
