/*
 * The PostgreSQL schema of wqrun (SPEC 8.1) and its migrations.
 *
 * One row per (queue, key) holds the whole pending state (POSTGRES.md 5),
 * so dedup, exclusivity, the follow-up rule and earliest-wins delays all
 * serialize on that row's lock:
 *   running   handed to a handler on runner `runner` with fencing `token`;
 *   run_at    when a pending (not running) row may be claimed: the add's
 *             time for a queued item, the ready time for a delayed one;
 *   delay_at  a delayed add pending beside a queued or running item;
 *   dirty     re-added while running: runs once more after it finishes;
 *   crashes   runs in a row that ended with their runner's death.
 * The views `items` and `failures` show it with SPEC section 4's columns.
 * Claims use a partial index that holds exactly the pending rows; every
 * other statement finds its row by primary key. There is deliberately no
 * index on `runner`: it would cost every claim an index insert, and a
 * planner misled by statistics taken while nothing ran picked it for the
 * outcomes' key lookups (measured: 300 us instead of 10 per row); only the
 * reaper, when a runner died, scans for a runner's rows.
 */
#include "store/pg/pg_schema.h"

#include "store/pg/pgconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Version 1, created in one transaction. */
static const char *const schema_v1 =
    "CREATE SCHEMA @S;\n"
    "CREATE TABLE @S.meta (key text PRIMARY KEY, value text);\n"
    "CREATE TABLE @S.queues (name text PRIMARY KEY, max_retries integer, defined_by text,\n"
    "  updated_at timestamptz NOT NULL DEFAULT now(), paused boolean NOT NULL DEFAULT false);\n"
    "CREATE SEQUENCE @S.seq;\n"
    "CREATE SEQUENCE @S.token;\n"
    "CREATE TABLE @S.jobs (\n"
    "  queue text NOT NULL, key text NOT NULL, payload jsonb,\n"
    "  priority integer NOT NULL DEFAULT 0, grp text,\n"
    "  running boolean NOT NULL DEFAULT false,\n"
    "  run_at timestamptz NOT NULL, seq bigint NOT NULL,\n"
    "  delay_at timestamptz, dirty boolean NOT NULL DEFAULT false,\n"
    "  enqueued_at timestamptz NOT NULL DEFAULT now(),\n"
    "  requeues integer NOT NULL DEFAULT 0, last_error text,\n"
    "  runner bigint, token bigint, claimed_at timestamptz,\n"
    "  crashes integer NOT NULL DEFAULT 0,\n"
    "  PRIMARY KEY (queue, key)\n"
    ") WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01,\n"
    "        autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = "
    "0.02);\n"
    "CREATE INDEX jobs_claim ON @S.jobs (queue, priority DESC, run_at, seq) WHERE NOT running;\n"

    "CREATE TABLE @S.dead (queue text NOT NULL, key text NOT NULL, payload jsonb, error text,\n"
    "  attempts integer NOT NULL, failed_at timestamptz NOT NULL DEFAULT now(),\n"
    "  PRIMARY KEY (queue, key));\n"
    "CREATE TABLE @S.done (queue text NOT NULL, key text NOT NULL,\n"
    "  finished_at timestamptz NOT NULL, result jsonb, PRIMARY KEY (queue, key));\n"
    "CREATE TABLE @S.schedules (queue text NOT NULL, name text NOT NULL, spec text NOT NULL,\n"
    "  key text, payload jsonb, tz text NOT NULL DEFAULT 'utc', catch_up text NOT NULL DEFAULT "
    "'once',\n"
    "  next_at timestamptz, last_at timestamptz, PRIMARY KEY (queue, name));\n"
    "CREATE TABLE @S.runners (id bigserial PRIMARY KEY, name text NOT NULL, host text NOT NULL,\n"
    "  pid integer NOT NULL, started_at timestamptz NOT NULL DEFAULT now(),\n"
    "  heartbeat_at timestamptz NOT NULL DEFAULT now(), lease double precision NOT NULL,\n"
    "  version text);\n"
    "CREATE UNLOGGED TABLE @S.waiting (queue text NOT NULL, runner bigint NOT NULL,\n"
    "  PRIMARY KEY (queue, runner));\n"
    "CREATE TABLE @S.counters (name text PRIMARY KEY, value bigint NOT NULL DEFAULT 0);\n"
    "INSERT INTO @S.counters VALUES ('takeovers', 0), ('crash_dead', 0);\n"
    "CREATE VIEW @S.items AS SELECT queue, key, payload,\n"
    "  CASE WHEN running THEN 'processing' WHEN run_at <= now() THEN 'queued' ELSE 'waiting' END "
    "AS "
    "state,\n"
    "  CASE WHEN NOT running AND run_at > now() THEN run_at ELSE delay_at END AS ready_at,\n"
    "  priority, grp, enqueued_at, requeues, last_error, requeues + 1 AS attempt, dirty,\n"
    "  runner, token, claimed_at FROM @S.jobs;\n"
    "CREATE VIEW @S.failures AS SELECT queue, key, requeues, last_error FROM @S.jobs\n"
    "  WHERE requeues > 0;\n"
    "INSERT INTO @S.meta VALUES ('schema_version', '1');\n";

/*
 * Version 2: operating the fleet and keep_done across runners (SPEC 7.2,
 * 7.5, 8.2). A cancel is a row in `signals` for the runner that runs the
 * key, which it reads with its heartbeat or at once when notified
 * ('!control'); queues.keep_done is the queue's shared completed-job memory.
 */
static const char *const schema_v2 =
    "CREATE TABLE @S.signals (id bigserial PRIMARY KEY, runner bigint NOT NULL,\n"
    "  queue text NOT NULL, key text NOT NULL, token bigint NOT NULL,\n"
    "  created_at timestamptz NOT NULL DEFAULT now());\n"
    "CREATE INDEX signals_runner ON @S.signals (runner);\n"
    "ALTER TABLE @S.queues ADD COLUMN keep_done double precision,\n"
    /* group limits: the queue's default per group, its own rate (SPEC 7.4) */
    "  ADD COLUMN g_conc integer, ADD COLUMN g_rate double precision,\n"
    "  ADD COLUMN g_burst double precision, ADD COLUMN q_rate double precision,\n"
    "  ADD COLUMN q_burst double precision, ADD COLUMN q_tat timestamptz;\n"
    /* One row per group seen: running counts its items processing on every runner; own:
     * q:set_group_limit's limits replace the queue's; tat the rate's GCRA time; wake_at when
     * a rate-held group may go on. */
    "CREATE TABLE @S.groups (queue text NOT NULL, grp text NOT NULL,\n"
    "  running integer NOT NULL DEFAULT 0, own boolean NOT NULL DEFAULT false,\n"
    "  conc integer, rate double precision, burst double precision, tat timestamptz,\n"
    "  wake_at timestamptz, PRIMARY KEY (queue, grp)) WITH (fillfactor = 70);\n"
    "CREATE INDEX groups_wake ON @S.groups (queue, wake_at) WHERE wake_at IS NOT NULL;\n"
    /* held: a due item of a saturated group, kept out of the claim index */
    "ALTER TABLE @S.jobs ADD COLUMN held boolean NOT NULL DEFAULT false;\n"
    /* outcomes each runner wrote (the dashboard's jobs/s per runner) */
    "ALTER TABLE @S.runners ADD COLUMN done bigint NOT NULL DEFAULT 0;\n"
    "DROP INDEX @S.jobs_claim;\n"
    "CREATE INDEX jobs_claim ON @S.jobs (queue, priority DESC, run_at, seq)\n"
    "  WHERE NOT running AND NOT held;\n"
    "CREATE INDEX jobs_held ON @S.jobs (queue, grp, priority DESC, run_at, seq) WHERE held;\n"
    "CREATE INDEX jobs_group_ready ON @S.jobs (queue, grp)\n"
    "  WHERE grp IS NOT NULL AND NOT running AND NOT held;\n"
    "CREATE INDEX done_expiry ON @S.done (queue, finished_at);\n"
    /* replaced by the functions below with new parameters (force, results) */
    "DROP FUNCTION IF EXISTS @S.add(text, text, jsonb, double precision, integer, text);\n"
    "DROP FUNCTION IF EXISTS @S.finish(text, bigint, text[], bigint[], smallint[],\n"
    "  double precision[],\n"
    "  integer[], text[], jsonb[]);\n"
    "UPDATE @S.meta SET value = '2' WHERE key = 'schema_version';\n";

/* Version 2 -> 3: add() takes unique_add (the functions below recreate it). */
static const char *const schema_v3 =
    "DROP FUNCTION IF EXISTS @S.add(text, text, jsonb, double precision, integer, text, boolean);\n"
    "UPDATE @S.meta SET value = '3' WHERE key = 'schema_version';\n";

/*
 * Version 3 -> 4: table health (issue 17). The hot tables' autovacuum runs
 * without cost delay (the default 2 ms sleeps kept a vacuum of jobs busy for
 * a minute while 1-2 M dead tuples piled up; its pages are in memory, so
 * throttling protects nothing), so dead tuples go as soon as no snapshot
 * needs them, and the table stays small after a long transaction ends.
 */
static const char *const schema_v4 =
    "ALTER TABLE @S.jobs SET (autovacuum_vacuum_cost_delay = 0);\n"
    "ALTER TABLE @S.groups SET (autovacuum_vacuum_cost_delay = 0);\n"
    "UPDATE @S.meta SET value = '4' WHERE key = 'schema_version';\n";

/*
 * Version 4 -> 5: the grouped claim without joins between arrays (issue 17).
 * room(queue, groups[]), a set-returning function the claims joined to
 * their candidates, gives way to room_of(group row, queue row), computed
 * once per group from the row the claim locks: the generic plans of those
 * joins compared every candidate with every group (474k comparisons for
 * 700 candidates) and the claim of a limited queue cost 120-300 ms.
 */
static const char *const schema_v5 =
    "DROP FUNCTION IF EXISTS @S.room(text, text[]);\n"
    /* the groups with a rate of their own (rated(): whether a wake_at may be needed) */
    "CREATE INDEX IF NOT EXISTS groups_rated ON @S.groups (queue, grp) WHERE own AND rate > 0;\n"
    "UPDATE @S.meta SET value = '5' WHERE key = 'schema_version';\n";

/*
 * Version 5 -> 6: outcomes that claim (issue 17). finish() takes how many
 * items the runner can start now and returns, besides the count of stale
 * outcomes, the items it claimed for the runner: above all the next held
 * items of the groups whose slots its outcomes freed, handed over in those
 * slots (one write per grouped item instead of an unhold, a claim and two
 * updates of the group's row).
 */
static const char *const schema_v6 =
    "DROP FUNCTION IF EXISTS @S.finish(text, bigint, text[], bigint[], smallint[],\n"
    "  double precision[], integer[], text[], jsonb[], jsonb[]);\n"
    "UPDATE @S.meta SET value = '6' WHERE key = 'schema_version';\n";

/*
 * Version 6 -> 7: claims that start at a floor (issue 17, table health). A
 * long transaction elsewhere keeps the index entries of every item claimed
 * after its snapshot at the head of jobs_claim; a claim from the head walked
 * them all (seconds after a minute of traffic). Runners now keep, per queue,
 * a ready time below which no pending item can be (pg.c's floor), and start
 * their walks there, one priority at a time:
 *   levels    the priorities a queue's items have had (an add writes one the
 *             first time it sees it), so that each walk starts at (queue,
 *             priority, floor) without walking other levels' entries;
 *   resets    counts the times items went back at their old places (a
 *             released claim): a floor older than the count means nothing;
 *   ready times of new items are the clock after the transaction has its
 *             id (clock_timestamp(), not the transaction's start), so that an
 *             item committed later than a runner looked is never older than
 *             what the transactions running then could have written.
 */
