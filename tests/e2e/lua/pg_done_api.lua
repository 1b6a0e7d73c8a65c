-- keep_done across runners (tests/e2e/test_pg_done.sh): the API runner,
-- queue "kd" without a handler and without options, so it never claims
-- and defines nothing: the database's keep_done decides its adds.
wq.queue("kd")
