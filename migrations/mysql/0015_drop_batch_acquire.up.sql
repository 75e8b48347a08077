-- Migration 0016 re-creates leadership_acquire_many, deciding a row at the
-- largest version alone and re-checking the guard before it commits. The
-- procedure of migration 0012 is dropped here; a batch sent meanwhile
-- finds it missing and is sent one CALL of leadership_acquire per flag.
DROP PROCEDURE IF EXISTS leadership_acquire_many
