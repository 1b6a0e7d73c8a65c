-- HTTP/2 where the server offers it (tests/e2e/test_wq_http2.sh runs nginx
-- with HTTP/2 over TLS on WQ_H2_PORT and HTTP/1.1 in clear on WQ_H1_PORT;
-- each answer is "CONNECTION-NUMBER PROTOCOL"): concurrent requests to the
-- TLS port share one HTTP/2 connection; the clear port stays HTTP/1.1.
local t = require "wqtest"
t.watchdog(60)

local H2 = "https://127.0.0.1:" .. assert(os.getenv("WQ_H2_PORT")) .. "/"
local H1 = "http://127.0.0.1:" .. assert(os.getenv("WQ_H1_PORT")) .. "/"

-- n requests at once (a task each); returns {[connection] = count}, {[protocol] = count}
local function burst(url, n)
    local conns, protos, left = {}, {}, n
    for i = 1, n do
        wq.spawn(function()
            local r, err = wq.http({url = url, query = {i = i}, verify = false})
            if r then
                local c, p = r.body:match("^(%d+) (%S+)")
                conns[c or "?"] = (conns[c or "?"] or 0) + 1
                protos[p or "?"] = (protos[p or "?"] or 0) + 1
            else
                protos[err] = (protos[err] or 0) + 1
            end
            left = left - 1
        end)
    end
    t.ok(t.wait_until(function() return left == 0 end, 20), "all " .. n .. " ended")
    return conns, protos
end

local function count(set)
    local n = 0
    for _ in pairs(set) do
        n = n + 1
    end
    return n
end

local conns, protos = burst(H2, 20)
print("h2 burst: protocols " .. t.show(protos) .. ", connections " .. t.show(conns))
t.eq(protos, {["HTTP/2.0"] = 20}, "HTTP/2 over TLS")
t.eq(count(conns), 1, "20 concurrent requests on one connection")
local first = next(conns)
conns, protos = burst(H2, 20)
t.eq(protos, {["HTTP/2.0"] = 20}, "HTTP/2 again")
t.eq(conns, {[first] = 20}, "a second burst reuses the connection")

conns, protos = burst(H1, 5)
print("h1 burst: protocols " .. t.show(protos) .. ", connections " .. t.show(conns))
t.eq(protos, {["HTTP/1.1"] = 5}, "HTTP/1.1 in clear")
t.eq(count(conns), 5, "5 concurrent HTTP/1.1 requests on 5 connections (none waited)")

t.done()