static const char *const schema_v7 =
    "CREATE TABLE @S.levels (queue text NOT NULL, priority integer NOT NULL,\n"
    "  PRIMARY KEY (queue, priority));\n"
    "INSERT INTO @S.levels SELECT DISTINCT queue, priority FROM @S.jobs;\n"
    "ALTER TABLE @S.queues ADD COLUMN resets bigint NOT NULL DEFAULT 0;\n"
    /* an item added in the reader's own transaction is queued, not waiting (its ready time
     * is the clock of its add, later than the transaction's start) */
    "CREATE OR REPLACE VIEW @S.items AS SELECT queue, key, payload,\n"
    "  CASE WHEN running THEN 'processing' WHEN run_at <= clock_timestamp() THEN 'queued'\n"
    "    ELSE 'waiting' END AS state,\n"
    "  CASE WHEN NOT running AND run_at > clock_timestamp() THEN run_at ELSE delay_at END\n"
    "    AS ready_at,\n"
    "  priority, grp, enqueued_at, requeues, last_error, requeues + 1 AS attempt, dirty,\n"
    "  runner, token, claimed_at FROM @S.jobs;\n"
    "UPDATE @S.meta SET value = '7' WHERE key = 'schema_version';\n";

/*
 * The functions, as this version of wqrun defines them: created (or
 * replaced) after every migration, so they always match the binary. A
 * migration drops those whose parameters change.
 */
