-- backends: all
-- Bad arguments, swept: every function of the wq table and every method of
-- every wq object (found at run time, so a new one is covered or fails here
-- until SIGNATURES below describes it) is called with each bad value in each
-- parameter position, the others valid, in a task of its own under a
-- watchdog. Each call must either raise an error naming the function and the
-- parameter ("add: bad argument 'key' (...)", "q:add: bad argument 'self'
-- (...)") or be an acceptance listed in SIGNATURES (documented in
-- docs/lua-api.md: optional arguments taking nil, delays <= 0 meaning "now",
-- numbers as keys...). A call whose task never finishes, a crash or an
-- ASan/UBSan report fails the test. About 3,200 calls: 0.3 s, 1.5 s under
-- ASan with WQ_TEST_GCSTRESS (a full collection before every resume).
local t = require "wqtest"

local WATCHDOG = 5 -- seconds a call may take (exec runs a process)
t.watchdog(110) -- below ctest's 120 s

-- ---- the bad values ----

local function raiser(what)
    return function()
        error("metamethod " .. what .. " raised", 0)
    end
end
local MM_ERROR = "metamethod __%a+ raised" -- the metamethods' own error, propagated as is

local huge = string.rep("x", 2 * 1024 * 1024)
local cyclic = {}
cyclic.self = cyclic
local deep = {}
do
    local d = deep
    for _ = 1, 10000 do
        d.d = {}
        d = d.d
    end
end

-- {name, value}; names are what the acceptance lists below refer to.
local VALUES = {
    {"nil", nil},
    {"true", true},
    {"false", false},
    {"{}", {}},
    {"function", function() end},
    {"coroutine", coroutine.create(function() end)},
    {"userdata", io.stdout},
    {"lightuserdata", wq.json.null},
    {"nan", 0 / 0},
    {"inf", math.huge},
    {"-inf", -math.huge},
    {"-1", -1},
    {"0", 0},
    {"2^63", 2 ^ 63},
    {"1e308", 1e308},
    {"maxinteger", math.maxinteger},
    {"huge string", huge},
    {"NUL string", "a\0b"},
    {"empty string", ""},
    {"cyclic table", cyclic},
    {"deep table", deep},
    {"__len raises", setmetatable({"x"}, {__len = raiser("__len")})},
    {"__index raises", setmetatable({"x"}, {__index = raiser("__index")})},
    {"__pairs raises", setmetatable({"x"}, {__pairs = raiser("__pairs")})},
}
-- Sets of value names, for the acceptance lists.
local function set(...)
    local s = {}
    for _, list in ipairs({...}) do
        if type(list) ~= "table" then
            s[list] = true
        elseif #list > 0 then
            for _, n in ipairs(list) do
                s[n] = true
            end
        else -- a set
            for n in pairs(list) do
                s[n] = true
            end
        end
    end
    return s
