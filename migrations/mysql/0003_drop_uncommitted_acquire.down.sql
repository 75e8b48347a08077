-- Acquire-or-renew in one round trip (CALL). MySQL and MariaDB have no
-- INSERT … RETURNING that both support, so the decision is one
-- INSERT … ON DUPLICATE KEY UPDATE that reports its outcome through
-- LAST_INSERT_ID(expr): 0 when it lost, else the version of the term it
-- won or renewed; then one SELECT reports the row.
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
        SELECT TRUE, p_holder, LAST_INSERT_ID(), v_now, v_now + p_lease_us, v_now;
    ELSE
        SELECT FALSE, holder, version, renewed_at, expires_at, v_now FROM leadership_flags WHERE name = p_name;
    END IF;
END
