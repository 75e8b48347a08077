DROP PROCEDURE IF EXISTS leadership_acquire
