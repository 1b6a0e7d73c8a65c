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

do -- what json-c would change silently is refused, saying where (a JSONPath)
    local function refused(text, why, what)
        local v, err = json.decode(text)
        t.eq(v, nil, what or text)
        t.eq(err, "invalid JSON: " .. why, what or text)
    end
    -- a NUL byte in a key: json-c keeps keys as C strings, cut at the NUL
    refused('{"a\\u0000b":1,"a\\u0000c":2}', 'NUL byte in object key at $["a\\u0000b"]',
            "was {a = 2}")
    refused('{"key":"k","key\\u0000x":"n2"}', 'NUL byte in object key at $["key\\u0000x"]',
            "was read as a second 'key'")
    refused('[{"x":{"\\u0000":1}}]', 'NUL byte in object key at $[0].x["\\u0000"]')
    t.eq(json.decode('{"k":"a\\u0000b"}'), {k = "a\0b"}, "a NUL inside a value is fine")
    t.eq(json.decode('["a\\u0000", {"b":1}]'), {"a\0", {b = 1}}, "a NUL string before a key")
    -- a key twice in one object: the last one would win
    refused('{"a":1,"a":2}', "duplicate object key at $.a", "was {a = 2}")
    refused('{"key":"k","payload":{"x":[1,{"y":1,"y":2}]}}',
            "duplicate object key at $.payload.x[1].y")
    refused('{"ab":1,"\\u0061b":2}', 'duplicate object key at $["\\u0061b"]', "the same key escaped")
    refused('{"\u{1F600}":1,"\\ud83d\\ude00":2}', 'duplicate object key at $["\\ud83d\\ude00"]',
            "a surrogate pair is its UTF-8")
    refused('{"":1,"":2}', 'duplicate object key at $[""]')
    t.eq(json.decode('{"a":{"a":1},"b":{"a":2},"c":[{"a":3},{"a":4}]}'),
         {a = {a = 1}, b = {a = 2}, c = {{a = 3}, {a = 4}}}, "equal keys in different objects")
    t.eq(json.decode('{"a:b":"c:d","e":":"}'), {["a:b"] = "c:d", e = ":"}, "':' inside strings")
    -- a lone surrogate: json-c would make it U+FFFD
    refused('"\\ud800"', "lone surrogate \\ud800 at $", "a high one alone")
    refused('"\\uDBFFx"', "lone surrogate \\uDBFF at $", "then a character")
    refused('"\\ud800\\u0041"', "lone surrogate \\ud800 at $", "then another escape")
    refused('"\\ud800\\ud800\\udc00"', "lone surrogate \\ud800 at $", "then a pair")
    refused('"\\udc00"', "lone surrogate \\udc00 at $", "a low one alone")
    refused('["\\ud83d\\ude00\\ude00"]', "lone surrogate \\ude00 at $[0]", "a low one after a pair")
    refused('{"\\ud800":1}', 'lone surrogate \\ud800 at $["\\ud800"]', "in a key")
    t.eq(json.decode('"\\ud83d\\ude00\\uD83D\\uDE00"'), "\u{1F600}\u{1F600}", "pairs, either case")
    t.eq(json.decode('"\\\\ud800"'), "\\ud800", "an escaped backslash, not an escape")
    t.eq(json.decode('"\xed\xa0\x80"'), "\xed\xa0\x80", "raw bytes are kept as they are")
    -- a long path is cut
    local _, err = json.decode('{"' .. string.rep("k", 60) .. '":[[[[[[[[[[[[[[[[[[[[[[[[[[[[["\\udfff"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}')
    t.matches(err, '^invalid JSON: lone surrogate \\udfff at %$%["k+%.%.%."%]%[0%]')
    t.matches(err, "%.%.%.$")
    t.eq(#err < 160, true, "a message of bounded length")
end

do -- what encodes is what decodes: tables that could not come back are refused
    for _, v in ipairs({{[1] = "a", ["1"] = "b"}, {[1] = "a", [3] = "c"}, {[2.5] = 1}, {"a", n = 1}}) do
        t.raises(function() json.encode(v) end,
                 "json.encode: bad argument 'value' (number key ")
    end
    local cyc = {}
    cyc.self = cyc
    t.raises(function() json.encode(cyc) end,
             "json.encode: bad argument 'value' (table inside itself (a cycle))")
    local v = {a = {1, 2, {b = "x\0"}}, ["1"] = true, e = {}, n = json.null}
    t.eq(json.decode(json.encode(v)), v, "a table that encodes comes back equal")
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

do -- a C module in a shared object finds the Lua API in wqrun (Lua is linked in statically
    -- and exported): lua-cjson's own cjson.so, from Debian's package.cpath
    local path = package.searchpath("cjson", package.cpath)
    t.ok(path, "cjson.so on package.cpath")
    local open = path and package.loadlib(path, "luaopen_cjson")
    t.eq(type(open), "function", "luaopen_cjson loaded from " .. tostring(path))
    if type(open) == "function" then
        t.eq(open().encode({1, "x"}), '[1,"x"]', "the module works")
    end
end

t.done()
