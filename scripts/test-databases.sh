#!/usr/bin/env bash
# Installs (Debian packages, when missing) and starts PostgreSQL, MariaDB and
# a PgBouncer in transaction pooling mode in front of that PostgreSQL, on
# loopback, for the integration tests; creates the database and users, and
# prints the DSNs as shell exports:
#
#   eval "$(scripts/test-databases.sh)"
#   go test -race ./...
#
# Idempotent for the servers: ones already running are left alone. The test
# databases are scratch and start empty on every run: `leadership` is
# dropped and created again on both servers. A database that lived through
# an unclean shutdown (a machine image taken while the servers ran, a power
# cut) has a failover guard that rightly holds new terms for a lease and
# numbers them from the clock (docs/failover.md); the tests assume a schema
# with no such history. Needs root (apt-get, starting servers). Progress goes to stderr;
# only the export lines go to stdout.
#
#   scripts/test-databases.sh --stop    stops the servers
set -euo pipefail

log() { echo "test-databases: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# wait_for TIMEOUT_SECONDS DESCRIPTION COMMAND...: retries COMMAND until it
# succeeds or the timeout passes.
wait_for() {
	local timeout=$1 what=$2
	shift 2
	local deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			return 1
		fi
		sleep 0.25
	done
}

# PgBouncer's files: configuration, password file, pid file and log.
PGB_DIR=/tmp/leadership-pgbouncer
PGB_PORT=6433

pg_version() { ls /etc/postgresql 2>/dev/null | sort -V | tail -1; }

stop_all() {
	local v
	v=$(pg_version)
	if [ -n "$v" ]; then
		pg_ctlcluster "$v" main stop >&2 2>&1 || true
	fi
	if [ -f "$PGB_DIR/pgbouncer.pid" ]; then
		kill "$(cat "$PGB_DIR/pgbouncer.pid")" 2>/dev/null || true
		rm -f "$PGB_DIR/pgbouncer.pid"
	fi
	if [ -f /tmp/mariadbd.pid ]; then
		start-stop-daemon --stop --pidfile /tmp/mariadbd.pid --retry 30 >&2 2>&1 || true
		rm -f /tmp/mariadbd.pid
	fi
	log "stopped"
}

if [ "${1:-}" = "--stop" ]; then
	stop_all
	exit 0
fi

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts servers), or export LEADERSHIP_TEST_POSTGRES_DSN, LEADERSHIP_TEST_MYSQL_DSN and LEADERSHIP_TEST_PGBOUNCER_DSN for servers you run yourself"

