-- A server that sends an endless body (tests/e2e/http_server.py /endless,
-- WQ_HTTP_PORT): with max_body = 1 MiB the request fails at the limit, the
-- server sees the connection closed, and the process's peak RSS (VmHWM)
-- grows by a few MiB, not by what the server sent. The same for endless
-- header lines.
local t = require "wqtest"
t.watchdog(60)

local HTTP = "http://127.0.0.1:" .. assert(os.getenv("WQ_HTTP_PORT"))

-- A field of /proc/self/status in KiB.
local function status_kib(name)
    local f = assert(io.open("/proc/self/status"))
    local s = f:read("a")
    f:close()
    return tonumber(s:match(name .. ":%s*(%d+) kB"))
end

-- Warm up (libcurl, the connection) so the peak below is the body's.
assert(wq.http({url = HTTP .. "/echo"}))
collectgarbage()
local hwm0 = status_kib("VmHWM")
local t0 = wq.now()
local r, err = wq.http({url = HTTP .. "/endless?id=endless", max_body = 1024 * 1024, timeout = 20})
local took = wq.now() - t0
local hwm1 = status_kib("VmHWM")
t.eq(r, nil, "an endless body fails")
t.eq(err, "http: GET " .. HTTP .. "/endless?id=endless: response body over the limit of 1048576 bytes",
    "at the size limit")
t.between(took, 0, 5, "at once, not at the timeout")

local ev = {}
t.wait_until(function()
    local e = wq.http({url = HTTP .. "/events", query = {id = "endless"}})
    ev = e and e:json() or {}
    return ev.closed_after ~= nil
end, 5, 0.05)
print(string.format("endless: failed after %.3f s; the server sent %.1f MiB before it saw the close; "
    .. "peak RSS %d -> %d KiB (+%d)", took, (ev.sent or 0) / 1048576, hwm0, hwm1, hwm1 - hwm0))
t.ok(ev.closed_after ~= nil, "the server saw the connection closed")
t.between(ev.sent or 0, 1024 * 1024, 64 * 1024 * 1024, "the server sent more than the limit, then stopped")
-- The body buffer (under 2 MiB) and libcurl's buffers; ASan's quarantine adds a little.
t.between(hwm1 - hwm0, 0, 16 * 1024, "peak RSS grows by at most 16 MiB")

-- Endless header lines: libcurl stops them (at 300 KB in all), and the
-- headers kept for the response table stop with them.
hwm0 = status_kib("VmHWM")
t0 = wq.now()
r, err = wq.http({url = HTTP .. "/endless-headers?id=headers", timeout = 20})
took = wq.now() - t0
hwm1 = status_kib("VmHWM")
print(string.format("endless headers: failed after %.3f s: %s; peak RSS %d -> %d KiB (+%d)", took,
    tostring(err), hwm0, hwm1, hwm1 - hwm0))
t.eq(r, nil, "endless headers fail")
t.matches(err, "^http: GET " .. HTTP .. "/endless%-headers%?id=headers: Too large response headers",
    "at libcurl's limit")
t.between(took, 0, 5, "at once, not at the timeout")
t.between(hwm1 - hwm0, 0, 16 * 1024, "peak RSS grows by at most 16 MiB")

t.done()
