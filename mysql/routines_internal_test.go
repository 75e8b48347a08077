package mysql

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/dbflag/leadership/migrations"
)

// TestEachRoutineMarkerIsItsNewestBodys: each procedure of routine mode
// is created last by the migration routines names, whose body has the
// procedure's marker, and no earlier migration's body of the procedure
// has it; so ensureRoutines tells an older procedure by its definition
// (a new migration replacing a procedure needs a new marker).
func TestEachRoutineMarkerIsItsNewestBodys(t *testing.T) {
	files, err := fs.Glob(migrations.FS, "mysql/*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routines {
		creates := regexp.MustCompile(`(?m)^\s*CREATE\s+PROCEDURE\s+` + r.name + `\s*\(`)
		var newest string
		for _, file := range files { // in order of version
			body, err := fs.ReadFile(migrations.FS, file)
			if err != nil {
				t.Fatal(err)
			}
			if !creates.Match(body) {
				continue
			}
			newest = file
			if has := strings.Contains(string(body), r.marker); has != (file == r.migration) {
				t.Errorf("%s creates %s and has its marker %q: %v, want %v", file, r.name, r.marker, has, file == r.migration)
			}
		}
		if newest != r.migration {
			t.Errorf("the newest migration that creates %s is %s, not %s", r.name, newest, r.migration)
		}
	}
}
