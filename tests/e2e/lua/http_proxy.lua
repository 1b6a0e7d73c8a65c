-- Run with http_proxy=http://127.0.0.1:WQ_HTTP_PORT and no_proxy=localhost
-- (tests/e2e/test_wq_http.sh): libcurl takes the proxy from the
-- environment, so a URL to an .invalid host (one that cannot resolve)
-- reaches tests/e2e/http_server.py as an absolute-form request line; a
-- no_proxy host is fetched directly.
local t = require "wqtest"
t.watchdog(30)

local PORT = assert(os.getenv("WQ_HTTP_PORT"))
t.eq(os.getenv("http_proxy"), "http://127.0.0.1:" .. PORT, "run with http_proxy set")

local r, err = wq.http({url = "http://through-proxy.invalid/some/path?q=1"})
t.ok(r, "through the proxy: " .. tostring(err))
if r then
    local e = r:json() or {}
    t.eq(e.proxied, true, "the proxy got it")
    t.eq(e.request_line, "GET http://through-proxy.invalid/some/path?q=1 HTTP/1.1", "absolute form")
    t.eq(e.host, "through-proxy.invalid", "for the .invalid host")
end

r, err = wq.http({url = "http://localhost:" .. PORT .. "/echo"})
t.ok(r, "no_proxy: " .. tostring(err))
if r then
    local e = r:json() or {}
    t.eq(e.proxied, nil, "a no_proxy host is not proxied")
    t.eq(e.request_line, "GET /echo HTTP/1.1", "origin form")
end

t.done()
