-- backends: all
-- A process pool as a queue's handler (SPEC 10.1): the request is {queue,
-- key, payload, attempt}; {"result": ...} is a success (kept by keep_done),
-- {"error"} a failure retried with the attempts counted, {"retry_in": s} a
-- retry after s, {"permanent": true} a dead letter at once, a reply with
-- neither a failure whose process is replaced; a cancelled job's process is
-- killed and replaced. Without --db it runs itself again on a SQLite --db.
local t = require "wqtest"
t.watchdog(90)

local p = assert(wq.pool({"python3", "pool_worker.py"}, {size = 2}))
local q = wq.queue("poolh", {handler = p, max_retries = 2, keep_done = 600,
    limiter = wq.limiter.exponential(0.01, 0.01)})
t.eq(q:stats().workers, 2, "workers default to the pool's size")

t.raises(function() wq.queue("bad", {handler = 5}) end,
    "queue: bad argument 'handler' (function or pool expected, got number)")

q:add("ok-1", {op = "ok", n = 1, s = "é\n"})
q:add("ok-2") -- no payload: null
q:add("weird/\"key\"\1", {op = "ok"})
q:add("err", {op = "error"})
q:add("retry", {op = "retry", s = 0.3})
q:add("perm", {op = "permanent"})
q:add("flaky", {op = "flaky", ["until"] = 3})
q:add("neither", {op = "neither"})

local function finished()
    local st = q:stats()
    return st.processing == 0 and st.depth == 0 and st.waiting == 0
end
local t0 = wq.now()
t.ok(t.wait_until(finished, 30), "every job finished")

local r = q:item("ok-1")
t.eq(r and r.state, "done")
t.eq(r and r.result, {key = "ok-1", attempt = 1, queue = "poolh", payload = {op = "ok", n = 1, s = "é\n"}},
    "the request carried queue, key, payload and attempt; the result is kept")
r = q:item("ok-2")
t.eq(r and r.result and r.result.payload, {}, "no payload: null, as the worker saw it")
r = q:item("weird/\"key\"\1")
t.eq(r and r.result and r.result.key, "weird/\"key\"\1", "a key with quotes and control bytes, exactly")
r = q:item("flaky")
t.eq(r and r.state, "done", "flaky succeeded on its third attempt")

local dead = {}
for _, d in ipairs(q:dead()) do dead[d.key] = d end
t.eq(dead.err and dead.err.error, "boom err", "error: the message")
t.eq(dead.err and dead.err.attempts, 3, "error: retried up to max_retries (3 runs)")
t.eq(dead.err and dead.err.payload, {op = "error"})
t.eq(dead.perm and dead.perm.error, "never", "permanent: the message")
t.eq(dead.perm and dead.perm.attempts, 1, "permanent: dead at once, as wq.fail")
t.eq(dead.retry and dead.retry.error, "later")
t.eq(dead.retry and dead.retry.attempts, 3, "retry_in: counted as a failure")
t.ok(wq.now() - t0 >= 0.6, "retry_in: two retries after 0.3 s each (not the limiter's 0.01 s)")
t.matches(dead.neither and dead.neither.error or "", 'bad reply line from process')
t.matches(dead.neither and dead.neither.error or "", 'neither "result" nor "error"')
t.eq(dead["ok-1"], nil)
t.eq(dead.flaky, nil)
local st = q:stats()
t.eq(st.succeeded, 4)
t.eq(st.failures, 3 + 1 + 3 + 2 + 3, "failures: err 3, perm 1, retry 3, flaky 2, neither 3")

do -- cancel of a running job: its process is killed and replaced; no retry, no dead letter
    local pidfile = os.tmpname()
    os.remove(pidfile)
    q:add("long", {op = "sleep", s = 60, pidfile = pidfile})
    local pid = t.wait_pid(pidfile, 10)
    t.ok(pid, "the job started on a process")
    local started = p:stats().started
    t.eq(q:cancel("long"), true)
    t.ok(t.wait_until(function() return q:stats().processing == 0 end, 5), "the job ended")
    t.eq(q:stats().cancelled, 1)
    t.ok(t.wait_until(function()
        local f = io.open("/proc/" .. pid .. "/stat")
        local s = f and f:read("a")
        if f then f:close() end
        return not s or s:match("^%d+ %b() Z") ~= nil
    end, 5), "its process was killed")
    t.eq(p:stats().started, started + 1, "and replaced")
    t.eq(p:stats().running, 2)
    q:add("after", {op = "ok"})
    t.ok(t.wait_until(function() return q:item("after") and q:item("after").state == "done" end, 10),
        "the pool serves the next job")
    os.remove(pidfile)
end

do -- a pool process killed mid-job (kill -9): the run fails naming it, the process is
    -- replaced, and the retry (attempt 2, a failure counted) succeeds
    local pidfile = os.tmpname()
    os.remove(pidfile)
    local started, failures = p:stats().started, q:stats().failures
    q:add("killed", {op = "sleep_first", s = 60, pidfile = pidfile})
    local pid = t.wait_pid(pidfile, 10)
    t.ok(pid, "the job started on a process")
    t.eq(wq.exec({"kill", "-9", tostring(pid)}).status, 0, "kill -9 of the pool process")
    t.ok(t.wait_until(function() return q:item("killed") and q:item("killed").state == "done" end, 10),
        "the job ran again and succeeded")
    t.eq(q:item("killed") and q:item("killed").result, {attempt = 2}, "on its second attempt")
    t.eq(q:stats().failures, failures + 1, "the killed run counted as a failure")
    t.eq(p:stats().started, started + 1, "the process was replaced")
    local dead = false
    for _, d in ipairs(q:dead()) do dead = dead or d.key == "killed" end
    t.eq(dead, false, "no dead letter")
    os.remove(pidfile)
end

-- The same on a SQLite state file (this script again, with --db).
local wqrun = os.getenv("WQRUN")
if wqrun and not os.getenv("WQ_BACKEND") and not os.getenv("WQ_POOL_NESTED") then
    local db = os.tmpname()
    local res = wq.exec({wqrun, "--quiet", "--db", db, arg[0]}, {env = {WQ_POOL_NESTED = "1"}})
    t.eq(res.status, 0, "on --db SQLite: the same checks pass: " .. res.stderr)
    t.matches(res.stdout .. res.stderr, "checks passed")
    for _, name in ipairs({db, db .. "-wal", db .. "-shm"}) do os.remove(name) end
end
p:close()
t.done()
