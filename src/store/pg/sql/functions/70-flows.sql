-- Flows (SPEC 9, docs/flows.md): the graph's bookkeeping. Counts, not scans: a node's
-- waits is the number of its dependencies not finished; a finish decrements the waits of
-- each of its dependents (one row each, locked: two finishes of one node's last two
-- dependencies serialize on its row, and only the one that takes it to 0 releases it); a
-- revival (retry_dead of a dead node) increments them again. Lock order (10-groups.sql):
-- items' rows, then flow_nodes rows by id (the node, then its dependents wave by wave, each
-- wave in id order), then flows rows by id, then groups and queues. Releasing a node inserts
-- a new item row (nobody can wait for it before the commit).
--
-- node_deps: job.deps of a node, in its after's order: [{queue, key, state, result, error}]
-- (result and error absent when NULL). Only for a node (callers test jobs.node first).
CREATE OR REPLACE FUNCTION @S.node_deps(p_node bigint) RETURNS jsonb LANGUAGE sql STABLE AS $fn$
  SELECT coalesce(jsonb_agg(jsonb_build_object('queue', d.queue, 'key', d.key, 'state', d.state)
      || CASE WHEN d.result IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('result', d.result) END
      || CASE WHEN d.error IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('error', d.error) END
      ORDER BY e.ord), '[]'::jsonb)
    FROM @S.flow_deps e JOIN @S.flow_nodes d ON d.id = e.dep WHERE e.node = p_node $fn$;
CREATE OR REPLACE FUNCTION @S.node_flow(p_node bigint) RETURNS text LANGUAGE sql STABLE AS $fn$
  SELECT n.flow FROM @S.flow_nodes n WHERE n.id = p_node $fn$;
-- flow_release: a node's item goes into its queue (its row locked by the caller, blocked or
-- new): add_one() with its payload, priority and group, force (a done memory of the key
-- does not skip it), the item's node set. o_wake: its group's row needs a wake_at.
CREATE OR REPLACE FUNCTION @S.flow_release(p_node bigint, p_now timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE n record; r record;
BEGIN
  UPDATE @S.flow_nodes x SET state = 'pending' WHERE x.id = p_node
    RETURNING x.queue, x.key, x.payload, x.priority, x.grp INTO n;
  r := @S.add_one(n.queue, n.key, n.payload, NULL, n.priority, n.grp, true, false, p_now, NULL,
                  p_node);
  RETURN r.o_wake;
END $fn$;
-- flow_account: the flows' unfinished counts change by the deltas (one entry each, any
-- order), in id order; then the groups' wake_at (released items held at once) in name order,
-- and runners waiting for the queues of released items are told.
CREATE OR REPLACE FUNCTION @S.flow_account(p_flows text[], p_deltas integer[], p_wq text[],
    p_wg text[], p_queues text[], p_now timestamptz) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE r record;
BEGIN
  FOR r IN SELECT u.f, sum(u.d)::integer AS d FROM unnest(p_flows, p_deltas) AS u(f, d)
           GROUP BY u.f ORDER BY u.f LOOP
    UPDATE @S.flows x SET unfinished = x.unfinished + r.d,
        finished_at = CASE WHEN x.unfinished + r.d > 0 THEN NULL
                           ELSE coalesce(x.finished_at, now()) END
      WHERE x.id = r.f;
  END LOOP;
  FOR r IN SELECT DISTINCT u.q, u.g FROM unnest(p_wq, p_wg) AS u(q, g) ORDER BY u.q, u.g LOOP
    UPDATE @S.groups x SET wake_at = least(x.wake_at, p_now + interval '1 second')
      WHERE x.queue = r.q AND x.grp = r.g
        AND (x.wake_at IS NULL OR x.wake_at > p_now + interval '1 second');
  END LOOP;
  FOR r IN SELECT DISTINCT w.queue FROM @S.waiting w WHERE w.queue = ANY (p_queues) LOOP
    PERFORM pg_notify(@L, r.queue);
  END LOOP;