static const char *const functions =
    /* Group limits (SPEC 7.4, 8.2). group_state: a group's limits (its own, else the
     * queue's default), how many of its items run on every runner, and how many may start
     * now within its rate (GCRA: tokens = (now - tat) * rate + burst, at most burst). Exact
     * when the caller holds the group's row lock (claims and outcomes do). Lock order, so
     * that nothing waits in a circle: outcomes lock group rows in name order (before that
     * only the held items they hand over, with SKIP LOCKED; after it they claim); claims run
     * side by side and never wait for a group row or an item another transaction holds (SKIP
     * LOCKED), except for a group row another claim is creating (claims create them in name
     * order); an add locks its item's row, then at most its own group's row, last. */
    "CREATE OR REPLACE FUNCTION @S.group_state(p_queue text, p_grp text, OUT conc integer,\n"
    "    OUT rate double precision, OUT burst double precision, OUT running integer,\n"
    "    OUT tokens double precision, OUT tat timestamptz) LANGUAGE plpgsql AS $fn$\n"
    "DECLARE g @S.groups%ROWTYPE; q @S.queues%ROWTYPE;\n"
    "BEGIN\n"
    "  SELECT * INTO g FROM @S.groups x WHERE x.queue = p_queue AND x.grp = p_grp;\n"
    "  SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue;\n"
    "  IF g.own THEN conc := g.conc; rate := g.rate; burst := g.burst;\n"
    "  ELSE conc := q.g_conc; rate := q.g_rate; burst := q.g_burst; END IF;\n"
    "  running := coalesce(g.running, 0); tat := g.tat;\n"
    "  tokens := CASE WHEN rate > 0 THEN greatest(0, least(burst, floor(\n"
    "      extract(epoch FROM now() - coalesce(g.tat, now())) * rate + burst)))\n"
    "    ELSE 'Infinity' END;\n"
    "END $fn$;\n"
    /* set_group_limit: a group's own limits (p_own false: the queue's default again). */
    "CREATE OR REPLACE FUNCTION @S.set_group_limit(p_queue text, p_grp text, p_own boolean,\n"
    "    p_conc integer, p_rate double precision, p_burst double precision) RETURNS void\n"
    "LANGUAGE plpgsql AS $fn$\n"
    "BEGIN\n"
    "  PERFORM @S.check_queue('wqrun.set_group_limit', p_queue);\n"
    "  INSERT INTO @S.groups AS x (queue, grp, own, conc, rate, burst)\n"
    "    VALUES (p_queue, p_grp, p_own, p_conc, p_rate, p_burst)\n"
    "    ON CONFLICT (queue, grp) DO UPDATE SET own = EXCLUDED.own, conc = EXCLUDED.conc,\n"
    "      rate = EXCLUDED.rate, burst = EXCLUDED.burst;\n"
    "  PERFORM @S.promote(p_queue, p_grp);\n"
    "  PERFORM pg_notify(@L, '!control'); -- every runner's claims count limits from now\n"
    "END $fn$;\n"
    /* A group's limits: its own (q:set_group_limit), else the queue's default; room_of: how
     * many more of its items may start now (its concurrency left, its rate's tokens), exact
     * when the caller holds the group's row lock. Single expressions, so that the planner
     * inlines them. At most 2^31 - 1 (no limit): the claims keep rooms in jsonb. */
    "CREATE OR REPLACE FUNCTION @S.conc_of(x @S.groups, q @S.queues) RETURNS integer\n"
    "LANGUAGE sql IMMUTABLE AS $fn$ SELECT CASE WHEN x.own THEN x.conc ELSE q.g_conc END $fn$;\n"
    "CREATE OR REPLACE FUNCTION @S.rate_of(x @S.groups, q @S.queues) RETURNS double precision\n"
    "LANGUAGE sql IMMUTABLE AS $fn$ SELECT CASE WHEN x.own THEN x.rate ELSE q.g_rate END $fn$;\n"
    "CREATE OR REPLACE FUNCTION @S.burst_of(x @S.groups, q @S.queues) RETURNS double precision\n"
    "LANGUAGE sql IMMUTABLE AS $fn$ SELECT CASE WHEN x.own THEN x.burst ELSE q.g_burst END $fn$;\n"
    "CREATE OR REPLACE FUNCTION @S.room_of(x @S.groups, q @S.queues) RETURNS double precision\n"
    "LANGUAGE sql STABLE AS $fn$\n"
    "  SELECT least(2147483647, coalesce(@S.conc_of(x, q) - x.running, 2147483647),\n"
    "    CASE WHEN @S.rate_of(x, q) > 0 THEN greatest(0, least(@S.burst_of(x, q),\n"
    "      floor(extract(epoch FROM now() - coalesce(x.tat, now())) * @S.rate_of(x, q)\n"
    "            + @S.burst_of(x, q)))) END)::float8 $fn$;\n"
    /* rated: whether a rate may hold back any of these groups (else no wake_at to keep) */
    "CREATE OR REPLACE FUNCTION @S.rated(q @S.queues, p_grps text[]) RETURNS boolean\n"
    "LANGUAGE sql STABLE AS $fn$\n"
    "  SELECT coalesce(q.g_rate > 0, false) OR EXISTS (SELECT 1 FROM @S.groups x\n"
    "    WHERE x.queue = q.name AND x.own AND x.rate > 0 AND x.grp = ANY (p_grps)) $fn$;\n"
    /* ungroup: items of these groups (one entry per item) stopped running: their slots
     * free up, and as many held items as may start now become claimable, in priority and
     * FIFO order. Set-based: one statement per step for every group at once. */
    "CREATE OR REPLACE FUNCTION @S.ungroup(p_queue text, p_grps text[]) RETURNS void\n"
    "LANGUAGE plpgsql AS $fn$\n"
    "DECLARE v_g text[];\n"
    "BEGIN\n"
    "  SELECT array_agg(DISTINCT g ORDER BY g) INTO v_g FROM unnest(p_grps) g WHERE g IS NOT "
    "NULL;\n"
    "  IF v_g IS NULL THEN RETURN; END IF;\n"
    "  PERFORM 1 FROM @S.groups x WHERE x.queue = p_queue AND x.grp = ANY (v_g)\n"
    "    ORDER BY x.grp FOR UPDATE; -- in name order: outcomes never wait in a circle\n"
    "  UPDATE @S.groups x SET running = greatest(x.running - a.n, 0)\n"
    "    FROM (SELECT g, count(*) AS n FROM unnest(p_grps) g WHERE g IS NOT NULL GROUP BY g) a\n"
    "    WHERE x.queue = p_queue AND x.grp = a.g;\n"
    "  PERFORM @S.promote_all(p_queue, v_g);\n"
    "END $fn$;\n"
    /* promote_all: for each group (its row locked by the caller), unhold as many held items
     * as may start now, less those already claimable; a group its rate holds back gets a
     * wake_at for the claims. Driven from the groups' rows: index lookups per group. */
    "CREATE OR REPLACE FUNCTION @S.promote_all(p_queue text, p_grps text[]) RETURNS void\n"
    "LANGUAGE plpgsql AS $fn$\n"
    "DECLARE q @S.queues%ROWTYPE; n integer;\n"
    "BEGIN\n"
    "  SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue;\n"
    "  UPDATE @S.jobs j SET held = false WHERE j.ctid = ANY (ARRAY(\n"
    "    SELECT h.ctid FROM unnest(p_grps) AS g (grp)\n"
    "      CROSS JOIN LATERAL (SELECT x FROM @S.groups x\n"
    "          WHERE x.queue = p_queue AND x.grp = g.grp) gx\n"
    "      CROSS JOIN LATERAL (SELECT @S.room_of(gx.x, q) - (SELECT count(*) FROM @S.jobs y\n"
    "          WHERE y.queue = p_queue AND y.grp = g.grp AND NOT y.running AND NOT y.held\n"
    "            AND y.run_at <= now()) AS k) f\n"
    "      CROSS JOIN LATERAL (SELECT h.ctid FROM @S.jobs h\n"
    "          WHERE h.queue = p_queue AND h.grp = g.grp AND h.held\n"
    "          ORDER BY h.priority DESC, h.run_at, h.seq\n"
    "          LIMIT least(greatest(f.k, 0), 1000)::integer\n"
    "          FOR UPDATE SKIP LOCKED) h));\n"
    "  GET DIAGNOSTICS n = ROW_COUNT;\n"
    "  -- claimable now: runners with idle workers claim at once, not at their next poll\n"
    "  IF n > 0 AND EXISTS (SELECT 1 FROM @S.waiting w WHERE w.queue = p_queue) THEN\n"
    "    PERFORM pg_notify(@L, p_queue);\n"
    "  END IF;\n"
    "  IF @S.rated(q, p_grps) THEN\n"
    "    UPDATE @S.groups x\n"
    "       SET wake_at = x.tat - make_interval(secs => (@S.burst_of(x, q) - 1) / @S.rate_of(x, "
    "q))\n"
    "     WHERE x.queue = p_queue AND x.grp = ANY (p_grps) AND @S.rate_of(x, q) > 0\n"
    "       AND @S.room_of(x, q) < 1\n"
    "       AND EXISTS (SELECT 1 FROM @S.jobs h WHERE h.queue = p_queue AND h.grp = x.grp\n"
    "                     AND h.held);\n"
    "  END IF;\n"
    "END $fn$;\n"
    "CREATE OR REPLACE FUNCTION @S.promote(p_queue text, p_grp text) RETURNS void\n"
    "LANGUAGE plpgsql AS $fn$\n"
    "BEGIN\n"
    "  PERFORM 1 FROM @S.groups x WHERE x.queue = p_queue AND x.grp = p_grp FOR UPDATE;\n"
    "  PERFORM @S.promote_all(p_queue, ARRAY[p_grp]);\n"
    "END $fn$;\n"
    /* sweep: groups with held items and room (an add that read a group's state without its
     * lock while an outcome freed a slot may leave one held): made claimable again. */
    "CREATE OR REPLACE FUNCTION @S.sweep(p_queue text) RETURNS integer LANGUAGE plpgsql AS $fn$\n"
    "DECLARE v_g text[]; q @S.queues%ROWTYPE;\n"
    "BEGIN\n"
    "  SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue;\n"
    "  SELECT array_agg(x.grp) INTO v_g FROM (SELECT x.grp FROM @S.groups x\n"
    "    WHERE x.queue = p_queue\n"
    "      AND (@S.room_of(x, q) >= 1 OR (@S.rate_of(x, q) > 0 AND x.wake_at IS NULL))\n"
    "      AND EXISTS (SELECT 1 FROM @S.jobs h WHERE h.queue = x.queue\n"
    "      AND h.grp = x.grp AND h.held) ORDER BY x.grp FOR UPDATE SKIP LOCKED) x;\n"
    "  IF v_g IS NOT NULL THEN PERFORM @S.promote_all(p_queue, v_g); END IF;\n"
    "  RETURN coalesce(cardinality(v_g), 0);\n"
    "END $fn$;\n"
    /* claim: the first p_limit due items, in priority then FIFO order, whose groups' limits
     * (and the queue's rate) let them start now; counted against their groups from here. A
     * saturated group's due items are held (out of the claim index), so that saturated
     * groups cost later claims nothing. Set-based: a handful of statements per claim. */
    "CREATE OR REPLACE FUNCTION @S.claim(p_queue text, p_limit integer, p_runner bigint)\n"
    "RETURNS TABLE (o_key text, o_payload jsonb, o_priority integer, o_token bigint,\n"
    "    o_requeues integer, o_enqueued double precision, o_grp text, o_run_at double "
    "precision,\n"
    "    o_seq bigint) LANGUAGE plpgsql AS $fn$\n"
    "DECLARE q @S.queues%ROWTYPE; v_now timestamptz := statement_timestamp();\n"
    "  v_max integer := p_limit;\n"
    "  v_tokens double precision; v_woken text[]; v_ids tid[]; v_grps text[]; v_room jsonb;\n"
    "  v_taken jsonb; v_adm tid[]; v_admg text[]; v_full text[]; n integer;\n"
    "BEGIN\n"
    "  IF NOT EXISTS (SELECT 1 FROM @S.runners x WHERE x.id = p_runner) THEN RETURN; END IF;\n"
    "  SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue;\n"
    "  IF q.paused THEN RETURN; END IF;\n"
    "  IF q.q_rate > 0 THEN -- the queue's own rate: one budget for every runner\n"
    "    SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue FOR UPDATE;\n"
    "    v_tokens := greatest(0, least(q.q_burst, floor(extract(epoch FROM\n"
    "      v_now - coalesce(q.q_tat, v_now)) * q.q_rate + q.q_burst)));\n"
    "    v_max := least(v_max, v_tokens)::integer;\n"
    "    IF v_max < 1 THEN RETURN; END IF;\n"
    "  END IF;\n"
    /* groups whose rate lets them go on again: their held items become claimable */
    "  WITH w AS (UPDATE @S.groups x SET wake_at = NULL WHERE x.ctid = ANY (ARRAY(\n"
    "             SELECT y.ctid FROM @S.groups y WHERE y.queue = p_queue AND y.wake_at <= v_now\n"
    "             FOR UPDATE SKIP LOCKED)) RETURNING x.grp)\n"
    "  SELECT array_agg(w.grp ORDER BY w.grp) INTO v_woken FROM w;\n"
    "  IF v_woken IS NOT NULL THEN PERFORM @S.promote_all(p_queue, v_woken); END IF;\n"
    "  SELECT array_agg(c.id ORDER BY c.o), array_agg(c.grp ORDER BY c.o) INTO v_ids, v_grps\n"
    "    FROM (SELECT j.id, j.grp,\n"
    "            row_number() OVER (ORDER BY j.priority DESC, j.run_at, j.seq) AS o\n"
    "          FROM (SELECT j.ctid AS id, j.grp, j.priority, j.run_at, j.seq FROM @S.jobs j\n"
    "                WHERE j.queue = p_queue AND NOT j.running\n"
    "                  AND NOT j.held AND j.run_at <= v_now\n"
    "                ORDER BY j.priority DESC, j.run_at, j.seq LIMIT 2 * v_max + 10\n"
    "                FOR UPDATE SKIP LOCKED) j) c;\n"
    "  IF v_ids IS NULL THEN RETURN; END IF;\n"
    /* rows for groups seen for the first time (an insert that meets an existing row waits
     * for whoever updates it: only the missing ones are inserted) */
    "  INSERT INTO @S.groups AS x (queue, grp)\n"
    "    SELECT DISTINCT p_queue, g FROM unnest(v_grps) g WHERE g IS NOT NULL\n"
    "      AND NOT EXISTS (SELECT 1 FROM @S.groups y WHERE y.queue = p_queue AND y.grp = g)\n"
    "    ORDER BY 2 ON CONFLICT DO NOTHING;\n"
    /* the candidates' groups whose rows no outcome holds now, and how many of each may start
     * (a jsonb object: a lookup per candidate, not a join); the others wait for the next
     * claim */
    "  SELECT jsonb_object_agg(t.grp, t.room) INTO v_room\n"
    "    FROM (SELECT DISTINCT g FROM unnest(v_grps) g WHERE g IS NOT NULL) AS u (grp)\n"
    "      CROSS JOIN LATERAL (SELECT x.grp, @S.room_of(x, q) AS room FROM @S.groups x\n"
    "          WHERE x.queue = p_queue AND x.grp = u.grp FOR UPDATE SKIP LOCKED) t;\n"
    "  SELECT array_agg(a.id ORDER BY a.o), array_agg(a.grp ORDER BY a.o) INTO v_adm, v_admg\n"
    "    FROM (SELECT c.id, c.grp, c.o FROM (\n"
    "      SELECT u.id, u.grp, u.o, row_number() OVER (PARTITION BY u.grp ORDER BY u.o) AS rn\n"
    "        FROM unnest(v_ids, v_grps) WITH ORDINALITY AS u(id, grp, o)) c\n"
    "      WHERE c.grp IS NULL OR c.rn <= (v_room ->> c.grp)::float8\n"
    "      ORDER BY c.o LIMIT v_max) a;\n"
    "  n := coalesce(cardinality(v_adm), 0);\n"
    "  SELECT jsonb_object_agg(a.g, a.n) INTO v_taken\n"
    "    FROM (SELECT g, count(*) AS n FROM unnest(v_admg) g WHERE g IS NOT NULL GROUP BY g) a;\n"
    "  IF n > 0 THEN\n"
    "    UPDATE @S.groups x SET running = x.running + a.n,\n"
    "        tat = CASE WHEN @S.rate_of(x, q) > 0 THEN greatest(coalesce(x.tat, v_now), v_now)\n"
    "                   + make_interval(secs => a.n / @S.rate_of(x, q)) END\n"
    "      FROM (SELECT t.key AS g, t.value::integer AS n FROM jsonb_each_text(v_taken) t) a\n"
    "      WHERE x.queue = p_queue AND x.grp = a.g;\n"
    "    RETURN QUERY UPDATE @S.jobs j SET running = true, runner = p_runner,\n"
    "        token = nextval('@S.token'), claimed_at = v_now,\n"
    "        delay_at = CASE WHEN j.delay_at <= v_now THEN NULL ELSE j.delay_at END\n"
    "      WHERE j.ctid = ANY (v_adm) RETURNING j.key, j.payload, j.priority, j.token,\n"
    "        j.requeues, extract(epoch FROM j.enqueued_at)::float8, j.grp,\n"
    "        extract(epoch FROM j.run_at)::float8, j.seq;\n"
    "  END IF;\n"
    /* saturated groups (no room left now): their due items wait outside the claim index */
    "  SELECT array_agg(t.key ORDER BY t.key) INTO v_full FROM jsonb_each_text(v_room) t\n"
    "   WHERE t.value::float8 - coalesce((v_taken ->> t.key)::float8, 0) < 1;\n"
    "  IF v_full IS NOT NULL THEN\n"
    "    UPDATE @S.jobs j SET held = true WHERE j.ctid = ANY (ARRAY(SELECT h.ctid FROM @S.jobs h\n"
    "      WHERE h.queue = p_queue AND h.grp = ANY (v_full) AND NOT h.running AND NOT h.held\n"
    "        AND h.run_at <= v_now FOR UPDATE SKIP LOCKED));\n"
    "    IF @S.rated(q, v_full) THEN -- wake_at where a rate holds them back\n"
    "      PERFORM @S.promote_all(p_queue, v_full);\n"
    "    END IF;\n"
    "  END IF;\n"
    "  IF q.q_rate > 0 AND n > 0 THEN\n"
    "    UPDATE @S.queues x SET q_tat = greatest(coalesce(x.q_tat, v_now), v_now)\n"
    "      + make_interval(secs => n / q.q_rate) WHERE x.name = p_queue;\n"
    "  END IF;\n"
    "END $fn$;\n"
    /* release: a runner's running items go back (it was declared dead, or it lets go). */
    "CREATE OR REPLACE FUNCTION @S.release(p_runners bigint[], p_crashed boolean) RETURNS "
    "integer\n"
    "LANGUAGE plpgsql AS $fn$\n"
    "DECLARE g record; n integer := 0;\n"
    "BEGIN\n"
    "  FOR g IN WITH x AS (UPDATE @S.jobs j SET running = false, runner = NULL, token = NULL,\n"
    "               claimed_at = NULL,\n"
    "               crashes = CASE WHEN p_crashed THEN j.crashes + 1 ELSE j.crashes END\n"
    "             WHERE j.running AND j.runner = ANY (p_runners) RETURNING j.queue, j.grp)\n"
    /* queue by queue in name order: concurrent releases lock the groups' and queues' rows in
     * one order */
    "           SELECT x.queue, array_agg(x.grp) AS grps, count(*) AS c FROM x GROUP BY x.queue\n"
    "           ORDER BY x.queue LOOP\n"
    "    PERFORM @S.ungroup(g.queue, g.grps);\n"
    "    -- back at their old places, maybe below runners' floors (see schema_v7)\n"
    "    UPDATE @S.queues x SET resets = x.resets + 1 WHERE x.name = g.queue;\n"
    "    IF p_crashed THEN PERFORM pg_notify(@L, g.queue); END IF;\n"
    "    n := n + g.c;\n"
    "  END LOOP;\n"
    "  RETURN n;\n"
    "END $fn$;\n"
    /* wqrun.add: the rules of q:add / q:add_after (WORKQUEUE.md) on the row. */
    "CREATE OR REPLACE FUNCTION @S.add(queue text, key text, payload jsonb DEFAULT NULL,\n"
    "    after_seconds double precision DEFAULT NULL, priority integer DEFAULT NULL,\n"
    "    grp text DEFAULT NULL, force boolean DEFAULT false, unique_add boolean DEFAULT false)\n"
    "  RETURNS text LANGUAGE plpgsql AS "
    "$fn$\n"
    "DECLARE\n"
    "  v_now timestamptz;\n"
    "  v_ready timestamptz;\n"
    "  r @S.jobs%ROWTYPE;\n"
    "  v_out text;\n"
    "  v_keep double precision;\n"
    "  v_held boolean := false; v_gs record; v_nready integer; v_running boolean;\n"
    "BEGIN\n"
    "  IF queue IS NULL OR queue !~ '^[A-Za-z0-9_.-]{1,64}$' THEN\n"
    "    RAISE EXCEPTION 'wqrun.add: bad argument ''queue'' (1-64 characters of "
    "[A-Za-z0-9_.-], got %)',\n"
    "      coalesce(quote_literal(queue), 'NULL') USING ERRCODE = '22023';\n"
    "  END IF;\n"
    "  IF key IS NULL OR octet_length(key) > 65536 THEN\n"
    "    RAISE EXCEPTION 'wqrun.add: bad argument ''key'' (%)',\n"
    "      CASE WHEN key IS NULL THEN 'NULL' ELSE 'longer than 65536 bytes' END USING ERRCODE = "
    "'22023';\n"
    "  END IF;\n"
    "  IF after_seconds = 'NaN'::float8 OR after_seconds = 'Infinity'::float8 THEN\n"
    "    RAISE EXCEPTION 'wqrun.add: bad argument ''after_seconds'' (%)', after_seconds\n"
    "      USING ERRCODE = '22023';\n"
    "  END IF;\n"
    /* ready times are the clock once this transaction has its id (schema_v7) */
    "  PERFORM pg_current_xact_id();\n"
    "  v_now := clock_timestamp();\n"
    "  IF after_seconds > 0 THEN v_ready := v_now + make_interval(secs => after_seconds); END IF;\n"
    /* keep_done (SPEC 7.2): finished within it and nothing pending: skipped; force forgets */
    "  SELECT q.keep_done INTO v_keep FROM @S.queues q WHERE q.name = add.queue;\n"
    "  IF v_keep > 0 AND coalesce(add.force, false) THEN\n"
    "    DELETE FROM @S.done d WHERE d.queue = add.queue AND d.key = add.key;\n"
    /* (coalesce: NULL AND EXISTS would look the key up for a queue that keeps nothing) */
    "  ELSIF coalesce(v_keep, 0) > 0 AND EXISTS (SELECT 1 FROM @S.done d WHERE d.queue = "
    "add.queue\n"
    "        AND d.key = add.key AND d.finished_at > v_now - make_interval(secs => v_keep))\n"
    "      AND NOT EXISTS (SELECT 1 FROM @S.jobs j WHERE j.queue = add.queue AND j.key = "
    "add.key) THEN\n"
    "    RETURN 'skipped: done';\n"
    "  END IF;\n"
    /* unique: a key pending or running is left as it is (no follow-up, nothing changed) */
    "  IF coalesce(add.unique_add, false) THEN\n"
    "    SELECT j.running INTO v_running FROM @S.jobs j WHERE j.queue = add.queue AND j.key = "
    "add.key;\n"
    "    IF FOUND THEN\n"
    "      RETURN CASE WHEN v_running THEN 'skipped: processing' ELSE 'skipped: pending' END;\n"
    "    END IF;\n"
    "  END IF;\n"
    /* a new due item of a saturated group is held at once (see claim) */
    "  IF add.grp IS NOT NULL AND v_ready IS NULL THEN\n"
    "    v_gs := @S.group_state(add.queue, add.grp);\n"
    "    IF v_gs.conc IS NOT NULL OR v_gs.rate > 0 THEN\n"
    "      SELECT count(*) INTO v_nready FROM @S.jobs j WHERE j.queue = add.queue\n"
    "        AND j.grp = add.grp AND NOT j.running AND NOT j.held AND j.run_at <= v_now;\n"
    "      v_held := v_gs.running + v_nready >= coalesce(v_gs.conc, 2147483647)\n"
    "                OR v_gs.tokens <= v_nready;\n"
    "    END IF;\n"
    "  END IF;\n"
    "  INSERT INTO @S.levels VALUES (add.queue, coalesce(add.priority, 0)) ON CONFLICT DO "
    "NOTHING;\n"
    "  LOOP\n"
    "    INSERT INTO @S.jobs AS j (queue, key, payload, priority, grp, run_at, seq, "
    "enqueued_at, held)\n"
    "      VALUES (add.queue, add.key, add.payload, coalesce(add.priority, 0), add.grp,\n"
    "              coalesce(v_ready, v_now), nextval('@S.seq'), v_now, v_held)\n"
    "      ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING;\n"
    "    IF FOUND THEN\n"
    "      v_out := CASE WHEN v_ready IS NULL THEN 'queued' ELSE 'delayed' END;\n"
    /* held as read without the group's lock: an outcome committing meanwhile may free a
     * slot without seeing this row; the claims look at the group again in a second. The
     * group's row is locked last (after the item's): an outcome holding it never waits for
     * this add */
    "      IF v_held THEN\n"
    "        UPDATE @S.groups x SET wake_at = least(x.wake_at, v_now + interval '1 second')\n"
    "          WHERE x.queue = add.queue AND x.grp = add.grp\n"
    "            AND (x.wake_at IS NULL OR x.wake_at > v_now + interval '1 second');\n"
    "      END IF;\n"
    "      EXIT;\n"
    "    END IF;\n"
    "    SELECT * INTO r FROM @S.jobs j WHERE j.queue = add.queue AND j.key = add.key FOR UPDATE;\n"
    "    IF NOT FOUND THEN CONTINUE; END IF; -- finished meanwhile: insert again\n"
    "    IF r.running THEN\n"
    "      IF v_ready IS NULL THEN\n"
    "        IF r.dirty OR r.delay_at <= v_now THEN v_out := 'deduplicated';\n"
    "        ELSE r.dirty := true; v_out := 'follow-up'; END IF;\n"
    "      ELSIF r.delay_at IS NULL OR v_ready < r.delay_at THEN\n"
    "        r.delay_at := v_ready; v_out := 'delayed';\n"
    "      ELSE v_out := 'deduplicated'; END IF;\n"
    "      r.priority := coalesce(add.priority, r.priority);\n"
    "    ELSIF r.run_at <= v_now THEN -- queued\n"
    "      IF v_ready IS NULL THEN\n"
    "        v_out := 'deduplicated';\n"
    "        IF add.priority > r.priority THEN -- rises to the back of its new level\n"
    "          r.priority := add.priority; r.run_at := v_now; r.seq := nextval('@S.seq');\n"
    "        END IF;\n"
    "      ELSIF r.delay_at IS NULL OR v_ready < r.delay_at THEN\n"
    "        r.delay_at := v_ready; v_out := 'delayed';\n"
    "      ELSE v_out := 'deduplicated'; END IF;\n"
    "    ELSE -- waiting: only a delayed add is pending\n"
    "      IF v_ready IS NULL THEN\n"
    "        r.delay_at := r.run_at; r.run_at := v_now; r.seq := nextval('@S.seq');\n"
    "        v_out := 'queued';\n"
    "      ELSIF v_ready < r.run_at THEN\n"
    "        r.run_at := v_ready; r.seq := nextval('@S.seq'); v_out := 'delayed';\n"
    "      ELSE v_out := 'deduplicated'; END IF;\n"
    "      r.priority := coalesce(add.priority, r.priority);\n"
    "    END IF;\n"
    "    UPDATE @S.jobs j SET payload = coalesce(add.payload, r.payload), priority = r.priority,\n"
    "        grp = coalesce(add.grp, r.grp), run_at = r.run_at, seq = r.seq, delay_at = "
    "r.delay_at,\n"
    "        dirty = r.dirty\n"
    "      WHERE j.queue = add.queue AND j.key = add.key;\n"
    "    EXIT;\n"
    "  END LOOP;\n"
    "  IF v_out <> 'deduplicated' AND EXISTS (SELECT 1 FROM @S.waiting w WHERE w.queue = "
    "add.queue) THEN\n"
    "    PERFORM pg_notify(@L, add.queue);\n"
    "  END IF;\n"
    "  RETURN v_out;\n"
    "END $fn$;\n"
    /* add_many: new keys in one INSERT (the bulk case), every other item through add(). */
    "CREATE OR REPLACE FUNCTION @S.add_many(items jsonb) RETURNS jsonb LANGUAGE plpgsql AS $fn$\n"
    "DECLARE\n"
    "  v_now timestamptz; v_bad bigint; v_new bigint[]; v_out text[];\n"
    "  e record; q text;\n"
    "BEGIN\n"
    "  PERFORM pg_current_xact_id(); -- ready times: see add()\n"
    "  v_now := clock_timestamp();\n"
    "  IF jsonb_typeof(items) IS DISTINCT FROM 'array' THEN\n"
    "    RAISE EXCEPTION 'wqrun.add_many: bad argument ''items'' (a JSON array expected, got %)',\n"
    "      coalesce(jsonb_typeof(items), 'NULL') USING ERRCODE = '22023';\n"
    "  END IF;\n"
    "  SELECT min(x.i) INTO v_bad FROM jsonb_array_elements(items) WITH ORDINALITY AS x(it, i)\n"
    "   WHERE jsonb_typeof(x.it) <> 'object' OR jsonb_typeof(x.it->'queue') IS DISTINCT FROM "
    "'string'\n"
    "      OR jsonb_typeof(x.it->'key') IS DISTINCT FROM 'string'\n"
    "      OR x.it->>'queue' !~ '^[A-Za-z0-9_.-]{1,64}$';\n"
    "  IF v_bad IS NOT NULL THEN\n"
    "    RAISE EXCEPTION 'wqrun.add_many: bad argument ''items'' (item % needs a string \"key\" "
    "and a \"queue\" of 1-64 characters of [A-Za-z0-9_.-])', v_bad USING ERRCODE = '22023';\n"
    "  END IF;\n"
    "  INSERT INTO @S.levels SELECT DISTINCT x.it->>'queue', "
    "coalesce((x.it->>'priority')::integer, 0)\n"
    "    FROM jsonb_array_elements(items) AS x(it) ORDER BY 1, 2 ON CONFLICT DO NOTHING;\n"
    "  WITH x AS (SELECT it, i FROM jsonb_array_elements(items) WITH ORDINALITY AS x(it, i)),\n"
    "  ins AS (INSERT INTO @S.jobs AS j (queue, key, payload, priority, grp, run_at, seq, "
    "enqueued_at)\n"
    "      SELECT x.it->>'queue', x.it->>'key',\n"
    "             CASE WHEN x.it->'payload' <> 'null'::jsonb THEN x.it->'payload' END,\n"
    "             coalesce((x.it->>'priority')::integer, 0), x.it->>'group',\n"
    "             CASE WHEN (x.it->>'after')::float8 > 0\n"
    "                  THEN v_now + make_interval(secs => (x.it->>'after')::float8) ELSE v_now "
    "END,\n"
    "             nextval('@S.seq'), v_now\n"
    "        FROM x WHERE NOT coalesce((x.it->>'force')::boolean, false)\n"
    "          AND x.it->>'group' IS NULL\n"
    /* a key with a done row (keep_done) is add()'s to decide */
    "          AND NOT EXISTS (SELECT 1 FROM @S.done d WHERE d.queue = x.it->>'queue'\n"
    "                            AND d.key = x.it->>'key')\n"
    "        ORDER BY x.i\n"
    "      ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING RETURNING j.queue, j.key)\n"
    "  SELECT array_agg(f.i) INTO v_new FROM (SELECT min(x.i) AS i FROM x\n"
    "      JOIN ins ON ins.queue = x.it->>'queue' AND ins.key = x.it->>'key' GROUP BY ins.queue, "
    "ins.key) f;\n"
    "  SELECT array_agg(CASE WHEN n.i IS NULL THEN NULL WHEN (x.it->>'after')::float8 > 0\n"
    "                         THEN 'delayed' ELSE 'queued' END ORDER BY x.i) INTO v_out\n"
    "    FROM jsonb_array_elements(items) WITH ORDINALITY AS x(it, i)\n"
    "    LEFT JOIN unnest(v_new) AS n(i) ON n.i = x.i;\n"
    "  IF cardinality(v_new) IS DISTINCT FROM cardinality(v_out) THEN\n"
    "    FOR e IN SELECT it, i FROM jsonb_array_elements(items) WITH ORDINALITY AS x(it, i) "
    "LOOP\n"
    "      CONTINUE WHEN v_out[e.i] IS NOT NULL;\n"
    "      v_out[e.i] := @S.add(e.it->>'queue', e.it->>'key',\n"
    "        CASE WHEN e.it->'payload' <> 'null'::jsonb THEN e.it->'payload' END,\n"
    "        (e.it->>'after')::double precision, (e.it->>'priority')::integer, e.it->>'group',\n"
    "        coalesce((e.it->>'force')::boolean, false), coalesce((e.it->>'unique')::boolean, "
    "false));\n"
    "    END LOOP;\n"
    "  END IF;\n"
    "  FOR q IN SELECT DISTINCT w.queue FROM @S.waiting w WHERE w.queue IN\n"
    "      (SELECT x.it->>'queue' FROM jsonb_array_elements(items) AS x(it)) LOOP\n"
    "    PERFORM pg_notify(@L, q);\n"
    "  END LOOP;\n"
    "  RETURN coalesce(to_jsonb(v_out), '[]'::jsonb);\n"
    "END $fn$;\n"
    /* finish: outcomes of claimed items, fenced by token, and the items it claims for the
     * runner (as a claim returns them: see below), then one row with o_stale:
     * how many outcomes were stale. One primary-key statement per item: its plan cannot
     * depend on statistics. p_done (keep_done) holds, per item, what a success leaves in
     * `done`: its result, JSON null for none, or SQL NULL for nothing (the whole array NULL
     * when the queue keeps nothing); p_take: how many items the runner can start now. */
    "CREATE OR REPLACE FUNCTION @S.finish(p_queue text, p_runner bigint, p_keys text[], p_tokens "
    "bigint[],\n"
    "    p_kinds smallint[], p_delays double precision[], p_requeues integer[], p_errors text[],\n"
    "    p_payloads jsonb[], p_done jsonb[] DEFAULT NULL, p_take integer DEFAULT 0)\n"
    "RETURNS TABLE (o_stale integer, o_key text, o_payload jsonb, o_priority integer, o_token "
    "bigint,\n"
    "    o_requeues integer, o_enqueued double precision, o_grp text, o_run_at double precision,\n"
    "    o_seq bigint) LANGUAGE plpgsql AS $fn$\n"
    "DECLARE\n"
    "  v_now timestamptz;\n"
    "  v_dead boolean := EXISTS (SELECT 1 FROM @S.dead d WHERE d.queue = p_queue);\n"
    "  n integer := 0; k smallint; v_payload jsonb; v_retry timestamptz; o record;\n"
    "  v_gone text[]; v_grps text[]; v_grp text; q @S.queues%ROWTYPE;\n"
    "  v_hand tid[]; v_hg text[]; v_nc bigint := 0;\n"
    "BEGIN\n"
    "  PERFORM pg_current_xact_id(); -- ready times: see add()\n"
    "  v_now := clock_timestamp();\n"
    "  -- The common case in one statement: successes with nothing pending after them. A token\n"
    "  -- is unique to one claim, so key and token matching each some pair is that pair. Each\n"
    "  -- row is found by its own primary key lookup (a LATERAL subquery with LIMIT is planned\n"
    "  -- as one, whatever the statistics say) and deleted by its tuple id: a plan that scans\n"
    "  -- the queue's range of the key index instead (which ANALYZE at a moment of few live\n"
    "  -- rows made the generic plan) walks every entry a long transaction keeps: seconds.\n"
    "  WITH g AS (DELETE FROM @S.jobs j WHERE j.ctid = ANY (ARRAY(SELECT x.ctid\n"
    "        FROM unnest(p_keys, p_kinds) AS u(key, kind),\n"
    "          LATERAL (SELECT y.ctid FROM @S.jobs y WHERE y.queue = p_queue AND y.key = u.key\n"
    "                   LIMIT 1) x\n"
    "       WHERE u.kind IN (0, 1)))\n"
    "      AND j.token = ANY (p_tokens) AND j.running AND NOT j.dirty AND j.delay_at IS NULL\n"
    "      RETURNING j.key, j.grp)\n"
    "  SELECT coalesce(array_agg(g.key), '{}'), array_agg(g.grp) FILTER (WHERE g.grp IS NOT NULL)\n"
    "    INTO v_gone, v_grps FROM g;\n"
    "  n := cardinality(v_gone);\n"
    "  IF v_dead AND n > 0 THEN\n"
    "    DELETE FROM @S.dead d WHERE d.queue = p_queue AND d.key = ANY (v_gone);\n"
    "  END IF;\n"
    "  IF p_done IS NOT NULL AND n > 0 THEN\n"
    "    INSERT INTO @S.done AS d (queue, key, finished_at, result)\n"
    "      SELECT p_queue, u.key, v_now, nullif(u.res, 'null'::jsonb)\n"
    "        FROM unnest(p_keys, p_kinds, p_done) AS u(key, kind, res)\n"
    "       WHERE u.kind = 1 AND u.res IS NOT NULL AND u.key = ANY (v_gone)\n"
    "      ON CONFLICT (queue, key) DO UPDATE SET finished_at = EXCLUDED.finished_at,\n"
    "        result = EXCLUDED.result;\n"
    "  END IF;\n"
    "  -- the rest one by one (one pass over the arrays: subscripting one copies it)\n"
    "  IF n < coalesce(cardinality(p_keys), 0) THEN\n"
    "  FOR o IN SELECT * FROM unnest(p_keys, p_tokens, p_kinds, p_delays, p_requeues, p_errors,\n"
    "                                p_payloads, p_done) AS u(key, token, kind, delay, requeues, "
    "err,\n"
    "                                payload, res) LOOP\n"
    "    k := o.kind;\n"
    "    IF k IN (0, 1) AND o.key = ANY (v_gone) THEN CONTINUE; END IF;\n"
    "    IF k IN (0, 1, 3) THEN -- nothing else pending: the row goes\n"
    "      DELETE FROM @S.jobs j WHERE j.queue = p_queue AND j.key = o.key\n"
    "        AND j.token = o.token AND j.running AND NOT j.dirty AND j.delay_at IS NULL\n"
    "        RETURNING j.payload, j.grp INTO v_payload, v_grp;\n"
    "    END IF;\n"
    "    IF k NOT IN (0, 1, 3) OR NOT FOUND THEN\n"
    "      v_retry := CASE WHEN k = 2 THEN v_now + make_interval(secs => greatest(o.delay, 0)) "
    "END;\n"
    "      UPDATE @S.jobs j SET running = false, runner = NULL, token = NULL, claimed_at = NULL,\n"
    "          crashes = CASE WHEN k = 4 THEN j.crashes ELSE 0 END,\n"
    "          dirty = CASE WHEN k = 4 THEN j.dirty ELSE false END,\n"
    "          requeues = CASE WHEN k IN (0, 4) THEN j.requeues WHEN k = 2 THEN o.requeues ELSE 0 "
    "END,\n"
    "          last_error = CASE WHEN k IN (0, 4) THEN j.last_error WHEN k = 2 THEN o.err END,\n"
    "          payload = coalesce(o.payload, j.payload),\n"
    "          -- again: re-added (or a delayed add came due) while running: queued now\n"
    "          run_at = CASE WHEN k = 4 THEN j.run_at\n"
    "                        WHEN j.dirty OR j.delay_at <= v_now THEN v_now\n"
    "                        ELSE least(v_retry, j.delay_at) END,\n"
    "          delay_at = CASE WHEN k = 4 THEN j.delay_at\n"
    "                          WHEN j.dirty OR j.delay_at <= v_now THEN\n"
    "                            least(v_retry, CASE WHEN j.delay_at > v_now THEN j.delay_at END)\n"
    "                     END,\n"
    "          seq = CASE WHEN k = 4 THEN j.seq ELSE nextval('@S.seq') END\n"
    "        WHERE j.queue = p_queue AND j.key = o.key AND j.token = o.token AND j.running\n"
    "        RETURNING j.payload, j.grp INTO v_payload, v_grp;\n"
    "      IF NOT FOUND THEN CONTINUE; END IF; -- stale: taken over meanwhile\n"
    "    END IF;\n"
    "    n := n + 1;\n"
    "    IF v_grp IS NOT NULL THEN v_grps := v_grps || v_grp; END IF;\n"
    "    IF k = 3 THEN\n"
    "      INSERT INTO @S.dead AS d (queue, key, payload, error, attempts, failed_at)\n"
    "        VALUES (p_queue, o.key, v_payload, o.err, o.requeues, v_now)\n"
    "        ON CONFLICT (queue, key) DO UPDATE SET payload = EXCLUDED.payload,\n"
    "          error = EXCLUDED.error, attempts = EXCLUDED.attempts, failed_at = "
    "EXCLUDED.failed_at;\n"
    "      v_dead := true;\n"
    "    ELSIF k = 1 AND v_dead THEN\n"
    "      DELETE FROM @S.dead d WHERE d.queue = p_queue AND d.key = o.key;\n"
    "    END IF;\n"
    "    IF k = 1 AND o.res IS NOT NULL THEN\n"
    "      INSERT INTO @S.done AS d (queue, key, finished_at, result)\n"
    "        VALUES (p_queue, o.key, v_now, nullif(o.res, 'null'::jsonb))\n"
    "        ON CONFLICT (queue, key) DO UPDATE SET finished_at = EXCLUDED.finished_at,\n"
    "          result = EXCLUDED.result;\n"
    "    END IF;\n"
    "  END LOOP;\n"
    "  END IF;\n"
    "  -- The runner can start p_take items now: the first p_take in priority then FIFO order\n"
    "  -- among the next held items of the groups these outcomes freed slots in (the heads) and\n"
    "  -- the items claimable now. A head among them is handed over: claimed for this runner at\n"
    "  -- once, in its group's freed slot, whose count of running items stays as it is (one out,\n"
    "  -- one in), so the group's row is neither written nor locked. The claimable ones among\n"
    "  -- them are claimed as claim() does, after the other freed slots are counted down. Heads\n"
    "  -- of groups with a rate, and queues with one, go through claim() (budgets are counted\n"
    "  -- there).\n"
    "  IF p_take > 0 THEN\n"
    "    SELECT * INTO q FROM @S.queues x WHERE x.name = p_queue;\n"
    "    IF q.q_rate > 0 THEN\n"
    "      v_nc := p_take;\n"
    "    ELSIF NOT q.paused AND EXISTS (SELECT 1 FROM @S.runners r WHERE r.id = p_runner) THEN\n"
    "      SELECT array_agg(t.id) FILTER (WHERE t.head), array_agg(t.grp) FILTER (WHERE t.head),\n"
    "             count(*) FILTER (WHERE NOT t.head)\n"
    "        INTO v_hand, v_hg, v_nc\n"
    "        FROM (SELECT u.head, u.id, u.grp FROM (\n"
    "                SELECT true AS head, h.id, f.g AS grp, h.priority, h.run_at, h.seq\n"
    "                  FROM (SELECT g, count(*) AS n FROM unnest(v_grps) g GROUP BY g) f\n"
    "                  CROSS JOIN LATERAL (SELECT x FROM @S.groups x WHERE x.queue = p_queue\n"
    "                      AND x.grp = f.g AND NOT coalesce(@S.rate_of(x, q) > 0, false)) gx\n"
    "                  CROSS JOIN LATERAL (SELECT h.ctid AS id, h.priority, h.run_at, h.seq\n"
    "                      FROM @S.jobs h WHERE h.queue = p_queue AND h.grp = f.g AND h.held\n"
    "                      ORDER BY h.priority DESC, h.run_at, h.seq\n"
    "                      LIMIT greatest(0, least(f.n, @S.room_of(gx.x, q) + f.n))::integer\n"
    "                      FOR UPDATE SKIP LOCKED) h\n"
    "                UNION ALL\n"
    "                (SELECT false, NULL, NULL, j.priority, j.run_at, j.seq FROM @S.jobs j\n"
    "                  WHERE j.queue = p_queue AND NOT j.running AND NOT j.held\n"
    "                    AND j.run_at <= v_now\n"
    "                  ORDER BY j.priority DESC, j.run_at, j.seq LIMIT p_take)) u\n"
    "              ORDER BY u.priority DESC, u.run_at, u.seq LIMIT p_take) t;\n"
    "      -- (heads locked and not taken are the ones ungroup() below makes claimable)\n"
    "      IF v_hand IS NOT NULL THEN\n"
    "        RETURN QUERY UPDATE @S.jobs j SET held = false, running = true, runner = p_runner,\n"
    "            token = nextval('@S.token'), claimed_at = v_now,\n"
    "            delay_at = CASE WHEN j.delay_at <= v_now THEN NULL ELSE j.delay_at END\n"
    "          WHERE j.ctid = ANY (v_hand) RETURNING NULL::integer, j.key, j.payload, j.priority,\n"
    "            j.token, j.requeues, extract(epoch FROM j.enqueued_at)::float8, j.grp,\n"
    "            extract(epoch FROM j.run_at)::float8, j.seq;\n"
    "        -- the freed slots no head took: counted down as usual\n"
    "        SELECT array_agg(f.g) INTO v_grps\n"
    "          FROM (SELECT g, count(*) AS n FROM unnest(v_grps) g GROUP BY g) f\n"
    "          LEFT JOIN (SELECT g, count(*) AS m FROM unnest(v_hg) g GROUP BY g) t USING (g)\n"
    "          CROSS JOIN LATERAL generate_series(1, f.n - coalesce(t.m, 0)) r;\n"
    "      END IF;\n"
    "    END IF;\n"
    "  END IF;\n"
    "  IF v_grps IS NOT NULL THEN PERFORM @S.ungroup(p_queue, v_grps); END IF;\n"
    "  IF v_nc > 0 THEN\n"
    "    RETURN QUERY SELECT NULL::integer, c.* FROM @S.claim(p_queue, v_nc::integer, p_runner) "
    "c;\n"
    "  END IF;\n"
    /* the queue's row last, as release() does (after the jobs' and the groups' rows) */
    "  IF 4 = ANY (p_kinds) THEN -- handed back at their old places (see release)\n"
    "    UPDATE @S.queues x SET resets = x.resets + 1 WHERE x.name = p_queue;\n"
    "  END IF;\n"
    "  o_stale := coalesce(cardinality(p_keys), 0) - n;\n"
    "  RETURN NEXT;\n"
    "END $fn$;\n"
    /* reap: runners that died (their session lock is gone: killed, connection reset) or went
     * silent past their lease give their running items back. */
    "CREATE OR REPLACE FUNCTION @S.reap(p_class integer) RETURNS integer LANGUAGE plpgsql AS $fn$\n"
    "DECLARE\n"
    "  v_dead bigint[]; n integer := 0; m integer := 0; g record;\n"
    "BEGIN\n"
    "  SELECT array_agg(r.id) INTO v_dead FROM (\n"
    "    SELECT r.id FROM @S.runners r\n"
    "     WHERE r.heartbeat_at < now() - make_interval(secs => r.lease)\n"
    "        OR (pg_postmaster_start_time() < now() - make_interval(secs => r.lease)\n"
    "            AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory'\n"
    "                 AND l.database = (SELECT oid FROM pg_database WHERE datname = "
    "current_database())\n"
    "                 AND l.classid = p_class::oid AND l.objid = r.id::oid AND l.objsubid = 2\n"
    "                 AND l.granted))\n"
    "     FOR UPDATE SKIP LOCKED) r;\n"
    "  IF v_dead IS NULL THEN RETURN 0; END IF;\n"
    "  FOR g IN WITH x AS (DELETE FROM @S.jobs j WHERE j.running AND j.runner = ANY (v_dead)\n"
    "               AND j.crashes + 1 > 5 RETURNING j.*),\n"
    "    d AS (INSERT INTO @S.dead AS d (queue, key, payload, error, attempts, failed_at)\n"
    "      SELECT x.queue, x.key, x.payload,\n"
    "             format('its runner died while running it %s times in a row', x.crashes + 1),\n"
    "             x.requeues + 1, now() FROM x\n"
    "      ON CONFLICT (queue, key) DO UPDATE SET payload = EXCLUDED.payload,\n"
    "        error = EXCLUDED.error, attempts = EXCLUDED.attempts, failed_at = "
    "EXCLUDED.failed_at)\n"
    "    SELECT x.queue, array_agg(x.grp) AS grps, count(*) AS c FROM x GROUP BY x.queue LOOP\n"
    "    PERFORM @S.ungroup(g.queue, g.grps);\n"
    "    m := m + g.c;\n"
    "  END LOOP;\n"
    "  n := @S.release(v_dead, true);\n"
    "  DELETE FROM @S.runners WHERE id = ANY (v_dead);\n"
    "  DELETE FROM @S.waiting WHERE runner = ANY (v_dead);\n"
    "  UPDATE @S.counters SET value = value + n WHERE name = 'takeovers';\n"
    "  UPDATE @S.counters SET value = value + m WHERE name = 'crash_dead';\n"
    "  RETURN n + m;\n"
    "END $fn$;\n"
    "CREATE OR REPLACE FUNCTION @S.check_queue(fn text, queue text) RETURNS void LANGUAGE plpgsql "
    "AS $fn$\n"
    "BEGIN\n"
    "  IF queue IS NULL OR queue !~ '^[A-Za-z0-9_.-]{1,64}$' THEN\n"
    "    RAISE EXCEPTION '%: bad argument ''queue'' (1-64 characters of [A-Za-z0-9_.-], got %)',\n"
    "      fn, coalesce(quote_literal(queue), 'NULL') USING ERRCODE = '22023';\n"
    "  END IF;\n"
    "END $fn$;\n"
    /* known_queue: a runner defined it, or it holds items or dead letters. */
    "CREATE OR REPLACE FUNCTION @S.known_queue(p_queue text) RETURNS boolean LANGUAGE sql STABLE "
    "AS $fn$\n"
    "  SELECT EXISTS (SELECT 1 FROM @S.queues q WHERE q.name = p_queue)\n"
    "      OR EXISTS (SELECT 1 FROM @S.jobs j WHERE j.queue = p_queue)\n"
    "      OR EXISTS (SELECT 1 FROM @S.dead d WHERE d.queue = p_queue) $fn$;\n"
    /* pause: whether it changed; every runner stops handing the queue's items out. */
    "CREATE OR REPLACE FUNCTION @S.pause(p_queue text, p_paused boolean DEFAULT true) RETURNS "
    "boolean\n"
    "LANGUAGE plpgsql AS $fn$\n"
    "DECLARE v_was boolean;\n"
    "BEGIN\n"
    "  PERFORM @S.check_queue('wqrun.pause', p_queue);\n"
    "  IF p_paused IS NULL THEN\n"
    "    RAISE EXCEPTION 'wqrun.pause: bad argument ''paused'' (NULL)' USING ERRCODE = '22023';\n"
    "  END IF;\n"
    "  INSERT INTO @S.queues AS q (name, paused) VALUES (p_queue, false) ON CONFLICT DO NOTHING;\n"
    "  SELECT q.paused INTO v_was FROM @S.queues q WHERE q.name = p_queue FOR UPDATE;\n"
    "  IF v_was = p_paused THEN RETURN false; END IF;\n"
    "  UPDATE @S.queues q SET paused = p_paused, updated_at = now() WHERE q.name = p_queue;\n"
    "  PERFORM pg_notify(@L, '!control');\n"
    "  RETURN true;\n"
    "END $fn$;\n"
    /* remove: a pending item that no handler runs. */
    "CREATE OR REPLACE FUNCTION @S.remove(p_queue text, p_key text) RETURNS text LANGUAGE plpgsql "
    "AS $fn$\n"
    "BEGIN\n"
    "  DELETE FROM @S.jobs j WHERE j.queue = p_queue AND j.key = p_key AND NOT j.running;\n"
    "  IF FOUND THEN RETURN 'removed'; END IF;\n"
    "  IF EXISTS (SELECT 1 FROM @S.jobs j WHERE j.queue = p_queue AND j.key = p_key) THEN\n"
    "    RETURN 'processing';\n"
    "  END IF;\n"
    "  RETURN 'absent';\n"
    "END $fn$;\n"
    /* cancel: tells the runner that runs the key. */
    "CREATE OR REPLACE FUNCTION @S.cancel(p_queue text, p_key text) RETURNS text LANGUAGE plpgsql "
    "AS $fn$\n"
    "DECLARE r record;\n"
    "BEGIN\n"
    "  SELECT j.running, j.runner, j.token INTO r FROM @S.jobs j\n"
    "   WHERE j.queue = p_queue AND j.key = p_key;\n"
    "  IF NOT FOUND THEN RETURN 'absent'; END IF;\n"
    "  IF NOT r.running THEN RETURN 'not processing'; END IF;\n"
    "  INSERT INTO @S.signals (runner, queue, key, token) VALUES (r.runner, p_queue, p_key, "
    "r.token);\n"
    "  PERFORM pg_notify(@L, '!control');\n"
    "  RETURN 'cancelling';\n"
    "END $fn$;\n"
    /* retry_dead: dead letters back into the queue (all with p_key NULL), failure count clean. */
    "CREATE OR REPLACE FUNCTION @S.retry_dead(p_queue text, p_key text DEFAULT NULL) RETURNS "
    "integer\n"
    "LANGUAGE plpgsql AS $fn$\n"
    "DECLARE d record; n integer := 0;\n"
    "BEGIN\n"
    "  FOR d IN SELECT x.key, x.payload FROM @S.dead x\n"
    "            WHERE x.queue = p_queue AND (p_key IS NULL OR x.key = p_key)\n"
    "            ORDER BY x.failed_at, x.key FOR UPDATE LOOP\n"
    "    DELETE FROM @S.dead x WHERE x.queue = p_queue AND x.key = d.key;\n"
    "    PERFORM @S.add(p_queue, d.key, d.payload);\n"
    "    UPDATE @S.jobs j SET requeues = 0, last_error = NULL, crashes = 0\n"
    "     WHERE j.queue = p_queue AND j.key = d.key AND NOT j.running;\n"
    "    n := n + 1;\n"
    "  END LOOP;\n"
    "  RETURN n;\n"
    "END $fn$;\n"
    /* define_schedule: a runner's q:schedule. The same schedule (spec and tz) keeps the time
     * the others count on, or, if that time passed while no runner ran it, adds it once now
     * (catch_up 'once') or skips it. The row lock makes concurrent definitions take turns. */
    "CREATE OR REPLACE FUNCTION @S.define_schedule(p_queue text, p_name text, p_spec text,\n"
    "    p_key text, p_payload jsonb, p_tz text, p_catch_up text, p_next double precision)\n"
    "RETURNS text LANGUAGE plpgsql AS $fn$\n"
    "DECLARE o @S.schedules%ROWTYPE; v_next timestamptz; v_last timestamptz;\n"
    "  v_out text := 'defined';\n"
    "BEGIN\n"
    "  PERFORM @S.check_queue('wqrun.define_schedule', p_queue);\n"
    "  v_next := CASE WHEN p_next > 0 THEN to_timestamp(p_next) END;\n"
    "  SELECT * INTO o FROM @S.schedules s WHERE s.queue = p_queue AND s.name = p_name FOR "
    "UPDATE;\n"
    "  IF FOUND THEN v_last := o.last_at; END IF;\n"
    "  IF FOUND AND o.spec = p_spec AND o.tz = p_tz AND o.next_at IS NOT NULL THEN\n"
    "    IF o.next_at > now() THEN\n"
    "      v_next := o.next_at; v_out := 'kept';\n"
    "    ELSIF p_catch_up = 'once' THEN\n"
    "      v_out := 'caught up: ' || @S.add(p_queue, coalesce(p_key, p_name), p_payload);\n"
    "      v_last := o.next_at;\n"
    "    ELSE\n"
    "      v_out := 'skipped a missed time';\n"
    "    END IF;\n"
    "  END IF;\n"
    "  INSERT INTO @S.schedules AS s (queue, name, spec, key, payload, tz, catch_up, next_at, "
    "last_at)\n"
    "    VALUES (p_queue, p_name, p_spec, p_key, p_payload, p_tz, p_catch_up, v_next, v_last)\n"
    "    ON CONFLICT (queue, name) DO UPDATE SET spec = EXCLUDED.spec, key = EXCLUDED.key,\n"
    "      payload = EXCLUDED.payload, tz = EXCLUDED.tz, catch_up = EXCLUDED.catch_up,\n"
    "      next_at = EXCLUDED.next_at, last_at = EXCLUDED.last_at;\n"
    "  RETURN v_out;\n"
    "END $fn$;\n"
    /* fire: a runner's timer for time p_at came. Whoever comes first once the row's next time
     * is due moves it on (compare-and-set) and adds; the others find it moved. */
    "CREATE OR REPLACE FUNCTION @S.fire(p_queue text, p_name text, p_at double precision,\n"
    "    p_next double precision) RETURNS text LANGUAGE plpgsql AS $fn$\n"
    "DECLARE s record;\n"
    "BEGIN\n"
    "  UPDATE @S.schedules x SET last_at = x.next_at,\n"
    "      next_at = CASE WHEN p_next > 0 THEN to_timestamp(p_next) END\n"
    "    WHERE x.queue = p_queue AND x.name = p_name\n"
    "      AND x.next_at <= greatest(now(), to_timestamp(p_at))\n"
    "    RETURNING x.key, x.payload INTO s;\n"
    "  IF NOT FOUND THEN RETURN 'taken'; END IF;\n"
    "  RETURN @S.add(p_queue, coalesce(s.key, p_name), s.payload);\n"
    "END $fn$;\n"
    "CREATE OR REPLACE FUNCTION @S.purge_dead(p_queue text) RETURNS integer LANGUAGE sql AS $fn$\n"
    "  WITH d AS (DELETE FROM @S.dead x WHERE x.queue = p_queue RETURNING 1)\n"
    "  SELECT count(*)::integer FROM d $fn$;\n";

