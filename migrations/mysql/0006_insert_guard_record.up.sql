-- The guard's one record, for a schema that has seen no incarnation yet
-- (each migration file holds one statement: the DSN needs no
-- multiStatements).
INSERT IGNORE INTO leadership_guard (id) VALUES (1)
