package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"strings"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Statement mode (see WithoutRoutines): the procedures of migrations 0014
// and 0016, sent as plain statements. In the templates, :now is the
// statement's clock (UTC_TIMESTAMP is read once per statement, at its
// start, so every occurrence is the same instant) and :at the clock the
// guard read returned, at which a batch is decided as the procedures
// decide at their one v_now; the other :names are parameters, bound by
// bind. The assignments, their order and the LAST_INSERT_ID(expr) outcome
// are the procedure's, right with and without MariaDB's
// SIMULTANEOUS_ASSIGNMENT (see
// migrations/mysql/0014_create_rechecked_acquire.up.sql).
const (
	// guardReadTemplate reads, at the start of the transaction and without
	// a lock, the clock, the guard record and this server's incarnation
	// (NULL when it has none yet).
	guardReadTemplate = `
SELECT :now, g.incarnation, g.hold_until, g.version_floor, g.max_lease,
       (SELECT i.incarnation FROM leadership_incarnation i WHERE i.server_id = @@server_id)
FROM leadership_guard g WHERE g.id = 1`

	// guardUpdateTemplate records the incarnation :incarnation noticed at
	// :at and the lease, under the row lock, after the requests; its
	// conditions are re-checked on the latest version of the record.
	guardUpdateTemplate = `
UPDATE leadership_guard SET
    hold_until = IF(incarnation <> :incarnation AND incarnation <> '',
                    GREATEST(hold_until, :at + GREATEST(max_lease, :lease)), hold_until),
    version_floor = IF(incarnation <> :incarnation AND incarnation <> '', GREATEST(version_floor, :at), version_floor),
    max_lease = GREATEST(max_lease, :lease),
    incarnation = :incarnation
WHERE id = 1 AND (incarnation <> :incarnation OR max_lease < :lease)`

	// existsTemplate reads whether the flag has a row, in the snapshot of
	// the guard read: sent only while new terms are held, when a flag
	// without a row must not get one.
	existsTemplate = `SELECT EXISTS (SELECT 1 FROM leadership_flags WHERE name = :name)`

	// upsertTemplate is the procedure's upsert; :held and :floor are what
	// the guard read decided.
	upsertTemplate = `
INSERT INTO leadership_flags (name, holder, version, renewed_at, expires_at)
VALUES (:name, :holder, LAST_INSERT_ID(GREATEST(1, :floor)), :at, :at + :lease)
ON DUPLICATE KEY UPDATE
    renewed_at = IF(LAST_INSERT_ID(0) = 0 AND ({take} OR {renew}), :at, renewed_at),
    version = IF({take} OR {renew}, LAST_INSERT_ID(IF({renew} AND (expires_at > :at OR version >= :floor), version, GREATEST(version + 1, :floor))), version),
    holder = IF({take} OR {renew}, :holder, holder),
    expires_at = IF({take} OR {renew}, :at + :lease, expires_at)`

	// guardCheckTemplate reads the guard record as it stands, committed,
	// under a shared lock kept until the commit (after the requests, and
	// after guardUpdate when it was sent): no Quarantine commits between
	// this read and the commit, and one committed since the guard read is
	// seen here.
	guardCheckTemplate = `SELECT hold_until, version_floor FROM leadership_guard WHERE id = 1 LOCK IN SHARE MODE`

	// readRowTemplate reads, in the upsert's transaction, its outcome
	// (LAST_INSERT_ID of the session: 0 when it lost, else the term's
	// version) and the row. FOR UPDATE reads the latest version of the
	// row (the upsert holds its lock), not the snapshot the guard read
	// fixed.
	readRowTemplate = `SELECT LAST_INSERT_ID(), holder, version, renewed_at, expires_at
FROM leadership_flags WHERE name = :name FOR UPDATE`

	// insertIncarnation gives the server an incarnation, in a transaction
	// of its own (see migrations/mysql/0007_create_incarnation.up.sql).
	insertIncarnation = `INSERT IGNORE INTO leadership_incarnation (server_id, incarnation)
VALUES (@@server_id, CONCAT(@@server_id, '/', UUID()))`
)

// The conditions of the upsert: a takeover (the row expired, no hold) and a
// renewal of the caller's own term (while held, only of a term that has not
// expired).
var upsertConditions = strings.NewReplacer(
	"{take}", "(NOT :held AND expires_at <= :at)",
	"{renew}", "(:version > 0 AND holder = :holder AND version = :version AND (NOT :held OR expires_at > :at))",
)

// statementQuery is a template with a ? for each parameter, and the names of
// the parameters in their order.
type statementQuery struct {
	sql    string
	params []string
}

var placeholderRE = regexp.MustCompile(`:(now|at|name|holder|version|lease|held|floor|incarnation)\b`)

func compile(template string) statementQuery {
	var q statementQuery
	q.sql = placeholderRE.ReplaceAllStringFunc(template, func(m string) string {
		if m == ":now" {
			return nowMicros
		}
		q.params = append(q.params, m[1:])
		return "?"
	})
	return q
}