/* The migrations: migrations[v - 1] takes version v - 1 to v. */
static const char *const *const migrations[] = {&schema_v1, &schema_v2, &schema_v3, &schema_v4,
                                                &schema_v5, &schema_v6, &schema_v7};

/* The claims of a queue without limits: CLAIM_PICK is a CTE NAME of up to $2 due, unlocked
 * items of queue $1 matching WHERE, in ORDER (locked); CLAIM_LEVELS one of up to $2 due,
 * unlocked items of the priorities (levels) matching LCOND, each read from FLOOR on, highest
 * first (pg.c's floor: below it a long transaction may have left the entries of items
 * claimed since, and no pending item is there); CLAIM_MARK hands the first $2 of the CTEs'
 * UNION (duplicates go) to runner $3 and returns them. Due by the statement's time: a ready
 * time is the clock of its add, which may be later than this transaction's start. */
#define CLAIM_DUE                                                                                  \
    "run_at <= statement_timestamp() AND NOT running\n"                                            \
    "    AND NOT EXISTS (SELECT 1 FROM @S.queues p WHERE p.name = $1 AND p.paused)"
#define CLAIM_PICK(name, where, order)                                                             \
    name " AS MATERIALIZED (SELECT ctid, priority, run_at, seq FROM @S.jobs\n"                     \
         "  WHERE queue = $1 AND " where " AND " CLAIM_DUE "\n"                                    \
         "  ORDER BY " order " LIMIT $2 FOR UPDATE SKIP LOCKED)"
