-- add_one: the rules of q:add / q:add_after (WORKQUEUE.md) on the item's row, for add()
-- and add_many(). p_now: the time of the add (the clock once the transaction has its id,
-- schema_v7); p_seq: its place among adds of the same time (NULL: the next of the
-- sequence). Locks the item's row (and, with force, its done row after it) and nothing
-- else: o_wake says that its group's row needs a wake_at (the caller takes group rows
-- last, in name order: see 10-groups.sql). Notifies nobody.
CREATE OR REPLACE FUNCTION @S.add_one(queue text, key text, payload jsonb,
    after_seconds double precision, priority integer, grp text, force boolean,
    unique_add boolean, p_now timestamptz, p_seq bigint, p_node bigint DEFAULT NULL,
    OUT o_out text, OUT o_wake boolean)
  LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz := p_now;
  v_ready timestamptz;
  r @S.jobs%ROWTYPE;
  v_was @S.jobs%ROWTYPE;
  v_out text;
  v_keep double precision;
  v_unique boolean;
  v_held boolean := false; v_gs record; v_nready integer; v_running boolean;
BEGIN
  IF queue IS NULL OR queue !~ '^[A-Za-z0-9_.-]+$' OR length(queue) > 64 THEN -- see add_many
    RAISE EXCEPTION 'wqrun.add: bad argument ''queue'' (1-64 characters of [A-Za-z0-9_.-], got %)',
      coalesce(quote_literal(queue), 'NULL') USING ERRCODE = '22023';
  END IF;
  IF key IS NULL OR octet_length(key) > 65536 THEN
    RAISE EXCEPTION 'wqrun.add: bad argument ''key'' (%)',
      CASE WHEN key IS NULL THEN 'NULL' ELSE 'longer than 65536 bytes' END USING ERRCODE = '22023';
  END IF;
  IF after_seconds = 'NaN'::float8 OR after_seconds = 'Infinity'::float8 THEN
    RAISE EXCEPTION 'wqrun.add: bad argument ''after_seconds'' (%)', after_seconds
      USING ERRCODE = '22023';
  END IF;
  IF after_seconds > 0 THEN v_ready := v_now + make_interval(secs => after_seconds); END IF;
-- a blocked flow node (no item row yet): stays blocked; its payload is replaced when one is
-- given, its priority only rises (p_node: the node being released, see flow_release)
  IF p_node IS NULL THEN
    UPDATE @S.flow_nodes n SET payload = coalesce(add_one.payload, n.payload),
        priority = greatest(n.priority, coalesce(add_one.priority, n.priority))
      WHERE n.queue = add_one.queue AND n.key = add_one.key AND n.state = 'blocked';
    IF FOUND THEN o_out := 'blocked'; o_wake := false; RETURN; END IF;
  END IF;
-- keep_done (SPEC 7.2): finished within it and nothing pending: skipped; force forgets
  SELECT q.keep_done, q.unique_adds INTO v_keep, v_unique FROM @S.queues q
    WHERE q.name = add_one.queue;
  IF v_keep > 0 AND coalesce(add_one.force, false) THEN
    -- the item's row first (an outcome writing the done row holds it): rows of one key in
    -- the order the outcomes take them
    PERFORM 1 FROM @S.jobs j WHERE j.queue = add_one.queue AND j.key = add_one.key FOR UPDATE;
    DELETE FROM @S.done d WHERE d.queue = add_one.queue AND d.key = add_one.key;
-- (coalesce: NULL AND EXISTS would look the key up for a queue that keeps nothing)
  ELSIF coalesce(v_keep, 0) > 0 AND EXISTS (SELECT 1 FROM @S.done d WHERE d.queue = add_one.queue
        AND d.key = add_one.key AND d.finished_at > v_now - make_interval(secs => v_keep))
      AND NOT EXISTS (SELECT 1 FROM @S.jobs j WHERE j.queue = add_one.queue AND j.key = add_one.key) THEN
    o_out := 'skipped: done'; o_wake := false; RETURN;
  END IF;
-- unique: a key pending or running is left as it is (no follow-up, nothing changed); an
-- add that does not say is unique when its queue's definition is (unique = true)
  IF coalesce(add_one.unique_add, v_unique, false) THEN
    SELECT j.running INTO v_running FROM @S.jobs j WHERE j.queue = add_one.queue AND j.key = add_one.key;
    IF FOUND THEN
      o_out := CASE WHEN v_running THEN 'skipped: processing' ELSE 'skipped: pending' END;
      o_wake := false; RETURN;
    END IF;
  END IF;