var (
	guardRead   = compile(guardReadTemplate)
	guardUpdate = compile(guardUpdateTemplate)
	guardCheck  = compile(guardCheckTemplate)
	flagExists  = compile(existsTemplate)
	upsert      = compile(upsertConditions.Replace(upsertTemplate))
	readRow     = compile(readRowTemplate)
)

// bind returns the arguments of q from values.
func (q statementQuery) bind(values map[string]any) []any {
	args := make([]any, len(q.params))
	for i, p := range q.params {
		args[i] = values[p]
	}
	return args
}

// errDataOutOfRange is MySQL's error for an integer out of range: the
// upsert's version + 1 on a row at the largest version.
const errDataOutOfRange = 1690

// errNoIncarnation ends the transaction of an attempt that found no
// incarnation of the server, so that one is inserted outside it.
var errNoIncarnation = errors.New("the server has no incarnation yet")

// errGuardChanged ends the transaction of an attempt whose decisions the
// guard record, as it stood at the end, would change (a Quarantine, or a
// new incarnation noticed by another statement, committed meanwhile), so
// that the attempt is decided again.
var errGuardChanged = errors.New("the guard record changed during the attempt")

// guardPasses is how many times an attempt of statement mode, like the
// procedures, decides its requests when the guard record keeps changing
// under it before it gives up.
const guardPasses = 3

// acquireStatements is statement mode: one transaction for batch, which
// reads the guard once (a consistent read, without a lock), then, for
// each request in order, its upsert and the read of its outcome, all
// decided at the clock of the guard read, as leadership_acquire_many
// decides at its one v_now; each request sees the writes of those before
// it. Then, with the flag rows locked, it records a new incarnation or a
// longer lease (asking for the longest lease of the batch, so that a hold
// started here lasts at least as long as any request alone would have
// started) and reads the guard record again under a shared lock (see
// guardCheckTemplate): when the record as it stands would change a
// decision (a hold begun by a Quarantine that committed while a request
// waited for a row lock), the transaction is rolled back and the batch
// decided again. The transaction is committed before the results are
// trusted (START TRANSACTION starts one whatever the session's
// autocommit). The first attempt after the server started finds no
// incarnation: it rolls back (it wrote nothing), inserts one in a
// transaction of its own and starts over.
//
// Unlike the procedures, which run from the re-read to the commit on the
// server, this transaction keeps the guard record locked across the round
// trip to its COMMIT (across two when it recorded a new incarnation or a
// longer lease, with an exclusive lock). A process stopped (SIGSTOP) right
// there holds the record until it resumes or its connection is closed: a
// Quarantine keeps trying until its context ends (it never queues), a
// statement recording a new incarnation or a longer lease waits, and,
// behind an exclusive lock, so does every acquire's re-read, up to
// innodb_lock_wait_timeout each.
func (s *Store) acquireStatements(ctx context.Context, batch []*sqlstore.PendingAcquire, results []leadership.Result) error {
	st, err := s.statements(ctx)
	if err != nil {
		return err
	}
	var guardLease int64
	for _, p := range batch {
		guardLease = max(guardLease, leaseMicros(p.Req))
	}
	return sqlstore.RetryOnce(ctx, transient, func() error {
		inserted := false
		for range guardPasses {
			err := s.inTx(ctx, false, func(tx *sql.Tx) error {
				g, err := readGuard(ctx, tx, st, guardLease)
				if err != nil {
					return err
				}
				for i, p := range batch {
					if err := acquireInTx(ctx, tx, st, g, p.Req, &results[i]); err != nil {
						return err
					}
				}
				return checkGuard(ctx, tx, g, guardLease)
			})
			switch {
			case errors.Is(err, errGuardChanged):
				continue
			case !errors.Is(err, errNoIncarnation):
				return err
			case inserted:
				return errors.New("the server's incarnation vanished just after it was inserted: is leadership_incarnation a MEMORY table?")
			}
			if err := s.inTx(ctx, false, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, insertIncarnation)
				return err
			}); err != nil {
				return err
			}
			inserted = true
		}
		return fmt.Errorf("%w %d times in a row: is something writing leadership_guard in a loop?", errGuardChanged, guardPasses)
	})
}

// guardDecision is what the guard read decided for a transaction of
// statement mode: the clock it read (every request is decided at it),
// whether new terms are held and until when, and the version floor; and
// what checkGuard records: the incarnation recorded and the current one,
// and the longest lease on record.
type guardDecision struct {
	now, hold, floor  int64
	held              bool
	recorded, current []byte
	maxLease          int64
}

// readGuard reads the guard record and the server's incarnation in tx. It
// returns errNoIncarnation, having written nothing, when the server has
// no incarnation yet.
func readGuard(ctx context.Context, tx *sql.Tx, st *prepared, guardLease int64) (guardDecision, error) {
	var g guardDecision
	err := tx.StmtContext(ctx, st.guardRead).QueryRowContext(ctx).Scan(&g.now, &g.recorded, &g.hold, &g.floor, &g.maxLease, &g.current)
	if errors.Is(err, sql.ErrNoRows) {
		return g, errNoGuardRecord
	}
	if err != nil {
		return g, err
	}
	if g.current == nil {
		return g, errNoIncarnation
	}
	if string(g.recorded) != string(g.current) && len(g.recorded) > 0 { // rule 1: a new incarnation
		g.hold = max(g.hold, g.now+max(g.maxLease, guardLease))
		g.floor = max(g.floor, g.now)
	}
	g.held = g.now < g.hold
	return g, nil
}

