-- The failover guard (docs/failover.md): the acquire statement notices
-- when the server may have lost acknowledged commits (crash recovery, a
-- promoted standby) and then starts no new term for one longest lease, and
-- gives later terms versions above any that was lost.
--
-- leadership_incarnation is UNLOGGED: PostgreSQL empties it in crash
-- recovery and on a promoted standby (standbys never receive unlogged
-- data) and keeps it across a clean restart, which loses no commit. The
-- first acquire statement that finds it empty writes a new random
-- identifier: the server's incarnation.
CREATE UNLOGGED TABLE IF NOT EXISTS leadership_incarnation (
    id          int  NOT NULL PRIMARY KEY CHECK (id = 1),
    incarnation text NOT NULL
);

-- One row per schema: the incarnation that last wrote it ('' until the
-- first acquire statement of a new schema), the end of the hold in force
-- (no new term starts before it), the lowest version a new term may get,
-- and the longest lease any acquire statement asked for, in microseconds.
-- ('' is kept for a row restored by hand: it means "no earlier incarnation".)
CREATE TABLE IF NOT EXISTS leadership_guard (
    id            int         NOT NULL PRIMARY KEY CHECK (id = 1),
    incarnation   text        NOT NULL DEFAULT '',
    hold_until    timestamptz NOT NULL DEFAULT '1970-01-01 00:00:00+00',
    version_floor bigint      NOT NULL DEFAULT 0,
    max_lease_us  bigint      NOT NULL DEFAULT 0
);
-- The guard record starts with the incarnation the schema is created
-- under, never '' once migrated: a crash that loses the first acquire
-- statements of a new schema then still shows a new incarnation, and the
-- first acquisition of a fresh schema is still immediate.
INSERT INTO leadership_incarnation (id, incarnation) VALUES (1, gen_random_uuid()::text)
ON CONFLICT (id) DO NOTHING;
INSERT INTO leadership_guard (id, incarnation)
SELECT 1, incarnation FROM leadership_incarnation WHERE id = 1
ON CONFLICT (id) DO NOTHING;