-- a new due item of a saturated group is held at once (see claim)
  IF add_one.grp IS NOT NULL AND v_ready IS NULL THEN
    v_gs := @S.group_state(add_one.queue, add_one.grp);
    IF v_gs.conc IS NOT NULL OR v_gs.rate > 0 THEN
      SELECT count(*) INTO v_nready FROM @S.jobs j WHERE j.queue = add_one.queue
        AND j.grp = add_one.grp AND NOT j.running AND NOT j.held AND j.run_at <= v_now;
      v_held := v_gs.running + v_nready >= coalesce(v_gs.conc, 2147483647)
                OR v_gs.tokens <= v_nready;
    END IF;
  END IF;
  INSERT INTO @S.levels VALUES (add_one.queue, coalesce(add_one.priority, 0)) ON CONFLICT DO NOTHING;
  LOOP
    INSERT INTO @S.jobs AS j (queue, key, payload, priority, grp, run_at, seq, enqueued_at, held,
        node)
      VALUES (add_one.queue, add_one.key, add_one.payload, coalesce(add_one.priority, 0), add_one.grp,
              coalesce(v_ready, v_now), coalesce(p_seq, nextval('@S.seq')), v_now, v_held, p_node)
      ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING;
    IF FOUND THEN
      v_out := CASE WHEN v_ready IS NULL THEN 'queued' ELSE 'delayed' END;
