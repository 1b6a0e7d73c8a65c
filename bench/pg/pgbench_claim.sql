-- Two commits per batch: claim 100 rows (FOR UPDATE SKIP LOCKED in a
-- MATERIALIZED CTE feeding an UPDATE ... RETURNING), commit; then delete
-- them (the jobs are done), commit. Run with -M prepared.
WITH c AS MATERIALIZED (
    SELECT id FROM claim_q WHERE locked_at IS NULL
    ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED
), u AS (
    UPDATE claim_q q SET locked_at = now(), attempts = q.attempts + 1
    FROM c WHERE q.id = c.id RETURNING q.id
)
SELECT coalesce(array_agg(id), '{}') AS ids FROM u \gset
DELETE FROM claim_q WHERE id = ANY (CAST(:ids AS bigint[]));
