-- A service fed over HTTP: queue "jobs" has no handler, so posted items
-- stay in the state file for the test to read back; queue "seen" prints
-- each payload it handles (as %q) so the test can check every byte.
wq.queue("jobs")
wq.queue("seen", {handler = function(key, payload)
    io.write(("seen %s %q\n"):format(key, payload))
    io.flush()
end})
