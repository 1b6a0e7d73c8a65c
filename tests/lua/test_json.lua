-- wq.json: the one exact codec (the payloads' own), and the Lua half of the
-- wq module carried inside the binary (wq.log, q:dead()).
local t = require "wqtest"
local cjson = require "cjson"
local json = wq.json

do -- numbers are exact both ways
    local big = (1 << 53) + 1
    t.eq(json.encode({n = big}), '{"n":9007199254740993}', "a 64-bit integer is exact")
    t.eq(json.decode('{"n":9007199254740993}').n, big)
    t.eq(math.type(json.decode("9223372036854775807")), "integer")
    t.eq(json.decode("9223372036854775807"), math.maxinteger)
    t.eq(json.decode("-9223372036854775808"), math.mininteger)
    for _, x in ipairs({0.1, 1 / 3, 1e300, -2.5e-300, 123456.789, 2 ^ 60 + 0.0}) do
        local back = json.decode(json.encode(x))
        t.eq(back, x, "the double " .. string.format("%.17g", x) .. " round-trips")
        t.eq(math.type(back), "float")
    end
    t.eq(json.decode("18446744073709551616"), 2.0 ^ 64, "beyond int64: the nearest double")
    -- lua-cjson (still preloaded) rounds: the reason wq.json exists
    t.eq(cjson.encode({n = big}) ~= json.encode({n = big}), true,
         "cjson rounds 2^53+1, wq.json does not")
end

do -- strings keep every byte, null is cjson.null
    local s = "a\0b\1c\"d\\e\xff\u{e9}"
    t.eq(json.decode(json.encode(s)), s)
    local v = json.decode('{"a":null,"b":[1,null]}')
    t.eq(v.a, json.null, "null inside a table")
    t.eq(json.null, cjson.null, "the same null as cjson's")
    t.eq(json.decode("null"), nil, "a top-level null is nil")
end

do -- not JSON: nil and why; misuse raises
    local v, err = json.decode('{"a":1,}')
    t.eq(v, nil)
    t.matches(err, "invalid JSON", "a trailing comma")
    v, err = json.decode('{"k":"tab\tinside"}')
    t.eq(v, nil, "a raw control character in a string")
    t.matches(err, "control character")
    v, err = json.decode("1e999")
    t.eq(v, nil, "a number beyond the doubles")
    t.raises(function() json.encode(print) end, "json.encode: bad argument 'value' (function not allowed)")
    t.raises(function() json.encode() end, "bad argument")
    t.raises(function() json.decode(nil) end, "json.decode: bad argument 'text'")
end

do -- a payload comes back as json.decode(json.encode(payload)) would give it
    local q = wq.queue("payloads")
    local p = {n = (1 << 62) + 3, x = 0.1, s = "é\0", list = {1, 2.5, "three"}}
    q:add("k", p)
    local _, got = q:get()
    t.eq(got, json.decode(json.encode(p)))
    t.eq(got.n, (1 << 62) + 3)
end

do -- the Lua half: wq.log and q:dead()
    t.raises(function() wq.log() end, "log: bad argument 'fmt' (value expected)")
    wq.log("wq.log %s %d", "formats", 42)
    wq.log({}) -- one argument: as tostring gives it
    local q = wq.queue("dying", {max_retries = 0, handler = function(key)
        error("no " .. key)
    end})
    q:add("b")
    wq.sleep(0.01)
    q:add("a")
    wq.sleep(0.01)
    local dead = q:dead()
    t.eq(#dead, 2)
    t.eq(dead[1].key, "b", "oldest first")
    t.eq(dead[2].key, "a")
    t.matches(dead[1].error, "no b")
    t.raises(function() q.dead() end, "q:dead: bad argument 'self'")
end

t.done()
