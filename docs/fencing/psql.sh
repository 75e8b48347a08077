#!/bin/sh
# A job run by `leadership run --dsn postgres://…`, writing to the same
# database in a transaction fenced with its term: it commits only if the
# flag's row still names this run's term. Usage: psql.sh DSN
exec psql "$1" -v ON_ERROR_STOP=1 -q \
  -v flag="$LEADERSHIP_NAME" -v holder="$LEADERSHIP_HOLDER" -v token="$LEADERSHIP_TOKEN" <<'SQL'
BEGIN;
-- The fence, first: FOR SHARE holds off every new term until COMMIT.
CREATE TEMP TABLE fence (ok int CONSTRAINT not_leader CHECK (ok = 1)) ON COMMIT DROP;
INSERT INTO fence SELECT count(*) FROM (
    SELECT FROM leadership_flags
    WHERE name = :'flag' AND holder = :'holder' AND version = :'token'
    FOR SHARE) AS term;
-- The job's writes.
INSERT INTO report (token) VALUES (:'token');
COMMIT;
SQL
