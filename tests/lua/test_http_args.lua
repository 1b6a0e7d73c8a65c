-- wq.http's argument errors: each raises before any connection is made
-- (no server is needed; 127.0.0.1:9 is never contacted) with a message that
-- names the function and the argument: "http: bad argument 'url' (...)".
local t = require "wqtest"

local URL = "http://127.0.0.1:9/x"

-- bad(req, arg, text): wq.http(req) raises "http: bad argument 'arg' (...text...)"
local function bad(req, arg, text, what)
    local msg = t.raises(function() wq.http(req) end, "http: bad argument '" .. arg .. "' (",
        what or (arg .. ": " .. tostring(text)))
    if msg and text then
        t.matches(msg, text, (what or arg) .. ": says why")
    end
end

local function with(fields)
    local req = {url = URL}
    for k, v in pairs(fields) do
        req[k] = v
    end
    return req
end

-- the request itself
bad(nil, "request", "table expected, got nil")
bad(URL, "request", "table expected, got string", "a URL string instead of a table")
bad(with({bogus = 1}), "opts", "unknown option 'bogus'")
bad(with({URL = "x"}), "opts", "unknown option 'URL'", "options are case-sensitive")

-- url
bad({}, "url", "string expected, got nil", "no url")
bad({url = 42}, "url", "string expected, got number")
bad({url = "example.com/path"}, "url", "an absolute http:// or https:// URL expected", "no scheme")
bad({url = "/path/only"}, "url", "an absolute http:// or https:// URL expected", "a path")
bad({url = ""}, "url", "an absolute http:// or https:// URL expected", "empty")
bad({url = "ftp://example.com/file"}, "url", "scheme must be http or https", "ftp://")
bad({url = "file:///etc/passwd"}, "url", "scheme must be http or https", "file://")
bad({url = "http://exa mple.com/"}, "url", "http://exa mple.com/", "a space in the host")
bad({url = "http://example.com/\0x"}, "url", "NUL", "a NUL byte")

-- method
bad(with({method = "get"}), "method", "must be upper case")
bad(with({method = "GE T"}), "method", "a method name")
bad(with({method = ""}), "method", "a method name", "empty")
bad(with({method = 1}), "method", "a method name", "a number")

-- headers
bad(with({headers = "X-A: b"}), "headers", "table expected, got string")
bad(with({headers = {["X-A"] = "b\r\nX-Injected: 1"}}), "headers", "'X-A' contains a line break",
    "CR LF in a value")
bad(with({headers = {["X-A"] = "b\nc"}}), "headers", "contains a line break", "LF in a value")
bad(with({headers = {["X-A"] = "b\rc"}}), "headers", "contains a line break", "CR in a value")
bad(with({headers = {["X-A"] = "b\0c"}}), "headers", "NUL", "NUL in a value")
bad(with({headers = {["X-A"] = 1}}), "headers", "the value of 'X-A' must be a string, got number")
bad(with({headers = {["X-A"] = true}}), "headers", "must be a string, got boolean")
bad(with({headers = {["X-A"] = {"b"}}}), "headers", "must be a string, got table")
bad(with({headers = {"X-A: b"}}), "headers", "names must be strings", "a list, not a map")
bad(with({headers = {["Bad Name"] = "v"}}), "headers", "'Bad Name' is not a header name")
bad(with({headers = {["X-A:"] = "v"}}), "headers", "is not a header name", "a colon in the name")
bad(with({headers = {[""] = "v"}}), "headers", "is not a header name", "an empty name")
bad(with({headers = {["X\nY"] = "v"}}), "headers", "is not a header name", "a newline in the name")

-- body
bad(with({method = "POST", body = 42}), "body", "string or table expected, got number")
bad(with({method = "POST", body = true}), "body", "string or table expected, got boolean")
bad(with({method = "POST", body = print}), "body", "string or table expected, got function")
bad(with({method = "POST", body = {f = print}}), "body", nil, "a table JSON cannot encode")
bad(with({method = "HEAD", body = "x"}), "body", "a HEAD request has no body")
bad(with({method = "HEAD", body = {}}), "body", "a HEAD request has no body", "HEAD, table body")

-- query
bad(with({query = "a=1"}), "query", "table expected, got string")
bad(with({query = {a = true}}), "query", "the value of 'a' must be a string or a number, got boolean")
bad(with({query = {a = {"x", false}}}), "query", "got boolean", "in a list")
bad(with({query = {"x"}}), "query", "names must be strings")

-- timeouts
bad(with({timeout = -1}), "timeout", "must be >= 0", "negative")
bad(with({timeout = 0 / 0}), "timeout", "must be finite", "nan")
bad(with({timeout = math.huge}), "timeout", "must be finite", "inf")
bad(with({timeout = "5"}), "timeout", "number expected, got string")
bad(with({connect_timeout = -0.5}), "connect_timeout", "must be >= 0", "negative")
bad(with({connect_timeout = {}}), "connect_timeout", "number expected, got table")

-- redirects
bad(with({redirects = -1}), "redirects", "a boolean or a count from 0 to 1000 expected", "negative")
bad(with({redirects = 1.5}), "redirects", "a boolean or a count", "a fraction")
bad(with({redirects = 1001}), "redirects", "a boolean or a count", "over 1000")
bad(with({redirects = "yes"}), "redirects", "a boolean or a count", "a string")

-- verify
bad(with({verify = "no"}), "verify", "boolean expected")
bad(with({verify = 0}), "verify", "boolean expected", "0 is not false")

-- max_body
bad(with({max_body = -1}), "max_body", "a byte count (integer >= 0) expected", "negative")
bad(with({max_body = 1.5}), "max_body", "a byte count", "a fraction")
bad(with({max_body = "1M"}), "max_body", "a byte count", "a string")
bad(with({max_body = 0 / 0}), "max_body", "a byte count", "nan")

-- the first bad argument is the one named, and nothing was sent: a valid
-- request to the same URL afterwards fails with a transport error only
local r, err = wq.http({url = URL, timeout = 5})
t.eq(r, nil, "a valid request to a closed port")
t.matches(err, "^http: GET " .. URL .. ": ", "is a transport failure, not an argument error")

-- and the argument checks come before the task check: outside a task the
-- message is still about the argument
local ok, msg = pcall(coroutine.wrap(function() return wq.http({url = "ftp://x"}) end))
t.eq(ok, false, "raised in a coroutine of the script's own")
t.matches(msg, "http: bad argument 'url'", "about the argument")
ok, msg = pcall(coroutine.wrap(function() return wq.http({url = URL}) end))
t.eq(ok, false, "a valid request outside a task")
t.matches(msg, "http: cannot wait here", "cannot wait there")

t.done()