-- held as read without the group's lock: an outcome committing meanwhile may free a
-- slot without seeing this row; the claims look at the group again in a second (the
-- caller's wake_at)
      o_wake := v_held;
      EXIT;
    END IF;
    SELECT * INTO r FROM @S.jobs j WHERE j.queue = add_one.queue AND j.key = add_one.key FOR UPDATE;
    IF NOT FOUND THEN CONTINUE; END IF; -- finished meanwhile: insert again
    v_was := r;
    IF r.running THEN
      IF v_ready IS NULL THEN
        IF r.dirty OR r.delay_at <= v_now THEN v_out := 'deduplicated';
        ELSE r.dirty := true; v_out := 'follow-up'; END IF;
      ELSIF r.delay_at IS NULL OR v_ready < r.delay_at THEN
        r.delay_at := v_ready; v_out := 'delayed';
      ELSE v_out := 'deduplicated'; END IF;
      r.priority := coalesce(add_one.priority, r.priority);
    ELSIF r.run_at <= v_now THEN -- queued
      IF v_ready IS NULL THEN
        v_out := 'deduplicated';
        IF add_one.priority > r.priority THEN -- rises to the back of its new level
          r.priority := add_one.priority; r.run_at := v_now; r.seq := coalesce(p_seq, nextval('@S.seq'));
        END IF;
      ELSIF r.delay_at IS NULL OR v_ready < r.delay_at THEN
        r.delay_at := v_ready; v_out := 'delayed';
      ELSE v_out := 'deduplicated'; END IF;
    ELSE -- waiting: only a delayed add is pending
      IF v_ready IS NULL THEN
        r.delay_at := r.run_at; r.run_at := v_now; r.seq := coalesce(p_seq, nextval('@S.seq'));
        v_out := 'queued';
      ELSIF v_ready < r.run_at THEN
        r.run_at := v_ready; r.seq := coalesce(p_seq, nextval('@S.seq')); v_out := 'delayed';
      ELSE v_out := 'deduplicated'; END IF;
      r.priority := coalesce(add_one.priority, r.priority);
    END IF;
    r.payload := coalesce(add_one.payload, r.payload);
    r.grp := coalesce(add_one.grp, r.grp);
    r.node := coalesce(r.node, p_node);
    -- a row the add leaves as it was (a plain dedup: the common re-add of a pending key) is not
    -- written again: the lock above is all it needs
    IF r IS DISTINCT FROM v_was THEN
      UPDATE @S.jobs j SET payload = r.payload, priority = r.priority, grp = r.grp,
          run_at = r.run_at, seq = r.seq, delay_at = r.delay_at, dirty = r.dirty, node = r.node
        WHERE j.queue = add_one.queue AND j.key = add_one.key;
    END IF;
    EXIT;
  END LOOP;
  o_out := v_out; o_wake := coalesce(o_wake, false);
END $fn$;
-- wqrun.add: one item (add_one), its group's row last. An add to a queue nobody knows (no
-- runner defined it, no items or dead letters: a misspelled name?) is made all the same, with a
-- WARNING naming the queue (psql shows it; runners' connections ignore notices).
CREATE OR REPLACE FUNCTION @S.add(queue text, key text, payload jsonb DEFAULT NULL,
    after_seconds double precision DEFAULT NULL, priority integer DEFAULT NULL,
    grp text DEFAULT NULL, force boolean DEFAULT false, unique_add boolean DEFAULT NULL)
  RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz; r record; v_known boolean;
BEGIN
  -- ready times are the clock once this transaction has its id (schema_v7)
  PERFORM pg_current_xact_id();
  v_now := clock_timestamp();
  v_known := @S.known_queue(add.queue);
  r := @S.add_one(add.queue, add.key, add.payload, add.after_seconds, add.priority, add.grp,
                  add.force, add.unique_add, v_now, NULL);
  IF r.o_wake THEN
    UPDATE @S.groups x SET wake_at = least(x.wake_at, v_now + interval '1 second')
      WHERE x.queue = add.queue AND x.grp = add.grp
        AND (x.wake_at IS NULL OR x.wake_at > v_now + interval '1 second');
  END IF;
  IF r.o_out IN ('queued', 'delayed', 'follow-up')
      AND EXISTS (SELECT 1 FROM @S.waiting w WHERE w.queue = add.queue) THEN
    PERFORM pg_notify(@L, add.queue);
  END IF;
  IF NOT v_known THEN
    RAISE WARNING 'wqrun.add: no runner has defined queue %: the item waits until a script defines it (a misspelled name?)',
      quote_literal(add.queue);
  END IF;
  RETURN r.o_out;
END $fn$;
-- add_many: new keys in one INSERT (the bulk case: rows no runner can see before the
-- commit, so none waits for them), every other item through add_one(), in the lock order
-- (10-groups.sql): their rows by queue and key, then the rows of the groups that need a
-- wake_at, by queue and name. One time for all; sequence numbers in the batch's order, the
-- items add_one() takes included (worked through in key order, queued in the batch's).
CREATE OR REPLACE FUNCTION @S.add_many(items jsonb) RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz; v_bad bigint; v_look boolean; v_nnew bigint; v_out text[]; v_seqs bigint[];
  v_plain boolean; v_fi bigint[]; v_fo text[];
  e record; q text; r record; v_wq text[]; v_wg text[];
BEGIN
  PERFORM pg_current_xact_id(); -- ready times: see add()
  v_now := clock_timestamp();
  IF jsonb_typeof(items) IS DISTINCT FROM 'array' THEN
    RAISE EXCEPTION 'wqrun.add_many: bad argument ''items'' (a JSON array expected, got %)',
      coalesce(jsonb_typeof(items), 'NULL') USING ERRCODE = '22023';
  END IF;
  -- Malformed items are looked for in C (jsonpath: strict finds items that are not objects,
  -- nested arrays included; lax the members, missing ones included), then the queue names'
  -- lengths over the items read as rows; only when there is one, the first is found for the
  -- message. No bounded repetition in a pattern: '{1,64}' costs PostgreSQL's regex engine
  -- about 2.5 us per match, '+' and a length 0.4 (the check was most of a bulk add's time).
  v_look := jsonb_path_exists(items, 'strict $[*] ? (@.type() != "object")')
     OR jsonb_path_exists(items, '$[*] ? (!exists(@.queue) || !exists(@.key)
          || @.queue.type() != "string" || @.key.type() != "string"
          || !(@.queue like_regex "^[A-Za-z0-9_.-]+$"))');
  IF NOT v_look THEN
    v_look := EXISTS (SELECT 1 FROM jsonb_to_recordset(items) AS x(queue text)
                       WHERE length(x.queue) > 64);
  END IF;
  IF v_look THEN
    SELECT min(x.i) INTO v_bad FROM jsonb_array_elements(items) WITH ORDINALITY AS x(it, i)
     WHERE jsonb_typeof(x.it) <> 'object' OR jsonb_typeof(x.it->'queue') IS DISTINCT FROM 'string'
        OR jsonb_typeof(x.it->'key') IS DISTINCT FROM 'string'
        OR x.it->>'queue' !~ '^[A-Za-z0-9_.-]+$' OR length(x.it->>'queue') > 64;
    IF v_bad IS NOT NULL THEN
      RAISE EXCEPTION 'wqrun.add_many: bad argument ''items'' (item % needs a string "key" and a "queue" of 1-64 characters of [A-Za-z0-9_.-])', v_bad USING ERRCODE = '22023';
    END IF;
  END IF;
  INSERT INTO @S.levels SELECT DISTINCT x.queue, coalesce(x.priority, 0)
    FROM jsonb_to_recordset(items) AS x(queue text, priority integer) ORDER BY 1, 2
    ON CONFLICT DO NOTHING;
  -- The items as typed rows, read from the JSON once. A key with a done row (keep_done) or of
  -- a blocked flow node is add_one()'s to decide: looked up per item only when the tables have
  -- such rows at all (once per statement, in its snapshot, as the lookups).
  WITH x AS (SELECT * FROM ROWS FROM (jsonb_to_recordset(items) AS (queue text, key text,
               payload jsonb, priority integer, "group" text, after float8, force boolean))
               WITH ORDINALITY AS x(queue, key, payload, priority, grp, after, force, i)),
  -- each item's place in the sequence, taken in the batch's order: an inserted row returns it,
  -- which tells its item (a join on the key would be a hash join and a grouping per batch)
  s AS MATERIALIZED (SELECT x.*, nextval('@S.seq') AS seq FROM x ORDER BY x.i),
  ins AS (INSERT INTO @S.jobs AS j (queue, key, payload, priority, grp, run_at, seq, enqueued_at)
      SELECT x.queue, x.key, nullif(x.payload, 'null'::jsonb), coalesce(x.priority, 0), NULL,
             CASE WHEN x.after > 0 THEN v_now + make_interval(secs => x.after) ELSE v_now END,
             x.seq, v_now
        FROM s x WHERE NOT coalesce(x.force, false) AND x.grp IS NULL
          AND (NOT EXISTS (SELECT 1 FROM @S.done)
               OR NOT EXISTS (SELECT 1 FROM @S.done d WHERE d.queue = x.queue AND d.key = x.key))
          AND (NOT EXISTS (SELECT 1 FROM @S.flow_nodes n WHERE n.state = 'blocked')
               OR NOT EXISTS (SELECT 1 FROM @S.flow_nodes n
                 WHERE n.queue = x.queue AND n.key = x.key AND n.state = 'blocked'))
        ORDER BY x.i
      ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING RETURNING j.seq)
  -- each new key's first item is queued or delayed; the others (NULL) are add_one()'s, at
  -- their own places in the sequence
  SELECT array_agg(CASE WHEN ins.seq IS NULL THEN NULL WHEN x.after > 0 THEN 'delayed'
                        ELSE 'queued' END ORDER BY x.i),
         count(ins.seq), array_agg(x.seq ORDER BY x.i) INTO v_out, v_nnew, v_seqs
    FROM s x LEFT JOIN ins ON ins.seq = x.seq;
  -- The common rest: plain re-adds (no payload, priority, delay, group, force or unique) of
  -- keys outside blocked flow nodes, to queues whose adds are not unique by definition. When
  -- every item left is one, their rows are locked at once in key order (as add_one() would take
  -- them one by one) and each key's first re-add gets add_one()'s rule for a plain add: a
  -- queued key is left as it is, a running one runs once more after (dirty), a waiting one is
  -- queued now (its delay kept for later); later re-adds of a key in the batch deduplicate.
  -- A key whose row went meanwhile, and every other batch, go through add_one() below.
  IF v_nnew IS DISTINCT FROM cardinality(v_out) THEN
    SELECT bool_and((x.payload IS NULL OR x.payload = 'null'::jsonb) AND x.priority IS NULL
             AND (x.after IS NULL OR x.after <= 0) AND x.grp IS NULL AND NOT coalesce(x.force, false)
             AND NOT coalesce(x.uniq, qq.unique_adds, false))
        AND (NOT EXISTS (SELECT 1 FROM @S.flow_nodes n WHERE n.state = 'blocked')
             OR NOT EXISTS (SELECT 1 FROM ROWS FROM (jsonb_to_recordset(items)
                                  AS (queue text, key text)) WITH ORDINALITY AS y(queue, key, i)
                              JOIN @S.flow_nodes n ON n.queue = y.queue AND n.key = y.key
                             WHERE v_out[y.i] IS NULL AND n.state = 'blocked'))
      INTO v_plain
      FROM ROWS FROM (jsonb_to_recordset(items) AS (queue text, payload jsonb, priority integer,
             "group" text, after float8, force boolean, "unique" boolean))
             WITH ORDINALITY AS x(queue, payload, priority, grp, after, force, uniq, i)
      LEFT JOIN @S.queues qq ON qq.name = x.queue
     WHERE v_out[x.i] IS NULL;
  END IF;
  IF v_plain THEN
    PERFORM 1 FROM @S.jobs j
      WHERE (j.queue, j.key) IN (SELECT y.queue, y.key FROM ROWS FROM (jsonb_to_recordset(items)
                                   AS (queue text, key text)) WITH ORDINALITY AS y(queue, key, i)
                                  WHERE v_out[y.i] IS NULL)
      ORDER BY j.queue, j.key FOR UPDATE;
    WITH it AS (SELECT y.queue, y.key, y.i, v_seqs[y.i] AS seq,
                       row_number() OVER (PARTITION BY y.queue, y.key ORDER BY y.i) AS n
                  FROM ROWS FROM (jsonb_to_recordset(items) AS (queue text, key text))
                       WITH ORDINALITY AS y(queue, key, i)
                 WHERE v_out[y.i] IS NULL),
    o AS (SELECT it.i, it.queue, it.key, it.seq,
                 CASE WHEN j.key IS NULL THEN NULL -- gone meanwhile: add_one() adds it again
                      WHEN it.n > 1 THEN 'deduplicated'
                      WHEN j.running THEN CASE WHEN j.dirty OR j.delay_at <= v_now
                                               THEN 'deduplicated' ELSE 'follow-up' END
                      WHEN j.run_at <= v_now THEN 'deduplicated'
                      ELSE 'queued' END AS out
            FROM it LEFT JOIN @S.jobs j ON j.queue = it.queue AND j.key = it.key),
    u AS (UPDATE @S.jobs j SET dirty = j.dirty OR o.out = 'follow-up',
              delay_at = CASE WHEN o.out = 'queued' THEN j.run_at ELSE j.delay_at END,
              run_at = CASE WHEN o.out = 'queued' THEN v_now ELSE j.run_at END,
              seq = CASE WHEN o.out = 'queued' THEN o.seq ELSE j.seq END
            FROM o WHERE o.out IN ('follow-up', 'queued') AND j.queue = o.queue AND j.key = o.key)
    SELECT array_agg(o.i), array_agg(o.out) INTO v_fi, v_fo FROM o;
    FOR k IN 1 .. coalesce(cardinality(v_fi), 0) LOOP
      v_out[v_fi[k]] := v_fo[k];
    END LOOP;
  END IF;
  IF array_position(v_out, NULL) IS NOT NULL THEN
    -- keys of blocked flow nodes last: their nodes' rows after every item's row (the lock
    -- order: 10-groups.sql)
    FOR e IN SELECT it, i FROM jsonb_array_elements(items) WITH ORDINALITY AS x(it, i)
             ORDER BY CASE WHEN v_out[x.i] IS NULL THEN EXISTS (SELECT 1 FROM @S.flow_nodes n
                                WHERE n.queue = x.it->>'queue' AND n.key = x.it->>'key'
                                  AND n.state = 'blocked') END,
                      x.it->>'queue', x.it->>'key', x.i LOOP
      CONTINUE WHEN v_out[e.i] IS NOT NULL;
      r := @S.add_one(e.it->>'queue', e.it->>'key',
        CASE WHEN e.it->'payload' <> 'null'::jsonb THEN e.it->'payload' END,
        (e.it->>'after')::double precision, (e.it->>'priority')::integer, e.it->>'group',
        coalesce((e.it->>'force')::boolean, false), (e.it->>'unique')::boolean,
        v_now, v_seqs[e.i]);
      v_out[e.i] := r.o_out;
      IF r.o_wake THEN
        v_wq := v_wq || (e.it->>'queue'); v_wg := v_wg || (e.it->>'group');
      END IF;
    END LOOP;
  END IF;
  -- the groups' rows last, in name order (held items: see add_one)
  FOR r IN SELECT DISTINCT u.q, u.g FROM unnest(v_wq, v_wg) AS u(q, g) ORDER BY u.q, u.g LOOP
    UPDATE @S.groups x SET wake_at = least(x.wake_at, v_now + interval '1 second')
      WHERE x.queue = r.q AND x.grp = r.g
        AND (x.wake_at IS NULL OR x.wake_at > v_now + interval '1 second');
  END LOOP;
  FOR q IN SELECT DISTINCT w.queue FROM @S.waiting w WHERE w.queue IN
      (SELECT x.it->>'queue' FROM jsonb_array_elements(items) AS x(it)) LOOP
    PERFORM pg_notify(@L, q);
  END LOOP;
  RETURN coalesce(to_jsonb(v_out), '[]'::jsonb);
END $fn$;
