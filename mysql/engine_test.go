package mysql_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/dbflag/leadership/internal/testkit/testdb"
	"github.com/dbflag/leadership/mysql"
)

// incarnationEngine is the engine of the database's leadership_incarnation
// table, "" when it has none.
func incarnationEngine(t testing.TB, dsn string) string {
	t.Helper()
	var engine string
	err := openDB(t, dsn).QueryRow(`SELECT COALESCE((SELECT engine FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'leadership_incarnation'), '')`).Scan(&engine)
	if err != nil {
		t.Fatal(err)
	}
	return engine
}

// TestMigrateRefusesAServerThatWouldNotMakeTheIncarnationTableMemory runs
// on a MariaDB server of its own started with enforce_storage_engine=InnoDB,
// which makes CREATE TABLE … ENGINE = MEMORY fail (error 1290, naming only
// NO_ENGINE_SUBSTITUTION) under the default sql_mode, and create an InnoDB
// table with a mere note (1266) under a sql_mode without
// NO_ENGINE_SUBSTITUTION: a table that survives restarts, so that the
// failover guard would never notice one. Migrate (and so Build) must
// refuse in both cases with an error naming the setting, create no table,
// and refuse an InnoDB table made earlier, naming the ALTER TABLE that
// fixes it; a MEMORY table made before the setting is fine.
func TestMigrateRefusesAServerThatWouldNotMakeTheIncarnationTableMemory(t *testing.T) {
	t.Parallel()
	srv := testdb.StartMariaDB(t, "--enforce-storage-engine=InnoDB")
	inModes(t, func(t *testing.T, opts ...mysql.Option) {
		for _, c := range []struct{ name, sqlMode string }{
			{"DefaultSQLMode", ""},
			{"SQLModeWithoutNoEngineSubstitution", "STRICT_TRANS_TABLES"},
		} {
			t.Run(c.name, func(t *testing.T) {
				dsn := srv.NewDatabase(t, "engine")
				if c.sqlMode != "" {
					dsn += "?sql_mode=" + url.QueryEscape("'"+c.sqlMode+"'")
				}
				s := newStore(t, openDB(t, dsn), opts...)
				for range 2 { // a second Migrate says the same
					err := s.Migrate(context.Background())
					if err == nil || !strings.Contains(err.Error(), "enforce_storage_engine") || !strings.Contains(err.Error(), "MEMORY") {
						t.Fatalf("Migrate on a server enforcing InnoDB = %v, want an error naming enforce_storage_engine and MEMORY", err)
					}
				}
				if engine := incarnationEngine(t, dsn); engine != "" {
					t.Errorf("Migrate refused but created leadership_incarnation with the engine %s", engine)
				}
			})
		}
		t.Run("AnInnoDBTableMadeEarlier", func(t *testing.T) {
			dsn := srv.NewDatabase(t, "engine")
			// As a migration of an earlier release did under a sql_mode
			// without NO_ENGINE_SUBSTITUTION.
			substituting := openDB(t, dsn+"?sql_mode=''")
			if _, err := substituting.Exec(`CREATE TABLE leadership_incarnation (
    server_id INT UNSIGNED NOT NULL PRIMARY KEY, incarnation VARBINARY(64) NOT NULL) ENGINE = MEMORY`); err != nil {
				t.Fatal(err)
			}
			if engine := incarnationEngine(t, dsn); engine != "InnoDB" {
				t.Fatalf("the substituting server made the table %s, want InnoDB", engine)
			}
			err := newStore(t, openDB(t, dsn), opts...).Migrate(context.Background())
			if err == nil || !strings.Contains(err.Error(), "InnoDB") || !strings.Contains(err.Error(), "ALTER TABLE leadership_incarnation ENGINE = MEMORY") ||
				!strings.Contains(err.Error(), "enforce_storage_engine") {
				t.Fatalf("Migrate with an InnoDB incarnation table = %v, want an error naming the engine, the setting and the ALTER TABLE", err)
			}
		})
		t.Run("AMemoryTableMadeBeforeTheSetting", func(t *testing.T) {
			dsn := srv.NewDatabase(t, "engine")
			cfg, err := driver.ParseDSN(dsn)
			if err != nil {
				t.Fatal(err)
			}
			// Root may unset the setting for its session (it needs SUPER).
			conn, err := srv.Root.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			for _, q := range []string{"SET SESSION enforce_storage_engine = NULL", "CREATE TABLE `" + cfg.DBName + "`.leadership_incarnation (" +
				"server_id INT UNSIGNED NOT NULL PRIMARY KEY, incarnation VARBINARY(64) NOT NULL) ENGINE = MEMORY"} {
				if _, err := conn.ExecContext(context.Background(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			s := newStore(t, openDB(t, dsn), opts...)
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatalf("Migrate with a MEMORY incarnation table, on a server enforcing InnoDB: %v", err)
			}
			if res := acquire(t, s, "f", "a", 0, time.Minute); !res.Acquired || res.Version != 1 {
				t.Fatalf("first acquisition = %+v, want version 1", res)
			}
			if engine := incarnationEngine(t, dsn); engine != "MEMORY" {
				t.Fatalf("leadership_incarnation is %s after Migrate, want MEMORY", engine)
			}
		})
	})
}
