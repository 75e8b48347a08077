package mysql

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4/database"
)

// TestMigrateErrorsNameTheFix checks that the refusals to create the
// procedure name their fix: for 1418 and 1419 (binary logging)
// log_bin_trust_function_creators, for 1227 and other denials the
// privileges, and for all of them statement mode; also when golang-migrate
// wraps the error in its database.Error, which does not unwrap. In
// statement mode the denial names no routine privilege.
func TestMigrateErrorsNameTheFix(t *testing.T) {
	routine, statement := &Store{}, &Store{noRoutines: true}
	wrap := func(err error) error {
		return database.Error{OrigErr: err, Err: "migration failed", Query: []byte("CREATE PROCEDURE leadership_acquire …")}
	}
	for _, c := range []struct {
		number uint16
		want   []string
	}{
		{1418, []string{"binary logging", "log_bin_trust_function_creators", "SUPER", "WithoutRoutines()", "routines=false"}},
		{1419, []string{"binary logging", "log_bin_trust_function_creators", "SUPER", "WithoutRoutines()", "routines=false"}},
		{1227, []string{"permission denied", "CREATE ROUTINE", "SET USER or SUPER", "WithoutRoutines()", "routines=false"}},
		{1044, []string{"permission denied", "CREATE ROUTINE", "Migrate(false)", "WithoutRoutines()"}},
		{1142, []string{"permission denied", "CREATE ROUTINE", "Migrate(false)", "WithoutRoutines()"}},
		{1370, []string{"permission denied", "CREATE ROUTINE", "Migrate(false)", "WithoutRoutines()"}},
	} {
		e := &mysql.MySQLError{Number: c.number, SQLState: [5]byte{'H', 'Y', '0', '0', '0'}, Message: "refused"}
		for _, err := range []error{e, wrap(e)} {
			got := routine.describeMigrate("apply migrations", err).Error()
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("error %d (%T): %q does not name %q", c.number, err, got, w)
				}
			}
		}
	}
	got := statement.describeMigrate("apply migrations", wrap(&mysql.MySQLError{Number: 1142, Message: "CREATE command denied"}))
	if s := got.Error(); !strings.Contains(s, "CREATE on the database") || strings.Contains(s, "ROUTINE") {
		t.Errorf("statement mode's denial = %q, want CREATE named and no routine privilege", s)
	}
	if other := errors.New("other"); !errors.Is(routine.describeMigrate("x", other), other) {
		t.Error("describeMigrate does not wrap the error")
	}
	acq := describe("acquire", &mysql.MySQLError{Number: errProcAccessDenied, Message: "execute command denied"}).Error()
	for _, w := range []string{"EXECUTE on leadership_acquire", "WithoutRoutines()", "SELECT, INSERT, UPDATE"} {
		if !strings.Contains(acq, w) {
			t.Errorf("EXECUTE denied at acquire: %q does not name %q", acq, w)
		}
	}
}
