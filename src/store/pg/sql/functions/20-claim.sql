-- claim: the first p_limit due items, in priority then FIFO order, whose groups' limits
-- (and the queue's rate) let them start now; counted against their groups from here. A
-- saturated group's due items are held (out of the claim index), so that saturated
-- groups cost later claims nothing. Set-based: a handful of statements per claim.
CREATE OR REPLACE FUNCTION @S.claim(p_queue text, p_limit integer, p_runner bigint)
RETURNS TABLE (o_key text, o_payload jsonb, o_priority integer, o_token bigint,
    o_requeues integer, o_enqueued double precision, o_grp text, o_run_at double precision,
    o_seq bigint, o_flow text, o_deps jsonb) LANGUAGE plpgsql AS $fn$
DECLARE q @S.queues%ROWTYPE; v_now timestamptz := statement_timestamp();
  v_max integer := p_limit;
  v_tokens double precision; v_woken text[]; v_ids tid[]; v_grps text[]; v_room jsonb;
  v_taken jsonb; v_adm tid[]; v_admg text[]; v_full text[]; n integer;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM @S.runners x WHERE x.id = p_runner) THEN RETURN; END IF;
  SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue;
  IF q.paused THEN RETURN; END IF;
  IF q.q_rate > 0 THEN -- the queue's own rate: one budget for every runner
    SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue FOR UPDATE;
    v_tokens := greatest(0, least(q.q_burst, floor(extract(epoch FROM
      v_now - coalesce(q.q_tat, v_now)) * q.q_rate + q.q_burst)));
    v_max := least(v_max, v_tokens)::integer;
    IF v_max < 1 THEN RETURN; END IF;
  END IF;
-- groups whose rate lets them go on again: their held items become claimable
  WITH w AS (UPDATE @S.groups x SET wake_at = NULL WHERE x.ctid = ANY (ARRAY(
             SELECT y.ctid FROM @S.groups y WHERE y.queue = p_queue AND y.wake_at <= v_now
             FOR UPDATE SKIP LOCKED)) RETURNING x.grp)
  SELECT array_agg(w.grp ORDER BY w.grp) INTO v_woken FROM w;
  IF v_woken IS NOT NULL THEN PERFORM @S.promote_all(p_queue, v_woken); END IF;
  SELECT array_agg(c.id ORDER BY c.o), array_agg(c.grp ORDER BY c.o) INTO v_ids, v_grps
    FROM (SELECT j.id, j.grp,
            row_number() OVER (ORDER BY j.priority DESC, j.run_at, j.seq) AS o
          FROM (SELECT j.ctid AS id, j.grp, j.priority, j.run_at, j.seq FROM @S.jobs j
                WHERE j.queue = p_queue AND NOT j.running
                  AND NOT j.held AND j.run_at <= v_now
                ORDER BY j.priority DESC, j.run_at, j.seq LIMIT 2 * v_max + 10
                FOR UPDATE SKIP LOCKED) j) c;
  IF v_ids IS NULL THEN RETURN; END IF;
-- rows for groups seen for the first time (an insert that meets an existing row waits
-- for whoever updates it: only the missing ones are inserted)
  INSERT INTO @S.groups AS x (queue, grp)
    SELECT DISTINCT p_queue, g FROM unnest(v_grps) g WHERE g IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM @S.groups y WHERE y.queue = p_queue AND y.grp = g)
    ORDER BY 2 ON CONFLICT DO NOTHING;
