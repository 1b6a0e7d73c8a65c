CREATE OR REPLACE FUNCTION @S.check_queue(fn text, queue text) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  IF queue IS NULL OR queue !~ '^[A-Za-z0-9_.-]+$' OR length(queue) > 64 THEN -- see add_many
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
-- remove: a pending item that no handler runs; a flow node's item or a blocked node: the
-- node is dead ('removed'), and so are the nodes that wait for it (70-flows.sql).
-- In the history of a queue that keeps one (SPEC 11): 'removed', with no runner (none ran it).
CREATE OR REPLACE FUNCTION @S.remove(p_queue text, p_key text) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE v_node bigint; v_added timestamptz; v_req integer;
BEGIN
  DELETE FROM @S.jobs j WHERE j.queue = p_queue AND j.key = p_key AND NOT j.running
    RETURNING j.node, j.enqueued_at, j.requeues INTO v_node, v_added, v_req;
  IF FOUND THEN
    INSERT INTO @S.history (queue, key, state, added_at, finished_at, attempts)
      SELECT p_queue, p_key, 'removed', v_added, clock_timestamp(), v_req
       WHERE EXISTS (SELECT 1 FROM @S.queues q WHERE q.name = p_queue AND q.history > 0);
    IF v_node IS NOT NULL THEN PERFORM @S.flow_finished(v_node, true, NULL, 'removed'); END IF;
    RETURN 'removed';
  END IF;
  IF EXISTS (SELECT 1 FROM @S.jobs j WHERE j.queue = p_queue AND j.key = p_key) THEN
    RETURN 'processing';
  END IF;
  SELECT n.id INTO v_node FROM @S.flow_nodes n WHERE n.queue = p_queue AND n.key = p_key
     AND n.state = 'blocked' FOR UPDATE;
  IF FOUND THEN
    PERFORM @S.flow_finished(v_node, true, NULL, 'removed');
    RETURN 'removed';
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
DECLARE d record; n integer := 0; v_now timestamptz; v_payload jsonb; r record; v_node bigint;
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
    -- a dead flow node of the key (the latest that died of its own, no unfinished node has
    -- the key): its item again, and the nodes it killed come back (flow_revive)
    SELECT x.id INTO v_node FROM @S.flow_nodes x WHERE x.queue = p_queue AND x.key = d.key
       AND x.state = 'dead' AND x.cause IS NULL
       AND NOT EXISTS (SELECT 1 FROM @S.flow_nodes y WHERE y.queue = p_queue AND y.key = d.key
                         AND y.state IN ('blocked', 'pending'))
     ORDER BY x.finished_at DESC, x.id DESC LIMIT 1 FOR UPDATE OF x;
    r := @S.add_one(p_queue, d.key, v_payload, NULL, NULL, NULL, false, false, v_now, d.seq,
                    v_node);
    UPDATE @S.jobs j SET requeues = 0, last_error = NULL, crashes = 0
     WHERE j.queue = p_queue AND j.key = d.key AND NOT j.running;
    IF v_node IS NOT NULL THEN PERFORM @S.flow_revive(v_node); END IF;
    n := n + 1;
  END LOOP;
  IF n > 0 AND EXISTS (SELECT 1 FROM @S.waiting w WHERE w.queue = p_queue) THEN
    PERFORM pg_notify(@L, p_queue);
  END IF;
  RETURN n;
END $fn$;
