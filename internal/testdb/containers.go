package testdb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// Images used when no DSN is given and a Docker engine answers; override
// them with LEADERSHIP_TEST_POSTGRES_IMAGE and LEADERSHIP_TEST_MYSQL_IMAGE
// (for example mariadb:11 — the mysql module speaks to both).
const (
	DefaultPostgresImage = "postgres:16-alpine"
	DefaultMySQLImage    = "mysql:8.4"
)

// Postgres returns a PostgreSQL DSN: LEADERSHIP_TEST_POSTGRES_DSN, else a
// container of its own for this test, else it skips or fails t (see
// [Unavailable]).
func Postgres(t testing.TB) string {
	t.Helper()
	if dsn := os.Getenv(EnvPostgres); dsn != "" {
		return dsn
	}
	if err := dockerHealthy(); err != nil {
		Unavailable(t, "PostgreSQL", EnvPostgres, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The same roles as scripts/test-databases.sh creates.
	init := writeScript(t, "roles.sql", `CREATE ROLE lead_noddl LOGIN PASSWORD 'lead';
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO lead_noddl;`)
	ctr, err := tcpostgres.Run(ctx, image("LEADERSHIP_TEST_POSTGRES_IMAGE", DefaultPostgresImage),
		tcpostgres.WithDatabase("leadership"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		tcpostgres.WithInitScripts(init), tcpostgres.BasicWaitStrategies())
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("start a PostgreSQL container: %v", err)
	}
	dsn, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		t.Fatalf("PostgreSQL container address: %v", err)
	}
	return dsn
}

// MySQL returns a go-sql-driver DSN: LEADERSHIP_TEST_MYSQL_DSN, else a
// container of its own for this test, else it skips or fails t.
func MySQL(t testing.TB) string {
	t.Helper()
	if dsn := os.Getenv(EnvMySQL); dsn != "" {
		return dsn
	}
	if err := dockerHealthy(); err != nil {
		Unavailable(t, "MySQL/MariaDB", EnvMySQL, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The same users as scripts/test-databases.sh creates; tests create
	// databases named leadership_*.
	init := writeScript(t, "users.sql", "CREATE USER 'lead_ro'@'%' IDENTIFIED BY 'lead';\n"+
		"GRANT SELECT ON leadership.* TO 'lead_ro'@'%';\n"+
		"GRANT ALL ON `leadership_%`.* TO 'lead'@'%';\n")
	ctr, err := tcmysql.Run(ctx, image("LEADERSHIP_TEST_MYSQL_IMAGE", DefaultMySQLImage),
		tcmysql.WithDatabase("leadership"), tcmysql.WithUsername("lead"), tcmysql.WithPassword("lead"),
		tcmysql.WithScripts(init))
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("start a MySQL container: %v", err)
	}
	dsn, err := ctr.ConnectionString(ctx)
	if err != nil {
		t.Fatalf("MySQL container address: %v", err)
	}
	return dsn
}

// writeScript writes an initialisation script for a container.
func writeScript(t testing.TB, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
	return path
}

func image(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// dockerHealthy reports why testcontainers-go cannot run, or nil.
func dockerHealthy() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("no Docker engine: %v", r)
		}
	}()
	provider, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return fmt.Errorf("no Docker engine: %w", err)
	}
	defer provider.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := provider.Health(ctx); err != nil {
		return fmt.Errorf("no Docker engine: %w", err)
	}
	return nil
}
