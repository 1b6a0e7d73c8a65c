-- A thousand requests in flight at once (a task each) to a server that never
-- answers (tests/e2e/http_server.py's "never" port, WQ_NEVER_PORT: the
-- connections complete in the kernel, nothing reads them) with timeout = 1:
-- all return nil and a timeout message within a few seconds, and everything
-- is freed: the open sockets return to their count before, and RSS after
-- two more rounds is not much above RSS after the first (a leak would add to it).
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

-- The open sockets: their count and a listing of every descriptor (for a
-- failure's message).
local function fds()
    local f = assert(io.open("/proc/self/stat"))
    local pid = f:read("n")
    f:close()
    local p = assert(io.popen("ls -l /proc/" .. pid .. "/fd | sed -n 's/.* \\([0-9]* -> .*\\)/\\1/p'"))
    local list = p:read("a")
    p:close()
    -- sockets only: the pipe of this very popen may be listed twice
    local _, n = list:gsub("socket:", "")
    return n, list
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
        -- "Operation timed out" once connected; "Connection timed out" for
        -- the few whose connect the loop has not yet seen done (a slow
        -- sanitizer build)
        t.matches(m, "^http: GET URL: %a+ timed out after N milliseconds", tag .. ": a timeout")
    end
    return took
end


-- A request first, so libcurl is set up before the baseline.
wq.http({url = NEVER .. "/warm", timeout = 0.1})
collectgarbage()
local ROUNDS = {"first", "second", "third"}
local rss, fd, list, took = {}, {}, {}, {}
rss[0] = rss_kib()
fd[0], list[0] = fds()
for i, tag in ipairs(ROUNDS) do
    took[i] = round(tag)
    collectgarbage()
    rss[i] = rss_kib()
    fd[i], list[i] = fds()
end
print(string.format("many: %d requests a round, rounds took %.2f, %.2f, %.2f s; RSS %d KiB before, "
    .. "then %d, %d, %d after each; open sockets %d before, then %d, %d, %d",
    N, took[1], took[2], took[3], rss[0], rss[1], rss[2], rss[3], fd[0], fd[1], fd[2], fd[3]))
-- WQ_TEST_GCSTRESS (the sanitizer pass): a full collection before each of
-- the thousands of resumes makes the rounds slower.
local slack = os.getenv("WQ_TEST_GCSTRESS") == "1" and 8 or 2
for i, tag in ipairs(ROUNDS) do
    t.between(took[i], 0.95, 1 + slack, tag .. " round: ends at the timeout")
    if not t.eq(fd[i], fd[0], tag .. " round: every socket is closed") then
        io.stderr:write("descriptors before:\n", list[0], "after the ", tag, " round:\n", list[i])
    end
end
-- What stays after the first round is caches (libcurl's spare handles,
-- malloc's arenas, Lua's); a leak of the transfers would add to it in each
-- later round (leaking only the easy handles: 8.5 MiB a round).
-- (ASan's quarantine keeps freed memory: test_wq_http.sh makes it 4 MiB.)
t.between(rss[1] - rss[0], -100000, 64 * 1024, "RSS after the first round: at most 64 MiB over before")
t.between(rss[3] - rss[1], -100000, 8 * 1024, "RSS after two more rounds: at most 8 MiB over the first")

t.done()