/* the floor, unless items went back to their old places since it was found (queues.resets) */
#define CLAIM_FLOOR(at, resets)                                                                    \
    "CASE WHEN (SELECT r.resets FROM @S.queues r WHERE r.name = $1) = " resets "::bigint\n"        \
    "  THEN to_timestamp(" at "::float8) ELSE '-infinity' END"
#define CLAIM_LEVELS(name, lcond, floor)                                                           \
    name " AS MATERIALIZED (SELECT x.* FROM (SELECT l.priority FROM @S.levels l\n"                 \
         "    WHERE l.queue = $1 AND " lcond " ORDER BY l.priority DESC) l\n"                      \
         "  CROSS JOIN LATERAL (SELECT ctid, priority, run_at, seq FROM @S.jobs\n"                 \
         "    WHERE queue = $1 AND priority = l.priority AND run_at >= " floor "\n"                \
         "      AND NOT held AND " CLAIM_DUE "\n"                                                  \
         "    ORDER BY run_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED) x LIMIT $2)"
#define CLAIM_MARK(ctes)                                                                           \
    "UPDATE @S.jobs j SET running = true, runner = $3, token = nextval('@S.token'),\n"             \
    "  claimed_at = now(), delay_at = CASE WHEN j.delay_at <= now() THEN NULL ELSE j.delay_at "    \
    "END\n"                                                                                        \
    "WHERE j.ctid = ANY (ARRAY(SELECT u.ctid FROM (" ctes ") u\n"                                  \
    "    ORDER BY u.priority DESC, u.run_at, u.seq LIMIT $2))\n"                                   \
    "  AND EXISTS (SELECT 1 FROM @S.runners WHERE id = $3)\n"                                      \
    "RETURNING j.key, j.payload, j.priority, j.token, j.requeues,\n"                               \
    "  extract(epoch FROM j.enqueued_at), j.grp, extract(epoch FROM j.run_at), j.seq"
