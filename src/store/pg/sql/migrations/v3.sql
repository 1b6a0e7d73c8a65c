-- Version 2 -> 3: add() takes unique_add (the functions below recreate it). *
DROP FUNCTION IF EXISTS @S.add(text, text, jsonb, double precision, integer, text, boolean);
UPDATE @S.meta SET value = '3' WHERE key = 'schema_version';
