package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"io/fs"
	"regexp"
	"strings"
	"time"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// Statement mode (see WithoutRoutines): the upsert of migration 0004's
// procedure, sent as a plain statement. :now is the statement's clock
// (UTC_TIMESTAMP is read once per statement, at its start, so every
// occurrence is the same instant); :name, :holder, :version and :lease are
// the request's, bound as parameters by upsertArgs. The assignments, their
// order and the LAST_INSERT_ID(expr) outcome are the procedure's, right
// with and without MariaDB's SIMULTANEOUS_ASSIGNMENT (see
// migrations/mysql/0004_create_committing_acquire.up.sql).
const upsertTemplate = `
INSERT INTO leadership_flags (name, holder, version, renewed_at, expires_at)
VALUES (:name, :holder, LAST_INSERT_ID(1), :now, :now + :lease)
ON DUPLICATE KEY UPDATE
    renewed_at = IF(LAST_INSERT_ID(0) = 0 AND (expires_at <= :now
                    OR (:version > 0 AND holder = :holder AND version = :version)), :now, renewed_at),
    version = IF(expires_at <= :now OR (:version > 0 AND holder = :holder AND version = :version),
                 LAST_INSERT_ID(IF(:version > 0 AND holder = :holder AND version = :version, version, version + 1)),
                 version),
    holder = IF(expires_at <= :now OR (:version > 0 AND holder = :holder AND version = :version), :holder, holder),
    expires_at = IF(expires_at <= :now OR (:version > 0 AND holder = :holder AND version = :version),
                    :now + :lease, expires_at)`

var (
	placeholderRE = regexp.MustCompile(`:(now|name|holder|version|lease)\b`)
	// upsertQuery is upsertTemplate with a ? for each parameter, and
	// upsertParams the names of the parameters in their order.
	upsertQuery, upsertParams = func() (string, []string) {
		var names []string
		q := placeholderRE.ReplaceAllStringFunc(upsertTemplate, func(m string) string {
			if m == ":now" {
				return nowMicros
			}
			names = append(names, m[1:])
			return "?"
		})
		return q, names
	}()
)

// readRowQuery reads, in the upsert's transaction, its outcome
// (LAST_INSERT_ID of the session: 0 when it lost, else the term's version),
// the row, and the clock.
const readRowQuery = `SELECT LAST_INSERT_ID(), holder, version, renewed_at, expires_at, ` + nowMicros + `
FROM leadership_flags WHERE name = ?`

// upsertArgs binds the request to upsertParams.
func upsertArgs(req leadership.Request, leaseMicros int64) []any {
	args := make([]any, len(upsertParams))
	for i, p := range upsertParams {
		switch p {
		case "name":
			args[i] = req.Name
		case "holder":
			args[i] = req.Holder
		case "version":
			args[i] = req.Version
		case "lease":
			args[i] = leaseMicros
		}
	}
	return args
}

// acquireStatements is Acquire in statement mode: the upsert and the read
// of its outcome in a transaction of their own, committed before the reply
// is trusted (START TRANSACTION starts one whatever the session's
// autocommit). LAST_INSERT_ID is the session's, and the transaction keeps
// the session, so the read sees the upsert's outcome; the row it reads is
// the upsert's, still locked by it. On a win the row's renewed_at is the
// upsert's clock; on a loss Now is read by the SELECT, a little later in
// the same transaction.
func (s *Store) acquireStatements(ctx context.Context, req leadership.Request, leaseMicros int64) (leadership.Result, error) {
	upsert, readRow, err := s.statements(ctx)
	if err != nil {
		return leadership.Result{}, describe("acquire "+sqlstore.Quote(req.Name), err)
	}
	args := upsertArgs(req, leaseMicros)
	var res leadership.Result
	err = sqlstore.RetryOnce(ctx, transient, func() error {
		return s.inTx(ctx, false, func(tx *sql.Tx) error {
			res = leadership.Result{Record: leadership.Record{Name: req.Name}}
			if _, err := tx.StmtContext(ctx, upsert).ExecContext(ctx, args...); err != nil {
				return err
			}
			var won, renewed, expires, now int64
			if err := tx.StmtContext(ctx, readRow).QueryRowContext(ctx, req.Name).Scan(
				&won, &res.Holder, &res.Version, &renewed, &expires, &now); err != nil {
				return err
			}
			res.Acquired = won > 0
			if res.Acquired {
				now = renewed
			}
			res.RenewedAt, res.ExpiresAt, res.Now = time.UnixMicro(renewed), time.UnixMicro(expires), time.UnixMicro(now)
			return nil
		})
	})
	if err != nil {
		return leadership.Result{}, describe("acquire "+sqlstore.Quote(req.Name), err)
	}
	return res, nil
}

// statements returns the two statements of statement mode, prepared once
// for the store; database/sql prepares them once per connection, and
// Tx.StmtContext reuses the connection's.
func (s *Store) statements(ctx context.Context) (upsert, readRow *sql.Stmt, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.upsert == nil {
		if s.upsert, err = s.db.PrepareContext(ctx, upsertQuery); err != nil {
			return nil, nil, err
		}
	}
	if s.readRow == nil {
		if s.readRow, err = s.db.PrepareContext(ctx, readRowQuery); err != nil {
			return nil, nil, err
		}
	}
	return s.upsert, s.readRow, nil
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
