-- Migration 0014 re-creates leadership_acquire, deciding a row at the
-- largest version alone and re-checking the guard before it commits.
-- MySQL has no CREATE OR REPLACE PROCEDURE, so the procedure of migration
-- 0009 is dropped here (see migration 0003: an attempt between the two
-- fails, and an EXECUTE granted on the procedure by name is dropped with
-- it).
DROP PROCEDURE IF EXISTS leadership_acquire
