-- A service fed over HTTP: queue "jobs" has no handler, so posted items
-- stay in the state file for the test to read back; queue "seen" prints
-- each payload it handles (as %q) so the test can check every byte.
wq.queue("jobs")
wq.queue("seen", {handler = function(key, payload)
    io.write(("seen %s %q\n"):format(key, payload))
    io.flush()
end})
-- queue "once" remembers finished keys for an hour (keep_done)
wq.queue("once", {keep_done = 3600, handler = function(key)
    io.write(("ran %s\n"):format(key))
    io.flush()
end})
