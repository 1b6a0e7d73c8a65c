-- Version 6 -> 7: claims that start at a floor (issue 17, table health). A
-- long transaction elsewhere keeps the index entries of every item claimed
-- after its snapshot at the head of jobs_claim; a claim from the head walked
-- them all (seconds after a minute of traffic). Runners now keep, per queue,
-- a ready time below which no pending item can be (pg.c's floor), and start
-- their walks there, one priority at a time:
--   levels    the priorities a queue's items have had (an add writes one the
--             first time it sees it), so that each walk starts at (queue,
--             priority, floor) without walking other levels' entries;
--   resets    counts the times items went back at their old places (a
--             released claim): a floor older than the count means nothing;
--   ready times of new items are the clock after the transaction has its
--             id (clock_timestamp(), not the transaction's start), so that an
--             item committed later than a runner looked is never older than
--             what the transactions running then could have written.
CREATE TABLE @S.levels (queue text NOT NULL, priority integer NOT NULL,
  PRIMARY KEY (queue, priority));
INSERT INTO @S.levels SELECT DISTINCT queue, priority FROM @S.jobs;
ALTER TABLE @S.queues ADD COLUMN resets bigint NOT NULL DEFAULT 0;
-- an item added in the reader's own transaction is queued, not waiting (its ready time
-- is the clock of its add, later than the transaction's start)
CREATE OR REPLACE VIEW @S.items AS SELECT queue, key, payload,
  CASE WHEN running THEN 'processing' WHEN run_at <= clock_timestamp() THEN 'queued'
    ELSE 'waiting' END AS state,
  CASE WHEN NOT running AND run_at > clock_timestamp() THEN run_at ELSE delay_at END
    AS ready_at,
  priority, grp, enqueued_at, requeues, last_error, requeues + 1 AS attempt, dirty,
  runner, token, claimed_at FROM @S.jobs;
UPDATE @S.meta SET value = '7' WHERE key = 'schema_version';
