CREATE OR REPLACE FUNCTION @S.check_queue(fn text, queue text) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  IF queue IS NULL OR queue !~ '^[A-Za-z0-9_.-]{1,64}$' THEN
    RAISE EXCEPTION '%: bad argument ''queue'' (1-64 characters of [A-Za-z0-9_.-], got %)',
      fn, coalesce(quote_literal(queue), 'NULL') USING ERRCODE = '22023';
  END IF;
END $fn$;
-- known_queue: a runner defined it, or it holds items or dead letters.
CREATE OR REPLACE FUNCTION @S.known_queue(p_queue text) RETURNS boolean LANGUAGE sql STABLE AS $fn$
  SELECT EXISTS (SELECT 1 FROM @S.queues q WHERE q.name = p_queue)
      OR EXISTS (SELECT 1 FROM @S.jobs j WHERE j.queue = p_queue)
      OR EXISTS (SELECT 1 FROM @S.dead d WHERE d.queue = p_queue) $fn$;
-- pause: whether it changed; every runner stops handing the queue's items out.
CREATE OR REPLACE FUNCTION @S.pause(p_queue text, p_paused boolean DEFAULT true) RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE v_was boolean;
BEGIN
  PERFORM @S.check_queue('wqrun.pause', p_queue);
  IF p_paused IS NULL THEN
    RAISE EXCEPTION 'wqrun.pause: bad argument ''paused'' (NULL)' USING ERRCODE = '22023';
  END IF;
  INSERT INTO @S.queues AS q (name, paused) VALUES (p_queue, false) ON CONFLICT DO NOTHING;
  SELECT q.paused INTO v_was FROM @S.queues q WHERE q.name = p_queue FOR UPDATE;
  IF v_was = p_paused THEN RETURN false; END IF;
  UPDATE @S.queues q SET paused = p_paused, updated_at = now() WHERE q.name = p_queue;
  PERFORM pg_notify(@L, '!control');
  RETURN true;
END $fn$;
-- remove: a pending item that no handler runs.
CREATE OR REPLACE FUNCTION @S.remove(p_queue text, p_key text) RETURNS text LANGUAGE plpgsql AS $fn$
BEGIN
  DELETE FROM @S.jobs j WHERE j.queue = p_queue AND j.key = p_key AND NOT j.running;
  IF FOUND THEN RETURN 'removed'; END IF;
  IF EXISTS (SELECT 1 FROM @S.jobs j WHERE j.queue = p_queue AND j.key = p_key) THEN
    RETURN 'processing';
  END IF;
  RETURN 'absent';
END $fn$;
-- cancel: tells the runner that runs the key.
CREATE OR REPLACE FUNCTION @S.cancel(p_queue text, p_key text) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE r record;
BEGIN
  SELECT j.running, j.runner, j.token INTO r FROM @S.jobs j
   WHERE j.queue = p_queue AND j.key = p_key;
  IF NOT FOUND THEN RETURN 'absent'; END IF;
  IF NOT r.running THEN RETURN 'not processing'; END IF;
  INSERT INTO @S.signals (runner, queue, key, token) VALUES (r.runner, p_queue, p_key, r.token);
  PERFORM pg_notify(@L, '!control');
  RETURN 'cancelling';
END $fn$;
-- retry_dead: dead letters back into the queue (all with p_key NULL), failure count clean,
-- in the order they died. Rows by key, each item's row before its dead letter (the lock
-- order: 10-groups.sql).
CREATE OR REPLACE FUNCTION @S.retry_dead(p_queue text, p_key text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE d record; n integer := 0; v_now timestamptz; v_payload jsonb; r record;
BEGIN
  PERFORM pg_current_xact_id(); -- ready times: see add()
  v_now := clock_timestamp();
  FOR d IN WITH o AS MATERIALIZED (SELECT x.key FROM @S.dead x
                 WHERE x.queue = p_queue AND (p_key IS NULL OR x.key = p_key)
                 ORDER BY x.failed_at, x.key),
           s AS MATERIALIZED (SELECT o.key, nextval('@S.seq') AS seq FROM o)
           SELECT s.key, s.seq FROM s ORDER BY s.key LOOP
    PERFORM 1 FROM @S.jobs j WHERE j.queue = p_queue AND j.key = d.key FOR UPDATE;
    DELETE FROM @S.dead x WHERE x.queue = p_queue AND x.key = d.key
      RETURNING x.payload INTO v_payload;
    CONTINUE WHEN NOT FOUND; -- retried (or run) meanwhile
    r := @S.add_one(p_queue, d.key, v_payload, NULL, NULL, NULL, false, false, v_now, d.seq);
    UPDATE @S.jobs j SET requeues = 0, last_error = NULL, crashes = 0
     WHERE j.queue = p_queue AND j.key = d.key AND NOT j.running;
    n := n + 1;
  END LOOP;
  IF n > 0 AND EXISTS (SELECT 1 FROM @S.waiting w WHERE w.queue = p_queue) THEN
    PERFORM pg_notify(@L, p_queue);
  END IF;
  RETURN n;
END $fn$;
