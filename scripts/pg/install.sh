#!/usr/bin/env bash
# Installs Debian's PostgreSQL server (initdb, pg_ctl) for the tests that need a real database, when it
# is missing. Idempotent: prints the bin directory and exits 0 when it is there already. No service is
# started or assumed: scripts/pg/cluster.sh runs a throwaway cluster of its own.
set -euo pipefail

find_bin() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        [[ -x $d/initdb && -x $d/pg_ctl ]] && { echo "$d"; return 0; }
    done
    command -v initdb >/dev/null && command -v pg_ctl >/dev/null && { dirname "$(command -v initdb)"; return 0; }
    return 1
}

if bin=$(find_bin); then
    echo "$bin"
    exit 0
fi
SUDO=()
if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null || { echo "pg/install: need root (or sudo) to apt-get install postgresql" >&2; exit 1; }
    SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
echo "pg/install: installing Debian's postgresql" >&2
"${SUDO[@]}" apt-get update -qq >&2 || { echo "pg/install: apt-get update failed" >&2; exit 1; }
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends postgresql >&2 \
    || { echo "pg/install: apt-get install postgresql failed" >&2; exit 1; }
bin=$(find_bin) || { echo "pg/install: postgresql installed but initdb/pg_ctl not found" >&2; exit 1; }
echo "$bin"
