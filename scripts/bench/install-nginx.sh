#!/usr/bin/env bash
# Installs Debian's nginx for `muster-bench master --vs-mastersrv`, which runs it on loopback
# (its own config in a temporary directory) to serve DDNet mastersrv's servers.json the way a
# production DDNet master deployment does. Only the binary is used: the Debian service is
# stopped and disabled so nothing listens on port 80.
set -euo pipefail

if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
    echo "nginx present: $(/usr/sbin/nginx -v 2>&1)"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-nginx.sh: needs root (apt-get install nginx)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Keep the package's service from starting on port 80 during the install.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod +x "$policy"
    created_policy=1
fi
cleanup() { if [ "$created_policy" = 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT
apt-get update -qq
apt-get install -y -qq nginx >/dev/null
if command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now nginx >/dev/null 2>&1 || true
fi
echo "nginx installed: $(/usr/sbin/nginx -v 2>&1)"
