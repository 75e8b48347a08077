-- One row per flag, in the connection's current schema. Instants come from
-- the database clock (now()), written only by the conditional statements
-- of the postgres store. The row is never deleted: version is the fencing
-- token and must never go backwards.
CREATE TABLE IF NOT EXISTS leadership_flags (
    name       text        NOT NULL PRIMARY KEY,
    holder     text        NOT NULL DEFAULT '',
    version    bigint      NOT NULL DEFAULT 0 CHECK (version >= 0),
    renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
