-- A thousand requests in flight at once (a task each) to a server that never
-- answers (tests/e2e/http_server.py's "never" port, WQ_NEVER_PORT: the
-- connections complete in the kernel, nothing reads them) with timeout = 1:
-- all return nil and a timeout message within a few seconds, and everything
-- is freed: the open descriptors return to their count before, and RSS after
-- a second round is not above RSS after the first (a leak would add to it).
local t = require "wqtest"
t.watchdog(100)

local NEVER = "http://127.0.0.1:" .. assert(os.getenv("WQ_NEVER_PORT"))
local N = tonumber(arg[1]) or 1000

local function rss_kib()
    local f = assert(io.open("/proc/self/status"))
    local s = f:read("a")
    f:close()
    return tonumber(s:match("VmRSS:%s*(%d+) kB"))
end

local function fds()
    local f = assert(io.open("/proc/self/stat"))
    local pid = f:read("n")
    f:close()
    local p = assert(io.popen("ls /proc/" .. pid .. "/fd | wc -l"))
    local n = tonumber(p:read("a"))
    p:close()
    return n
end

-- The round: N tasks, each one request; returns the seconds it took and the
-- messages seen (message -> count).
local function round(tag)
    local left, msgs, oks = N, {}, 0
    local t0 = wq.now()
    for i = 1, N do
        wq.spawn(function()
            local r, err = wq.http({url = NEVER .. "/" .. tag .. "/" .. i, timeout = 1})
            if r then
                oks = oks + 1
            else
                local m = err:gsub(NEVER .. "/%w+/%d+", "URL"):gsub("after %d+ milliseconds",
                    "after N milliseconds"):gsub("with %d+ ", "with N ")
                msgs[m] = (msgs[m] or 0) + 1
            end
            left = left - 1
        end)
    end
    t.ok(t.wait_until(function() return left == 0 end, 30, 0.05), tag .. ": all " .. N .. " ended")
    local took = wq.now() - t0
    t.eq(oks, 0, tag .. ": no response")
    for m, n in pairs(msgs) do
        print(string.format("%s: %d x %s", tag, n, m))
        t.matches(m, "^http: GET URL: Operation timed out after N milliseconds", tag .. ": a timeout")
    end
    return took
end


-- A request first, so libcurl is set up before the baseline.
wq.http({url = NEVER .. "/warm", timeout = 0.1})
collectgarbage()
local rss0, fd0 = rss_kib(), fds()
local took1 = round("first")
collectgarbage()
local rss1, fd1 = rss_kib(), fds()
local took2 = round("second")
collectgarbage()
local rss2, fd2 = rss_kib(), fds()
print(string.format("many: %d requests, rounds took %.2f s and %.2f s; RSS %d KiB before, %d after "
    .. "the first round, %d after the second; open descriptors %d, %d, %d",
    N, took1, took2, rss0, rss1, rss2, fd0, fd1, fd2))
t.between(took1, 0.95, 4, "the first round ends at the timeout")
t.between(took2, 0.95, 4, "the second round ends at the timeout")
t.eq(fd1, fd0, "every socket of the first round is closed")
t.eq(fd2, fd0, "every socket of the second round is closed")
-- What stays after the first round is caches (libcurl's spare handles,
-- malloc's arenas, Lua's); a leak of the transfers would add to it again.
t.between(rss1 - rss0, -100000, 32 * 1024, "RSS after the first round: at most 32 MiB over before")
t.between(rss2 - rss1, -100000, 4 * 1024, "RSS after the second round: at most 4 MiB over the first")

t.done()
