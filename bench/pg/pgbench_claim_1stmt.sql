-- One statement per batch: claim and delete 100 rows at once (DELETE ...
-- RETURNING fed by the SKIP LOCKED CTE). The job leaves the table before it
-- runs (at most once); a bound, not a design.
WITH c AS MATERIALIZED (
    SELECT id FROM claim_q WHERE locked_at IS NULL
    ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED
)
DELETE FROM claim_q q USING c WHERE q.id = c.id RETURNING q.id;
