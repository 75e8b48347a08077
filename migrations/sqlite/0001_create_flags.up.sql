-- One row per flag. Instants are Unix milliseconds from the database clock
-- (unixepoch('subsec')), written only by the conditional statements of the
-- sqlite store. The row is never deleted: version is the fencing token and
-- must never go backwards.
CREATE TABLE IF NOT EXISTS leadership_flags (
    name       TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL DEFAULT '',
    version    INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    renewed_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
