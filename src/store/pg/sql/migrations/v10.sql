-- Version 9 -> 10: the queue option unique = true (SPEC 12), and dead letters' tracebacks. queues.unique_adds is the
-- definition of the runner that defined the queue last: an add that says neither
-- unique_add => true nor false (wqrun add, SQL) is unique when it is true. add() changes
-- its parameter's default from false to NULL (not said), so it is made anew.
ALTER TABLE @S.queues ADD COLUMN unique_adds boolean;
-- A dead letter keeps its last failure's Lua traceback (finish() takes it after the message).
ALTER TABLE @S.dead ADD COLUMN traceback text;
-- When a runner took its lock again after a reconnect (a database restart): reap() trusts the
-- lock of a runner that took it since the database started (see 40-finish.sql).
ALTER TABLE @S.runners ADD COLUMN locked_at timestamptz;
DROP FUNCTION IF EXISTS @S.add(text, text, jsonb, double precision, integer, text, boolean,
  boolean);
-- reap() tells whom it reaped and which keys (for the reaping runner's log)
DROP FUNCTION IF EXISTS @S.reap(integer);
UPDATE @S.meta SET value = '10' WHERE key = 'schema_version';
