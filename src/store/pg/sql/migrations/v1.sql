-- Version 1, created in one transaction. *
CREATE SCHEMA @S;
CREATE TABLE @S.meta (key text PRIMARY KEY, value text);
CREATE TABLE @S.queues (name text PRIMARY KEY, max_retries integer, defined_by text,
  updated_at timestamptz NOT NULL DEFAULT now(), paused boolean NOT NULL DEFAULT false);
CREATE SEQUENCE @S.seq;
CREATE SEQUENCE @S.token;
CREATE TABLE @S.jobs (
  queue text NOT NULL, key text NOT NULL, payload jsonb,
  priority integer NOT NULL DEFAULT 0, grp text,
  running boolean NOT NULL DEFAULT false,
  run_at timestamptz NOT NULL, seq bigint NOT NULL,
  delay_at timestamptz, dirty boolean NOT NULL DEFAULT false,
  enqueued_at timestamptz NOT NULL DEFAULT now(),
  requeues integer NOT NULL DEFAULT 0, last_error text,
  runner bigint, token bigint, claimed_at timestamptz,
  crashes integer NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, key)
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02);
CREATE INDEX jobs_claim ON @S.jobs (queue, priority DESC, run_at, seq) WHERE NOT running;
CREATE TABLE @S.dead (queue text NOT NULL, key text NOT NULL, payload jsonb, error text,
  attempts integer NOT NULL, failed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (queue, key));
CREATE TABLE @S.done (queue text NOT NULL, key text NOT NULL,
  finished_at timestamptz NOT NULL, result jsonb, PRIMARY KEY (queue, key));
CREATE TABLE @S.schedules (queue text NOT NULL, name text NOT NULL, spec text NOT NULL,
  key text, payload jsonb, tz text NOT NULL DEFAULT 'utc', catch_up text NOT NULL DEFAULT 'once',
  next_at timestamptz, last_at timestamptz, PRIMARY KEY (queue, name));
CREATE TABLE @S.runners (id bigserial PRIMARY KEY, name text NOT NULL, host text NOT NULL,
  pid integer NOT NULL, started_at timestamptz NOT NULL DEFAULT now(),
  heartbeat_at timestamptz NOT NULL DEFAULT now(), lease double precision NOT NULL,
  version text);
CREATE UNLOGGED TABLE @S.waiting (queue text NOT NULL, runner bigint NOT NULL,
  PRIMARY KEY (queue, runner));
CREATE TABLE @S.counters (name text PRIMARY KEY, value bigint NOT NULL DEFAULT 0);
INSERT INTO @S.counters VALUES ('takeovers', 0), ('crash_dead', 0);
CREATE VIEW @S.items AS SELECT queue, key, payload,
  CASE WHEN running THEN 'processing' WHEN run_at <= now() THEN 'queued' ELSE 'waiting' END AS state,
  CASE WHEN NOT running AND run_at > now() THEN run_at ELSE delay_at END AS ready_at,
  priority, grp, enqueued_at, requeues, last_error, requeues + 1 AS attempt, dirty,
  runner, token, claimed_at FROM @S.jobs;
CREATE VIEW @S.failures AS SELECT queue, key, requeues, last_error FROM @S.jobs
  WHERE requeues > 0;
INSERT INTO @S.meta VALUES ('schema_version', '1');
