-- Operating across runners (tests/e2e/test_pg_ops.sh): the API runner. It
-- defines queue "w" without a handler, so it never claims: everything it
-- is asked over HTTP acts on what the other runners run.
wq.queue("w")
