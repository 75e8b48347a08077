package sqlstore

import (
	"fmt"
	"strings"
)

// UnreadableRow is a row of the flag table that a store's Flags could not
// read: a value another program wrote that the store cannot represent (a
// PostgreSQL time of 'infinity', text in a SQLite integer column).
type UnreadableRow struct {
	Name string
	Err  error // why: the scan's error, naming the column
}

// UnreadableRows is the error a store's Flags returns, with every row,
// when some rows could not be read: those are returned with their name
// only, and listed here, so that one bad row hides no other. Use
// [UnreadableRows.Err] to return it.
type UnreadableRows []UnreadableRow

// Err returns u as an error, or nil when it is empty.
func (u UnreadableRows) Err() error {
	if len(u) == 0 {
		return nil
	}
	return u
}

// maxReason bounds the text of a row's reason: the value that could not
// be read may be long.
const maxReason = 200

// Reason is why the row could not be read, at most about 200 bytes.
func (r UnreadableRow) Reason() string {
	why := r.Err.Error()
	if len(why) > maxReason {
		why = why[:maxReason] + "…"
	}
	return why
}

func (u UnreadableRows) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d row(s) of leadership_flags cannot be read (written by another program; correct them with SQL, keeping each version, the fencing token):", len(u))
	for i, r := range u {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s: %q", Quote(r.Name), r.Reason())
	}
	return b.String()
}

// Nulls is why a row of the flag table with a NULL (in a table whose NOT
// NULL constraints were dropped by hand) cannot be read: it names the
// columns holder, version, renewed_at and expires_at whose valid is
// false, in that order; nil when none is.
func Nulls(holder, version, renewed, expires bool) error {
	columns := [...]string{"holder", "version", "renewed_at", "expires_at"}
	var null []string
	for i, valid := range [...]bool{holder, version, renewed, expires} {
		if !valid {
			null = append(null, columns[i])
		}
	}
	if len(null) == 0 {
		return nil
	}
	return fmt.Errorf("%s NULL", strings.Join(null, ", "))
}
