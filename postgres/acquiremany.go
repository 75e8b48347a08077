package postgres

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbflag/leadership"
	"github.com/dbflag/leadership/internal/sqlstore"
)

// acquireManySQL is acquireSQL for many flags in one statement, one row of
// input and one row of result per flag: $1 names, $2 holders, $4 leases in
// microseconds (arrays in one order, no name twice), $3 a JSON object of
// the version each request holds, by name (0 or absent: none). Each row is
// decided by the rules of acquireSQL, word for word, against the same
// guard. The guard (the same guardCTEs, given another lease CTE) is read,
// and written when needed, once for the statement, with the longest lease
// of its rows where acquireSQL takes the row's own, so a hold it starts
// lasts at least as long as any row's would. The upsert takes the rows in
// the order of their names, as the statements of a batch did one after the
// other, so two processes' statements lock rows in one order.
//
// The version held is looked up by name (a binary search in the JSON
// object) because ON CONFLICT DO UPDATE sees only the row and the proposed
// row, not the input row it came from. Each result row carries the
// position of its request (1-based); a request without a result row lost
// to a row inserted by a concurrent statement after this one began, as
// acquireSQL reports with no row at all.
const acquireManySQL = `
WITH req AS (
    SELECT * FROM unnest($1::text[], $2::text[], $4::bigint[]) WITH ORDINALITY AS r(name, holder, lease_us, i)
), lease AS (
    SELECT max(lease_us) AS us FROM req
), ` + guardCTEs + `, up AS (
    INSERT INTO leadership_flags AS f (name, holder, version, renewed_at, expires_at)
    SELECT q.name, q.holder, greatest(1, g.version_floor), now(), now() + q.lease_us * interval '1 microsecond'
    FROM req q, guard g
    WHERE now() >= g.hold_until OR EXISTS (SELECT FROM leadership_flags WHERE name = q.name)
    ORDER BY q.name COLLATE "C"
    ON CONFLICT (name) DO UPDATE SET
        version = CASE WHEN f.holder = excluded.holder AND f.version = coalesce(($3::jsonb ->> excluded.name)::bigint, 0)
                            AND (f.expires_at > excluded.renewed_at OR f.version >= (SELECT version_floor FROM guard))
                       THEN f.version ELSE greatest(f.version + 1, (SELECT version_floor FROM guard)) END,
        holder = excluded.holder,
        renewed_at = excluded.renewed_at,
        expires_at = excluded.expires_at
    WHERE (coalesce(($3::jsonb ->> excluded.name)::bigint, 0) > 0 AND f.holder = excluded.holder
           AND f.version = coalesce(($3::jsonb ->> excluded.name)::bigint, 0)
           AND (f.expires_at > excluded.renewed_at OR excluded.renewed_at >= (SELECT hold_until FROM guard)))
       OR (f.expires_at <= excluded.renewed_at AND excluded.renewed_at >= (SELECT hold_until FROM guard)
           AND f.version < 9223372036854775807)
    RETURNING f.name, f.holder, f.version, f.renewed_at, f.expires_at
)
SELECT q.i, true, u.holder, u.version, u.renewed_at, u.expires_at, now() FROM up u JOIN req q ON q.name = u.name
UNION ALL
SELECT q.i, false, f.holder, f.version, f.renewed_at, greatest(f.expires_at, g.hold_until), now()
FROM req q JOIN leadership_flags f ON f.name = q.name, guard g
WHERE NOT EXISTS (SELECT FROM up WHERE up.name = q.name)
UNION ALL
SELECT q.i, false, '', 0, now(), g.hold_until, now() FROM req q, guard g
WHERE now() < g.hold_until AND NOT EXISTS (SELECT FROM up WHERE up.name = q.name)
  AND NOT EXISTS (SELECT FROM leadership_flags WHERE name = q.name)`

// distinctRuns splits batch, sorted by name, into runs that each hold a name at
// most once (one upsert cannot change a row twice), in the batch's order:
// the k-th request of a name goes into the k-th run, so the runs, sent one
// after the other in one transaction, decide the requests of a name in
// the batch's order. Each run is a slice of positions in batch.
func distinctRuns(batch []*sqlstore.PendingAcquire) [][]int {
	var out [][]int
	k := 0
	for i, p := range batch {
		if i > 0 && p.Req.Name == batch[i-1].Req.Name {
			k++
		} else {
			k = 0
		}
		if k == len(out) {
			out = append(out, nil)
		}
		out[k] = append(out[k], i)
	}
	return out
}

// acquireManyArgs returns the arguments of acquireManySQL for the requests
// of batch at positions run.
func acquireManyArgs(batch []*sqlstore.PendingAcquire, run []int) []any {
	names := make([]string, len(run))
	holders := make([]string, len(run))
	leases := make([]int64, len(run))
	var held strings.Builder
	held.WriteByte('{')
	for j, i := range run {
		req := batch[i].Req
		names[j], holders[j] = req.Name, req.Holder
		leases[j] = (req.Lease + time.Microsecond - 1).Microseconds() // round up: never shorter than asked
		if req.Version > 0 {
			if held.Len() > 1 {
				held.WriteByte(',')
			}
			writeJSONString(&held, req.Name)
			held.WriteByte(':')
			held.WriteString(strconv.FormatInt(req.Version, 10))
		}
	}
	held.WriteByte('}')
	return []any{names, holders, held.String(), leases}
}

// writeJSONString writes s, a valid name (UTF-8 without control
// characters, see [leadership.ValidateName]), as a JSON string escaping
// only the quote and the backslash: encoding/json would also write U+2028,
// U+2029 and HTML characters as \u escapes, which jsonb refuses for
// characters beyond ASCII in a database whose encoding is not UTF-8.
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		if r == '"' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
}

// scanAcquireMany reads the result rows of one acquireManySQL statement
// into results, at the positions run names; a request without a row gets
// the result of a loss whose row was not visible yet.
func scanAcquireMany(rows pgx.Rows, batch []*sqlstore.PendingAcquire, run []int, results []leadership.Result) error {
	seen := make([]bool, len(run))
	for rows.Next() {
		var (
			i   int64
			res leadership.Result
		)
		if err := rows.Scan(&i, &res.Acquired, &res.Holder, &res.Version, &res.RenewedAt, &res.ExpiresAt, &res.Now); err != nil {
			rows.Close()
			return err
		}
		if i < 1 || int(i) > len(run) || seen[i-1] {
			rows.Close()
			return errors.New("acquire many: a result row names no request of the statement, or one twice")
		}
		seen[i-1] = true
		res.Name = batch[run[i-1]].Req.Name
		results[run[i-1]] = res
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for j, ok := range seen {
		if !ok {
			// As scanAcquire for no row: zero instants make the follower
			// retry soon.
			results[run[j]] = leadership.Result{Record: leadership.Record{Name: batch[run[j]].Req.Name}}
		}
	}
	return nil
}
