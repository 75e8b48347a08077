#!/bin/sh
# A job run by `leadership run --dsn sqlite:PATH`, writing to the same
# SQLite file in a transaction fenced with its term: it commits only if the
# flag's row still names this run's term. Usage: sqlite3.sh PATH
exec sqlite3 -bail -cmd '.timeout 10000' \
  -cmd ".parameter set :flag '$LEADERSHIP_NAME'" \
  -cmd ".parameter set :holder '$LEADERSHIP_HOLDER'" \
  -cmd ".parameter set :token $LEADERSHIP_TOKEN" "$1" <<'SQL'
BEGIN IMMEDIATE;
-- The fence, first: the write lock is held from here to COMMIT.
UPDATE leadership_flags SET host_writes = host_writes + 1
WHERE name = :flag AND holder = :holder AND version = :token;
CREATE TEMP TABLE fence (ok INTEGER, CONSTRAINT not_leader CHECK (ok = 1));
INSERT INTO temp.fence VALUES (changes());
-- The job's writes.
INSERT INTO report (token) VALUES (:token);
COMMIT;
SQL