-- the candidates' groups whose rows no outcome holds now, and how many of each may start
-- (a jsonb object: a lookup per candidate, not a join); the others wait for the next
-- claim
  SELECT jsonb_object_agg(t.grp, t.room) INTO v_room
    FROM (SELECT DISTINCT g FROM unnest(v_grps) g WHERE g IS NOT NULL ORDER BY g) AS u (grp)
      CROSS JOIN LATERAL (SELECT x.grp, @S.room_of(x, q) AS room FROM @S.groups x
          WHERE x.queue = p_queue AND x.grp = u.grp FOR UPDATE SKIP LOCKED) t;
  SELECT array_agg(a.id ORDER BY a.o), array_agg(a.grp ORDER BY a.o) INTO v_adm, v_admg
    FROM (SELECT c.id, c.grp, c.o FROM (
      SELECT u.id, u.grp, u.o, row_number() OVER (PARTITION BY u.grp ORDER BY u.o) AS rn
        FROM unnest(v_ids, v_grps) WITH ORDINALITY AS u(id, grp, o)) c
      WHERE c.grp IS NULL OR c.rn <= (v_room ->> c.grp)::float8
      ORDER BY c.o LIMIT v_max) a;
  n := coalesce(cardinality(v_adm), 0);
  SELECT jsonb_object_agg(a.g, a.n) INTO v_taken
    FROM (SELECT g, count(*) AS n FROM unnest(v_admg) g WHERE g IS NOT NULL GROUP BY g) a;
  IF n > 0 THEN
    UPDATE @S.groups x SET running = x.running + a.n,
        tat = CASE WHEN @S.rate_of(x, q) > 0 THEN greatest(coalesce(x.tat, v_now), v_now)
                   + make_interval(secs => a.n / @S.rate_of(x, q)) END
      FROM (SELECT t.key AS g, t.value::integer AS n FROM jsonb_each_text(v_taken) t) a
      WHERE x.queue = p_queue AND x.grp = a.g;
    RETURN QUERY UPDATE @S.jobs j SET running = true, runner = p_runner,
        token = nextval('@S.token'), claimed_at = v_now,
        delay_at = CASE WHEN j.delay_at <= v_now THEN NULL ELSE j.delay_at END
      WHERE j.ctid = ANY (v_adm) RETURNING j.key, j.payload, j.priority, j.token,
        j.requeues, extract(epoch FROM j.enqueued_at)::float8, j.grp,
        extract(epoch FROM j.run_at)::float8, j.seq,
        CASE WHEN j.node IS NOT NULL THEN @S.node_flow(j.node) END,
        CASE WHEN j.node IS NOT NULL THEN @S.node_deps(j.node) END;
  END IF;
-- saturated groups (no room left now): their due items wait outside the claim index
  SELECT array_agg(t.key ORDER BY t.key) INTO v_full FROM jsonb_each_text(v_room) t
   WHERE t.value::float8 - coalesce((v_taken ->> t.key)::float8, 0) < 1;
  IF v_full IS NOT NULL THEN
    UPDATE @S.jobs j SET held = true WHERE j.ctid = ANY (ARRAY(SELECT h.ctid FROM @S.jobs h
      WHERE h.queue = p_queue AND h.grp = ANY (v_full) AND NOT h.running AND NOT h.held
        AND h.run_at <= v_now FOR UPDATE SKIP LOCKED));
    IF @S.rated(q, v_full) THEN -- wake_at where a rate holds them back
      PERFORM @S.promote_all(p_queue, v_full);
    END IF;
  END IF;
  IF q.q_rate > 0 AND n > 0 THEN
    UPDATE @S.queues x SET q_tat = greatest(coalesce(x.q_tat, v_now), v_now)
      + make_interval(secs => n / q.q_rate) WHERE x.name = p_queue;
  END IF;
END $fn$;
-- release: a runner's running items go back (it was declared dead, or it lets go).
CREATE OR REPLACE FUNCTION @S.release(p_runners bigint[], p_crashed boolean) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE g record; n integer := 0;
BEGIN
  -- the items' rows first, in key order (the lock order: 10-groups.sql)
  PERFORM 1 FROM @S.jobs j WHERE j.running AND j.runner = ANY (p_runners)
    ORDER BY j.queue, j.key FOR UPDATE;
  FOR g IN WITH x AS (UPDATE @S.jobs j SET running = false, runner = NULL, token = NULL,
               claimed_at = NULL, progress = NULL,
               crashes = CASE WHEN p_crashed THEN j.crashes + 1 ELSE j.crashes END
             WHERE j.running AND j.runner = ANY (p_runners) RETURNING j.queue, j.grp)
-- queue by queue in name order: concurrent releases lock the groups' and queues' rows in
-- one order
           SELECT x.queue, array_agg(x.grp) AS grps, count(*) AS c FROM x GROUP BY x.queue
           ORDER BY x.queue LOOP
    PERFORM @S.ungroup(g.queue, g.grps);
    -- back at their old places, maybe below runners' floors (see schema_v7)
    UPDATE @S.queues x SET resets = x.resets + 1 WHERE x.name = g.queue;
    IF p_crashed THEN PERFORM pg_notify(@L, g.queue); END IF;
    n := n + g.c;
  END LOOP;
  RETURN n;
END $fn$;