# --- packages ---------------------------------------------------------------
missing=()
command -v pg_ctlcluster >/dev/null 2>&1 && [ -n "$(pg_version)" ] || missing+=(postgresql)
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
[ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || missing+=(mariadb-client)
[ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v sqlite3 >/dev/null 2>&1 || missing+=(sqlite3)   # the fenced shell job of docs/fencing/sqlite3.sh
if ((${#missing[@]})); then
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	timeout 600 apt-get update -qq >&2 || die "apt-get update failed"
	timeout 900 apt-get install -y -qq "${missing[@]}" >&2 || die "apt-get install ${missing[*]} failed"
fi

# --- PostgreSQL -------------------------------------------------------------
v=$(pg_version)
[ -n "$v" ] || die "no PostgreSQL cluster in /etc/postgresql after installing"
if ! pg_lsclusters -h 2>/dev/null | awk -v v="$v" '$1==v && $2=="main" {print $4}' | grep -q online; then
	log "starting PostgreSQL $v"
	pg_ctlcluster "$v" main start >&2 || die "pg_ctlcluster $v main start failed: $(tail -5 /var/log/postgresql/postgresql-"$v"-main.log 2>/dev/null)"
fi
wait_for 60 "PostgreSQL" su postgres -c "psql -Atc 'select 1'" ||
	die "PostgreSQL did not accept connections within 60 s: $(tail -5 /var/log/postgresql/postgresql-"$v"-main.log 2>/dev/null)"
psql_su() { su postgres -c "psql -v ON_ERROR_STOP=1 -Atq $*" >&2; }
psql_su "-c \"ALTER USER postgres PASSWORD 'postgres'\""
psql_su "-c 'DROP DATABASE IF EXISTS leadership WITH (FORCE)'" "-c 'CREATE DATABASE leadership'"
if [ "$(su postgres -c "psql -Atc \"SELECT 1 FROM pg_roles WHERE rolname='lead_noddl'\"")" != 1 ]; then
	psql_su "-c \"CREATE ROLE lead_noddl LOGIN PASSWORD 'lead'\""
fi
psql_su "-d leadership -c 'REVOKE CREATE ON SCHEMA public FROM PUBLIC' -c 'GRANT CONNECT ON DATABASE leadership TO lead_noddl' -c 'GRANT USAGE ON SCHEMA public TO lead_noddl'"
wait_for 30 "PostgreSQL over TCP" env PGPASSWORD=postgres psql -h 127.0.0.1 -U postgres -d leadership -Atc 'select 1' ||
	die "PostgreSQL does not accept password logins on 127.0.0.1:5432"
log "PostgreSQL $v ready on 127.0.0.1:5432"

# --- PgBouncer ---------------------------------------------------------------
# Transaction pooling in front of the PostgreSQL above: what a pooled
# production database looks like (LISTEN receives nothing, session state
# does not last, Debian's 1.18 has no prepared statements in this mode).
# Two databases: leadership (20 server connections) and leadership_single
# (one server connection, so that every client shares one server session).
if ! { [ -f "$PGB_DIR/pgbouncer.pid" ] && kill -0 "$(cat "$PGB_DIR/pgbouncer.pid")" 2>/dev/null; }; then
	install -d -o postgres -g postgres "$PGB_DIR"
	cat >"$PGB_DIR/pgbouncer.ini" <<INI
[databases]
leadership = host=127.0.0.1 port=5432 dbname=leadership
leadership_single = host=127.0.0.1 port=5432 dbname=leadership pool_size=1

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGB_PORT
unix_socket_dir =
pool_mode = transaction
auth_type = scram-sha-256
auth_file = $PGB_DIR/userlist.txt
default_pool_size = 20
max_client_conn = 2000
pidfile = $PGB_DIR/pgbouncer.pid
logfile = $PGB_DIR/pgbouncer.log
INI
	echo '"postgres" "postgres"' >"$PGB_DIR/userlist.txt"
	chown postgres:postgres "$PGB_DIR/pgbouncer.ini" "$PGB_DIR/userlist.txt"
	chmod 600 "$PGB_DIR/userlist.txt"
	log "starting PgBouncer on 127.0.0.1:$PGB_PORT"
	su postgres -s /bin/sh -c "/usr/sbin/pgbouncer -d $PGB_DIR/pgbouncer.ini" >&2 ||
		die "could not start pgbouncer: $(tail -5 "$PGB_DIR/pgbouncer.log" 2>/dev/null)"
fi
wait_for 30 "PgBouncer" env PGPASSWORD=postgres psql -h 127.0.0.1 -p "$PGB_PORT" -U postgres -d leadership -Atc 'select 1' ||
	die "PgBouncer does not pass logins to PostgreSQL on 127.0.0.1:$PGB_PORT: $(tail -5 "$PGB_DIR/pgbouncer.log" 2>/dev/null)"
log "PgBouncer $(/usr/sbin/pgbouncer --version | head -1 | awk '{print $2}') (transaction pooling) ready on 127.0.0.1:$PGB_PORT"

# --- MariaDB ----------------------------------------------------------------
if ! mariadb-admin ping >/dev/null 2>&1; then
	if [ ! -d /var/lib/mysql/mysql ]; then
		log "initialising the MariaDB data directory"
		mariadb-install-db --user=mysql --datadir=/var/lib/mysql >&2 || die "mariadb-install-db failed"
	fi
	install -d -o mysql -g root /run/mysqld
	log "starting MariaDB"
	start-stop-daemon --start --background --make-pidfile --pidfile /tmp/mariadbd.pid \
		--chuid mysql --exec /usr/sbin/mariadbd -- --bind-address=127.0.0.1 --port=3306 \
		--log-error=/tmp/mariadbd.err >&2 || die "could not start mariadbd"
	wait_for 60 "MariaDB" mariadb-admin ping ||
		die "MariaDB did not answer within 60 s: $(tail -20 /tmp/mariadbd.err 2>/dev/null)"
fi
mariadb -e "
DROP DATABASE IF EXISTS leadership;
CREATE DATABASE leadership;
CREATE USER IF NOT EXISTS 'lead'@'127.0.0.1' IDENTIFIED BY 'lead';
GRANT ALL ON leadership.* TO 'lead'@'127.0.0.1';
GRANT ALL ON \`leadership_%\`.* TO 'lead'@'127.0.0.1' WITH GRANT OPTION;
-- the tests create users lacking one grant each (cmd/leadership's grants_test.go)
GRANT CREATE USER ON *.* TO 'lead'@'127.0.0.1';
CREATE USER IF NOT EXISTS 'lead_ro'@'127.0.0.1' IDENTIFIED BY 'lead';
GRANT SELECT ON leadership.* TO 'lead_ro'@'127.0.0.1';
" >&2 || die "could not create the MariaDB database and users"
wait_for 30 "MariaDB over TCP" mariadb -h 127.0.0.1 -P 3306 -ulead -plead leadership -e 'select 1' ||
	die "MariaDB does not accept the user lead on 127.0.0.1:3306"
log "MariaDB $(mariadb -N -e 'select version()') ready on 127.0.0.1:3306"

echo "export LEADERSHIP_TEST_POSTGRES_DSN='postgres://postgres:postgres@127.0.0.1:5432/leadership?sslmode=disable'"
echo "export LEADERSHIP_TEST_MYSQL_DSN='lead:lead@tcp(127.0.0.1:3306)/leadership'"
echo "export LEADERSHIP_TEST_PGBOUNCER_DSN='postgres://postgres:postgres@127.0.0.1:$PGB_PORT/leadership?sslmode=disable'"
