-- Acquire-or-renew in one round trip (CALL), committed before the reply is
-- sent, whatever the session's autocommit. MySQL and MariaDB have no
-- INSERT … RETURNING that both support, so the decision is one
-- INSERT … ON DUPLICATE KEY UPDATE that reports its outcome through
-- LAST_INSERT_ID(expr): 0 when it lost, else the version of the term it
-- won or renewed.
--
-- Transaction: a session may run with autocommit off (autocommit=0 in a
-- go-sql-driver DSN, init_connect='SET autocommit=0', a global
-- autocommit=0). Migration 0002's procedure then left its upsert
-- uncommitted: the caller trusted a term that the server rolled back when
-- the connection closed, and the open transaction kept the row locked
-- against every other process. So the work runs in an explicit
-- transaction: START TRANSACTION (which also commits anything the session
-- left open: the store only runs on pooled connections, never inside a
-- caller's transaction, which database/sql never lends out), the upsert,
-- the read of the row into variables, COMMIT; only then the result row is
-- sent (its first column named acquired, by which the store recognises
-- this procedure), so a reply exists only for a committed statement and no
-- transaction stays open in the session afterwards. COMMIT names AND NO
-- CHAIN NO RELEASE so that completion_type cannot chain a new transaction
-- or close the session. A failed statement (a deadlock, a lock wait
-- timeout) rolls the transaction back before the error is returned, so no
-- transaction is left open either. With autocommit on, this is the one
-- transaction the upsert had alone before, plus the read.
--
-- The assignments are ordered so that they are right both when each sees
-- the columns assigned before it (MySQL; MariaDB by default) and when all
-- see the old row (MariaDB's SIMULTANEOUS_ASSIGNMENT): renewed_at does not
-- occur in the condition; version changes only when the row was free
-- (expires_at <= now), which makes the condition true whatever the other
-- columns hold, and holder likewise; expires_at is assigned last. IF()
-- evaluates only the branch it takes, so LAST_INSERT_ID(0) runs first and
-- LAST_INSERT_ID(version) only on a win. The routine keeps the sql_mode it
-- was created with; it is right in either mode.
CREATE PROCEDURE leadership_acquire(
    IN p_name VARCHAR(255) CHARACTER SET utf8mb4,
    IN p_holder VARCHAR(255) CHARACTER SET utf8mb4,
    IN p_version BIGINT,
    IN p_lease_us BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_now BIGINT DEFAULT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
    DECLARE v_won BOOLEAN DEFAULT FALSE;
    DECLARE v_holder VARCHAR(255) CHARACTER SET utf8mb4 DEFAULT '';
    DECLARE v_version, v_renewed, v_expires BIGINT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    INSERT INTO leadership_flags (name, holder, version, renewed_at, expires_at)
    VALUES (p_name, p_holder, LAST_INSERT_ID(1), v_now, v_now + p_lease_us)
    ON DUPLICATE KEY UPDATE
        renewed_at = IF(LAST_INSERT_ID(0) = 0 AND (expires_at <= v_now
                        OR (p_version > 0 AND holder = p_holder AND version = p_version)), v_now, renewed_at),
        version = IF(expires_at <= v_now OR (p_version > 0 AND holder = p_holder AND version = p_version),
                     LAST_INSERT_ID(IF(p_version > 0 AND holder = p_holder AND version = p_version, version, version + 1)),
                     version),
        holder = IF(expires_at <= v_now OR (p_version > 0 AND holder = p_holder AND version = p_version), p_holder, holder),
        expires_at = IF(expires_at <= v_now OR (p_version > 0 AND holder = p_holder AND version = p_version),
                        v_now + p_lease_us, expires_at);
    IF LAST_INSERT_ID() > 0 THEN
        SET v_won = TRUE, v_holder = p_holder, v_version = LAST_INSERT_ID(),
            v_renewed = v_now, v_expires = v_now + p_lease_us;
    ELSE
        SELECT holder, version, renewed_at, expires_at INTO v_holder, v_version, v_renewed, v_expires
        FROM leadership_flags WHERE name = p_name;
    END IF;
    COMMIT AND NO CHAIN NO RELEASE;
    SELECT v_won AS acquired, v_holder AS holder, v_version AS version,
           v_renewed AS renewed_at, v_expires AS expires_at, v_now AS now;
END
