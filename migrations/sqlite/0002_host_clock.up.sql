-- Expiry judged by a host clock that never steps (CLOCK_BOOTTIME on
-- Linux), not by the wall clock. host_boot is the boot ID of the clock
-- that wrote host_renewed_at and host_expires_at (milliseconds); a row of
-- another boot is free. renewed_at and expires_at stay wall-clock
-- milliseconds, written by every version, so that older versions sharing
-- the file judge rows as before.
--
-- host_writes counts the statements of this version that changed the row.
-- An older version changes a row without touching it; the trigger then
-- clears host_boot, and the row is judged by its wall-clock expiry, as the
-- older version judges it, until this version writes it again.
ALTER TABLE leadership_flags ADD COLUMN host_boot TEXT NOT NULL DEFAULT '';
ALTER TABLE leadership_flags ADD COLUMN host_renewed_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE leadership_flags ADD COLUMN host_expires_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE leadership_flags ADD COLUMN host_writes INTEGER NOT NULL DEFAULT 0;
CREATE TRIGGER IF NOT EXISTS leadership_flags_older_write
AFTER UPDATE ON leadership_flags
WHEN NEW.host_writes = OLD.host_writes AND NEW.host_boot <> ''
BEGIN
    UPDATE leadership_flags SET host_boot = '' WHERE name = NEW.name;
END;