// checkGuard, after the requests of a transaction decided by g, records a
// new incarnation or a longer lease, then reads the guard record as it
// stands under a shared lock, and returns errGuardChanged when it would
// change a decision: a transaction decided outside a hold finds one in
// force at its clock, or a higher version floor (a hold or floor only
// grows; decided during a hold, nothing it could start depends on them).
func checkGuard(ctx context.Context, tx *sql.Tx, g guardDecision, guardLease int64) error {
	if string(g.recorded) != string(g.current) || g.maxLease < guardLease {
		if _, err := tx.ExecContext(ctx, guardUpdate.sql, guardUpdate.bind(map[string]any{
			"incarnation": g.current, "at": g.now, "lease": guardLease})...); err != nil {
			return err
		}
	}
	var hold, floor int64
	if err := tx.QueryRowContext(ctx, guardCheck.sql).Scan(&hold, &floor); err != nil {
		return err
	}
	if !g.held && (g.now < hold || floor > g.floor) {
		return errGuardChanged
	}
	return nil
}

// acquireInTx decides req in tx as g says.
func acquireInTx(ctx context.Context, tx *sql.Tx, st *prepared, g guardDecision, req leadership.Request, res *leadership.Result) error {
	*res = leadership.Result{Record: leadership.Record{Name: req.Name}, Now: time.UnixMicro(g.now)}
	if g.held { // no first acquisition during a hold
		var found bool
		if err := tx.QueryRowContext(ctx, flagExists.sql, flagExists.bind(map[string]any{"name": req.Name})...).Scan(&found); err != nil {
			return err
		}
		if !found {
			res.RenewedAt, res.ExpiresAt = time.UnixMicro(g.now), time.UnixMicro(g.hold)
			return nil
		}
	}
	_, err := tx.StmtContext(ctx, st.upsert).ExecContext(ctx, upsert.bind(map[string]any{
		"name": req.Name, "holder": req.Holder, "version": req.Version, "lease": leaseMicros(req),
		"at": g.now, "held": g.held, "floor": g.floor})...)
	// A row at the largest version: version + 1 fails the upsert alone
	// (InnoDB rolls back the statement, not the transaction), and the row
	// is reported as it stands, lost (see sqlstore.Exhausted).
	exhausted := number(err) == errDataOutOfRange
	if err != nil && !exhausted {
		return err
	}
	var won, renewed, expires int64
	if err := tx.StmtContext(ctx, st.readRow).QueryRowContext(ctx, readRow.bind(map[string]any{"name": req.Name})...).Scan(
		&won, &res.Holder, &res.Version, &renewed, &expires); err != nil {
		return err
	}
	res.Acquired = won > 0 && !exhausted
	if !res.Acquired && g.held {
		expires = max(expires, g.hold)
	}
	res.RenewedAt, res.ExpiresAt = time.UnixMicro(renewed), time.UnixMicro(expires)
	return nil
}

// prepared is the statements of statement mode that every attempt sends.
type prepared struct{ guardRead, upsert, readRow *sql.Stmt }

// statements returns the statements every attempt of statement mode sends,
// prepared once for the store; database/sql prepares them once per
// connection, and Tx.StmtContext reuses the connection's. The guard's
// update and the incarnation's insert are rare and not prepared.
func (s *Store) statements(ctx context.Context) (*prepared, error) {
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{{&s.stmts.guardRead, guardRead.sql}, {&s.stmts.upsert, upsert.sql}, {&s.stmts.readRow, readRow.sql}} {
		if _, err := s.prepare(ctx, p.stmt, p.sql); err != nil {
			return nil, err
		}
	}
	return &s.stmts, nil
}

// routineRE recognises a migration that creates or drops a stored routine.
var routineRE = regexp.MustCompile(`(?im)^\s*(CREATE|DROP)\s+(PROCEDURE|FUNCTION)\b`)

// noRoutine is what a routine's migration becomes in statement mode: a
// statement that changes nothing and needs no privilege.
const noRoutine = "SELECT 1"

// statementFS is the migrations with every migration that creates or drops
// a routine replaced by [noRoutine]. golang-migrate then applies the same
// versions into the same version table in both modes, so a database can
// move from one mode to the other and keeps upgrading in order; the
// procedures are (re-)created, in routine mode, by ensureRoutines.
type statementFS struct{ fs.FS }

func (f statementFS) Open(name string) (fs.File, error) {
	file, err := f.FS.Open(name)
	if err != nil || !strings.HasSuffix(name, ".sql") {
		return file, err
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(file)
	if err != nil {
		return nil, err
	}
	if routineRE.Match(body) {
		body = []byte(noRoutine)
	}
	return &memFile{info, bytes.NewReader(body)}, nil
}

// memFile is a migration file read into memory.
type memFile struct {
	info fs.FileInfo
	*bytes.Reader
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Close() error               { return nil }
