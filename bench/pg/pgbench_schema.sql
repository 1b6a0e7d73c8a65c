-- The table the pgbench ceiling scripts drain: a narrow job table, N rows
-- pre-loaded (psql -v n=N), a partial index holding exactly the claimable
-- rows, statistics gathered after the load (as graphile-worker gets them).
DROP TABLE IF EXISTS claim_q;
CREATE TABLE claim_q (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_at    timestamptz NOT NULL DEFAULT now(),
    locked_at timestamptz,
    attempts  smallint NOT NULL DEFAULT 0
);
CREATE INDEX claim_q_ready ON claim_q (id) WHERE locked_at IS NULL;
INSERT INTO claim_q (run_at) SELECT now() FROM generate_series(1, :n);
ANALYZE claim_q;
