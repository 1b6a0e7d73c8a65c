-- wq.http against tests/e2e/http_server.py (ports in WQ_HTTP_PORT,
-- WQ_HTTPS_PORT, WQ_FULL_PORT; run by tests/e2e/test_wq_http.sh): every
-- option, the response table, transport failures, keep-alive reuse, and
-- wq.sha256 / wq.hmac_sha256 against known vectors.
local t = require "wqtest"
t.watchdog(100)

local HTTP = "http://127.0.0.1:" .. assert(os.getenv("WQ_HTTP_PORT"))
local HTTPS = "https://127.0.0.1:" .. assert(os.getenv("WQ_HTTPS_PORT"))
local FULL = "http://127.0.0.1:" .. assert(os.getenv("WQ_FULL_PORT"))

-- A request that must get a response; the failure message otherwise.
local function get(req)
    local r, err = wq.http(req)
    if not r then
        t.fail(req.url .. ": " .. tostring(err))
        return {status = 0, headers = {}, body = "", json = function() return {} end}
    end
    return r
end

do -- the first requests to a host run concurrently: none waits for
    -- another's response (this runs first, before any connection to it)
    local left, fails = 8, 0
    local t0 = wq.now()
    for i = 1, 8 do
        wq.spawn(function()
            local r = wq.http({url = HTTP .. "/slow?after=1", query = {i = i}})
            if not (r and r.status == 200) then
                fails = fails + 1
            end
            left = left - 1
        end)
    end
    t.ok(t.wait_until(function() return left == 0 end, 10), "8 concurrent requests ended")
    t.eq(fails, 0, "all answered")
    t.between(wq.now() - t0, 0.95, 1.8, "in about the time of one (not two: none waited)")
end

do -- GET: the default method; the response table
    local r = get({url = HTTP .. "/echo"})
    t.eq(r.status, 200, "status")
    t.eq(r.url, HTTP .. "/echo", "url")
    t.eq(r.headers["content-type"], "application/json", "header names are lower-cased")
    local e = r:json()
    t.eq(e.method, "GET", "GET by default")
    t.eq(e.body, "", "no body")
    t.matches(e.headers["user-agent"], "^wqrun/", "wqrun's user agent by default")
end

do -- method, headers, a string body
    local r = get({url = HTTP .. "/echo", method = "PUT", body = "a\0b text",
        headers = {["X-Token"] = "s3cret", ["User-Agent"] = "mine/1", ["X-Empty"] = ""}})
    local e = r:json()
    t.eq(e.method, "PUT", "the method is sent")
    t.eq(e.body, "a\0b text", "the body is sent byte for byte")
    t.eq(e.headers["x-token"], "s3cret", "a header is sent")
    t.eq(e.headers["user-agent"], "mine/1", "a given User-Agent replaces wqrun's")
    t.eq(e.headers["x-empty"], "", "an empty header value is sent, empty")
    t.eq(e.headers["expect"], nil, "no Expect: 100-continue")
    local d = get({url = HTTP .. "/echo", method = "DELETE"}):json()
    t.eq(d.method, "DELETE", "DELETE")
    local p = get({url = HTTP .. "/echo", method = "POST", body = "x=1"}):json()
    t.eq(p.method, "POST", "POST")
    t.eq(p.body, "x=1", "POST body")
end

do -- a table body is JSON with its content type, unless one is given
    local e = get({url = HTTP .. "/echo", method = "POST", body = {a = 1, list = {1, 2}}}):json()
    t.eq(e.headers["content-type"], "application/json", "JSON content type")
    t.eq(wq.json.decode(e.body), {a = 1, list = {1, 2}}, "the table sent as JSON")
    local e2 = get({url = HTTP .. "/echo", method = "POST", body = {a = 1},
        headers = {["content-type"] = "application/vnd.x+json"}}):json()
    t.eq(e2.headers["content-type"], "application/vnd.x+json", "a given Content-Type is kept")
end

do -- query: appended, percent-encoded, in name order, lists repeat the name
    local r = get({url = HTTP .. "/echo?z=0", query = {b = {"x", "y z"}, a = "1&2", ["c d"] = 3}})
    local e = r:json()
    t.eq(e.query, "z=0&a=1%262&b=x&b=y%20z&c%20d=3", "the query string")
    t.eq(r.url, HTTP .. "/echo?z=0&a=1%262&b=x&b=y%20z&c%20d=3", "r.url has it too")
end

