-- Version 3 -> 4: table health (issue 17). The hot tables' autovacuum runs
-- without cost delay (the default 2 ms sleeps kept a vacuum of jobs busy for
-- a minute while 1-2 M dead tuples piled up; its pages are in memory, so
-- throttling protects nothing), so dead tuples go as soon as no snapshot
-- needs them, and the table stays small after a long transaction ends.
ALTER TABLE @S.jobs SET (autovacuum_vacuum_cost_delay = 0);
ALTER TABLE @S.groups SET (autovacuum_vacuum_cost_delay = 0);
UPDATE @S.meta SET value = '4' WHERE key = 'schema_version';
