-- A producer: adds a delayed item to a queue without a handler and ends.
-- Nobody waits for the item, so the process exits at once (SPEC section 2)
-- and the item stays in the state file, waiting.
local q = wq.queue("later")
q:add_after("later", 3600, {made_by = "producer"})
