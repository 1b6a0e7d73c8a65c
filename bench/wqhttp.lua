-- wq.http benchmark (issue 18), the runner's side; bench/bench_wqhttp.sh
-- starts the server and drives one mode per process:
--   wqrun --quiet bench/wqhttp.lua http  URL SECONDS WORKERS [WARMUP]
--   wqrun --quiet bench/wqhttp.lua exec  URL SECONDS WORKERS [WARMUP]
--   wqrun --quiet bench/wqhttp.lua hold  URL N
--   wqrun --quiet bench/wqhttp.lua sleep URL N
-- http and exec: a queue with WORKERS handler workers, each handler doing one
-- GET of URL, with wq.http (http) or wq.exec{"curl", "-s", URL} (exec). The
-- main chunk keeps the queue topped up with fresh keys (checked every
-- millisecond), so no worker waits for work. After WARMUP seconds (default
-- 1) it counts the requests that end in the next SECONDS and times each of
-- them with wq.now() around the call. Prints `<name> <value> <unit>` lines:
-- wqhttp_<mode>_rps, _p50_ms, _p99_ms, _requests, _errors (a failed call or a
-- status other than 200), _cpu_s (this process's user + system CPU in the
-- window, its reaped children's included: the curl processes of exec).
-- hold and sleep: N handlers that stay in flight: hold does a GET of URL with
-- a 600 s timeout (URL is a listener that never answers), sleep does
-- wq.sleep(600) (the same queue and N workers without HTTP: the baseline of
-- the coroutines). A "%s" in hold's URL is replaced by a loopback address of
-- its own per key (127.1.x.y), so that each request has a connection of its
-- own: requests to one host share the first connection while it is being
-- set up (libcurl's CURLOPT_PIPEWAIT waits to learn whether it multiplexes). Once every handler has started (and 2 s for the connects
-- to settle), prints `wqhttp_<mode>_ready N` and waits to be killed, so the
-- caller reads its RSS. N = 0 starts no queue.
local MODE, URL = arg[1], arg[2]
io.stdout:setvbuf("line")

local function out(name, value, unit, fmt)
    print(string.format("wqhttp_%s_%s " .. (fmt or "%.6g") .. " %s", MODE, name, value, unit))
end

-- User + system CPU seconds of this process and its reaped children.
local function cpu_s()
    local f = assert(io.open("/proc/self/stat"))
    local s = f:read("a")
    f:close()
    -- The fields after the command name (in parentheses, may hold spaces).
    local rest = s:match("%) (.*)$")
    local v = {}
    for w in rest:gmatch("%S+") do v[#v + 1] = tonumber(w) or 0 end
    -- utime, stime, cutime, cstime are fields 14-17 of stat; rest starts at 3.
    return (v[12] + v[13] + v[14] + v[15]) / 100 -- USER_HZ, 100 on Linux
end

if MODE == "hold" or MODE == "sleep" then
    local N = assert(tonumber(arg[3]), "N expected")
    local started = 0
    if N > 0 then
        local handler
        if MODE == "hold" then
            handler = function(key)
                started = started + 1
                local i = math.tointeger(tonumber(key))
                local host = string.format("127.1.%d.%d", i // 200, i % 200 + 1)
                wq.http {url = URL:format(host), timeout = 600, connect_timeout = 600}
            end
        else
            handler = function()
                started = started + 1
                wq.sleep(600)
            end
        end
        local q = wq.queue("hold", {handler = handler, workers = N})
        for i = 1, N do q:add(i) end
        while started < N do wq.sleep(0.01) end
        wq.sleep(2)
    end
    out("ready", N, "handlers", "%d")
    wq.sleep(3600)
    wq.exit(0)
end

assert(MODE == "http" or MODE == "exec", "bench/wqhttp.lua: mode http, exec, hold or sleep")
local SECONDS = assert(tonumber(arg[3]), "SECONDS expected")
local WORKERS = assert(math.tointeger(tonumber(arg[4])), "WORKERS expected")
local WARMUP = tonumber(arg[5]) or 1

local measuring, lat, n, errors = false, {}, 0, 0
local request
if MODE == "http" then
    local spec = {url = URL}
    request = function()
        local r, err = wq.http(spec)
        return r and r.status == 200, err
    end
else
    local argv = {"curl", "-s", URL}
    request = function()
        local r, err = wq.exec(argv)
        return r and r.status == 0 and r.stdout == "ok\n", err
    end
end

local first_err
local function handler()
    local t0 = wq.now()
    local ok, err = request()
    if measuring then
        n = n + 1
        lat[n] = wq.now() - t0
        if not ok then
            errors = errors + 1
            first_err = first_err or err
        end
    end
end

local q = wq.queue("load", {handler = handler, workers = WORKERS})
local key = 0
local function top_up()
    for _ = q:len() + 1, 4 * WORKERS + 1024 do
        key = key + 1
        q:add(key)
    end
end

top_up()
local t_end = wq.now() + WARMUP
while wq.now() < t_end do
    wq.sleep(0.001)
    top_up()
end
measuring = true
local t0, c0 = wq.now(), cpu_s()
t_end = t0 + SECONDS
while wq.now() < t_end do
    wq.sleep(0.001)
    top_up()
end
measuring = false
local elapsed, cpu = wq.now() - t0, cpu_s() - c0

table.sort(lat)
local function pct(p)
    if n == 0 then return 0 end
    return lat[math.max(1, math.ceil(n * p / 100))] * 1000
end
out("rps", n / elapsed, "req/s", "%.0f")
out("p50_ms", pct(50), "ms", "%.3f")
out("p99_ms", pct(99), "ms", "%.3f")
out("requests", n, "requests", "%d")
out("errors", errors, "requests", "%d")
out("cpu_s", cpu, "s", "%.2f")
if first_err then io.stderr:write("wqhttp: first error: ", tostring(first_err), "\n") end
wq.exit(0)
