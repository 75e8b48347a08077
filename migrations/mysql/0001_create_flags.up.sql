-- One row per flag, in the connection's database. Instants are integer
-- microseconds since the Unix epoch by the database clock
-- (UTC_TIMESTAMP(6)), so neither the session time zone nor the driver's
-- parseTime/loc settings can change them. The row is never deleted:
-- version is the fencing token and must never go backwards. utf8mb4_bin
-- makes names case- and accent-sensitive, as in the other stores; it
-- still ignores trailing spaces (PAD SPACE), which is why ValidateName
-- refuses names that start or end with one.
CREATE TABLE IF NOT EXISTS leadership_flags (
    name       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    holder     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    version    BIGINT NOT NULL DEFAULT 0,
    renewed_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
) ENGINE = InnoDB
