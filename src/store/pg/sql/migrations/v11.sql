-- Version 10 -> 11: the history of finished runs (SPEC 11). A row per run that ended done,
-- dead, cancelled or removed, written in the transaction of the outcome that ended it
-- (finish(), reap(), remove()), kept for queues.history seconds (the definition of the runner
-- that defined the queue last; 0: none kept) and pruned in slices by the runners. Its
-- primary key (queue, id) is the order the runs finished in per queue: a listing walks it
-- newest first, a prune deletes at its old end. history_key finds a key's last run (q:item,
-- wqrun show).
ALTER TABLE @S.queues ADD COLUMN history double precision NOT NULL DEFAULT 86400;
CREATE TABLE @S.history (id bigint GENERATED ALWAYS AS IDENTITY, queue text NOT NULL,
  key text NOT NULL,
  state text NOT NULL CHECK (state IN ('done', 'dead', 'cancelled', 'removed')),
  added_at timestamptz, started_at timestamptz, finished_at timestamptz NOT NULL,
  attempts integer NOT NULL, runner text, result jsonb, error text,
  PRIMARY KEY (queue, id));
CREATE INDEX history_key ON @S.history (queue, key, id);
-- finish() takes whether the runner keeps done keys (p_keep) and history (p_hist)
DROP FUNCTION IF EXISTS @S.finish(text, bigint, text[], bigint[], smallint[],
  double precision[], integer[], text[], jsonb[], jsonb[], integer, jsonb[]);
UPDATE @S.meta SET value = '11' WHERE key = 'schema_version';