do -- HEAD: a status and headers, no body
    local r = get({url = HTTP .. "/echo", method = "HEAD"})
    t.eq(r.status, 200, "HEAD status")
    t.eq(r.body, "", "HEAD has no body")
    t.ok(tonumber(r.headers["content-length"]) > 0, "HEAD keeps the headers")
end

do -- a status with headers is a response, not a failure; repeats are joined
    local r = get({url = HTTP .. "/status/429?h=Retry-After:7&h=X-A:b"})
    t.eq(r.status, 429, "429 is a response")
    t.eq(r.headers["retry-after"], "7", "Retry-After")
    t.eq(r.headers["x-a"], "b", "another header")
    t.eq(r.body, "status 429", "its body")
    t.eq(get({url = HTTP .. "/status/503"}).status, 503, "503")
    t.eq(get({url = HTTP .. "/repeat"}).headers["x-twice"], "a, b", "a repeated header joined")
end

do -- r:json()
    local r = get({url = HTTP .. "/status/200"})
    local v, msg = r:json()
    t.eq(v, nil, "a body that is not JSON: nil")
    t.ok(type(msg) == "string" and #msg > 0, "and a message")
end

do -- redirects: not followed by default; true follows; N bounds them
    local r = get({url = HTTP .. "/redirect/3"})
    t.eq(r.status, 302, "not followed by default")
    t.eq(r.headers.location, "/redirect/2", "the Location")
    r = get({url = HTTP .. "/redirect/3", redirects = false})
    t.eq(r.status, 302, "redirects = false")
    r = get({url = HTTP .. "/redirect/3", redirects = true})
    t.eq(r.status, 200, "followed")
    t.eq(r.url, HTTP .. "/redirect/0", "r.url is the URL after the redirects")
    t.eq(r.headers.location, nil, "the headers are the last response's")
    t.eq(r:json().path, "/redirect/0", "the body is the last response's")
    r = get({url = HTTP .. "/redirect/3", redirects = 3})
    t.eq(r.status, 200, "redirects = 3 follows three")
    local none, err = wq.http({url = HTTP .. "/redirect/12", redirects = true})
    t.eq(none, nil, "true follows at most 10")
    t.matches(err, "http: GET " .. HTTP .. "/redirect/12: ", "the message names the request")
    t.matches(err, "redirect", "and says why")
    none, err = wq.http({url = HTTP .. "/redirect/3", redirects = 2})
    t.eq(none, nil, "redirects = 2 with three: a failure")
    t.matches(err, "Maximum %(2%) redirects", "libcurl's message")
end

do -- a gzip body is decoded
    local r = get({url = HTTP .. "/gzip"})
    t.eq(r.headers["content-encoding"], "gzip", "gzip is accepted, and sent")
    t.eq(r:json().zipped, true, "decoded")
end

do -- timeout: the whole request
    local t0 = wq.now()
    local r, err = wq.http({url = HTTP .. "/slow?after=3", timeout = 0.5})
    local took = wq.now() - t0
    t.eq(r, nil, "a slow answer times out")
    t.matches(err, "^http: GET " .. HTTP .. "/slow%?after=3: ", "the message names the request")
    t.matches(err, "timed out", "libcurl's message")
    t.between(took, 0.45, 1.2, "at the timeout")
    r = get({url = HTTP .. "/slow?after=0.3", timeout = 2})
    t.eq(r.body, "slow", "an answer within the timeout")
    r = get({url = HTTP .. "/slow?after=0.3", timeout = 0})
    t.eq(r.body, "slow", "timeout = 0: none")
end

do -- connect_timeout: a connection that is never accepted
    local t0 = wq.now()
    local r, err = wq.http({url = FULL .. "/", connect_timeout = 0.5, timeout = 10})
    local took = wq.now() - t0
    t.eq(r, nil, "the connection is not made")
    t.matches(err, "Failed to connect .* Timeout was reached", "a connect timeout")
    t.between(took, 0.45, 1.5, "at connect_timeout, well before timeout")
    t0 = wq.now()
    r, err = wq.http({url = FULL .. "/", connect_timeout = 5, timeout = 0.5})
    t.eq(r, nil, "timeout bounds the connect too")
    t.between(wq.now() - t0, 0.45, 1.5, "at timeout")
end

do -- transport failures: nil and a message naming the request
    local r, err = wq.http({url = "http://127.0.0.1:1/x"})
    t.eq(r, nil, "connection refused")
    t.matches(err, "^http: GET http://127.0.0.1:1/x: ", "names the request")
    t.matches(err, "onnect", "libcurl's message")
    r, err = wq.http({url = "http://no-such-host.invalid/", method = "POST", body = "x"})
    t.eq(r, nil, "a name that does not resolve")
    t.matches(err, "^http: POST http://no%-such%-host.invalid/: ", "names the method and URL")
end

do -- TLS: a self-signed certificate fails verification unless verify = false
    local r, err = wq.http({url = HTTPS .. "/echo"})
    t.eq(r, nil, "verify = true by default")
    t.matches(err, "certificate", "a certificate error")
    r, err = wq.http({url = HTTPS .. "/echo", verify = true})
    t.eq(r, nil, "verify = true")
    r = get({url = HTTPS .. "/echo", verify = false})
    t.eq(r.status, 200, "verify = false works")
    t.eq(r:json().method, "GET", "over TLS")
end

do -- max_body: a larger response fails; up to it is fine
    local r, err = wq.http({url = HTTP .. "/big?n=1001", max_body = 1000})
    t.eq(r, nil, "over max_body")
    t.matches(err, "^http: GET " .. HTTP .. "/big%?n=1001: response body over the limit of 1000 bytes$",
        "the message")
    r = get({url = HTTP .. "/big?n=1000", max_body = 1000})
    t.eq(#r.body, 1000, "exactly max_body")
    r, err = wq.http({url = HTTP .. "/big?n=1", max_body = 0})
    t.eq(r, nil, "max_body = 0: no body allowed")
    r = get({url = HTTP .. "/status/204", max_body = 0})
    t.eq(r.status, 204, "max_body = 0 with an empty body")
    local mib = 1024 * 1024
    r = get({url = HTTP .. "/big?n=" .. 16 * mib})
    t.eq(#r.body, 16 * mib, "16 MiB by default")
    r, err = wq.http({url = HTTP .. "/big?n=" .. (16 * mib + 1)})
    t.eq(r, nil, "over the default 16 MiB")
    t.matches(err, "over the limit of 16777216 bytes", "the default limit")
end

do -- keep-alive: 100 sequential requests use at most 2 connections
    local before = get({url = HTTP .. "/conns"}):json().http
    for i = 1, 100 do
        local r = get({url = HTTP .. "/echo", query = {i = i}})
        if r.status ~= 200 then
            t.fail("request " .. i)
            break
        end
    end
    local after = get({url = HTTP .. "/conns"}):json().http
    print(string.format("keep-alive: 100 requests on %d new connection(s)", after - before))
    t.between(after - before, 0, 2, "connections reused")
end

do -- from handlers and tasks: concurrent requests all complete
    local q = wq.queue("fetch", {workers = 8, handler = function(key)
        local r, err = wq.http({url = HTTP .. "/slow?after=0.3", query = {k = key}})
        if not r then
            error(err)
        end
    end})
    local t0 = wq.now()
    for i = 1, 16 do
        q:add("k" .. i)
    end
    t.ok(t.wait_until(function() return q:stats().succeeded == 16 end, 10), "16 handlers fetched")
    t.between(wq.now() - t0, 0.55, 2.5, "8 at a time, concurrently (2 rounds of 0.3 s)")
end

do -- only where a task can wait
    local ok, err = pcall(coroutine.wrap(function()
        return wq.http({url = HTTP .. "/echo"})
    end))
    t.eq(ok, false, "not inside a coroutine of the script's own")
    t.matches(err, "http: cannot wait here", "the message")
end

do -- digests: FIPS 180-2 "abc"; RFC 4231 test case 2
    t.eq(wq.sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "sha256 abc")
    t.eq(wq.sha256(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "sha256 of nothing")
    t.eq(wq.hmac_sha256("Jefe", "what do ya want for nothing?"),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", "RFC 4231 case 2")
    t.eq(wq.hmac_sha256(string.rep("\xaa", 131),
        "Test Using Larger Than Block-Size Key - Hash Key First"),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", "RFC 4231 case 6")
    t.raises(function() wq.sha256(1) end, "sha256: bad argument 'data'", "a number is not bytes")
    t.raises(function() wq.hmac_sha256("k") end, "hmac_sha256: bad argument 'data'", "no data")
    t.raises(function() wq.hmac_sha256(nil, "d") end, "hmac_sha256: bad argument 'key'", "no key")
end

t.done()
