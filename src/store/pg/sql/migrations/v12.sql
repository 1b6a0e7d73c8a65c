-- Version 11 -> 12: add_many() reads its items' JSON once (issue 30: bulk enqueue). Nothing
-- in the tables changes; the functions recreated after this are the new ones.
UPDATE @S.meta SET value = '12' WHERE key = 'schema_version';