END $fn$;
-- flow_finish_all: nodes finished (their items left their queues, or blocked nodes removed):
-- done with their results, or dead with their errors; then, wave by wave down the graph,
-- their dependents' waits go down, and the blocked ones die (a dead dependency, unless
-- ignore_dead; `flow cancelled` in a cancelled flow) or are released (waits 0). Nodes
-- already finished are left alone. p_cancel: the flow cancel_flow cancels (its row is
-- written last). Returns how many nodes it finished (of the given ones).
CREATE OR REPLACE FUNCTION @S.flow_finish_all(p_nodes bigint[], p_dead boolean[],
    p_results jsonb[], p_errors text[], p_cancel text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz; r record; d record; n integer := 0;
  w_id bigint[] := '{}'; w_dead boolean[] := '{}'; w_msg text[] := '{}';
  x_id bigint[]; x_dead boolean[]; x_msg text[];
  v_fl text[] := '{}'; v_fd integer[] := '{}'; v_wq text[]; v_wg text[]; v_rq text[];
  v_cancelled boolean; v_err text; v_anydead boolean;
BEGIN
  PERFORM pg_current_xact_id(); -- ready times of released items: see add()
  v_now := clock_timestamp();
  -- the finished nodes in two statements: their rows locked in id order, then updated
  PERFORM 1 FROM @S.flow_nodes x WHERE x.id = ANY (p_nodes) ORDER BY x.id FOR UPDATE;
  WITH u AS (UPDATE @S.flow_nodes x SET state = CASE WHEN f.dead THEN 'dead' ELSE 'done' END,
          result = CASE WHEN NOT f.dead THEN nullif(f.res, 'null'::jsonb) END,
          error = CASE WHEN f.dead THEN f.err END, cause = NULL, finished_at = v_now
        FROM (SELECT DISTINCT ON (a.id) a.id, coalesce(a.dead, false) AS dead, a.res, a.err
                FROM unnest(p_nodes, p_dead, p_results, p_errors) AS a(id, dead, res, err)
               WHERE a.id IS NOT NULL ORDER BY a.id) f
       WHERE x.id = f.id AND x.state IN ('blocked', 'pending')
       RETURNING x.id, x.flow, x.queue, x.key, f.dead, f.err)
  SELECT coalesce(array_agg(u.id ORDER BY u.id), '{}'), coalesce(array_agg(u.dead ORDER BY u.id), '{}'),
         coalesce(array_agg(format('dependency %s/%s is dead: %s', u.queue, u.key, u.err)
                            ORDER BY u.id), '{}'),
         coalesce(array_agg(u.flow ORDER BY u.id), '{}'), count(*)
    INTO w_id, w_dead, w_msg, v_fl, n FROM u;
  v_fd := array_fill(-1, ARRAY[n]);
  WHILE cardinality(w_id) > 0 LOOP
    x_id := '{}'; x_dead := '{}'; x_msg := '{}';
    v_anydead := true = ANY (w_dead);
    -- this wave's dependents, in id order
    PERFORM 1 FROM @S.flow_nodes x WHERE x.id IN (SELECT e.node FROM @S.flow_deps e
      WHERE e.dep = ANY (w_id)) ORDER BY x.id FOR UPDATE;
    FOR d IN WITH c AS (SELECT e.node, count(*)::integer AS m FROM @S.flow_deps e
                         WHERE e.dep = ANY (w_id) GROUP BY e.node),
             u AS (UPDATE @S.flow_nodes x SET waits = x.waits - c.m FROM c WHERE x.id = c.node
                   RETURNING x.id, x.flow, x.queue, x.key, x.state, x.waits, x.ignore_dead)
             -- which dead node of the wave kills it: looked for only when one is dead (a
             -- join of 100,000 parts is not read again at each finish of a part)
             SELECT u.*, CASE WHEN v_anydead THEN (SELECT w.msg FROM @S.flow_deps e
                            JOIN unnest(w_id, w_dead, w_msg) AS w(id, dead, msg) ON w.id = e.dep
                           WHERE e.node = u.id AND w.dead ORDER BY e.ord LIMIT 1) END AS msg,
                         CASE WHEN v_anydead THEN (SELECT w.id FROM @S.flow_deps e
                            JOIN unnest(w_id, w_dead) AS w(id, dead) ON w.id = e.dep
                           WHERE e.node = u.id AND w.dead ORDER BY e.ord LIMIT 1) END AS killer
               FROM u WHERE u.state = 'blocked' ORDER BY u.id LOOP
      SELECT f.cancelled OR f.id = p_cancel INTO v_cancelled FROM @S.flows f WHERE f.id = d.flow;
      v_err := NULL;
      IF v_cancelled THEN
        IF d.waits = 0 OR (d.killer IS NOT NULL AND NOT d.ignore_dead) THEN
          v_err := 'flow cancelled';
        END IF;
      ELSIF d.killer IS NOT NULL AND NOT d.ignore_dead THEN
        v_err := d.msg;
      END IF;
      IF v_err IS NOT NULL THEN
        UPDATE @S.flow_nodes x SET state = 'dead', error = v_err,
            cause = CASE WHEN v_err = 'flow cancelled' THEN NULL ELSE d.killer END,
            finished_at = v_now
          WHERE x.id = d.id;
        v_fl := v_fl || d.flow; v_fd := v_fd || -1;
        x_id := x_id || d.id; x_dead := x_dead || true;
        x_msg := x_msg || format('dependency %s/%s is dead: %s', d.queue, d.key, v_err);
      ELSIF d.waits = 0 THEN
        IF @S.flow_release(d.id, v_now) THEN
          v_wq := v_wq || d.queue; v_wg := v_wg || (SELECT x.grp FROM @S.flow_nodes x
                                                     WHERE x.id = d.id);
        END IF;
        v_rq := v_rq || d.queue;
      END IF;
    END LOOP;
    w_id := x_id; w_dead := x_dead; w_msg := x_msg;
  END LOOP;
  PERFORM @S.flow_account(v_fl, v_fd, v_wq, v_wg, v_rq, v_now);
  RETURN n;
END $fn$;
-- flow_finished: one node's item left its queue (see flow_finish_all).
CREATE OR REPLACE FUNCTION @S.flow_finished(p_node bigint, p_dead boolean, p_result jsonb,
    p_error text) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM @S.flow_finish_all(ARRAY[p_node], ARRAY[p_dead], ARRAY[p_result], ARRAY[p_error]);
END $fn$;
-- flow_revive: a dead node comes back pending (retry_dead re-added its item, the item's row
-- locked by the caller); down the graph, its dependents wait for it again (waits + 1), and
-- those that died because of it come back blocked, unless another of their dependencies is
-- dead and they do not ignore dead ones (then that one is their cause), and so on.
CREATE OR REPLACE FUNCTION @S.flow_revive(p_node bigint) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz := clock_timestamp(); d record; o record;
  w_id bigint[] := '{}'; x_id bigint[];
  v_fl text[] := '{}'; v_fd integer[] := '{}';
BEGIN
  UPDATE @S.flow_nodes x SET state = 'pending', error = NULL, cause = NULL, result = NULL,
      finished_at = NULL
    WHERE x.id = p_node AND x.state = 'dead' RETURNING x.flow INTO d;
  IF NOT FOUND THEN RETURN; END IF;
  v_fl := v_fl || d.flow; v_fd := v_fd || 1;
  w_id := ARRAY[p_node];
  WHILE cardinality(w_id) > 0 LOOP
    x_id := '{}';
    PERFORM 1 FROM @S.flow_nodes x WHERE x.id IN (SELECT e.node FROM @S.flow_deps e
      WHERE e.dep = ANY (w_id)) ORDER BY x.id FOR UPDATE;
    FOR d IN WITH c AS (SELECT e.node, count(*)::integer AS m FROM @S.flow_deps e
                         WHERE e.dep = ANY (w_id) GROUP BY e.node),
             u AS (UPDATE @S.flow_nodes x SET waits = x.waits + c.m FROM c WHERE x.id = c.node
                   RETURNING x.id, x.flow, x.state, x.cause, x.ignore_dead)
             SELECT u.* FROM u WHERE u.state = 'dead' AND u.cause = ANY (w_id) ORDER BY u.id LOOP
      -- another dead dependency still kills it
      SELECT y.id, y.queue, y.key, y.error INTO o FROM @S.flow_deps e
        JOIN @S.flow_nodes y ON y.id = e.dep
       WHERE e.node = d.id AND y.state = 'dead' AND NOT d.ignore_dead ORDER BY e.ord LIMIT 1;
      IF FOUND THEN
        UPDATE @S.flow_nodes x SET cause = o.id,
            error = format('dependency %s/%s is dead: %s', o.queue, o.key, o.error)
          WHERE x.id = d.id;
      ELSE
        UPDATE @S.flow_nodes x SET state = 'blocked', error = NULL, cause = NULL,
            finished_at = NULL WHERE x.id = d.id;
        v_fl := v_fl || d.flow; v_fd := v_fd || 1;
        x_id := x_id || d.id;
      END IF;
    END LOOP;
    w_id := x_id;
  END LOOP;
  PERFORM @S.flow_account(v_fl, v_fd, NULL, NULL, NULL, v_now);
END $fn$;
-- add_flow: the flow document of POST /flows, all or nothing (inside the caller's
-- transaction): {"id", "keep", "nodes": [{"queue", "key", "payload", "after": [{"queue",
-- "key"}], "ignore_dead", "priority", "group"}]}. An existing id appends: nodes already in
-- the flow are skipped, new ones may wait for old ones. Refused (22023, naming the node):
-- a node added twice, an after naming no node of the doc or the flow, a cycle, an unknown
-- queue, a key pending outside the flow. Returns the flow's id.
CREATE OR REPLACE FUNCTION @S.add_flow(doc jsonb) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
  v_id text; v_keep double precision; v_now timestamptz; f @S.flows%ROWTYPE; r record;
  nq text[]; nk text[]; npay jsonb[]; nprio integer[]; ngrp text[]; nign boolean[];
  nold bigint[]; nnew integer[]; nn integer;
  -- edges of new nodes: from (doc index), to (doc index of a new dep) or old (id of a node
  -- already in the flow), ord
  ef integer[]; et integer[]; eo bigint[]; eord integer[]; ne integer;
  indeg integer[]; adj_start integer[]; adj integer[]; topo integer[] := '{}'; head integer := 1;
  vi integer; vj integer; ve integer; seen integer[]; o record; estart integer[];
  nafter jsonb[]; v_index jsonb; e_node bigint[] := '{}'; e_dep bigint[] := '{}';
  r_id bigint[] := '{}'; r_q text[] := '{}'; r_k text[] := '{}'; r_pay jsonb[] := '{}';
  r_prio integer[] := '{}'; r_grp text[] := '{}'; r_in bigint[];
  nid bigint[]; nstate text[]; nwaits integer[]; ncause bigint[]; nerr text[];
  v_dead_id bigint; v_dead_msg text; v_waits integer; v_unf integer := 0;
  v_wq text[]; v_wg text[]; v_rq text[];
BEGIN
  PERFORM pg_current_xact_id(); -- ready times: see add()
  v_now := clock_timestamp();
  IF jsonb_typeof(doc) IS DISTINCT FROM 'object'
      OR jsonb_typeof(coalesce(doc->'nodes', '[]')) <> 'array'
      OR coalesce(jsonb_typeof(doc->'id'), 'null') NOT IN ('string', 'null')
      OR coalesce(jsonb_typeof(doc->'keep'), 'null') NOT IN ('number', 'null') THEN
    RAISE EXCEPTION 'wqrun.add_flow: bad argument ''doc'' (an object {"id": string, "keep": seconds, "nodes": [...]} expected)'
      USING ERRCODE = '22023';
  END IF;
  v_id := doc->>'id';
  IF v_id IS NULL THEN v_id := 'f-' || gen_random_uuid()::text; END IF;
  v_keep := coalesce((doc->>'keep')::float8, 604800);
  SELECT min(x.i) INTO vi FROM jsonb_array_elements(coalesce(doc->'nodes', '[]')) WITH ORDINALITY AS x(it, i)
   WHERE jsonb_typeof(x.it) <> 'object' OR jsonb_typeof(x.it->'queue') IS DISTINCT FROM 'string'
      OR jsonb_typeof(x.it->'key') IS DISTINCT FROM 'string'
      OR coalesce(jsonb_typeof(x.it->'after'), 'null') NOT IN ('array', 'null')
      OR EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(x.it->'after') = 'array'
                   THEN x.it->'after' ELSE '[]' END) a(e)
                  WHERE jsonb_typeof(a.e->'queue') IS DISTINCT FROM 'string'
                     OR jsonb_typeof(a.e->'key') IS DISTINCT FROM 'string');
  IF vi IS NOT NULL THEN
    RAISE EXCEPTION 'flow %: node % needs a string "queue" and "key" (and "after" an array of them)',
      v_id, vi USING ERRCODE = '22023';
  END IF;
  SELECT array_agg(x.it->>'queue' ORDER BY x.i), array_agg(x.it->>'key' ORDER BY x.i),
         array_agg(CASE WHEN x.it->'payload' <> 'null'::jsonb THEN x.it->'payload' END ORDER BY x.i),
         array_agg(coalesce((x.it->>'priority')::integer, 0) ORDER BY x.i),
         array_agg(x.it->>'group' ORDER BY x.i),
         array_agg(coalesce((x.it->>'ignore_dead')::boolean, false) ORDER BY x.i),
         array_agg(CASE WHEN jsonb_typeof(x.it->'after') = 'array' THEN x.it->'after'
                        ELSE '[]'::jsonb END ORDER BY x.i)
    INTO nq, nk, npay, nprio, ngrp, nign, nafter
    FROM jsonb_array_elements(coalesce(doc->'nodes', '[]')) WITH ORDINALITY AS x(it, i);
  nn := coalesce(cardinality(nq), 0);
  -- a node added twice
  SELECT u.q, u.k INTO r FROM unnest(nq, nk) WITH ORDINALITY AS u(q, k, i)
   GROUP BY u.q, u.k HAVING count(*) > 1 ORDER BY min(u.i) LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'flow %: node %/% is added twice', v_id, r.q, r.k USING ERRCODE = '22023';
  END IF;
  -- Two commits to one flow at once (two runners starting the same script, a handler
  -- retried on another runner): one after the other, the second seeing what the first
  -- added (its statements read what committed before them). Before any row lock.
  PERFORM pg_advisory_xact_lock(hashtextextended('wqrun.flow:' || v_id, 0));
  SELECT * INTO f FROM @S.flows x WHERE x.id = v_id;
  IF FOUND AND f.cancelled THEN
    RAISE EXCEPTION 'flow %: cancelled (nothing can be added to it)', v_id USING ERRCODE = '22023';
  END IF;
  -- nodes already in the flow: skipped
  SELECT array_agg(n.id ORDER BY u.i) INTO nold FROM unnest(nq, nk) WITH ORDINALITY AS u(q, k, i)
    LEFT JOIN @S.flow_nodes n ON n.flow = v_id AND n.queue = u.q AND n.key = u.k;
  -- the new ones: queue names a queue can have (its runners may start later: the database
  -- keeps items of any queue), keys not pending outside the flow
  FOR vi IN 1 .. nn LOOP
    CONTINUE WHEN nold[vi] IS NOT NULL;
    IF nq[vi] !~ '^[A-Za-z0-9_.-]+$' OR length(nq[vi]) > 64 THEN -- see add_many
      RAISE EXCEPTION 'flow %: node %/%: no queue named %', v_id, nq[vi], nk[vi], nq[vi]
        USING ERRCODE = '22023';
    END IF;
  END LOOP;
  -- the document's nodes by queue and key (a queue name holds no newline): a jsonb object,
  -- looked up by binary search
  -- (the new ones only: a node already in the flow is found in flow_nodes)
  SELECT jsonb_object_agg(u.q || E'\n' || u.k, u.i) INTO v_index
    FROM unnest(nq, nk, nold) WITH ORDINALITY AS u(q, k, old, i) WHERE u.old IS NULL;
  -- the edges of the new nodes (a dependency named twice counts once)
  SELECT array_agg(s.i ORDER BY s.i, s.o), array_agg(s.j ORDER BY s.i, s.o),
         array_agg(s.old ORDER BY s.i, s.o), array_agg(s.o ORDER BY s.i, s.o)
    INTO ef, et, eo, eord
    FROM (SELECT DISTINCT ON (u.i, a.e->>'queue', a.e->>'key') u.i::integer AS i, a.o::integer AS o,
            t.i AS j, en.id AS old, a.e->>'queue' AS dq, a.e->>'key' AS dk
            FROM unnest(nafter, nold) WITH ORDINALITY AS u(af, self_old, i)
            CROSS JOIN LATERAL jsonb_array_elements(u.af) WITH ORDINALITY AS a(e, o)
            -- the document's node of the dependency: found in v_index, never by a join of
            -- the nodes with the edges (whose plan could compare every pair)
            CROSS JOIN LATERAL (SELECT (v_index->>((a.e->>'queue') || E'\n' || (a.e->>'key')))
                                  ::integer AS i) t
            LEFT JOIN @S.flow_nodes en ON t.i IS NULL AND en.flow = v_id
              AND en.queue = a.e->>'queue' AND en.key = a.e->>'key'
           WHERE u.self_old IS NULL
           ORDER BY u.i, a.e->>'queue', a.e->>'key', a.o) s;
  ne := coalesce(cardinality(ef), 0);
  FOR ve IN 1 .. ne LOOP
    IF et[ve] IS NULL AND eo[ve] IS NULL THEN
      SELECT a.e->>'queue' AS q, a.e->>'key' AS k INTO r
        FROM jsonb_array_elements(doc->'nodes'->(ef[ve] - 1)->'after') WITH ORDINALITY AS a(e, o)
       WHERE a.o = eord[ve];
      RAISE EXCEPTION 'flow %: node %/% waits for %/%, which is no node of the flow', v_id,
        nq[ef[ve]], nk[ef[ve]], r.q, r.k USING ERRCODE = '22023';
    END IF;
  END LOOP;
  -- topological order of the new nodes (Kahn): dependencies first, so that they get the
  -- smaller ids (waves lock in id order); what is left is in or behind a cycle
  indeg := array_fill(0, ARRAY[greatest(nn, 1)]);
  adj_start := array_fill(0, ARRAY[greatest(nn, 1) + 1]);
  FOR ve IN 1 .. ne LOOP
    IF et[ve] IS NOT NULL THEN
      indeg[ef[ve]] := indeg[ef[ve]] + 1;
      adj_start[et[ve] + 1] := adj_start[et[ve] + 1] + 1;
    END IF;
  END LOOP;
  adj_start[1] := 1;
  FOR vi IN 2 .. greatest(nn, 1) + 1 LOOP adj_start[vi] := adj_start[vi] + adj_start[vi - 1]; END LOOP;
  -- adj[adj_start[j] .. adj_start[j+1]-1]: the new nodes waiting for new node j
  SELECT array_agg(s.i ORDER BY s.j, s.i) INTO adj FROM unnest(ef, et) AS s(i, j)
   WHERE s.j IS NOT NULL;
  FOR vi IN 1 .. nn LOOP
    IF nold[vi] IS NULL AND indeg[vi] = 0 THEN topo := topo || vi; END IF;
  END LOOP;
  WHILE head <= coalesce(cardinality(topo), 0) LOOP
    vj := topo[head]; head := head + 1;
    FOR ve IN adj_start[vj] .. adj_start[vj + 1] - 1 LOOP
      vi := adj[ve];
      indeg[vi] := indeg[vi] - 1;
      IF indeg[vi] = 0 THEN topo := topo || vi; END IF;
    END LOOP;
  END LOOP;
  IF coalesce(cardinality(topo), 0) < (SELECT count(*) FROM unnest(nold) AS u(x) WHERE u.x IS NULL) THEN
    -- from the first node left, follow dependencies that are left until one comes again
    seen := array_fill(0, ARRAY[nn]);
    SELECT min(u.i) INTO vi FROM unnest(indeg, nold) WITH ORDINALITY AS u(d, o, i)
     WHERE u.o IS NULL AND u.d > 0;
    WHILE seen[vi] = 0 LOOP
      seen[vi] := 1;
      SELECT s.j INTO vi FROM unnest(ef, et) AS s(i, j)
       WHERE s.i = vi AND s.j IS NOT NULL AND indeg[s.j] > 0 LIMIT 1;
    END LOOP;
    RAISE EXCEPTION 'flow %: node %/% is in a cycle', v_id, nq[vi], nk[vi] USING ERRCODE = '22023';
  END IF;
  FOR head IN 1 .. coalesce(cardinality(topo), 0) LOOP
    vi := topo[head];
    IF EXISTS (SELECT 1 FROM @S.jobs x WHERE x.queue = nq[vi] AND x.key = nk[vi])
        OR EXISTS (SELECT 1 FROM @S.flow_nodes x WHERE x.queue = nq[vi] AND x.key = nk[vi]
                     AND x.state IN ('blocked', 'pending')) THEN
      RAISE EXCEPTION 'flow %: node %/% is already pending outside the flow', v_id, nq[vi], nk[vi]
        USING ERRCODE = '22023';
    END IF;
  END LOOP;
  -- the flow's row (before its nodes: they refer to it; its count last, in the lock order)
  INSERT INTO @S.flows (id, keep, created_at, finished_at, unfinished)
    VALUES (v_id, v_keep, v_now, NULL, 0) ON CONFLICT (id) DO NOTHING;
  IF coalesce(cardinality(topo), 0) = 0 THEN
    UPDATE @S.flows x SET finished_at = coalesce(x.finished_at, v_now)
     WHERE x.id = v_id AND x.unfinished = 0 AND x.finished_at IS NULL;
    RETURN v_id;
  END IF;
  -- ids in topological order, then each node's state from its dependencies'
  nid := array_fill(NULL::bigint, ARRAY[nn]);
  nstate := array_fill(NULL::text, ARRAY[nn]);
  nwaits := array_fill(0, ARRAY[nn]);
  ncause := array_fill(NULL::bigint, ARRAY[nn]);
  nerr := array_fill(NULL::text, ARRAY[nn]);
  FOR head IN 1 .. cardinality(topo) LOOP
    nid[topo[head]] := nextval(pg_get_serial_sequence('@S.flow_nodes', 'id'));
  END LOOP;
  -- the edges of node i are ef[estart[i] .. estart[i + 1] - 1] (ef is sorted by node, then
  -- ord): one pass over each node's own edges, never a scan of all of them per node
  estart := array_fill(0, ARRAY[nn + 1]);
  FOR ve IN 1 .. ne LOOP estart[ef[ve] + 1] := estart[ef[ve] + 1] + 1; END LOOP;
  estart[1] := 1;
  FOR vi IN 2 .. nn + 1 LOOP estart[vi] := estart[vi] + estart[vi - 1]; END LOOP;
  FOR head IN 1 .. cardinality(topo) LOOP
    vi := topo[head];
    v_waits := 0; v_dead_id := NULL; v_dead_msg := NULL;
    FOR ve IN estart[vi] .. estart[vi + 1] - 1 LOOP
      vj := et[ve];
      IF vj IS NOT NULL THEN -- a new node: its state is known already
        SELECT nid[vj] AS id, nstate[vj] AS state, nq[vj] AS queue, nk[vj] AS key,
               nerr[vj] AS error INTO o;
      ELSE
        SELECT x.id, x.state, x.queue, x.key, x.error INTO o FROM @S.flow_nodes x
         WHERE x.id = eo[ve];
      END IF;
      IF o.state = 'dead' THEN
        IF v_dead_id IS NULL THEN
          v_dead_id := o.id;
          v_dead_msg := format('dependency %s/%s is dead: %s', o.queue, o.key, o.error);
        END IF;
      ELSIF o.state <> 'done' THEN
        v_waits := v_waits + 1;
      END IF;
    END LOOP;
    nwaits[vi] := v_waits;
    IF v_dead_id IS NOT NULL AND NOT nign[vi] THEN
      nstate[vi] := 'dead'; ncause[vi] := v_dead_id; nerr[vi] := v_dead_msg;
    ELSE
      nstate[vi] := CASE WHEN v_waits > 0 THEN 'blocked' ELSE 'pending' END;
      v_unf := v_unf + 1;
    END IF;
  END LOOP;
  -- The rows, in statements over whole arrays read once each (unnest): a subscript of an
  -- array in a statement (nq[i] per row) made the insert of 30,000 nodes take seconds.
  -- Nodes in topological order (their ids), released ones pending at once.
  INSERT INTO @S.flow_nodes (id, flow, queue, key, state, waits, ignore_dead, payload, priority,
      grp, error, cause, finished_at)
    SELECT a.id, v_id, a.q, a.k, a.st, a.w, a.ign, a.pay, a.prio, a.grp, a.err, a.cause,
           CASE WHEN a.st = 'dead' THEN v_now END
      FROM unnest(nid, nq, nk, nstate, nwaits, nign, npay, nprio, ngrp, nerr, ncause)
             AS a(id, q, k, st, w, ign, pay, prio, grp, err, cause)
     WHERE a.id IS NOT NULL ORDER BY a.id;
  FOR ve IN 1 .. ne LOOP -- the edges by node id (plpgsql's arrays: a subscript costs O(1))
    e_node := e_node || nid[ef[ve]];
    e_dep := e_dep || coalesce(nid[et[ve]], eo[ve]);
  END LOOP;
  INSERT INTO @S.flow_deps (node, ord, dep)
    SELECT u.n, u.o, u.d FROM unnest(e_node, eord, e_dep) AS u(n, o, d);
  -- the released nodes' items: new keys (none was pending above) inserted in one statement
  -- in topological order, as add_one() would queue them (forced past keep_done: a done
  -- memory of the key goes); a grouped item (its group may hold it) and a key another add
  -- took meanwhile go through add_one()
  FOR head IN 1 .. cardinality(topo) LOOP
    vi := topo[head];
    CONTINUE WHEN nstate[vi] <> 'pending';
    r_id := r_id || nid[vi]; r_q := r_q || nq[vi]; r_k := r_k || nk[vi];
    r_pay := r_pay || npay[vi]; r_prio := r_prio || nprio[vi]; r_grp := r_grp || ngrp[vi];
  END LOOP;
  IF cardinality(r_id) > 0 THEN
    INSERT INTO @S.levels SELECT DISTINCT u.q, u.p FROM unnest(r_q, r_prio) AS u(q, p)
      ORDER BY 1, 2 ON CONFLICT DO NOTHING;
    IF EXISTS (SELECT 1 FROM @S.done d WHERE d.queue = ANY (r_q)) THEN
      DELETE FROM @S.done d USING unnest(r_q, r_k) AS u(q, k) WHERE d.queue = u.q AND d.key = u.k;
    END IF;
    WITH ins AS (INSERT INTO @S.jobs AS j (queue, key, payload, priority, grp, run_at, seq,
                                          enqueued_at, node)
        SELECT u.q, u.k, u.pay, u.prio, NULL, v_now, nextval('@S.seq'), v_now, u.id
          FROM unnest(r_q, r_k, r_pay, r_prio, r_grp, r_id) WITH ORDINALITY
                 AS u(q, k, pay, prio, grp, id, i)
         WHERE u.grp IS NULL ORDER BY u.i
        ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING RETURNING j.node)
    SELECT array_agg(ins.node) INTO r_in FROM ins;
    v_rq := r_q;
    IF coalesce(cardinality(r_in), 0) < cardinality(r_id) THEN
      FOR o IN SELECT u.id, u.q, u.k, u.pay, u.prio, u.grp
                 FROM unnest(r_id, r_q, r_k, r_pay, r_prio, r_grp) WITH ORDINALITY
                        AS u(id, q, k, pay, prio, grp, i)
                WHERE u.id <> ALL (coalesce(r_in, '{}')) ORDER BY u.q, u.k LOOP
        r := @S.add_one(o.q, o.k, o.pay, NULL, o.prio, o.grp, true, false, v_now, NULL, o.id);
        IF r.o_wake THEN
          v_wq := v_wq || o.q; v_wg := v_wg || o.grp;
        END IF;
      END LOOP;
    END IF;
  END IF;
  PERFORM @S.flow_account(ARRAY[v_id], ARRAY[v_unf], v_wq, v_wg, v_rq, v_now);
  RETURN v_id;
END $fn$;
-- cancel_flow: unstarted nodes are dead ('flow cancelled': blocked ones, and pending ones
-- whose items no handler runs, deleted), running ones are cancelled as cancel() does (their
-- outcomes finish them). The number of nodes cancelled or removed, NULL: no such flow.
CREATE OR REPLACE FUNCTION @S.cancel_flow(p_id text) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE v_fn bigint[]; v_bl bigint[]; m integer;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM @S.flows f WHERE f.id = p_id) THEN RETURN NULL; END IF;
  -- the items' rows of its pending nodes first, in key order (10-groups.sql)
  PERFORM 1 FROM @S.flow_nodes n JOIN @S.jobs j ON j.queue = n.queue AND j.key = n.key
   WHERE n.flow = p_id AND n.state = 'pending' ORDER BY j.queue, j.key FOR UPDATE OF j;
  WITH x AS (DELETE FROM @S.jobs j USING @S.flow_nodes n
              WHERE n.flow = p_id AND n.state = 'pending' AND j.queue = n.queue
                AND j.key = n.key AND j.node = n.id AND NOT j.running
             RETURNING j.node, j.queue, j.key, j.enqueued_at, j.requeues),
    -- their queues' history (SPEC 11): cancelled, never started
    h AS (INSERT INTO @S.history (queue, key, state, added_at, finished_at, attempts, error)
      SELECT x.queue, x.key, 'cancelled', x.enqueued_at, clock_timestamp(), x.requeues,
             'flow cancelled'
        FROM x WHERE EXISTS (SELECT 1 FROM @S.queues q WHERE q.name = x.queue
                               AND q.history > 0))
  SELECT array_agg(x.node) INTO v_fn FROM x;
  INSERT INTO @S.signals (runner, queue, key, token)
    SELECT j.runner, j.queue, j.key, j.token FROM @S.flow_nodes n
      JOIN @S.jobs j ON j.queue = n.queue AND j.key = n.key AND j.node = n.id
     WHERE n.flow = p_id AND n.state = 'pending' AND j.running;
  GET DIAGNOSTICS m = ROW_COUNT;
  IF m > 0 THEN PERFORM pg_notify(@L, '!control'); END IF;
  SELECT array_agg(n.id) INTO v_bl FROM @S.flow_nodes n WHERE n.flow = p_id AND n.state = 'blocked';
  v_fn := coalesce(v_fn, '{}') || coalesce(v_bl, '{}');
  IF cardinality(v_fn) > 0 THEN
    PERFORM @S.flow_finish_all(v_fn, array_fill(true, ARRAY[cardinality(v_fn)]), NULL,
                               array_fill('flow cancelled'::text, ARRAY[cardinality(v_fn)]), p_id);
  END IF;
  UPDATE @S.flows f SET cancelled = true WHERE f.id = p_id;
  RETURN cardinality(v_fn) + m;
