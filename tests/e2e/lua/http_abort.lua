-- A handler's timeout and q:cancel abort its wq.http transfer at once: the
-- handler ends at its deadline (or at the cancel), and the server
-- (tests/e2e/http_server.py, WQ_HTTP_PORT) sees the connection closed then,
-- not when the request's own timeout (30 s) would have ended it. The
-- server's closed_at (Unix time) is compared with wq.time() here: its
-- closed_after counts from when it read the request, which a loaded machine
-- can delay.
local t = require "wqtest"
t.watchdog(60)

local HTTP = "http://127.0.0.1:" .. assert(os.getenv("WQ_HTTP_PORT"))

-- What the server recorded for id, once it has closed_after (or after 5 s).
local function closed(id)
    local ev = {}
    t.wait_until(function()
        local r = wq.http({url = HTTP .. "/events", query = {id = id}})
        ev = r and r:json() or {}
        return ev.closed_after ~= nil
    end, 5, 0.05)
    return ev
end

do -- the handler's timeout (it fails at once, even under pcall)
    local started, started_wall, ended, err
    local q = wq.queue("timeout", {timeout = 1, max_retries = 0, handler = function()
        started, started_wall = wq.now(), wq.time()
        pcall(wq.http, {url = HTTP .. "/hang?id=deadline", timeout = 30})
        t.fail("the handler goes on after its timeout")
    end, on_dead = function(_, _, e)
        err, ended = e, wq.now()
    end})
    q:add("k")
    t.ok(t.wait_until(function() return ended ~= nil end, 10), "the handler failed")
    t.ok(started ~= nil, "the handler ran")
    t.matches(tostring(err), "timeout", "with the timeout")
    if ended and started then
        t.between(ended - started, 0.95, 1.5, "at the deadline")
    end
    local ev = closed("deadline")
    local at = (ev.closed_at or 0) - (started_wall or 0)
    print(string.format("timeout: server saw the connection closed %.3f s after the handler began "
        .. "(%s s after it read the request)", at, tostring(ev.closed_after)))
    t.ok(ev.opened, "the request reached the server")
    t.between(at, 0.95, 1.5, "the server saw the close at the deadline")
end

do -- q:cancel from another task
    local started, ended, err
    local q = wq.queue("cancel", {max_retries = 0, handler = function()
        started = wq.now()
        local ok, e = pcall(wq.http, {url = HTTP .. "/hang?id=cancel", timeout = 30})
        err = ok and "returned" or e
        ended = wq.now()
    end})
    q:add("k")
    local cancelled_at, cancelled_wall
    wq.spawn(function()
        -- Cancel once the server has the request.
        t.wait_until(function()
            local r = wq.http({url = HTTP .. "/events", query = {id = "cancel"}})
            return r and r:json().opened
        end, 5, 0.02)
        wq.sleep(0.3)
        cancelled_at, cancelled_wall = wq.now(), wq.time()
        q:cancel("k")
    end)
    t.ok(t.wait_until(function() return ended ~= nil end, 10), "the handler ended")
    t.eq(err, "cancelled", "the handler's wait raises \"cancelled\"")
    if cancelled_at and ended then
        t.between(ended - cancelled_at, 0, 0.2, "at once")
    end
    local ev = closed("cancel")
    local at = (ev.closed_at or 0) - (cancelled_wall or 0)
    print(string.format("cancel: server saw the connection closed %.3f s after the cancel "
        .. "(%s s after it read the request, cancelled %.3f s after the handler began)", at,
        tostring(ev.closed_after), (cancelled_at or 0) - (started or 0)))
    t.between(at, -0.05, 0.3, "the server saw the close at the cancel")
    t.ok(t.wait_until(function() return q:stats().cancelled == 1 end, 2), "counted as cancelled")
end

do -- a task's wq.http is not held up by the aborted ones: the loop is free
    local r = wq.http({url = HTTP .. "/echo"})
    t.eq(r and r.status, 200, "a later request")
end

t.done()
