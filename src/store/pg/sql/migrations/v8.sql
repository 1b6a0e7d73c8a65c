-- Version 7 -> 8: one lock order (issue 32). The functions recreated after this take rows
-- in the order 10-groups.sql gives: add_many() by key with its groups' rows last, and
-- add_one() beside add(); finish(), release(), reap() and retry_dead() by key. Nothing in
-- the tables changes.
UPDATE @S.meta SET value = '8' WHERE key = 'schema_version';
