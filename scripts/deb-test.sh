#!/usr/bin/env bash
# Checks the Debian package on this machine (needs root; changes the system while it runs):
# builds it from the debug binary (scripts/deb.sh --binary, no release build), installs it
# with dpkg -i, starts the unit's ExecStart as the unit's User with its StateDirectory as the
# postinst made it (systemd need not run), reads /healthz, stops it with SIGTERM, then
# purges the package and checks that nothing of it is left.
#
# The daemon listens on loopback only: like an administrator, the test edits the installed
# /etc/muster/muster.toml (HTTP on 127.0.0.1, a free port; every other face off) before it
# starts the daemon; the purge removes the edited file too.
#
#   scripts/deb-test.sh            about 1 minute once target/debug/muster is built
#   MUSTER_BIN=PATH scripts/deb-test.sh   package that binary instead of building one
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

fail() { echo "deb-test: FAILED: $*" >&2; exit 1; }
say() { echo "deb-test: $*"; }

[[ $(id -u) == 0 ]] || fail "needs root (dpkg -i)"
if dpkg -s muster >/dev/null 2>&1; then
    fail "a muster package is already installed; this test would remove it"
fi
getent passwd muster >/dev/null && fail "a user muster exists already"
[[ -e /var/lib/muster || -e /etc/muster ]] && fail "/var/lib/muster or /etc/muster exists already"

# MUSTER_BIN: a binary already built (scripts/test.sh passes the one `cargo test` built; a
# `cargo build -p muster` of its own would compile the crates again with other features).
bin=${MUSTER_BIN:-}
if [[ -z $bin ]]; then
    cargo build --locked -p muster >&2
    bin=target/debug/muster
fi
deb=$(scripts/deb.sh --binary "$bin" --compress none | tail -n1)
say "built $deb ($(du -h "$deb" | cut -f1))"

daemon=""
log=$(mktemp)
cleanup() {
    [[ -n $daemon ]] && kill "$daemon" 2>/dev/null || true
    rm -f "$log"
    dpkg --purge muster >/dev/null 2>&1 || true
}
trap cleanup EXIT

dpkg -i "$deb" >&2
dpkg -s muster | grep -q '^Status: install ok installed' || fail "not installed"

# What the package holds.
for f in /usr/bin/muster /usr/share/man/man1/muster.1.gz /usr/share/man/man1/muster-serve.1.gz \
    /usr/share/bash-completion/completions/muster /usr/share/zsh/vendor-completions/_muster \
    /usr/share/fish/vendor_completions.d/muster.fish /lib/systemd/system/muster.service \
    /etc/muster/muster.toml /usr/share/doc/muster/copyright; do
    dpkg -L muster | grep -qx "$f" || fail "the package lacks $f"
    [[ -f $f ]] || fail "$f not installed"
done
grep -qx /etc/muster/muster.toml /var/lib/dpkg/info/muster.conffiles || fail "config is no conffile"
zcat /usr/share/man/man1/muster.1.gz | grep -q '^\.TH muster 1' || fail "muster.1 is no manual page"
grep -q 'given-port-only' /usr/share/bash-completion/completions/muster || fail "bash completion"
/usr/bin/muster serve --config /etc/muster/muster.toml --print-config >/dev/null \
    || fail "the default configuration does not load"

# The unit's user, state directory and command, as installed.
unit=/lib/systemd/system/muster.service
key() { sed -n "s/^$1=//p" "$unit"; }
user=$(key User)
group=$(key Group)
state=/var/lib/$(key StateDirectory)
exec_start=$(key ExecStart)
umask_unit=$(key UMask)
[[ $user == muster && -n $group && -n $exec_start ]] || fail "unit: User=$user ExecStart=$exec_start"
getent passwd "$user" >/dev/null || fail "postinst made no user $user"
[[ $(stat -c '%U:%G %a' "$state") == "$user:$group 750" ]] \
    || fail "state directory: $(stat -c '%U:%G %a' "$state")"

# Loopback only: HTTP on a free port, the other faces off.
conf=/etc/muster/muster.toml
sed -i -e '/^\[listen\]/,/^\[/{s|^http = .*|http = "127.0.0.1:0"|' \
    -e 's/^\(gameagent\|gamespy_udp\|gamespy_tcp\|teeworlds07\|teeworlds06\|mgmt\|quake3\|valve\) = .*/\1 = "off"/}' \
    "$conf"

say "starting as $user: $exec_start"
read -r -a argv <<<"$exec_start"
(umask "$umask_unit" && cd / && exec setpriv --reuid="$user" --regid="$group" --init-groups \
    --no-new-privs -- "${argv[@]}") >"$log" 2>&1 &
daemon=$!
http=""
for _ in $(seq 1 100); do
    http=$(sed -n 's/^listening http tcp //p' "$log" | head -n1)
    [[ -n $http ]] && break
    kill -0 "$daemon" 2>/dev/null || { cat "$log" >&2; fail "the daemon exited"; }
    sleep 0.1
done
[[ -n $http ]] || { cat "$log" >&2; fail "no listening line"; }
[[ $http == 127.0.0.1:* ]] || fail "listens on $http, not loopback"
[[ $(grep -c '^listening' "$log") == 1 ]] || fail "faces other than http: $(grep '^listening' "$log")"
health=$(curl -fsS --max-time 5 "http://$http/healthz") || fail "GET /healthz"
say "GET http://$http/healthz: $health"
[[ $(ps -o user= -p "$daemon") == "$user" ]] || fail "runs as $(ps -o user= -p "$daemon")"
[[ $(find "$state" -mindepth 1 -maxdepth 1 -user "$user" | wc -l) -ge 1 ]] \
    || fail "nothing written to $state by $user"
kill -TERM "$daemon"
wait "$daemon" || fail "SIGTERM: exit code $?"
daemon=""

dpkg --purge muster >&2
dpkg -s muster >/dev/null 2>&1 && fail "still installed"
for f in /usr/bin/muster /etc/muster /var/lib/muster /lib/systemd/system/muster.service \
    /usr/share/man/man1/muster.1.gz /usr/share/bash-completion/completions/muster \
    /usr/share/doc/muster /var/lib/dpkg/info/muster.list; do
    [[ -e $f ]] && fail "$f left after purge"
done
getent passwd muster >/dev/null && fail "user muster left after purge"
getent group muster >/dev/null && fail "group muster left after purge"
rm -f "$deb"
say "ok: installed, served /healthz as $user from $state, purged without a trace"
