-- The server's incarnation as the schema is migrated (see migration 0007),
-- so that migration 0011 can record it in the guard: once migrated, the
-- guard record is never '' ("no earlier incarnation"), and a crash that
-- loses the first acquire statements of a new schema still shows a new
-- incarnation (docs/failover.md).
INSERT IGNORE INTO leadership_incarnation (server_id, incarnation) VALUES (@@server_id, CONCAT(@@server_id, '/', UUID()))