#define CLAIM_ORDER "priority DESC, run_at, seq"
/* From the floor ($4 ready time, valid while queues.resets is $5): c, every priority; h, items
 * left held by limits that are gone (the small index of held items). */
static const char claim_sql[] =
    "WITH " CLAIM_LEVELS("c", "true", CLAIM_FLOOR("$4", "$5")) ",\n" CLAIM_PICK(
        "h", "held", CLAIM_ORDER) "\n" CLAIM_MARK("SELECT * FROM c UNION SELECT * FROM h");
/* From the hint: a, the higher priorities from the floor ($7, valid while queues.resets is
 * $8); c, this one from the hint on; f, only when those two fall short, every priority from
 * the floor (lower priorities, items behind the hint). */
#define CLAIM_FROM_A CLAIM_LEVELS("a", "l.priority > $4", CLAIM_FLOOR("$7", "$8"))
#define CLAIM_FROM_C                                                                               \
    CLAIM_PICK("c", "priority = $4 AND (run_at, seq) >= (to_timestamp($5), $6) AND NOT held",      \
               "run_at, seq")
#define CLAIM_FROM_F                                                                               \
    CLAIM_LEVELS("f", "(SELECT count(*) FROM a) + (SELECT count(*) FROM c) < $2",                  \
                 CLAIM_FLOOR("$7", "$8"))
