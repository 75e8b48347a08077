-- The server's incarnation (docs/failover.md; package mysql, "Failover
-- guard"): a MEMORY table, which the server empties whenever it starts,
-- after a crash as after a clean shutdown. The first acquire statement
-- that finds no row for the server's @@server_id inserts one with a new
-- identifier, @@server_id/UUID(), outside its transaction (MEMORY is not
-- transactional, and MySQL with enforce_gtid_consistency refuses to mix it
-- with InnoDB in one transaction). Rows replicate like any other, but a
-- replica looks only for its own @@server_id, which replication requires
-- to differ from its source's: a promoted replica never takes its former
-- source's incarnation for its own.
CREATE TABLE IF NOT EXISTS leadership_incarnation (
    server_id   INT UNSIGNED NOT NULL PRIMARY KEY,
    incarnation VARBINARY(64) NOT NULL
) ENGINE = MEMORY