end
local ALL = {}
for _, v in ipairs(VALUES) do
    ALL[#ALL + 1] = v[1]
end
local STRINGS = {"huge string", "NUL string", "empty string"}
local FINITE = {"-1", "0", "2^63", "1e308", "maxinteger"}
local RAW_TABLES = {"__len raises", "__index raises", "__pairs raises"} -- read raw: {"x"}
-- keys: strings of any bytes, and finite numbers (converted with tostring)
local KEY = set(STRINGS, FINITE)
-- payloads: nil, strings and JSON-representable tables (read raw: metatables ignored)
local PAYLOAD = set("nil", "{}", STRINGS, RAW_TABLES)
-- delays: <= 0 means now
local DELAY = set("-1", "0")
-- an optional options table: nil or {} (no options)
local OPTS = set("nil", "{}")
local FN = set("function")

-- ---- the objects, and what each method takes ----

local serial = 0
local function uniq(prefix)
    serial = serial + 1
    return (prefix or "b") .. serial
end
local lim = wq.limiter.exponential(0.001, 1)

-- Each object kind: how to make a fresh one (one per call), how it is named
-- in a wrong-self error, and one instance to find its methods with.
local OBJECTS = {
    queue = {
        self = "q",
        new = function()
            local q = wq.queue(uniq("q"))
            q:add("k")
            return q
        end,
    },
    timer = {
        self = "timer",
        new = function()
            return wq.after(3600, function() end)
        end,
        cleanup = function(tm)
            tm:cancel()
        end,
    },
    limiter = {
        self = "l",
        new = function()
            return wq.limiter.exponential(0.001, 1)
        end,
    },
    flow = {
        self = "flow",
        new = function()
            return wq.flow(uniq("flow"))
        end,
        methods = {"add", "commit"}, -- its __index is a function: listed here
    },
    backoff = {
        self = "b",
        new = function()
            return wq.backoff({duration = 0.1})
        end,
        methods = {"step"}, -- its __index is a function: listed here
    },
    pool = {
        self = "pool",
        new = function()
            return assert(wq.pool({"cat"})) -- echoes each request line: a JSON reply
        end,
        cleanup = function(pl)
            pl:close()
        end,
    },
}

-- A parameter: {name, valid value (or function giving one: gen = true),
-- accept = set of value names that are documented acceptances,
-- err = the name the error must give (default name), fields = {...} for an
-- options table (each field swept like a parameter)}.
local function p(name, valid, accept, extra)
    local s = {name = name, valid = valid, accept = accept or {}}
    for k, v in pairs(extra or {}) do
        s[k] = v
    end
    return s
end

local function queue_name()
    return uniq("n")
end

local SIGNATURES = {
    -- wq.*
    ["wq.spawn"] = {fn = "spawn", p("fn", function() end, FN)},
    ["wq.sleep"] = {fn = "sleep", p("seconds", 0, DELAY)},
    ["wq.now"] = {fn = "now"},
    -- nil (no timeout) is valid, but would wait for ever here (the fresh queues hold a key)
    ["wq.wait_idle"] = {fn = "wait_idle", p("timeout", 0, set("0"), {skip = {["nil"] = true}})},
    ["wq.time"] = {fn = "time"},
    ["wq.shutdown"] = {skip = "begins a graceful stop of this test"},
    ["wq.exit"] = {fn = "exit", p("code", 1, set(), {skip = set("nil", "true", "false", "0")})},
    ["wq.after"] = {fn = "after", p("seconds", 3600, DELAY), p("fn", function() end, FN)},
    ["wq.every"] = {fn = "every", p("interval", 3600), p("fn", function() end, FN)},
    ["wq.requeue"] = {fn = "requeue", p("seconds", 1, DELAY), p("payload", nil, PAYLOAD)},
    ["wq.fail"] = {fn = "fail", p("message", "m", set(ALL))}, -- any value, as tostring gives it
    -- a delay that counts as a failure: negative is refused (unlike requeue's "now")
    ["wq.retry_in"] = {fn = "retry_in", p("seconds", 1, set("0")), p("message", "m", set(ALL))},
    -- a table is the whole-table form (its fields are checked by test_flows.lua)
    ["wq.flow"] = {fn = "flow", p("id", "fid", set("nil", FINITE), {skip = set("{}", "cyclic table",
        "deep table", RAW_TABLES)}), p("opts", nil, OPTS, {fields = {p("keep", 1, set("nil", "0"))}})},
    ["flow:add"] = {fn = "add", p("queue", "parts", set(STRINGS)), p("key", "k", KEY),
        p("payload", nil, PAYLOAD), p("opts", nil, OPTS, {
            fields = {
                p("priority", 1, set("nil", "-1", "0")),
                p("group", "g", set("nil", "NUL string")),
                -- an array of handles: an empty one (or a table with no array part) waits for nothing
                p("after", nil, set("nil", "{}", "cyclic table", "deep table")),
                p("ignore_dead", nil, set("nil", "true", "false")),
            },
        })},
    ["flow:commit"] = {fn = "commit"},
    ["wq.queue"] = {
        fn = "queue",
        p("name", queue_name, set(), {gen = true}),
        p("opts", nil, OPTS, {
            fields = {
                p("handler", nil, set("nil", "function")),
                p("workers", 1, set("nil")),
                p("limiter", lim, set("nil")),
                p("max_retries", 1, set("nil", "0", "maxinteger")),
                -- 0: no timeout
                p("timeout", 1, set("nil", "0")),
                p("persist", true, set("nil", "true", "false")),
                p("on_dead", nil, set("nil", "function")),
                p("keep_done", 1, set("nil", "0")),
                p("group_of", nil, set("nil", "function")),
                p("group_limit", nil, set("nil", "{}")),
                p("rate", nil, set("nil")),
            },
        }),
    },
    ["wq.exec"] = {
        fn = "exec",
        -- argv is read raw: the metamethod tables are {"x"}, a program that is not found
        p("argv", {"true"}, set(RAW_TABLES)),
        p("opts", nil, OPTS, {
            fields = {
                p("stdin", nil, set("nil", STRINGS)),
                -- a cwd that cannot be used is an operational failure: nil, message
                p("cwd", nil, set("nil", "huge string", "empty string")),
                p("env", nil, set("nil", "{}")),
                p("timeout", 30, set("nil", "0")),
            },
        }),
    },
    ["wq.pool"] = {
        fn = "pool",
        -- argv is read raw, as exec's: the metamethod tables are {"x"}, a program that is not found
        p("argv", {"cat"}, set(RAW_TABLES)),
        p("opts", nil, OPTS, {
            fields = {
                p("size", 1, set("nil")),
                -- a cwd that cannot be used is an operational failure: nil, message
                p("cwd", nil, set("nil", "huge string", "empty string")),
                p("env", nil, set("nil", "{}")),
                p("timeout", 30, set("nil", "0")),
            },
        }),
    },
    -- a request is any table JSON can carry (read raw, as payloads are)
    ["pool:call"] = {fn = "call", p("request", {}, set("{}", RAW_TABLES))},
    ["pool:close"] = {fn = "close"},
    ["pool:size"] = {fn = "size"},
    ["pool:stats"] = {fn = "stats"},
    ["wq.limiter.exponential"] = {fn = "exponential", p("base", 0.001, set("0")), p("max", 1, set("0")),
        p("opts", nil, OPTS, {fields = {p("jitter", 0.1, set("nil", "0"))}})},
    ["wq.limiter.fast_slow"] = {
        fn = "fast_slow",
        p("fast", 0.001, set("0")),
        p("slow", 1, set("0")),
        p("max_fast", 3, set("0", "maxinteger")),
        p("opts", nil, OPTS, {fields = {p("jitter", 0.1, set("nil", "0"))}}),
    },
    ["wq.limiter.bucket"] = {fn = "bucket", p("qps", 10, set("0", "2^63", "1e308", "maxinteger")),
        p("burst", 10, set("0", "maxinteger")), p("opts", nil, OPTS, {fields = {p("jitter", 0.1, set("nil", "0"))}})},
    ["wq.limiter.max_of"] = {fn = "max_of", p("limiter #1", lim), p("limiter #2", lim, set("nil"))},
    ["wq.limiter.with_max_wait"] = {fn = "with_max_wait", p("limiter", lim), p("max", 1, set("0")),
        p("opts", nil, OPTS, {fields = {p("jitter", 0.1, set("nil", "0"))}})},
    ["wq.limiter.with_jitter"] = {fn = "with_jitter", p("limiter", lim), p("fraction", 0.1, set("0"))},
    ["wq.limiter.default"] = {fn = "default", p("opts", nil, OPTS, {fields = {p("jitter", 0.1, set("nil", "0"))}})},
    ["wq.backoff"] = {
        fn = "backoff",
        p("opts", {}, set("{}"), {
            fields = {
                p("duration", 1, set("nil", "0")),
                p("factor", 2, set("nil", "0", "2^63", "1e308", "maxinteger")),
                p("jitter", 0.1, set("nil", "0", "2^63", "1e308", "maxinteger")),
                p("steps", 3, set("nil", "0", "maxinteger")),
                p("cap", 10, set("nil", "0")),
            },
        }),
    },
    ["wq.json.encode"] = {
        fn = "json.encode",
        p("value", 1, set("nil", "true", "false", "{}", "lightuserdata", FINITE, STRINGS, RAW_TABLES)),
    },
    ["wq.json.decode"] = {fn = "json.decode", p("text", "1", set(STRINGS))},
    ["wq.log"] = {
        fn = "log",
        -- fmt follows string.format: numbers are strings too (and a 2 MB
        -- line is not written to the test's stderr)
        p("fmt", "%d", set(FINITE, "nan", "inf", "-inf", STRINGS), {skip = set("huge string")}),
        p("#2", 1, set("-1", "0", "maxinteger")),
    },
    ["wq.on_shutdown"] = {fn = "on_shutdown", p("fn", function() end, FN)},
    ["wq.http"] = {
        fn = "http",
        -- A table is a request: its fields are swept below (127.0.0.1:9 refuses at once).
        p("request", nil, set(), {
            skip = set("{}", "cyclic table", "deep table", RAW_TABLES),
            valid_table = {url = "http://127.0.0.1:9/", timeout = 5},
            fields = {
                p("url", "http://127.0.0.1:9/", set()),
                p("method", "GET", set("nil")),
                p("headers", nil, set("nil", "{}")),
                -- a string is sent as it is, a table as JSON (read raw)
                p("body", nil, set("nil", "{}", STRINGS, RAW_TABLES)),
                -- a table value is a list of values: an empty one adds nothing
                p("query", nil, set("nil", "{}", "cyclic table", "deep table")),
                p("timeout", 5, set("nil", "0")),
                p("connect_timeout", 5, set("nil", "0")),
                p("redirects", false, set("nil", "true", "false", "0")),
                p("verify", true, set("nil", "true", "false")),
                p("max_body", 1, set("nil", "0", "maxinteger")),
            },
        }),
    },
    ["wq.sha256"] = {fn = "sha256", p("data", "abc", set(STRINGS))},
    ["wq.hmac_sha256"] = {fn = "hmac_sha256", p("key", "k", set(STRINGS)), p("data", "d", set(STRINGS))},

    -- queue methods
    ["queue:add"] = {fn = "add", p("key", "k", KEY), p("payload", nil, PAYLOAD), p("opts", nil, OPTS, {
        fields = {
            p("priority", 1, set("nil", "-1", "0")),
            p("group", "g", set("nil", "NUL string", "empty string")),
            p("force", false, set("nil", "true", "false")),
        },
    })},
    ["queue:add_after"] = {fn = "add_after", p("key", "k", KEY), p("seconds", 1, DELAY),
        p("payload", nil, PAYLOAD), p("opts", nil, OPTS)},
    ["queue:add_rate_limited"] = {fn = "add_rate_limited", p("key", "k", KEY),
        p("payload", nil, PAYLOAD), p("opts", nil, OPTS)},
    ["queue:len"] = {fn = "len"},
    ["queue:get"] = {fn = "get"},
    ["queue:done"] = {fn = "done", p("key", "k", KEY)},
    ["queue:shutdown"] = {fn = "shutdown"},
    ["queue:shutdown_with_drain"] = {fn = "shutdown_with_drain"},
    ["queue:shutting_down"] = {fn = "shutting_down"},
    ["queue:cancel_after"] = {fn = "cancel_after", p("key", "k", KEY)},
    ["queue:forget"] = {fn = "forget", p("key", "k", KEY)},
    ["queue:num_requeues"] = {fn = "num_requeues", p("key", "k", KEY)},
    ["queue:stats"] = {fn = "stats"},
    ["queue:retry_dead"] = {fn = "retry_dead", p("key", "k", KEY)},
    ["queue:done_info"] = {fn = "done_info", p("key", "k", KEY)},
    ["queue:item"] = {fn = "item", p("key", "k", KEY)},
    ["queue:forget_done"] = {fn = "forget_done", p("key", "k", KEY)},
    ["queue:name"] = {fn = "name"},
    -- nil (no timeout) is valid, but would wait for ever for a pending key
    ["queue:wait"] = {fn = "wait", p("key", "k", KEY), p("timeout", 0, set("0"), {skip = {["nil"] = true}})},
    ["queue:wait_idle"] = {fn = "wait_idle", p("timeout", 0, set("0"), {skip = {["nil"] = true}})},
    ["queue:dead"] = {fn = "dead"},
    ["queue:schedule"] = {
        fn = "schedule",
        p("name", "s", set()),
        p("spec", "@hourly", set()),
        p("opts", nil, OPTS, {
            fields = {
                p("key", "k", set("nil", KEY)),
                p("tz", "utc", set("nil")),
                p("catch_up", "once", set("nil")),
                p("payload", nil, PAYLOAD),
            },
        }),
    },
    ["queue:unschedule"] = {fn = "unschedule", p("name", "s", set(STRINGS))},
    ["queue:schedules"] = {fn = "schedules"},
    ["queue:set_group_limit"] = {
        fn = "set_group_limit",
        p("group", "g", set("NUL string", "empty string")),
        -- nil restores the default
        p("limit", nil, set("nil", "{}"), {
            fields = {
                p("concurrency", 1, set("nil", "maxinteger"), {err = "limit"}),
                p("rate", 1, set("nil"), {err = "limit"}),
                p("burst", 1, set("nil"), {err = "limit"}),
            },
            valid_table = {concurrency = 1, rate = 1, burst = 1},
        }),
    },
    ["queue:group_limit"] = {fn = "group_limit", p("group", "g", set("NUL string", "empty string"))},
    ["queue:pause"] = {fn = "pause"},
    ["queue:resume"] = {fn = "resume"},
    ["queue:paused"] = {fn = "paused"},
    ["queue:remove"] = {fn = "remove", p("key", "k", KEY)},
    ["queue:cancel"] = {fn = "cancel", p("key", "k", KEY)},
    ["queue:items"] = {
        fn = "items",
        p("opts", nil, OPTS, {
            fields = {
                p("state", "queued", set("nil")),
                p("limit", 10, set("nil", "maxinteger")),
                p("after_key", "a", set("nil", KEY)),
            },
        }),
    },
    ["queue:purge_dead"] = {fn = "purge_dead"},

    ["timer:cancel"] = {fn = "cancel"},
    ["timer:pending"] = {fn = "pending"},
    ["limiter:when"] = {fn = "when", p("key", "k", KEY)},
    ["limiter:forget"] = {fn = "forget", p("key", "k", KEY)},
    ["limiter:num_requeues"] = {fn = "num_requeues", p("key", "k", KEY)},
    ["backoff:step"] = {fn = "step"},
}

-- ---- discovery ----

local targets = {} -- {label=, f=, sig=, object=kind or nil}

local function add_wq_functions(tbl, path)
    local names = {}
    for k in pairs(tbl) do
        names[#names + 1] = k
    end
    table.sort(names)
    for _, k in ipairs(names) do
        local v = tbl[k]
        local label = path .. "." .. k
        if type(v) == "function" then
            targets[#targets + 1] = {label = label, f = v}
        elseif type(v) == "table" and path == "wq" then
            add_wq_functions(v, label)
        end
    end
end
add_wq_functions(wq, "wq")

local kinds = {}
for kind in pairs(OBJECTS) do
    kinds[#kinds + 1] = kind
end
table.sort(kinds)
local samples = {}
for _, kind in ipairs(kinds) do
    local o = OBJECTS[kind]
    local sample = o.new()
    samples[kind] = sample
    local names = {}
    local index = debug.getmetatable(sample).__index
    if type(index) == "table" then
        for k, v in pairs(index) do
            if type(v) == "function" then
                names[#names + 1] = k
            end
        end
    end
    for _, k in ipairs(o.methods or {}) do
        names[#names + 1] = k
    end
    table.sort(names)
    for _, k in ipairs(names) do
        targets[#targets + 1] = {label = kind .. ":" .. k, method = k, object = kind}
    end
end

-- Every function found has a signature, and every signature was found.
local found = {}
for _, tg in ipairs(targets) do
    found[tg.label] = true
    tg.sig = SIGNATURES[tg.label]
    if not tg.sig then
        t.fail(tg.label .. ": no entry in SIGNATURES (a new function? describe its parameters)")
    end
end
for label in pairs(SIGNATURES) do
    if not found[label] then
        t.fail(label .. ": in SIGNATURES but not found in wq or on its object")
    end
end

-- ---- running one call ----

local function valid_of(param)
    if param.gen then
        return param.valid()
    end
    return param.valid
end

local calls, accepted = 0, 0

-- Runs f(args) in a task of its own; returns ok, first result, or "watchdog".
local function run(f, args, n)
    local res = {}
    wq.spawn(function()
        local r = table.pack(pcall(f, table.unpack(args, 1, n)))
        res.ok, res.err, res.r = r[1], r[2], r
        res.done = true
    end)
    local deadline, spins = wq.now() + WATCHDOG, 0
    while not res.done do
        if wq.now() > deadline then
            return "watchdog"
        end
        spins = spins + 1
        wq.sleep(spins < 20 and 0 or 0.002)
    end
    -- what an accepted call returned may need undoing (timers keep the process alive)
    if res.ok then
        for i = 2, res.r.n do
            if getmetatable(res.r[i]) == getmetatable(samples.timer) then
                res.r[i]:cancel()
            end
        end
    end
    return res.ok, res.err
end

local function check(label, what, vname, ok, err, expect, accept)
    calls = calls + 1
    local where = string.format("%s(%s = %s)", label, what, vname)
    if ok == "watchdog" then
        return t.fail(where .. ": the call did not finish within " .. WATCHDOG .. " s (a task left waiting)")
    end
    if ok then
        if accept then
            accepted = accepted + 1
            return t.ok(true)
        end
        return t.fail(where .. ": accepted, but not listed as a documented acceptance")
    end
    if type(err) == "string" and (err:find(expect, 1, true) or err:match(MM_ERROR)) then
        return t.ok(true)
    end
    return t.fail(string.format("%s: error does not name the function and parameter\n     got %s\n     expected it to contain %s",
        where, t.show(err), t.show(expect)))
end

-- The method of an object kind, from its metatable (self may be anything).
local function method_of(tg)
    local index = debug.getmetatable(samples[tg.object]).__index
    if type(index) == "function" then
        return index(samples[tg.object], tg.method)
    end
    return index[tg.method]
end

-- Calls the target with args (self in front for a method), then cleans up.
local function call_target(tg, self, args, n)
    if not tg.object then
        return run(tg.f, args, n)
    end
    local full = {self}
    for i = 1, n do -- not table.insert: args has holes (nil values)
        full[i + 1] = args[i]
    end
    local ok, err = run(method_of(tg), full, n + 1)
    local o = OBJECTS[tg.object]
    if o.cleanup and getmetatable(self) == getmetatable(samples[tg.object]) then
        o.cleanup(self)
    end
    return ok, err
end

local function fresh(tg)
    if tg.object then
        return OBJECTS[tg.object].new()
    end
end

local function sweep(tg)
    local sig = tg.sig
    if sig.skip then
        return
    end
    local prefix = sig.fn
    local n = #sig
    local function base_args()
        local args = {}
        for i = 1, n do
            args[i] = valid_of(sig[i])
        end
        return args
    end
    -- self: every bad value and every other kind of wq object
    if tg.object then
        local selfname = OBJECTS[tg.object].self .. ":" .. prefix
        local bads = {}
        for _, v in ipairs(VALUES) do
            bads[#bads + 1] = v
        end
        for _, kind in ipairs(kinds) do
            if kind ~= tg.object then
                bads[#bads + 1] = {"a " .. kind, samples[kind]}
            end
        end
        for _, v in ipairs(bads) do
            local args = base_args()
            local ok, err = call_target(tg, v[2], args, n)
            check(tg.label, "self", v[1], ok, err, selfname .. ": bad argument 'self'", false)
        end
    end
    for i, param in ipairs(sig) do
        for _, v in ipairs(VALUES) do
            if not (param.skip and param.skip[v[1]]) then
                local args = base_args()
                args[i] = v[2]
                local ok, err = call_target(tg, fresh(tg), args, n)
                check(tg.label, param.name, v[1], ok, err, prefix .. ": bad argument '" .. (param.err or param.name),
                    param.accept[v[1]])
            end
        end
        for _, field in ipairs(param.fields or {}) do
            for _, v in ipairs(VALUES) do
                local args = base_args()
                local opts = {}
                for k, x in pairs(param.valid_table or {}) do
                    opts[k] = x
                end
                opts[field.name] = v[2]
                args[i] = opts
                local ok, err = call_target(tg, fresh(tg), args, n)
                check(tg.label, param.name .. "." .. field.name, v[1], ok, err,
                    prefix .. ": bad argument '" .. (field.err or field.name), field.accept[v[1]])
            end
        end
    end
end

-- The metamethods are reachable too (getmetatable(q).__tostring): called by
-- hand with a bad value, each raises or returns, and never crashes.
do
    local objs = {wq.fail("x"), wq.requeue(1)}
    for _, kind in ipairs(kinds) do
        objs[#objs + 1] = samples[kind]
    end
    local n = 0
    for _, o in ipairs(objs) do
        for _, mm in pairs(debug.getmetatable(o)) do
            if type(mm) == "function" then
                for _, v in ipairs(VALUES) do
                    pcall(mm, v[2], "step")
                    n = n + 1
                end
            end
        end
    end
    t.ok(n > 0, "metamethods called")
end

local t0 = os.clock()
for _, tg in ipairs(targets) do
    if tg.sig then
        sweep(tg)
    end
end
OBJECTS.timer.cleanup(samples.timer)
io.stdout:write(string.format("test_badargs: %d calls over %d functions, %d accepted as documented, %.1f s CPU\n",
    calls, #targets, accepted, os.clock() - t0))
t.ok(calls > 1000, "the sweep ran")
t.done()
