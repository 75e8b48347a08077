package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"io/fs"
	"regexp"
	"strings"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Statement mode (see WithoutRoutines): the procedure of migration 0009,
// sent as plain statements. In the templates, :now is the statement's
// clock (UTC_TIMESTAMP is read once per statement, at its start, so every
// occurrence is the same instant); the other :names are parameters, bound
// by bind. The assignments, their order and the LAST_INSERT_ID(expr)
// outcome are the procedure's, right with and without MariaDB's
// SIMULTANEOUS_ASSIGNMENT (see
// migrations/mysql/0009_create_guarded_acquire.up.sql).
const (
	// guardReadTemplate reads, at the start of the transaction and without
	// a lock, the clock, the guard record, this server's incarnation (NULL
	// when it has none yet) and whether the flag has a row.
	guardReadTemplate = `
SELECT :now, g.incarnation, g.hold_until, g.version_floor, g.max_lease,
       (SELECT i.incarnation FROM leadership_incarnation i WHERE i.server_id = @@server_id),
       EXISTS (SELECT 1 FROM leadership_flags f WHERE f.name = :name)
FROM leadership_guard g WHERE g.id = 1`

	// guardUpdateTemplate records the incarnation :incarnation noticed at
	// :at (the guard read's clock) and the lease, under the row lock; its
	// conditions are re-checked on the latest version of the record.
	guardUpdateTemplate = `
UPDATE leadership_guard SET
    hold_until = IF(incarnation <> :incarnation AND incarnation <> '',
                    GREATEST(hold_until, :at + GREATEST(max_lease, :lease)), hold_until),
    version_floor = IF(incarnation <> :incarnation AND incarnation <> '', GREATEST(version_floor, :at), version_floor),
    max_lease = GREATEST(max_lease, :lease),
    incarnation = :incarnation
WHERE id = 1 AND (incarnation <> :incarnation OR max_lease < :lease)`

	// upsertTemplate is the procedure's upsert; :held and :floor are what
	// the guard read decided.
	upsertTemplate = `
INSERT INTO leadership_flags (name, holder, version, renewed_at, expires_at)
VALUES (:name, :holder, LAST_INSERT_ID(GREATEST(1, :floor)), :now, :now + :lease)
ON DUPLICATE KEY UPDATE
    renewed_at = IF(LAST_INSERT_ID(0) = 0 AND ({take} OR {renew}), :now, renewed_at),
    version = IF({take} OR {renew}, LAST_INSERT_ID(IF({renew} AND (expires_at > :now OR version >= :floor), version, GREATEST(version + 1, :floor))), version),
    holder = IF({take} OR {renew}, :holder, holder),
    expires_at = IF({take} OR {renew}, :now + :lease, expires_at)`

	// readRowTemplate reads, in the upsert's transaction, its outcome
	// (LAST_INSERT_ID of the session: 0 when it lost, else the term's
	// version), the row, and the clock. FOR UPDATE reads the latest
	// version of the row (the upsert holds its lock), not the snapshot the
	// guard read fixed.
	readRowTemplate = `SELECT LAST_INSERT_ID(), holder, version, renewed_at, expires_at, :now
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
	"{take}", "(NOT :held AND expires_at <= :now)",
	"{renew}", "(:version > 0 AND holder = :holder AND version = :version AND (NOT :held OR expires_at > :now))",
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

// errNoIncarnation ends the transaction of an attempt that found no
// incarnation of the server, so that one is inserted outside it.
var errNoIncarnation = errors.New("the server has no incarnation yet")

// acquireStatements is statement mode: for each request of batch, in
// order, the guard read, the guard's update when needed, the upsert and
// the read of its outcome, all in one transaction, committed before the
// results are trusted (START TRANSACTION starts one whatever the session's
// autocommit). Each request's guard read sees the writes of those before
// it; each asks the guard for the longest lease of the batch, so that a
// hold started by any of them lasts at least as long as any request alone
// would have started (as leadership_acquire_many does). The first attempt
// after the server started finds no incarnation: it rolls back (it wrote
// nothing), inserts one in a transaction of its own and starts over.
func (s *Store) acquireStatements(ctx context.Context, batch []*sqlstore.Pending, results []leadership.Result) error {
	st, err := s.statements(ctx)
	if err != nil {
		return err
	}
	var guardLease int64 // the batch's longest, as leadership_acquire_many's
	for _, p := range batch {
		guardLease = max(guardLease, leaseMicros(p.Req))
	}
	return sqlstore.RetryOnce(ctx, transient, func() error {
		for range 2 {
			err := s.inTx(ctx, false, func(tx *sql.Tx) error {
				for i, p := range batch {
					if err := acquireInTx(ctx, tx, st, p.Req, guardLease, &results[i]); err != nil {
						return err
					}
				}
				return nil
			})
			if !errors.Is(err, errNoIncarnation) {
				return err
			}
			if err := s.inTx(ctx, false, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, insertIncarnation)
				return err
			}); err != nil {
				return err
			}
		}
		return errors.New("the server's incarnation vanished just after it was inserted: is leadership_incarnation a MEMORY table?")
	})
}

// acquireInTx is one attempt of statement mode in tx, asking the guard
// for the lease guardLease (at least req's). It returns errNoIncarnation,
// having written nothing, when the server has no incarnation yet.
func acquireInTx(ctx context.Context, tx *sql.Tx, st *prepared, req leadership.Request, guardLease int64, res *leadership.Result) error {
	lease := leaseMicros(req)
	*res = leadership.Result{Record: leadership.Record{Name: req.Name}}
	var (
		now, hold, floor, maxLease int64
		recorded, current          []byte
		exists                     bool
	)
	err := tx.StmtContext(ctx, st.guardRead).QueryRowContext(ctx, guardRead.bind(map[string]any{"name": req.Name})...).Scan(
		&now, &recorded, &hold, &floor, &maxLease, &current, &exists)
	if errors.Is(err, sql.ErrNoRows) {
		return errNoGuardRecord
	}
	if err != nil {
		return err
	}
	if current == nil {
		return errNoIncarnation
	}
	if string(recorded) != string(current) && len(recorded) > 0 { // rule 1: a new incarnation
		hold = max(hold, now+max(maxLease, guardLease))
		floor = max(floor, now)
	}
	if string(recorded) != string(current) || maxLease < guardLease {
		if _, err := tx.ExecContext(ctx, guardUpdate.sql, guardUpdate.bind(map[string]any{
			"incarnation": current, "at": now, "lease": guardLease})...); err != nil {
			return err
		}
	}
	held := now < hold
	if held && !exists { // no first acquisition during a hold
		res.RenewedAt, res.ExpiresAt, res.Now = time.UnixMicro(now), time.UnixMicro(hold), time.UnixMicro(now)
		return nil
	}
	if _, err := tx.StmtContext(ctx, st.upsert).ExecContext(ctx, upsert.bind(map[string]any{
		"name": req.Name, "holder": req.Holder, "version": req.Version, "lease": lease, "held": held, "floor": floor})...); err != nil {
		return err
	}
	// A loser reports the clock of the guard read, the instant its
	// decision (hold, floor) was taken at, as the procedure reports its
	// one v_now; the row read's own clock reading is later.
	var won, renewed, expires, readAt int64
	if err := tx.StmtContext(ctx, st.readRow).QueryRowContext(ctx, readRow.bind(map[string]any{"name": req.Name})...).Scan(
		&won, &res.Holder, &res.Version, &renewed, &expires, &readAt); err != nil {
		return err
	}
	res.Acquired = won > 0
	switch {
	case res.Acquired:
		now = renewed
	case held:
		expires = max(expires, hold)
	}
	res.RenewedAt, res.ExpiresAt, res.Now = time.UnixMicro(renewed), time.UnixMicro(expires), time.UnixMicro(now)
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
// procedure is (re-)created, in routine mode, by ensureRoutine.
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