#define CLAIM_FROM_UNION "SELECT * FROM a UNION SELECT * FROM c UNION SELECT * FROM f"
static const char claim_from_sql[] =
    "WITH " CLAIM_FROM_A ",\n" CLAIM_FROM_C ",\n" CLAIM_FROM_F "\n" CLAIM_MARK(CLAIM_FROM_UNION);

const wq_pg_stmt wq_pg_stmts[PGS_COUNT] = {
    /* The rows are found once, by the index holding exactly the pending ones, and updated
     * by their tuple ids (no second lookup). `NOT held` lets the planner use that partial
     * index (without it every claim read and sorted the whole table, dead tuples included:
     * 70 ms for 30,000 rows, and slower as the table bloats); items left held by limits
     * that are gone now are claimed too, through the small index of held items. */
    [PGS_CLAIM] = {"wq_claim", claim_sql},
    /* A claim from where the last one stopped (pg.c's hint): the higher priorities from
     * their head, this priority from the given position on, so that the entries of items
     * claimed before it are not walked again. */
    [PGS_CLAIM_FROM] = {"wq_claim_from", claim_from_sql},
    [PGS_FINISH] =
        {"wq_finish",
         "SELECT * FROM @S.finish($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::integer)"},
    [PGS_ADD_MANY] = {"wq_add_many", "SELECT @S.add_many($1::jsonb)"},
    [PGS_HEARTBEAT] = {"wq_heartbeat", "UPDATE @S.runners SET heartbeat_at = now(), done = $2\n"
                                       "  WHERE id = $1 RETURNING id"},
    /* The database-wide view (dashboards, /metrics): one pass over jobs... */
    [PGS_VIEW_JOBS] = {"wq_view_jobs",
                       "SELECT queue, runner,\n"
                       "  count(*) FILTER (WHERE NOT running AND NOT held AND run_at <= now()),\n"
                       "  count(*) FILTER (WHERE running),\n"
                       "  count(*) FILTER (WHERE NOT running AND run_at > now()),\n"
                       "  count(*) FILTER (WHERE held), count(*) FILTER (WHERE requeues > 0)\n"
                       "FROM @S.jobs GROUP BY queue, runner"},
    /* ...then the small tables */
    [PGS_VIEW_REST] =
        {"wq_view_rest",
         "SELECT 'q', n.name, coalesce(q.paused, false)::int::text,\n"
         "    (SELECT count(*) FROM @S.dead d WHERE d.queue = n.name)::text,\n"
         "    NULL, NULL, NULL, NULL\n"
         "  FROM (SELECT name FROM @S.queues UNION SELECT queue FROM @S.dead) n\n"
         "  LEFT JOIN @S.queues q ON q.name = n.name\n"
         "UNION ALL SELECT 'r', r.id::text, r.name, r.host, r.pid::text,\n"
         "    extract(epoch FROM r.started_at)::text,\n"
         "    extract(epoch FROM now() - r.heartbeat_at)::text, r.done::text\n"
         "  FROM @S.runners r\n"
         "UNION ALL SELECT 'm', coalesce((SELECT n_dead_tup FROM pg_stat_user_tables\n"
         "    WHERE schemaname = $1 AND relname = 'jobs'), 0)::text,\n"
         "  (SELECT value FROM @S.counters WHERE name = 'takeovers')::text,\n"
         "  (SELECT value FROM @S.counters WHERE name = 'crash_dead')::text,\n"
         "  NULL, NULL, NULL, NULL"},
    [PGS_REAP] = {"wq_reap", "SELECT @S.reap($1)"},
    [PGS_WAITING] = {"wq_waiting",
                     "WITH i AS (INSERT INTO @S.waiting SELECT $1, $2 WHERE $3::boolean\n"
                     "  ON CONFLICT DO NOTHING RETURNING 1),\n"
                     "d AS (DELETE FROM @S.waiting WHERE NOT $3::boolean AND queue = $1 AND "
                     "runner = $2 RETURNING 1)\n"
                     "SELECT (SELECT count(*) FROM i) + (SELECT count(*) FROM d)"},
    /* Sent after every claim that found nothing: index descents only. The next delayed item
     * is the earliest of each priority's first future item in the claim index (the queue's
     * levels; held items are due, so never among them); the queue's rate is looked at only
     * when it has one. Whether the queue has rows at all only when $2 (a run that may end
     * asked, and none of the queue's items runs here: under a long transaction the walk
     * over the key index's dead entries is long). */
    [PGS_NEXT_AT] =
        {"wq_next_at",
         "SELECT CASE WHEN $2::boolean THEN EXISTS (SELECT 1 FROM @S.jobs\n"
         "    WHERE queue = $1) END,\n"
         "  extract(epoch FROM least(\n"
         "    (SELECT min((SELECT j.run_at FROM @S.jobs j WHERE j.queue = $1\n"
         "                   AND NOT j.running AND NOT j.held AND j.priority = l.priority\n"
         "                   AND j.run_at > now() ORDER BY j.run_at LIMIT 1))\n"
         "       FROM @S.levels l WHERE l.queue = $1),\n"
         /* a group its rate holds back, the queue's own rate */
         "    (SELECT min(wake_at) FROM @S.groups WHERE queue = $1 AND wake_at IS NOT "
         "NULL),\n"
         /* (coalesce: NULL AND EXISTS evaluates the EXISTS, a walk from the
          * head of the claim index) */
         "    (SELECT CASE WHEN coalesce(q_rate, 0) > 0 AND EXISTS (SELECT 1 FROM @S.jobs\n"
         "             WHERE queue = $1 AND NOT running AND NOT held AND run_at <= "
         "now())\n"
         "        THEN q_tat - make_interval(secs => (q_burst - 1) / q_rate) END\n"
         "       FROM @S.queues WHERE name = $1)) - now())"},
    /* The floor of a queue without limits (pg.c): first the clock, then this transaction's id
     * (every id after it is given later than that clock), the oldest transaction still
     * running and the queue's resets... */
    [PGS_FLOOR_CLOCK] = {"wq_floor_clock", "SELECT extract(epoch FROM clock_timestamp())"},
    [PGS_FLOOR_XID] = {"wq_floor_xid", "SELECT pg_current_xact_id()::text,\n"
                                       "  pg_snapshot_xmin(pg_current_snapshot())::text,\n"
                                       "  (SELECT resets FROM @S.queues WHERE name = $1)"},
    /* ...then, from the floor $2 on, the earliest ready time of a pending item of each
     * priority, and of the held items (left by limits that are gone). */
    [PGS_FLOOR_MIN] = {"wq_floor_min",
                       "SELECT extract(epoch FROM min((SELECT j.run_at FROM @S.jobs j\n"
                       "    WHERE j.queue = $1 AND j.priority = l.priority\n"
                       "      AND j.run_at >= to_timestamp($2::float8) AND NOT j.running\n"
                       "      AND NOT j.held ORDER BY j.run_at, j.seq LIMIT 1))),\n"
                       "  (SELECT extract(epoch FROM min(h.run_at)) FROM @S.jobs h\n"
                       "    WHERE h.queue = $1 AND h.held)\n"
                       "FROM @S.levels l WHERE l.queue = $1"},
    [PGS_CLAIM_GROUPED] = {"wq_claim_grouped", "SELECT * FROM @S.claim($1, $2::integer, $3)"},
    [PGS_SWEEP] = {"wq_sweep", "SELECT @S.sweep($1)"},
    [PGS_RELOCK] = {"wq_relock", "SELECT pg_try_advisory_lock($1, $2::integer)"},
    [PGS_DEFINE] = {"wq_define",
                    "INSERT INTO @S.queues AS q (name, max_retries, keep_done, defined_by,\n"
                    "    g_conc, g_rate, g_burst, q_rate, q_burst)\n"
                    "  VALUES ($1, $2, nullif($3::float8, 0), $4, nullif($5::integer, 0),\n"
                    "    nullif($6::float8, 0), nullif($7::float8, 0), nullif($8::float8, 0),\n"
                    "    nullif($9::float8, 0))\n"
                    "  ON CONFLICT (name) DO UPDATE SET max_retries = EXCLUDED.max_retries,\n"
                    "    keep_done = EXCLUDED.keep_done, defined_by = EXCLUDED.defined_by,\n"
                    "    g_conc = EXCLUDED.g_conc, g_rate = EXCLUDED.g_rate,\n"
                    "    g_burst = EXCLUDED.g_burst, q_rate = EXCLUDED.q_rate,\n"
                    "    q_burst = EXCLUDED.q_burst, updated_at = now()\n"
                    /* the definition before this one: none when no runner made it (a
                     * row that a pause, an add or the CLI made first) */
                    "  RETURNING (SELECT max_retries FROM @S.queues WHERE name = $1\n"
                    "      AND defined_by IS NOT NULL),\n"
                    "    (SELECT coalesce(keep_done, 0) FROM @S.queues WHERE name = $1\n"
                    "      AND defined_by IS NOT NULL),\n"
                    "    (SELECT defined_by FROM @S.queues WHERE name = $1)"},
    [PGS_QUEUES] = {"wq_queues",
                    "SELECT name, paused, max_retries, coalesce(keep_done, 0),\n"
                    "  coalesce(defined_by, ''), (g_conc IS NOT NULL OR g_rate IS NOT NULL\n"
                    "    OR q_rate IS NOT NULL OR EXISTS (SELECT 1 FROM @S.groups g\n"
                    "      WHERE g.queue = name AND g.own)), coalesce(q_rate, 0)\n"
                    "  FROM @S.queues"},
    /* Completed-job memories past their queue's keep_done, a thousand at a time. */
    [PGS_PRUNE_DONE] =
        {"wq_prune_done",
         "DELETE FROM @S.done WHERE ctid = ANY (ARRAY(\n"
         "  SELECT d.ctid FROM @S.queues q CROSS JOIN LATERAL (\n"
         "    SELECT d.ctid FROM @S.done d WHERE d.queue = q.name AND d.finished_at\n"
         "      < now() - make_interval(secs => coalesce(q.keep_done, 0)) LIMIT "
         "1000) d\n"
         "  LIMIT 1000))"},
    /* This runner's signals; those of runners long gone go too (the table stays tiny). */
    [PGS_SIGNALS] = {"wq_signals", "WITH s AS (DELETE FROM @S.signals WHERE runner = $1\n"
                                   "    OR created_at < now() - interval '1 minute' RETURNING *)\n"
                                   "SELECT queue, key, token FROM s WHERE runner = $1"},
};

