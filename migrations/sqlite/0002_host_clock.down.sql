DROP TRIGGER IF EXISTS leadership_flags_older_write;
ALTER TABLE leadership_flags DROP COLUMN host_writes;
ALTER TABLE leadership_flags DROP COLUMN host_expires_at;
ALTER TABLE leadership_flags DROP COLUMN host_renewed_at;
ALTER TABLE leadership_flags DROP COLUMN host_boot;
