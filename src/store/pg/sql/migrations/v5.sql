-- Version 4 -> 5: the grouped claim without joins between arrays (issue 17).
-- room(queue, groups[]), a set-returning function the claims joined to
-- their candidates, gives way to room_of(group row, queue row), computed
-- once per group from the row the claim locks: the generic plans of those
-- joins compared every candidate with every group (474k comparisons for
-- 700 candidates) and the claim of a limited queue cost 120-300 ms.
DROP FUNCTION IF EXISTS @S.room(text, text[]);
-- the groups with a rate of their own (rated(): whether a wake_at may be needed)
CREATE INDEX IF NOT EXISTS groups_rated ON @S.groups (queue, grp) WHERE own AND rate > 0;
UPDATE @S.meta SET value = '5' WHERE key = 'schema_version';
