-- Migration 0009 re-creates leadership_acquire with the failover guard.
-- MySQL has no CREATE OR REPLACE PROCEDURE, so the procedure of migration
-- 0004 is dropped here (see migration 0003: an attempt between the two
-- fails, and an EXECUTE granted on the procedure by name is dropped with
-- it).
DROP PROCEDURE IF EXISTS leadership_acquire
