-- finish: outcomes of claimed items, fenced by token, and the items it claims for the
-- runner (as a claim returns them: see below), then one row with o_stale:
-- how many outcomes were stale. One primary-key statement per item: its plan cannot
-- depend on statistics. p_done (keep_done) holds, per item, what a success leaves in
-- `done`: its result, JSON null for none, or SQL NULL for nothing (the whole array NULL
-- when the queue keeps nothing); p_take: how many items the runner can start now. Flow nodes
-- (SPEC 9): p_results holds, per item, a node's result (JSON; SQL NULL: none, and the whole
-- array NULL when the batch has none), kept with its node whatever keep_done; kind 5 is a
-- cancelled node (its item goes as a success's does, its node is dead: 'cancelled'). An item
-- of a node that leaves its queue finishes its node (flow_finish_all), done or dead; one that
-- stays (re-added while it ran) does not. p_keep: whether p_done's results are kept in `done`
-- (they may be there for the history alone). p_hist: the runner keeps history (SPEC 11): every
-- run that ends done, dead or cancelled leaves a row in `history` (a cancel is kind 5 for any
-- item), in this transaction; a success's result is its p_done element.
CREATE OR REPLACE FUNCTION @S.finish(p_queue text, p_runner bigint, p_keys text[], p_tokens bigint[],
    p_kinds smallint[], p_delays double precision[], p_requeues integer[], p_errors text[],
    p_payloads jsonb[], p_done jsonb[] DEFAULT NULL, p_take integer DEFAULT 0,
    p_results jsonb[] DEFAULT NULL, p_keep boolean DEFAULT true, p_hist boolean DEFAULT false)
RETURNS TABLE (o_stale integer, o_key text, o_payload jsonb, o_priority integer, o_token bigint,
    o_requeues integer, o_enqueued double precision, o_grp text, o_run_at double precision,
    o_seq bigint, o_flow text, o_deps jsonb) LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz;
  v_dead boolean := EXISTS (SELECT 1 FROM @S.dead d WHERE d.queue = p_queue);
  n integer := 0; k smallint; v_payload jsonb; v_retry timestamptz; o record;
  v_gone text[]; v_goneset jsonb; v_grps text[]; v_grp text; q @S.queues%ROWTYPE;
  v_hand tid[]; v_hg text[]; v_nc bigint := 0; v_node bigint; v_fk text[];
  v_fn bigint[]; v_fd boolean[]; v_fr jsonb[]; v_fe text[];
  v_msg text; v_tb text; v_at integer;
  v_runner text; v_res jsonb; v_added timestamptz; v_started timestamptz; v_req integer;
  v_went boolean;
BEGIN
  PERFORM pg_current_xact_id(); -- ready times: see add()
  v_now := clock_timestamp();
  -- The common case in one statement: successes with nothing pending after them. A token
  -- is unique to one claim, so key and token matching each some pair is that pair. Each
  -- row is found by its own primary key lookup (a LATERAL subquery with LIMIT is planned
  -- as one, whatever the statistics say) and deleted by its tuple id: a plan that scans
  -- the queue's range of the key index instead (which ANALYZE at a moment of few live
  -- rows made the generic plan) walks every entry a long transaction keeps: seconds.
  -- The lock order (10-groups.sql): a batch with other outcomes than successes locks all
  -- its rows in key order first, so that the statements after this one wait for nothing.
  -- A batch of successes alone is deleted in one statement, in the order of its rows'
  -- tuple ids (a key-ordered join instead let the planner pick a hash join over the whole
  -- table now and then: twice the database's time per job, measured): only a producer
  -- that re-adds, in one transaction, two keys of such a batch while they run can meet it
  -- in a circle (docs/postgres.md).
  IF EXISTS (SELECT 1 FROM unnest(p_kinds) AS u(kind) WHERE u.kind NOT IN (0, 1)) THEN
    -- (each key with its own token: `token = ANY (p_tokens)` in this cached plan compared each
    -- row with the whole array, the batch's size squared; a batch of a runner that fell behind
    -- grows, and this statement then took most of its time: 4-17 k jobs/s instead of 40 k)
    PERFORM 1 FROM (SELECT u.key, u.token FROM unnest(p_keys, p_tokens) AS u(key, token)
                     ORDER BY u.key) s,
      LATERAL (SELECT 1 FROM @S.jobs y WHERE y.queue = p_queue AND y.key = s.key
                 AND y.token = s.token LIMIT 1 FOR UPDATE) x;
  END IF;
  -- The history's rows of these successes in one INSERT from what the DELETE returns: the
  -- results found by key in one JSON object (a join with the arrays could be planned as a
  -- nested loop: the batch's size squared).
  IF p_hist THEN
    SELECT r.name INTO v_runner FROM @S.runners r WHERE r.id = p_runner;
    IF p_done IS NOT NULL THEN
      SELECT jsonb_object_agg(u.key, u.res) INTO v_res
        FROM unnest(p_keys, p_done) AS u(key, res) WHERE u.res IS NOT NULL;
    END IF;
  END IF;
  -- Run as a one-shot plan (EXECUTE ... USING): its parameters are constants to the planner,
  -- so the fence `token = ANY ($4)` is a hashed lookup per row. A cached generic plan tested
  -- each row against the whole array: the batch's size squared (a batch of thousands, when
  -- the database falls behind, spent most of its time there, and fell further behind).
  EXECUTE $q$WITH g AS (DELETE FROM @S.jobs j WHERE j.ctid = ANY (ARRAY(SELECT x.ctid
        FROM unnest($2, $3) AS u(key, kind),
          LATERAL (SELECT y.ctid FROM @S.jobs y WHERE y.queue = $1 AND y.key = u.key
                   LIMIT 1) x
       WHERE u.kind IN (0, 1)))
      AND j.token = ANY ($4) AND j.running AND NOT j.dirty AND j.delay_at IS NULL
      RETURNING j.key, j.grp, j.node, j.enqueued_at, j.claimed_at, j.requeues),
    h AS (INSERT INTO @S.history (queue, key, state, added_at, started_at, finished_at,
            attempts, runner, result)
          SELECT $1, g.key, 'done', g.enqueued_at, g.claimed_at, $6, g.requeues + 1,
                 $7, nullif($8 -> g.key, 'null'::jsonb)
            FROM g WHERE $5)
  SELECT coalesce(array_agg(g.key), '{}'), array_agg(g.grp) FILTER (WHERE g.grp IS NOT NULL),
         array_agg(g.node) FILTER (WHERE g.node IS NOT NULL),
         array_agg(g.key) FILTER (WHERE g.node IS NOT NULL) FROM g$q$
    INTO v_gone, v_grps, v_fn, v_fk
    USING p_queue, p_keys, p_kinds, p_tokens, p_hist, v_now, v_runner, v_res;
  n := cardinality(v_gone);
  -- the keys gone, as a set looked up in C (`key = ANY (v_gone)` compared each item with the
  -- whole array: the batch's size squared, which a batch with one retry among a thousand
  -- successes paid in the loop below)
  IF n > 0 AND (n < coalesce(cardinality(p_keys), 0) OR (p_done IS NOT NULL AND p_keep)) THEN
    SELECT jsonb_object_agg(g.key, true) INTO v_goneset FROM unnest(v_gone) AS g(key);
  END IF;
  v_goneset := coalesce(v_goneset, '{}');
  IF v_fn IS NOT NULL THEN -- flow nodes done, with their results
    SELECT array_agg(false), array_agg(NULL::text),
           array_agg((SELECT r.res FROM unnest(p_keys, p_results) AS r(key, res)
                       WHERE r.key = f.key LIMIT 1) ORDER BY f.o)
      INTO v_fd, v_fe, v_fr FROM unnest(v_fk) WITH ORDINALITY AS f(key, o);
  END IF;
  IF v_dead AND n > 0 THEN
    DELETE FROM @S.dead d WHERE d.queue = p_queue AND d.key = ANY (v_gone);
  END IF;
  IF p_done IS NOT NULL AND p_keep AND n > 0 THEN
    INSERT INTO @S.done AS d (queue, key, finished_at, result)
      SELECT p_queue, u.key, v_now, nullif(u.res, 'null'::jsonb)
        FROM unnest(p_keys, p_kinds, p_done) AS u(key, kind, res)
       WHERE u.kind = 1 AND u.res IS NOT NULL AND v_goneset ? u.key ORDER BY u.key
      ON CONFLICT (queue, key) DO UPDATE SET finished_at = EXCLUDED.finished_at,
        result = EXCLUDED.result;
  END IF;
  -- the rest one by one (one pass over the arrays: subscripting one copies it)
  IF n < coalesce(cardinality(p_keys), 0) THEN
  FOR o IN SELECT * FROM unnest(p_keys, p_tokens, p_kinds, p_delays, p_requeues, p_errors,
                                p_payloads, p_done, p_results) AS u(key, token, kind, delay,
                                requeues, err, payload, res, nres)
             WHERE u.kind NOT IN (0, 1) OR NOT (v_goneset ? u.key) ORDER BY u.key LOOP
    k := o.kind;
    v_node := NULL;
    IF k IN (0, 1, 3, 5) THEN -- nothing else pending: the row goes
      DELETE FROM @S.jobs j WHERE j.queue = p_queue AND j.key = o.key
        AND j.token = o.token AND j.running AND NOT j.dirty AND j.delay_at IS NULL
        RETURNING j.payload, j.grp, j.node, j.enqueued_at, j.claimed_at, j.requeues
          INTO v_payload, v_grp, v_node, v_added, v_started, v_req;
      v_went := FOUND;
      -- re-added while it ran: the row stays, this run still ends (the history's times)
      IF NOT v_went AND p_hist THEN
        SELECT j.enqueued_at, j.claimed_at, j.requeues INTO v_added, v_started, v_req
          FROM @S.jobs j WHERE j.queue = p_queue AND j.key = o.key AND j.token = o.token
           AND j.running;
      END IF;
      -- a dead letter's error: its message, then its traceback (dead.traceback)
      v_at := CASE WHEN k = 3 THEN strpos(o.err, E'\nstack traceback:') ELSE 0 END;
      v_msg := CASE WHEN v_at > 0 THEN left(o.err, v_at - 1) ELSE o.err END;
      v_tb := CASE WHEN v_at > 0 THEN substr(o.err, v_at + 1) END;
      IF v_node IS NOT NULL THEN -- its node finished
        v_fn := v_fn || v_node; v_fd := v_fd || (k IN (3, 5));
        v_fr := v_fr || CASE WHEN k IN (0, 1) THEN o.nres END;
        v_fe := v_fe || CASE WHEN k = 3 THEN v_msg WHEN k = 5 THEN 'cancelled' END;
      END IF;
    END IF;
    IF k NOT IN (0, 1, 3, 5) OR NOT v_went THEN
      v_retry := CASE WHEN k = 2 THEN v_now + make_interval(secs => greatest(o.delay, 0)) END;
      UPDATE @S.jobs j SET running = false, runner = NULL, token = NULL, claimed_at = NULL,
          crashes = CASE WHEN k = 4 THEN j.crashes ELSE 0 END,
          dirty = CASE WHEN k = 4 THEN j.dirty ELSE false END,
          requeues = CASE WHEN k IN (0, 4) THEN j.requeues WHEN k = 2 THEN o.requeues ELSE 0 END,
          last_error = CASE WHEN k IN (0, 4) THEN j.last_error WHEN k = 2 THEN o.err END,
          payload = coalesce(o.payload, j.payload), progress = NULL,
          -- again: re-added (or a delayed add came due) while running: queued now
          run_at = CASE WHEN k = 4 THEN j.run_at
                        WHEN j.dirty OR j.delay_at <= v_now THEN v_now
                        ELSE least(v_retry, j.delay_at) END,
          delay_at = CASE WHEN k = 4 THEN j.delay_at
                          WHEN j.dirty OR j.delay_at <= v_now THEN
                            least(v_retry, CASE WHEN j.delay_at > v_now THEN j.delay_at END)
                     END,
          seq = CASE WHEN k = 4 THEN j.seq ELSE nextval('@S.seq') END
        WHERE j.queue = p_queue AND j.key = o.key AND j.token = o.token AND j.running
        RETURNING j.payload, j.grp INTO v_payload, v_grp;
      IF NOT FOUND THEN CONTINUE; END IF; -- stale: taken over meanwhile
    END IF;
    n := n + 1;
    IF v_grp IS NOT NULL THEN v_grps := v_grps || v_grp; END IF;
    IF k = 3 THEN
      INSERT INTO @S.dead AS d (queue, key, payload, error, attempts, failed_at, traceback)
        VALUES (p_queue, o.key, v_payload, v_msg, o.requeues, v_now, v_tb)
        ON CONFLICT (queue, key) DO UPDATE SET payload = EXCLUDED.payload,
          error = EXCLUDED.error, attempts = EXCLUDED.attempts, failed_at = EXCLUDED.failed_at,
          traceback = EXCLUDED.traceback;
      v_dead := true;
    ELSIF (k = 1 OR (k = 5 AND v_node IS NOT NULL)) AND v_dead THEN
      DELETE FROM @S.dead d WHERE d.queue = p_queue AND d.key = o.key;
    END IF;
    IF p_hist AND k IN (0, 1, 3, 5) THEN
      INSERT INTO @S.history (queue, key, state, added_at, started_at, finished_at, attempts,
          runner, result, error)
        VALUES (p_queue, o.key, CASE k WHEN 3 THEN 'dead' WHEN 5 THEN 'cancelled' ELSE 'done' END,
          v_added, v_started, v_now, CASE WHEN k = 3 THEN o.requeues ELSE v_req + 1 END,
          v_runner, CASE WHEN k IN (0, 1) THEN nullif(o.res, 'null'::jsonb) END,
          CASE k WHEN 3 THEN v_msg WHEN 5 THEN 'cancelled' END);
    END IF;
    IF k = 1 AND p_keep AND o.res IS NOT NULL THEN
      INSERT INTO @S.done AS d (queue, key, finished_at, result)
        VALUES (p_queue, o.key, v_now, nullif(o.res, 'null'::jsonb))
        ON CONFLICT (queue, key) DO UPDATE SET finished_at = EXCLUDED.finished_at,
          result = EXCLUDED.result;
    END IF;
  END LOOP;
  END IF;
  -- the nodes finished (their rows after the items', see 70-flows.sql)
  IF v_fn IS NOT NULL THEN PERFORM @S.flow_finish_all(v_fn, v_fd, v_fr, v_fe); END IF;
  -- The runner can start p_take items now: the first p_take in priority then FIFO order
  -- among the next held items of the groups these outcomes freed slots in (the heads) and
  -- the items claimable now. A head among them is handed over: claimed for this runner at
  -- once, in its group's freed slot, whose count of running items stays as it is (one out,
  -- one in), so the group's row is neither written nor locked. The claimable ones among
  -- them are claimed as claim() does, after the other freed slots are counted down. Heads
  -- of groups with a rate, and queues with one, go through claim() (budgets are counted
  -- there).
  IF p_take > 0 THEN
    SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue;
    IF q.q_rate > 0 THEN
      v_nc := p_take;
    ELSIF NOT q.paused AND EXISTS (SELECT 1 FROM @S.runners r WHERE r.id = p_runner) THEN
      SELECT array_agg(t.id) FILTER (WHERE t.head), array_agg(t.grp) FILTER (WHERE t.head),
             count(*) FILTER (WHERE NOT t.head)
        INTO v_hand, v_hg, v_nc
        FROM (SELECT u.head, u.id, u.grp FROM (
                SELECT true AS head, h.id, f.g AS grp, h.priority, h.run_at, h.seq
                  FROM (SELECT g, count(*) AS n FROM unnest(v_grps) g GROUP BY g) f
                  CROSS JOIN LATERAL (SELECT x FROM @S.groups x WHERE x.queue = p_queue
                      AND x.grp = f.g AND NOT coalesce(@S.rate_of(x, q) > 0, false)) gx
                  CROSS JOIN LATERAL (SELECT h.ctid AS id, h.priority, h.run_at, h.seq
                      FROM @S.jobs h WHERE h.queue = p_queue AND h.grp = f.g AND h.held
                      ORDER BY h.priority DESC, h.run_at, h.seq
                      LIMIT greatest(0, least(f.n, @S.room_of(gx.x, q) + f.n))::integer
                      FOR UPDATE SKIP LOCKED) h
                UNION ALL
                (SELECT false, NULL, NULL, j.priority, j.run_at, j.seq FROM @S.jobs j
                  WHERE j.queue = p_queue AND NOT j.running AND NOT j.held
                    AND j.run_at <= v_now
                  ORDER BY j.priority DESC, j.run_at, j.seq LIMIT p_take)) u
              ORDER BY u.priority DESC, u.run_at, u.seq LIMIT p_take) t;
      -- (heads locked and not taken are the ones ungroup() below makes claimable)
      IF v_hand IS NOT NULL THEN
        RETURN QUERY UPDATE @S.jobs j SET held = false, running = true, runner = p_runner,
            token = nextval('@S.token'), claimed_at = v_now,
            delay_at = CASE WHEN j.delay_at <= v_now THEN NULL ELSE j.delay_at END
          WHERE j.ctid = ANY (v_hand) RETURNING NULL::integer, j.key, j.payload, j.priority,
            j.token, j.requeues, extract(epoch FROM j.enqueued_at)::float8, j.grp,
            extract(epoch FROM j.run_at)::float8, j.seq,
            CASE WHEN j.node IS NOT NULL THEN @S.node_flow(j.node) END,
            CASE WHEN j.node IS NOT NULL THEN @S.node_deps(j.node) END;
        -- the freed slots no head took: counted down as usual
        SELECT array_agg(f.g) INTO v_grps
          FROM (SELECT g, count(*) AS n FROM unnest(v_grps) g GROUP BY g) f
          LEFT JOIN (SELECT g, count(*) AS m FROM unnest(v_hg) g GROUP BY g) t USING (g)
          CROSS JOIN LATERAL generate_series(1, f.n - coalesce(t.m, 0)) r;
      END IF;
    END IF;
  END IF;
  IF v_grps IS NOT NULL THEN PERFORM @S.ungroup(p_queue, v_grps); END IF;
  IF v_nc > 0 THEN
    RETURN QUERY SELECT NULL::integer, c.* FROM @S.claim(p_queue, v_nc::integer, p_runner) c;
  END IF;
-- the queue's row last, as release() does (after the jobs' and the groups' rows)
  IF 4 = ANY (p_kinds) THEN -- handed back at their old places (see release)
    UPDATE @S.queues x SET resets = x.resets + 1 WHERE x.name = p_queue;
  END IF;
  o_stale := coalesce(cardinality(p_keys), 0) - n;
  RETURN NEXT;
END $fn$;
-- reap: runners that died (their session lock is gone: killed, connection reset) or went
-- silent past their lease give their running items back. A missing lock means death only for
-- a runner that took it since the database (re)started: at registration (started_at) or after
-- a reconnect (locked_at); one that has not taken it again yet after a restart keeps its items
-- until its lease runs out (a database restart never causes a takeover). For the log of the runner that reaps:
-- o_taken items given back and o_dead dead-lettered (their runner died with them 5 times in a
-- row), the dead runners ("name (id N)"), and the first 10 keys of each kind ("queue 'key'", by
-- ", ").
CREATE OR REPLACE FUNCTION @S.reap(p_class integer)
RETURNS TABLE (o_taken integer, o_dead integer, o_runners text, o_keys text, o_dead_keys text)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_dead bigint[]; n integer := 0; m integer := 0; g record;
  v_uq text[]; v_ug text[]; v_fn bigint[]; v_fe text[]; v_dk text[];
BEGIN
  SELECT array_agg(r.id) INTO v_dead FROM (
    SELECT r.id FROM @S.runners r
     WHERE r.heartbeat_at < now() - make_interval(secs => r.lease)
        OR ((pg_postmaster_start_time() < now() - make_interval(secs => r.lease)
             OR greatest(r.started_at, r.locked_at) > pg_postmaster_start_time())
            AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory'
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND l.classid = p_class::oid AND l.objid = r.id::oid AND l.objsubid = 2
                 AND l.granted))
     FOR UPDATE SKIP LOCKED) r;
  IF v_dead IS NULL THEN
    o_taken := 0; o_dead := 0; RETURN NEXT; RETURN;
  END IF;
  SELECT string_agg(format('%s (id %s)', r.name, r.id), ', ' ORDER BY r.id) INTO o_runners
    FROM @S.runners r WHERE r.id = ANY (v_dead);
  -- their items' rows first, in key order (the lock order: 10-groups.sql), then groups
  PERFORM 1 FROM @S.jobs j WHERE j.running AND j.runner = ANY (v_dead)
    ORDER BY j.queue, j.key FOR UPDATE;
  SELECT string_agg(format('%s %L', s.queue, s.key), ', ') INTO o_keys FROM (SELECT j.queue,
    j.key FROM @S.jobs j WHERE j.running AND j.runner = ANY (v_dead) AND j.crashes + 1 <= 5
    ORDER BY j.queue, j.key LIMIT 10) s;
  WITH x AS (DELETE FROM @S.jobs j WHERE j.running AND j.runner = ANY (v_dead)
               AND j.crashes + 1 > 5 RETURNING j.*,
               format('its runner died while running it %s times in a row', j.crashes + 1) AS err),
    d AS (INSERT INTO @S.dead AS d (queue, key, payload, error, attempts, failed_at)
      SELECT x.queue, x.key, x.payload, x.err, x.requeues + 1, now() FROM x
      ON CONFLICT (queue, key) DO UPDATE SET payload = EXCLUDED.payload,
        error = EXCLUDED.error, attempts = EXCLUDED.attempts, failed_at = EXCLUDED.failed_at,
        traceback = NULL),
    -- the history of queues that keep one: a dead run of the runner that died
    h AS (INSERT INTO @S.history (queue, key, state, added_at, started_at, finished_at,
            attempts, runner, error)
      SELECT x.queue, x.key, 'dead', x.enqueued_at, x.claimed_at, now(), x.requeues + 1,
             (SELECT r.name FROM @S.runners r WHERE r.id = x.runner), x.err
        FROM x WHERE EXISTS (SELECT 1 FROM @S.queues q WHERE q.name = x.queue
                               AND q.history > 0))
  SELECT array_agg(x.queue), array_agg(x.grp), array_agg(x.node) FILTER (WHERE x.node IS NOT NULL),
         array_agg(x.err) FILTER (WHERE x.node IS NOT NULL), array_agg(format('%s %L', x.queue, x.key))
    INTO v_uq, v_ug, v_fn, v_fe, v_dk FROM x;
  o_dead_keys := array_to_string(v_dk[1:10], ', ');
  -- their flow nodes are dead (before the groups' rows: the lock order, 10-groups.sql)
  IF v_fn IS NOT NULL THEN
    PERFORM @S.flow_finish_all(v_fn, array_fill(true, ARRAY[cardinality(v_fn)]), NULL, v_fe);
  END IF;
  FOR g IN SELECT u.q AS queue, array_agg(u.g) AS grps, count(*) AS c
             FROM unnest(v_uq, v_ug) AS u(q, g) GROUP BY u.q ORDER BY u.q LOOP
    PERFORM @S.ungroup(g.queue, g.grps);
    m := m + g.c;
  END LOOP;
  n := @S.release(v_dead, true);
  DELETE FROM @S.runners WHERE id = ANY (v_dead);
  DELETE FROM @S.waiting WHERE runner = ANY (v_dead);
  UPDATE @S.counters SET value = value + n WHERE name = 'takeovers';
  UPDATE @S.counters SET value = value + m WHERE name = 'crash_dead';
  o_taken := n; o_dead := m;
  RETURN NEXT;
END $fn$;
