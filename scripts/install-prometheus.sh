#!/usr/bin/env bash
# Installs promtool and the Prometheus server (Debian package "prometheus")
# for the tests of monitoring/prometheus, which start their own server on a
# loopback port and stop it. Idempotent; needs root.
#
# The package enables a system service (Prometheus on :9090) and recommends
# prometheus-node-exporter (:9100). Neither is wanted: recommends are not
# installed, a policy-rc.d that refuses every start is in place during the
# install (unless one already exists, as in Docker images), and the service
# is disabled (and stopped, if systemd started it anyway).
set -euo pipefail

log() { echo "install-prometheus: $*" >&2; }

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
	log "promtool and prometheus present: $(promtool --version 2>&1 | head -1)"
	exit 0
fi
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# installed by scripts/install-prometheus.sh during apt-get install\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	trap 'rm -f "$policy"' EXIT
fi
timeout 600 apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends prometheus >&2
if command -v systemctl >/dev/null 2>&1; then
	systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
log "installed: $(promtool --version 2>&1 | head -1)"
