package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"
	"github.com/testcontainers/testcontainers-go"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Images used when no DSN is given and a Docker engine answers; override
// them with LEADERSHIP_TEST_POSTGRES_IMAGE and LEADERSHIP_TEST_MYSQL_IMAGE.
// The MySQL one may be a MySQL 8 or a MariaDB image (mariadb:10.11,
// mariadb:11): both official images take the same MYSQL_* variables and
// init scripts, and the wait for a login (mysqlLogin) is right for both.
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
		"GRANT ALL ON `leadership_%`.* TO 'lead'@'%' WITH GRANT OPTION;\n"+
		"GRANT CREATE USER ON *.* TO 'lead'@'%';\n")
	ctr, err := tcmysql.Run(ctx, image("LEADERSHIP_TEST_MYSQL_IMAGE", DefaultMySQLImage),
		tcmysql.WithDatabase("leadership"), tcmysql.WithUsername("lead"), tcmysql.WithPassword("lead"),
		tcmysql.WithScripts(init),
		// replaces the module's wait for MySQL's own log line, which
		// MariaDB never prints
		testcontainers.WithWaitStrategyAndDeadline(2*time.Minute,
			&mysqlLogin{user: "lead", password: "lead", database: "leadership"}))
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

// mysqlLogin is a wait strategy that is right for the official MySQL 8 and
// MariaDB images alike: it waits until user can log in to database over
// the container's mapped TCP port. Both images' docker-entrypoint.sh first
// start a temporary server with --skip-networking, create the users and
// database and run /docker-entrypoint-initdb.d there, stop it, and only
// then start the real server. So a TCP login can reach only the real
// server, after the init scripts ran. Log lines cannot say as much for
// both: each server logs "ready for connections" twice (port 0, then
// 3306), and what follows the port differs ("MySQL Community Server" or
// MariaDB's version comment). Use it as a pointer: testcontainers-go's
// MultiStrategy.String asks reflect whether each strategy is nil.
type mysqlLogin struct{ user, password, database string }

func (w *mysqlLogin) String() string {
	return fmt.Sprintf("MySQL login as %s to %s over TCP", w.user, w.database)
}

// WaitUntilReady tries to log in every 250 ms until it succeeds, ctx ends
// or the container stops, and then says what the last attempt met.
func (w *mysqlLogin) WaitUntilReady(ctx context.Context, target wait.StrategyTarget) error {
	var last error
	for {
		if last = w.login(ctx, target); last == nil {
			return nil
		}
		if state, err := target.State(ctx); err == nil && !state.Running {
			return fmt.Errorf("wait for %s: the container stopped (%s, exit code %d); last attempt: %w", w, state.Status, state.ExitCode, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w; last attempt: %w", w, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (w *mysqlLogin) login(ctx context.Context, target wait.StrategyTarget) error {
	host, err := target.Host(ctx)
	if err != nil {
		return err
	}
	port, err := target.MappedPort(ctx, "3306/tcp")
	if err != nil {
		return err
	}
	cfg := driver.NewConfig()
	cfg.User, cfg.Passwd, cfg.DBName = w.user, w.password, w.database
	cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(host, port.Port())
	cfg.Timeout = 5 * time.Second
	// Docker's proxy accepts the connection and closes it while nothing
	// listens in the container; the driver would log each such attempt.
	cfg.Logger = &driver.NopLogger{}
	connector, err := driver.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	return db.PingContext(ctx)
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
