-- The failover guard's record (docs/failover.md): one row per schema,
-- inserted by migration 0006, read by every acquire statement and written
-- only when it notices a new incarnation of the server, when a longer
-- lease than any before is asked, and by Quarantine. Instants and leases
-- are integer microseconds by the database clock, as in leadership_flags.
--   incarnation:   the incarnation (leadership_incarnation) that last
--                  wrote the record; '' before the first acquire statement.
--   hold_until:    no new term starts before this instant.
--   version_floor: the lowest version a new term may get.
--   max_lease:     the longest lease any acquire statement asked for.
CREATE TABLE IF NOT EXISTS leadership_guard (
    id            TINYINT NOT NULL PRIMARY KEY CHECK (id = 1),
    incarnation   VARBINARY(64) NOT NULL DEFAULT '',
    hold_until    BIGINT NOT NULL DEFAULT 0,
    version_floor BIGINT NOT NULL DEFAULT 0,
    max_lease     BIGINT NOT NULL DEFAULT 0
) ENGINE = InnoDB
