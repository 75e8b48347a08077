-- Acquire-or-renew in one round trip (CALL), committed before the reply is
-- sent whatever the session's autocommit (see migration 0004), with the
-- failover guard of docs/failover.md.
--
-- Incarnation: the server's row of leadership_incarnation (migration
-- 0007), inserted by the first call that finds none, before the
-- transaction: a MEMORY table is not transactional, and MySQL with
-- enforce_gtid_consistency refuses a transaction that writes both kinds.
-- INSERT IGNORE lets two calls insert at once; both then read the winner's.
--
-- The guard record is read without a lock (a consistent read, which also
-- fixes the transaction's snapshot), so acquisitions of different flags do
-- not wait for each other. It is written, under the row lock of an UPDATE
-- that re-checks its condition on the latest version, only when the
-- incarnation changed or the lease is the longest yet. When two calls
-- notice a new incarnation at once, the second UPDATE finds the record
-- already moved to the new incarnation and changes no hold; that call
-- holds from its own now, computed from what it read, which is at least
-- as long (docs/failover.md, rule 1). Locks are taken in the order guard,
-- then flag row, by every statement that takes both.
--
-- Rules (docs/failover.md): held = now < hold_until. A renewal of the
-- caller's term needs, while held, a row that has not expired; an expired
-- own term whose version is below version_floor (begun under an earlier
-- incarnation) is replaced by a new term instead of renewed, since a lost
-- later term may have raised a higher token. A new term
-- (takeover of an expired or released row) needs not held, and gets
-- version GREATEST(version + 1, version_floor); a new row gets
-- GREATEST(1, version_floor), and is not inserted while held: the call
-- then reports the name free but held (holder '', version 0, expiring at
-- hold_until). A losing call while held reports the expiry raised to
-- hold_until. The result's seventh column, hold_until, tells the store
-- this procedure from migration 0004's.
--
-- Assignments (right with and without MariaDB's SIMULTANEOUS_ASSIGNMENT,
-- see migration 0002): in the guard's UPDATE, hold_until and
-- version_floor read incarnation and max_lease, assigned after them; in
-- the upsert, renewed_at does not occur in any condition, version changes
-- only on a takeover (expired row, not held: a condition of expires_at
-- and a variable, both unchanged until the last assignment), holder
-- likewise, and expires_at is assigned last. A loser's row is read with
-- FOR UPDATE (the upsert already holds its lock), so it is the latest
-- version even when it was committed after the transaction's snapshot.
CREATE PROCEDURE leadership_acquire(
    IN p_name VARCHAR(255) CHARACTER SET utf8mb4,
    IN p_holder VARCHAR(255) CHARACTER SET utf8mb4,
    IN p_version BIGINT,
    IN p_lease_us BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_now BIGINT DEFAULT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
    DECLARE v_incarnation, v_recorded VARBINARY(64) DEFAULT NULL;
    DECLARE v_hold, v_floor, v_max_lease BIGINT DEFAULT 0;
    DECLARE v_held, v_won BOOLEAN DEFAULT FALSE;
    DECLARE v_holder VARCHAR(255) CHARACTER SET utf8mb4 DEFAULT '';
    DECLARE v_version, v_renewed, v_expires BIGINT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    SET v_incarnation = (SELECT incarnation FROM leadership_incarnation WHERE server_id = @@server_id);
    IF v_incarnation IS NULL THEN
        INSERT IGNORE INTO leadership_incarnation (server_id, incarnation)
        VALUES (@@server_id, CONCAT(@@server_id, '/', UUID()));
        SET v_incarnation = (SELECT incarnation FROM leadership_incarnation WHERE server_id = @@server_id);
    END IF;
    START TRANSACTION;
    SELECT incarnation, hold_until, version_floor, max_lease INTO v_recorded, v_hold, v_floor, v_max_lease
    FROM leadership_guard WHERE id = 1;
    IF v_recorded IS NULL OR v_incarnation IS NULL THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'leadership_guard has no record or leadership_incarnation no row: apply the migrations (leadership migrate)';
    END IF;
    IF v_recorded <> v_incarnation AND v_recorded <> '' THEN
        SET v_hold = GREATEST(v_hold, v_now + GREATEST(v_max_lease, p_lease_us)),
            v_floor = GREATEST(v_floor, v_now);
    END IF;
    IF v_recorded <> v_incarnation OR v_max_lease < p_lease_us THEN
        UPDATE leadership_guard SET
            hold_until = IF(incarnation <> v_incarnation AND incarnation <> '',
                            GREATEST(hold_until, v_now + GREATEST(max_lease, p_lease_us)), hold_until),
            version_floor = IF(incarnation <> v_incarnation AND incarnation <> '',
                               GREATEST(version_floor, v_now), version_floor),
            max_lease = GREATEST(max_lease, p_lease_us),
            incarnation = v_incarnation
        WHERE id = 1 AND (incarnation <> v_incarnation OR max_lease < p_lease_us);
    END IF;
    SET v_held = v_now < v_hold;
    IF v_held AND NOT EXISTS (SELECT 1 FROM leadership_flags WHERE name = p_name) THEN
        SET v_renewed = v_now, v_expires = v_hold;
    ELSE
        INSERT INTO leadership_flags (name, holder, version, renewed_at, expires_at)
        VALUES (p_name, p_holder, LAST_INSERT_ID(GREATEST(1, v_floor)), v_now, v_now + p_lease_us)
        ON DUPLICATE KEY UPDATE
            renewed_at = IF(LAST_INSERT_ID(0) = 0 AND ((NOT v_held AND expires_at <= v_now)
                            OR (p_version > 0 AND holder = p_holder AND version = p_version
                                AND (NOT v_held OR expires_at > v_now))), v_now, renewed_at),
            version = IF((NOT v_held AND expires_at <= v_now)
                         OR (p_version > 0 AND holder = p_holder AND version = p_version AND (NOT v_held OR expires_at > v_now)),
                         LAST_INSERT_ID(IF(p_version > 0 AND holder = p_holder AND version = p_version
                                           AND (NOT v_held OR expires_at > v_now)
                                           AND (expires_at > v_now OR version >= v_floor),
                                           version, GREATEST(version + 1, v_floor))),
                         version),
            holder = IF((NOT v_held AND expires_at <= v_now)
                        OR (p_version > 0 AND holder = p_holder AND version = p_version AND (NOT v_held OR expires_at > v_now)),
                        p_holder, holder),
            expires_at = IF((NOT v_held AND expires_at <= v_now)
                            OR (p_version > 0 AND holder = p_holder AND version = p_version AND (NOT v_held OR expires_at > v_now)),
                            v_now + p_lease_us, expires_at);
        IF LAST_INSERT_ID() > 0 THEN
            SET v_won = TRUE, v_holder = p_holder, v_version = LAST_INSERT_ID(),
                v_renewed = v_now, v_expires = v_now + p_lease_us;
        ELSE
            SELECT holder, version, renewed_at, expires_at INTO v_holder, v_version, v_renewed, v_expires
            FROM leadership_flags WHERE name = p_name FOR UPDATE;
            IF v_held THEN
                SET v_expires = GREATEST(v_expires, v_hold);
            END IF;
        END IF;
    END IF;
    COMMIT AND NO CHAIN NO RELEASE;
    SELECT v_won AS acquired, v_holder AS holder, v_version AS version,
           v_renewed AS renewed_at, v_expires AS expires_at, v_now AS now, v_hold AS hold_until;
END
