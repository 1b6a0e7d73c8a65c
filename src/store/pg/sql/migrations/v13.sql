-- Version 12 -> 13 (issue 30): queue names are checked without a bounded repetition in the
-- pattern, add_many() tells its new items by their sequence numbers and re-adds pending keys
-- at once, finish() looks keys up without comparing each with a whole array. Nothing in the
-- tables changes; the functions recreated after this are the new ones.
UPDATE @S.meta SET value = '13' WHERE key = 'schema_version';