char *wq_pg_sql(PGconn *pg, const char *schema, const char *sql)
{
    char *ident = PQescapeIdentifier(pg, schema, strlen(schema));
    char *lit = PQescapeLiteral(pg, schema, strlen(schema));
    if (!ident || !lit) {
        PQfreemem(ident);
        PQfreemem(lit);
        return NULL;
    }
    size_t il = strlen(ident), ll = strlen(lit), n = 0, cap = strlen(sql) + 1;
    for (const char *p = sql; (p = strchr(p, '@')); p++)
        cap += il > ll ? il : ll;
    char *out = malloc(cap);
    if (out) {
        for (const char *p = sql; *p; p++) {
            if (p[0] == '@' && p[1] == 'S') {
                memcpy(out + n, ident, il);
                n += il;
                p++;
            } else if (p[0] == '@' && p[1] == 'L') {
                memcpy(out + n, lit, ll);
                n += ll;
                p++;
            } else {
                out[n++] = *p;
            }
        }
        out[n] = '\0';
    }
    PQfreemem(ident);
    PQfreemem(lit);
    return out;
}

static void put_err(char *err, size_t errlen, const char *what, PGconn *pg, PGresult *r)
{
    char m[400];
    wq_pg_msg(m, sizeof m, r ? PQresultErrorMessage(r) : PQerrorMessage(pg));
    snprintf(err, errlen, "%s: %s", what, m);
}

/* Runs sql (no results wanted); 0 or -1 with err. */
static int exec(PGconn *pg, const char *sql, const char *what, char *err, size_t errlen)
{
    PGresult *r = PQexec(pg, sql);
    int ok = r && (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK);
    if (!ok)
        put_err(err, errlen, what, pg, r);
    PQclear(r);
    return ok ? 0 : -1;
}

/* The schema's version: >= 1, 0 absent, -1 foreign (err), -2 a query failed (err). */
static int version_of(PGconn *pg, const char *schema, char *err, size_t errlen)
{
    const char *p[1] = {schema};
    PGresult *r = PQexecParams(pg, "SELECT 1 FROM pg_namespace WHERE nspname = $1", 1, NULL, p,
                               NULL, NULL, 0);
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) {
        put_err(err, errlen, "cannot read the catalog", pg, r);
        PQclear(r);
        return -2;
    }
    int exists = PQntuples(r) > 0;
    PQclear(r);
    if (!exists)
        return 0;
    r = PQexecParams(pg,
                     "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                     "WHERE n.nspname = $1 AND c.relname = 'meta' AND c.relkind = 'r'",
                     1, NULL, p, NULL, NULL, 0);
    int has_meta = r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0;
    PQclear(r);
    int v = -1;
    if (has_meta) {
        char *sql = wq_pg_sql(pg, schema, "SELECT value FROM @S.meta WHERE key = 'schema_version'");
        r = sql ? PQexec(pg, sql) : NULL;
        free(sql);
        if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
            v = atoi(PQgetvalue(r, 0, 0));
        if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) {
            put_err(err, errlen, "cannot read the schema's version", pg, r);
            PQclear(r);
            return -2;
        }
        PQclear(r);
    }
    if (v < 1) {
        snprintf(err, errlen,
                 "schema \"%s\" exists but is not a wqrun schema (no meta row "
                 "'schema_version'); refusing to touch it (choose another with --pg-schema)",
                 schema);
        return -1;
    }
    return v;
}

int wq_pg_schema_ready(PGconn *pg, const char *schema, char *err, size_t errlen)
{
    int v = version_of(pg, schema, err, errlen);
    if (v < 0)
        return -1;
    if (v > WQ_PG_SCHEMA_VERSION) {
        snprintf(err, errlen,
                 "schema \"%s\" is version %d, newer than this wqrun knows (%d): refusing to use "
                 "it; upgrade wqrun",
                 schema, v, WQ_PG_SCHEMA_VERSION);
        return -1;
    }
    return v == WQ_PG_SCHEMA_VERSION;
}

int wq_pg_migrate(PGconn *pg, const char *schema, char *out, size_t outlen, char *err,
                  size_t errlen)
{
    if (exec(pg, "BEGIN", "cannot begin", err, errlen) < 0)
        return -1;
    /* IF EXISTS drops of what a fresh schema never had say so: not worth a line of output */
    if (exec(pg, "SET LOCAL client_min_messages = warning", "cannot set", err, errlen) < 0)
        goto fail;
    /* Concurrent starts wait here for the first to finish. */
    char lock[96];
    snprintf(lock, sizeof lock, "SELECT pg_advisory_xact_lock(%d, 0)", WQ_PG_LOCK_CLASS + 1);
    if (exec(pg, lock, "cannot take the migration lock", err, errlen) < 0)
        goto fail;
    int v = version_of(pg, schema, err, errlen);
    if (v < 0)
        goto fail;
    if (v > WQ_PG_SCHEMA_VERSION) {
        snprintf(err, errlen,
                 "schema \"%s\" is version %d, newer than this wqrun knows (%d): refusing to use "
                 "it; upgrade wqrun",
                 schema, v, WQ_PG_SCHEMA_VERSION);
        goto fail;
    }
    if (v == WQ_PG_SCHEMA_VERSION) {
        snprintf(out, outlen, "schema \"%s\" is up to date (version %d)", schema, v);
        return exec(pg, "COMMIT", "cannot commit", err, errlen);
    }
    for (int to = v + 1; to <= WQ_PG_SCHEMA_VERSION; to++) {
        char *sql = wq_pg_sql(pg, schema, *migrations[to - 1]);
        if (!sql) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        char what[200];
        snprintf(what, sizeof what, "cannot %s schema \"%s\" (version %d)",
                 to == 1 ? "create" : "upgrade", schema, to);
        int r = exec(pg, sql, what, err, errlen);
        free(sql);
        if (r < 0)
            goto fail;
    }
    char *sql = wq_pg_sql(pg, schema, functions);
    if (!sql) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    char what[200];
    snprintf(what, sizeof what, "cannot create the functions of schema \"%s\"", schema);
    int r = exec(pg, sql, what, err, errlen);
    free(sql);
    if (r < 0)
        goto fail;
    if (exec(pg, "COMMIT", "cannot commit the new schema", err, errlen) < 0)
        return -1;
    if (v == 0)
        snprintf(out, outlen, "schema \"%s\" created (version %d)", schema, WQ_PG_SCHEMA_VERSION);
    else
        snprintf(out, outlen, "schema \"%s\" upgraded from version %d to %d", schema, v,
                 WQ_PG_SCHEMA_VERSION);
    return 0;
fail:
    PQclear(PQexec(pg, "ROLLBACK"));
    return -1;
}
