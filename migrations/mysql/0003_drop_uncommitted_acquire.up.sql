-- Migration 0004 re-creates leadership_acquire so that it commits its own
-- work (see there). MySQL has no CREATE OR REPLACE PROCEDURE and each
-- migration file holds one statement (no multiStatements in the DSN), so
-- the old procedure is dropped here. Between the two migrations an attempt
-- fails with "procedure does not exist", which a flag treats like any other
-- failed attempt. Dropping a procedure also drops the EXECUTE privileges
-- granted on it alone: a user granted EXECUTE on leadership_acquire by name
-- must be granted it again (a grant on the database survives).
DROP PROCEDURE IF EXISTS leadership_acquire
