#!/bin/sh
# A job run by `leadership run --dsn mysql://…`, writing to the same
# database in a transaction fenced with its term: it commits only if the
# flag's row still names this run's term. The names are pasted into the
# SQL: they must not contain ' or \ (the default holder names do not).
# Usage: mariadb.sh [mariadb client options] DATABASE
exec mariadb "$@" <<SQL
START TRANSACTION;
-- The fence, first: LOCK IN SHARE MODE holds off every new term until COMMIT.
CREATE TEMPORARY TABLE fence (ok INT, CONSTRAINT not_leader CHECK (ok = 1));
INSERT INTO fence SELECT COUNT(*) FROM leadership_flags
WHERE name = '$LEADERSHIP_NAME' AND holder = '$LEADERSHIP_HOLDER' AND version = $LEADERSHIP_TOKEN
LOCK IN SHARE MODE;
-- The job's writes.
INSERT INTO report (token) VALUES ($LEADERSHIP_TOKEN);
COMMIT;
SQL
