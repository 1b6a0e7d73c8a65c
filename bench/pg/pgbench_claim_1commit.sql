-- One commit per batch: in one transaction, delete the batch this client
-- claimed last time (those jobs are done) and claim the next 100. A client's
-- last transaction (number :last) only deletes. Start with -D prev='{}'
-- -D k=0 -D last=<transactions per client>, run with -M prepared.
\set k :k + 1
BEGIN;
DELETE FROM claim_q WHERE id = ANY (CAST(:prev AS bigint[]));
\if :k < :last
WITH c AS MATERIALIZED (
    SELECT id FROM claim_q WHERE locked_at IS NULL
    ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED
), u AS (
    UPDATE claim_q q SET locked_at = now(), attempts = q.attempts + 1
    FROM c WHERE q.id = c.id RETURNING q.id
)
SELECT coalesce(array_agg(id), '{}') AS prev FROM u \gset
\endif
COMMIT;
