-- The other half of SPEC section 2's rule: a delayed item in a queue without
-- a handler keeps the process alive while a task waits in that queue's get.
-- The main chunk ends at once; the task gets the item after its delay.
local q = wq.queue("later")
q:add_after("soon", 0.5, {made_by = "producer"})
wq.spawn(function()
    local key, payload = q:get()
    print("got " .. key .. " " .. payload.made_by)
    q:done(key)
end)
