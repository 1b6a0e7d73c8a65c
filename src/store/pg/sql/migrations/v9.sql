-- Version 8 -> 9: flows (SPEC 9, docs/flows.md). A flow is a graph of nodes; a node is an
-- item of an ordinary queue that may wait for other nodes of its flow. The database is the
-- authority: runners hold only what they claimed.
--   flows       one row per flow: unfinished counts its nodes neither done nor dead,
--               finished_at is set when that reaches 0 (NULL again if it rises);
--   flow_nodes  one row per node: state blocked (waits for nodes not finished), pending (its
--               item is in its queue), done or dead; waits counts its dependencies not
--               finished (whatever its state); payload, priority and grp are what its item
--               gets when it is released; cause is the node whose death killed it;
--   flow_deps   node waits for dep; ord: dep's place in the node's after (one edge per dep);
--   jobs.node   the node a pending item is (NULL for an item of no flow: no default, so the
--               column costs nothing to add).
-- A key is the key of at most one unfinished node at a time (flow_nodes_unfinished).
CREATE TABLE @S.flows (id text PRIMARY KEY, keep double precision NOT NULL DEFAULT 604800,
  created_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz,
  unfinished integer NOT NULL DEFAULT 0, cancelled boolean NOT NULL DEFAULT false);
CREATE INDEX flows_expiry ON @S.flows (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX flows_running ON @S.flows (created_at) WHERE finished_at IS NULL;
CREATE SEQUENCE @S.flow_ids;
CREATE TABLE @S.flow_nodes (id bigserial PRIMARY KEY,
  flow text NOT NULL REFERENCES @S.flows ON DELETE CASCADE,
  queue text NOT NULL, key text NOT NULL,
  state text NOT NULL CHECK (state IN ('blocked', 'pending', 'done', 'dead')),
  waits integer NOT NULL DEFAULT 0, ignore_dead boolean NOT NULL DEFAULT false,
  payload jsonb, priority integer NOT NULL DEFAULT 0, grp text, result jsonb, error text,
  cause bigint, finished_at timestamptz, UNIQUE (flow, queue, key))
  WITH (fillfactor = 80, autovacuum_vacuum_cost_delay = 0);
CREATE UNIQUE INDEX flow_nodes_unfinished ON @S.flow_nodes (queue, key)
  WHERE state IN ('blocked', 'pending');
-- a key's finished nodes (retry_dead looks for the dead one)
CREATE INDEX flow_nodes_key ON @S.flow_nodes (queue, key);
CREATE TABLE @S.flow_deps (node bigint NOT NULL REFERENCES @S.flow_nodes ON DELETE CASCADE,
  ord integer NOT NULL, dep bigint NOT NULL, PRIMARY KEY (node, ord));
CREATE INDEX flow_deps_dep ON @S.flow_deps (dep);
ALTER TABLE @S.jobs ADD COLUMN node bigint;
-- Blocked nodes are items too (state 'blocked'); waits and flow at the end.
CREATE OR REPLACE VIEW @S.items AS SELECT queue, key, payload,
  CASE WHEN running THEN 'processing' WHEN run_at <= clock_timestamp() THEN 'queued'
    ELSE 'waiting' END AS state,
  CASE WHEN NOT running AND run_at > clock_timestamp() THEN run_at ELSE delay_at END
    AS ready_at,
  priority, grp, enqueued_at, requeues, last_error, requeues + 1 AS attempt, dirty,
  runner, token, claimed_at, NULL::integer AS waits,
  CASE WHEN node IS NOT NULL THEN (SELECT n.flow FROM @S.flow_nodes n WHERE n.id = node) END
    AS flow
  FROM @S.jobs
  UNION ALL SELECT n.queue, n.key, n.payload, 'blocked', NULL::timestamptz, n.priority, n.grp,
    NULL::timestamptz, 0, NULL::text, 1, false, NULL::bigint, NULL::bigint, NULL::timestamptz,
    n.waits, n.flow
  FROM @S.flow_nodes n WHERE n.state = 'blocked';
-- claim() and finish() return the claimed node's flow and deps; finish() takes the nodes'
-- results; add_one() the node its new item is.
DROP FUNCTION IF EXISTS @S.claim(text, integer, bigint);
DROP FUNCTION IF EXISTS @S.finish(text, bigint, text[], bigint[], smallint[],
  double precision[], integer[], text[], jsonb[], jsonb[], integer);
DROP FUNCTION IF EXISTS @S.add_one(text, text, jsonb, double precision, integer, text, boolean,
  boolean, timestamptz, bigint);
UPDATE @S.meta SET value = '9' WHERE key = 'schema_version';