END $fn$;
-- flow_summary: a flow's fields of `wqrun flows` / GET /flows (finished_at absent when NULL).
CREATE OR REPLACE FUNCTION @S.flow_summary(f @S.flows) RETURNS jsonb LANGUAGE sql STABLE AS $fn$
  SELECT jsonb_build_object('id', f.id, 'created_at', extract(epoch FROM f.created_at),
      'keep', f.keep, 'cancelled', f.cancelled, 'nodes', count(*),
      'blocked', count(*) FILTER (WHERE n.state = 'blocked'),
      'pending', count(*) FILTER (WHERE n.state = 'pending'),
      'done', count(*) FILTER (WHERE n.state = 'done'),
      'dead', count(*) FILTER (WHERE n.state = 'dead'))
    || CASE WHEN f.finished_at IS NULL THEN '{}'::jsonb
            ELSE jsonb_build_object('finished_at', extract(epoch FROM f.finished_at)) END
    FROM @S.flow_nodes n WHERE n.flow = f.id $fn$;
-- flow_list: flows ('running': with unfinished nodes, 'finished', NULL: all), newest first.
CREATE OR REPLACE FUNCTION @S.flow_list(p_state text, p_limit integer) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $fn$
DECLARE v jsonb;
BEGIN
  IF p_state IS NOT NULL AND p_state NOT IN ('running', 'finished') THEN
    RAISE EXCEPTION 'wqrun.flow_list: bad argument ''state'' (running, finished or NULL, got %)',
      quote_literal(p_state) USING ERRCODE = '22023';
  END IF;
  SELECT coalesce(jsonb_agg(@S.flow_summary(x) ORDER BY x.created_at DESC, x.id), '[]')
    INTO v FROM (SELECT * FROM @S.flows f
                  WHERE p_state IS NULL OR (p_state = 'running') = (f.finished_at IS NULL)
                  ORDER BY f.created_at DESC, f.id LIMIT coalesce(p_limit, 1000)) x;
  RETURN v;
