-- Version 2: operating the fleet and keep_done across runners (SPEC 7.2,
-- 7.5, 8.2). A cancel is a row in `signals` for the runner that runs the
-- key, which it reads with its heartbeat or at once when notified
-- ('!control'); queues.keep_done is the queue's shared completed-job memory.
CREATE TABLE @S.signals (id bigserial PRIMARY KEY, runner bigint NOT NULL,
  queue text NOT NULL, key text NOT NULL, token bigint NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX signals_runner ON @S.signals (runner);
ALTER TABLE @S.queues ADD COLUMN keep_done double precision,
-- group limits: the queue's default per group, its own rate (SPEC 7.4)
  ADD COLUMN g_conc integer, ADD COLUMN g_rate double precision,
  ADD COLUMN g_burst double precision, ADD COLUMN q_rate double precision,
  ADD COLUMN q_burst double precision, ADD COLUMN q_tat timestamptz;
-- One row per group seen: running counts its items processing on every runner; own:
-- q:set_group_limit's limits replace the queue's; tat the rate's GCRA time; wake_at when
-- a rate-held group may go on.
CREATE TABLE @S.groups (queue text NOT NULL, grp text NOT NULL,
  running integer NOT NULL DEFAULT 0, own boolean NOT NULL DEFAULT false,
  conc integer, rate double precision, burst double precision, tat timestamptz,
  wake_at timestamptz, PRIMARY KEY (queue, grp)) WITH (fillfactor = 70);
CREATE INDEX groups_wake ON @S.groups (queue, wake_at) WHERE wake_at IS NOT NULL;
-- held: a due item of a saturated group, kept out of the claim index
ALTER TABLE @S.jobs ADD COLUMN held boolean NOT NULL DEFAULT false;
-- outcomes each runner wrote (the dashboard's jobs/s per runner)
ALTER TABLE @S.runners ADD COLUMN done bigint NOT NULL DEFAULT 0;
DROP INDEX @S.jobs_claim;
CREATE INDEX jobs_claim ON @S.jobs (queue, priority DESC, run_at, seq)
  WHERE NOT running AND NOT held;
CREATE INDEX jobs_held ON @S.jobs (queue, grp, priority DESC, run_at, seq) WHERE held;
CREATE INDEX jobs_group_ready ON @S.jobs (queue, grp)
  WHERE grp IS NOT NULL AND NOT running AND NOT held;
CREATE INDEX done_expiry ON @S.done (queue, finished_at);
-- replaced by the functions below with new parameters (force, results)
DROP FUNCTION IF EXISTS @S.add(text, text, jsonb, double precision, integer, text);
DROP FUNCTION IF EXISTS @S.finish(text, bigint, text[], bigint[], smallint[],
  double precision[],
  integer[], text[], jsonb[]);
UPDATE @S.meta SET value = '2' WHERE key = 'schema_version';
