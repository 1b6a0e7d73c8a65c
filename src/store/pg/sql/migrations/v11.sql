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
-- A running item's latest job:progress (SPEC 11), set at most once a second per job by the
-- runner that runs it, cleared when the run ends; the items view shows it (last column).
ALTER TABLE @S.jobs ADD COLUMN progress jsonb;
CREATE OR REPLACE VIEW @S.items AS SELECT queue, key, payload,
  CASE WHEN running THEN 'processing' WHEN run_at <= clock_timestamp() THEN 'queued'
    ELSE 'waiting' END AS state,
  CASE WHEN NOT running AND run_at > clock_timestamp() THEN run_at ELSE delay_at END
    AS ready_at,
  priority, grp, enqueued_at, requeues, last_error, requeues + 1 AS attempt, dirty,
  runner, token, claimed_at, NULL::integer AS waits,
  CASE WHEN node IS NOT NULL THEN (SELECT n.flow FROM @S.flow_nodes n WHERE n.id = node) END
    AS flow, progress
  FROM @S.jobs
  UNION ALL SELECT n.queue, n.key, n.payload, 'blocked', NULL::timestamptz, n.priority, n.grp,
    NULL::timestamptz, 0, NULL::text, 1, false, NULL::bigint, NULL::bigint, NULL::timestamptz,
    n.waits, n.flow, NULL::jsonb
  FROM @S.flow_nodes n WHERE n.state = 'blocked';
UPDATE @S.meta SET value = '11' WHERE key = 'schema_version';