END $fn$;
-- flow_show: a flow and its nodes (by id: dependencies first) with their state, waits,
-- attempt (its item's, or its dead letter's), error, result, ignore_dead and after; NULL: no
-- such flow.
CREATE OR REPLACE FUNCTION @S.flow_show(p_id text) RETURNS jsonb LANGUAGE sql STABLE AS $fn$
  SELECT @S.flow_summary(f) || jsonb_build_object('nodes', coalesce((
      SELECT jsonb_agg(jsonb_build_object('queue', n.queue, 'key', n.key, 'state', n.state,
          'waits', CASE WHEN n.state = 'blocked' THEN n.waits END, 'ignore_dead', n.ignore_dead,
          'after', coalesce((SELECT jsonb_agg(jsonb_build_object('queue', d.queue, 'key', d.key)
                                ORDER BY e.ord)
                               FROM @S.flow_deps e JOIN @S.flow_nodes d ON d.id = e.dep
                              WHERE e.node = n.id), '[]'::jsonb))
        || CASE WHEN a.attempt IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('attempt', a.attempt) END
        || CASE WHEN coalesce(n.error, a.err) IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('error', coalesce(n.error, a.err)) END
        || CASE WHEN n.result IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('result', n.result) END
        ORDER BY n.id)
        FROM @S.flow_nodes n
        LEFT JOIN LATERAL (
          SELECT j.requeues + 1 AS attempt, j.last_error AS err FROM @S.jobs j
           WHERE n.state = 'pending' AND j.queue = n.queue AND j.key = n.key
          UNION ALL
          SELECT x.attempts, NULL FROM @S.dead x
           WHERE n.state = 'dead' AND n.cause IS NULL AND x.queue = n.queue AND x.key = n.key
          LIMIT 1) a ON true
       WHERE n.flow = f.id), '[]'::jsonb))
    FROM @S.flows f WHERE f.id = p_id $fn$;
-- prune_flows: flows finished longer than their keep ago go, with their nodes (at most
-- p_limit per call; the runners call it now and then).
CREATE OR REPLACE FUNCTION @S.prune_flows(p_limit integer) RETURNS integer LANGUAGE sql AS $fn$
  WITH x AS (DELETE FROM @S.flows f WHERE f.id IN (SELECT y.id FROM @S.flows y
                WHERE y.finished_at IS NOT NULL
                  AND y.finished_at < now() - make_interval(secs => y.keep)
                ORDER BY y.finished_at LIMIT p_limit FOR UPDATE SKIP LOCKED)
             RETURNING 1)
  SELECT count(*)::integer FROM x $fn$;
