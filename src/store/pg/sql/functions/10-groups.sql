-- The lock order. Every transaction that locks several rows takes them in one global
-- order, so that no producer, runner or operator waits in a circle:
--   1. levels (an add's new priority), by queue and priority;
--   2. the items' rows (jobs), by queue, then key (in the database's collation); a key's
--      done and dead rows right after its item's row;
--   3. the groups' rows, by queue, then name;
--   4. the queues' rows, by name.
-- Flows (70-flows.sql) come between 2 and 3: the items' rows, then flow_nodes rows by id (a
-- finished node, then its dependents wave by wave, each wave in id order: a dependency has a
-- smaller id than its dependents), then flows rows by id, then groups and queues. Releasing
-- a node inserts a new item row (no one can wait for it before the commit); an add of a
-- blocked node's key locks the node's row (add_many: those keys after every item's row).
-- add() and add_many() lock items in key order and the rows of the groups whose held
-- items need a wake_at after all of them; finish() locks its items in key order when the
-- batch has more than successes (a batch of successes alone: in tuple id order, see
-- 40-finish.sql), then groups (ungroup), then claims
-- (SKIP LOCKED: never waits), then its queue's row; release() and reap() lock their items
-- in key order first; retry_dead() each item's row before its dead letter. Claims do not
-- wait for a row another transaction holds (SKIP LOCKED), except for a group row another
-- claim is creating, and for the newer version of a row that a transaction still in
-- progress wrote (SKIP LOCKED waits there too): so they take group rows in name order. Rows a producer inserted are
-- invisible to runners until it commits: they wait for nothing of a producer's but the
-- rows it re-adds. docs/postgres.md says what may still be chosen as a deadlock victim
-- (a transaction of the user's own that also locks other rows).
--
-- Group limits (SPEC 7.4, 8.2). group_state: a group's limits (its own, else the
-- queue's default), how many of its items run on every runner, and how many may start
-- now within its rate (GCRA: tokens = (now - tat) * rate + burst, at most burst). Exact
-- when the caller holds the group's row lock (claims and outcomes do).
CREATE OR REPLACE FUNCTION @S.group_state(p_queue text, p_grp text, OUT conc integer,
    OUT rate double precision, OUT burst double precision, OUT running integer,
    OUT tokens double precision, OUT tat timestamptz) LANGUAGE plpgsql AS $fn$
DECLARE g @S.groups%ROWTYPE; q @S.queues%ROWTYPE;
BEGIN
  SELECT * INTO g FROM @S.groups x WHERE x.queue = p_queue AND x.grp = p_grp;
  SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue;
  IF g.own THEN conc := g.conc; rate := g.rate; burst := g.burst;
  ELSE conc := q.g_conc; rate := q.g_rate; burst := q.g_burst; END IF;
  running := coalesce(g.running, 0); tat := g.tat;
  tokens := CASE WHEN rate > 0 THEN greatest(0, least(burst, floor(
      extract(epoch FROM now() - coalesce(g.tat, now())) * rate + burst)))
    ELSE 'Infinity' END;
END $fn$;
-- set_group_limit: a group's own limits (p_own false: the queue's default again).
CREATE OR REPLACE FUNCTION @S.set_group_limit(p_queue text, p_grp text, p_own boolean,
    p_conc integer, p_rate double precision, p_burst double precision) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM @S.check_queue('wqrun.set_group_limit', p_queue);
  INSERT INTO @S.groups AS x (queue, grp, own, conc, rate, burst)
    VALUES (p_queue, p_grp, p_own, p_conc, p_rate, p_burst)
    ON CONFLICT (queue, grp) DO UPDATE SET own = EXCLUDED.own, conc = EXCLUDED.conc,
      rate = EXCLUDED.rate, burst = EXCLUDED.burst;
  PERFORM @S.promote(p_queue, p_grp);
  PERFORM pg_notify(@L, '!control'); -- every runner's claims count limits from now
END $fn$;
-- A group's limits: its own (q:set_group_limit), else the queue's default; room_of: how
-- many more of its items may start now (its concurrency left, its rate's tokens), exact
-- when the caller holds the group's row lock. Single expressions, so that the planner
-- inlines them. At most 2^31 - 1 (no limit): the claims keep rooms in jsonb.
CREATE OR REPLACE FUNCTION @S.conc_of(x @S.groups, q @S.queues) RETURNS integer
LANGUAGE sql IMMUTABLE AS $fn$ SELECT CASE WHEN x.own THEN x.conc ELSE q.g_conc END $fn$;
CREATE OR REPLACE FUNCTION @S.rate_of(x @S.groups, q @S.queues) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $fn$ SELECT CASE WHEN x.own THEN x.rate ELSE q.g_rate END $fn$;
CREATE OR REPLACE FUNCTION @S.burst_of(x @S.groups, q @S.queues) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $fn$ SELECT CASE WHEN x.own THEN x.burst ELSE q.g_burst END $fn$;
CREATE OR REPLACE FUNCTION @S.room_of(x @S.groups, q @S.queues) RETURNS double precision
LANGUAGE sql STABLE AS $fn$
  SELECT least(2147483647, coalesce(@S.conc_of(x, q) - x.running, 2147483647),
    CASE WHEN @S.rate_of(x, q) > 0 THEN greatest(0, least(@S.burst_of(x, q),
      floor(extract(epoch FROM now() - coalesce(x.tat, now())) * @S.rate_of(x, q)
            + @S.burst_of(x, q)))) END)::float8 $fn$;
-- rated: whether a rate may hold back any of these groups (else no wake_at to keep)
CREATE OR REPLACE FUNCTION @S.rated(q @S.queues, p_grps text[]) RETURNS boolean
LANGUAGE sql STABLE AS $fn$
  SELECT coalesce(q.g_rate > 0, false) OR EXISTS (SELECT 1 FROM @S.groups x
    WHERE x.queue = q.name AND x.own AND x.rate > 0 AND x.grp = ANY (p_grps)) $fn$;
-- ungroup: items of these groups (one entry per item) stopped running: their slots
-- free up, and as many held items as may start now become claimable, in priority and
-- FIFO order. Set-based: one statement per step for every group at once.
CREATE OR REPLACE FUNCTION @S.ungroup(p_queue text, p_grps text[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE v_g text[];
BEGIN
  SELECT array_agg(DISTINCT g ORDER BY g) INTO v_g FROM unnest(p_grps) g WHERE g IS NOT NULL;
  IF v_g IS NULL THEN RETURN; END IF;
  PERFORM 1 FROM @S.groups x WHERE x.queue = p_queue AND x.grp = ANY (v_g)
    ORDER BY x.grp FOR UPDATE; -- in name order: outcomes never wait in a circle
  UPDATE @S.groups x SET running = greatest(x.running - a.n, 0)
    FROM (SELECT g, count(*) AS n FROM unnest(p_grps) g WHERE g IS NOT NULL GROUP BY g) a
    WHERE x.queue = p_queue AND x.grp = a.g;
  PERFORM @S.promote_all(p_queue, v_g);
END $fn$;
-- promote_all: for each group (its row locked by the caller), unhold as many held items
-- as may start now, less those already claimable; a group its rate holds back gets a
-- wake_at for the claims. Driven from the groups' rows: index lookups per group.
CREATE OR REPLACE FUNCTION @S.promote_all(p_queue text, p_grps text[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE q @S.queues%ROWTYPE; n integer;
BEGIN
  SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue;
  UPDATE @S.jobs j SET held = false WHERE j.ctid = ANY (ARRAY(
    SELECT h.ctid FROM unnest(p_grps) AS g (grp)
      CROSS JOIN LATERAL (SELECT x FROM @S.groups x
          WHERE x.queue = p_queue AND x.grp = g.grp) gx
      CROSS JOIN LATERAL (SELECT @S.room_of(gx.x, q) - (SELECT count(*) FROM @S.jobs y
          WHERE y.queue = p_queue AND y.grp = g.grp AND NOT y.running AND NOT y.held
            AND y.run_at <= now()) AS k) f
      CROSS JOIN LATERAL (SELECT h.ctid FROM @S.jobs h
          WHERE h.queue = p_queue AND h.grp = g.grp AND h.held
          ORDER BY h.priority DESC, h.run_at, h.seq
          LIMIT least(greatest(f.k, 0), 1000)::integer
          FOR UPDATE SKIP LOCKED) h));
  GET DIAGNOSTICS n = ROW_COUNT;
  -- claimable now: runners with idle workers claim at once, not at their next poll
  IF n > 0 AND EXISTS (SELECT 1 FROM @S.waiting w WHERE w.queue = p_queue) THEN
    PERFORM pg_notify(@L, p_queue);
  END IF;
  IF @S.rated(q, p_grps) THEN
    UPDATE @S.groups x
       SET wake_at = x.tat - make_interval(secs => (@S.burst_of(x, q) - 1) / @S.rate_of(x, q))
     WHERE x.queue = p_queue AND x.grp = ANY (p_grps) AND @S.rate_of(x, q) > 0
       AND @S.room_of(x, q) < 1
       AND EXISTS (SELECT 1 FROM @S.jobs h WHERE h.queue = p_queue AND h.grp = x.grp
                     AND h.held);
  END IF;
END $fn$;
CREATE OR REPLACE FUNCTION @S.promote(p_queue text, p_grp text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM 1 FROM @S.groups x WHERE x.queue = p_queue AND x.grp = p_grp FOR UPDATE;
  PERFORM @S.promote_all(p_queue, ARRAY[p_grp]);
END $fn$;
-- sweep: groups with held items and room (an add that read a group's state without its
-- lock while an outcome freed a slot may leave one held): made claimable again.
CREATE OR REPLACE FUNCTION @S.sweep(p_queue text) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE v_g text[]; q @S.queues%ROWTYPE;
BEGIN
  SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue;
  SELECT array_agg(x.grp) INTO v_g FROM (SELECT x.grp FROM @S.groups x
    WHERE x.queue = p_queue
      AND (@S.room_of(x, q) >= 1 OR (@S.rate_of(x, q) > 0 AND x.wake_at IS NULL))
      AND EXISTS (SELECT 1 FROM @S.jobs h WHERE h.queue = x.queue
      AND h.grp = x.grp AND h.held) ORDER BY x.grp FOR UPDATE SKIP LOCKED) x;
  IF v_g IS NOT NULL THEN PERFORM @S.promote_all(p_queue, v_g); END IF;
  RETURN coalesce(cardinality(v_g), 0);
END $fn$;
