-- Version 5 -> 6: outcomes that claim (issue 17). finish() takes how many
-- items the runner can start now and returns, besides the count of stale
-- outcomes, the items it claimed for the runner: above all the next held
-- items of the groups whose slots its outcomes freed, handed over in those
-- slots (one write per grouped item instead of an unhold, a claim and two
-- updates of the group's row).
DROP FUNCTION IF EXISTS @S.finish(text, bigint, text[], bigint[], smallint[],
  double precision[], integer[], text[], jsonb[], jsonb[]);
UPDATE @S.meta SET value = '6' WHERE key = 'schema_version';
