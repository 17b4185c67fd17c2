#!/usr/bin/env bash
# End-to-end test of the server browser (issue 6) in a real headless Chromium.
#
#   scripts/web/e2e.sh             build muster, start `muster serve` and a farm of emulated
#                                  servers on loopback, drive Chromium through the page
#
# Installs what it needs when missing: Debian `chromium` (apt-get, needs root) and
# playwright-core (pinned in package.json / package-lock.json, `npm ci` into
# scripts/web/node_modules). Saves a screenshot to docs/browser.png.
#
# Environment:
#   MUSTER_WEB_GAMESPY=N       emulated GameSpy v1 servers (default 160)
#   MUSTER_WEB_DDNET=N         emulated Teeworlds servers registered over DDNet HTTP (default 60)
#   MUSTER_WEB_SCREENSHOT=PATH where the screenshot goes (default docs/browser.png)
#   MUSTER_BIN=PATH            a prebuilt muster binary (default: cargo build, target/debug/muster)
#   CHROMIUM=PATH              the browser (default /usr/bin/chromium)
#
# Exits non-zero on any failure; every process it started is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

gs_count=${MUSTER_WEB_GAMESPY:-160}
tw_count=${MUSTER_WEB_DDNET:-60}
screenshot=${MUSTER_WEB_SCREENSHOT:-$root/docs/browser.png}
chromium=${CHROMIUM:-/usr/bin/chromium}

step() { printf '==> %s\n' "$*"; }
die() { printf 'e2e: %s\n' "$*" >&2; exit 1; }

if [[ ! -x $chromium ]]; then
    step "installing Debian chromium"
    if [[ $(id -u) != 0 ]]; then die "chromium missing at $chromium and not root to apt-get it"; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null ||
        { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null; } ||
        die "could not install chromium"
fi
command -v node >/dev/null || die "node is required"
if [[ ! -f scripts/web/node_modules/playwright-core/package.json ]]; then
    step "installing playwright-core (npm ci)"
    (cd scripts/web && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci failed"
fi

if [[ -n ${MUSTER_BIN:-} ]]; then
    muster=$MUSTER_BIN
else
    step "building muster"
    cargo build -q -p muster --bin muster
    muster=$root/target/debug/muster
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/muster-web-e2e.XXXXXX")
pids=()
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [[ $rc != 0 ]]; then
        for f in "$work"/*.log; do [[ -f $f ]] && { echo "--- $f"; tail -n 20 "$f"; }; done
    fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT INT TERM

# Waits up to $2 seconds for a line matching $3 in file $1; prints the last match.
wait_line() {
    local file=$1 secs=$2 pattern=$3 i
    for ((i = 0; i < secs * 10; i++)); do
        if grep -q -- "$pattern" "$file" 2>/dev/null; then grep -- "$pattern" "$file" | tail -n 1; return 0; fi
        sleep 0.1
    done
    return 1
}

step "starting muster serve"
cat >"$work/master.toml" <<EOF
data_dir = "$work/data"
[listen]
gameagent = "off"
gamespy_udp = "127.0.0.1:0"
gamespy_tcp = "off"
teeworlds07 = "off"
teeworlds06 = "off"
http = "127.0.0.1:0"
mgmt = "off"
[limits]
# Every emulated server shares the source 127.0.0.1; lift the per-source caps for the farm.
heartbeat_burst = 100000
heartbeat_refill = "1ms"
challenge_burst = 1000
challenge_refill = "1ms"
list_burst = 100000
list_refill = "1ms"
servers_per_source = 100000
max_pending = 100000
tcp_max_per_source = 1024
[poller]
interval = "5s"
max_per_second = 1000
# Polls of a loaded 2-core CI box can time out; the test is about the page, not de-listing.
delist_after_failures = 1000
EOF
"$muster" serve --config "$work/master.toml" >"$work/serve.log" 2>&1 &
pids+=($!)
http=$(wait_line "$work/serve.log" 20 "^listening http tcp " | awk '{print $4}') || die "serve did not start"
gamespy=$(wait_line "$work/serve.log" 5 "^listening gamespy-udp udp " | awk '{print $4}') || die "no gamespy face"
base="http://$http"
echo "    master at $base, gamespy heartbeats to $gamespy"

# The master's faces limit challenges per source address (GameSpy: 8 outstanding per IP), as
# they should; so the GameSpy servers are spread over loopback addresses 127.0.1.K, eight per
# address. DDNet servers must register from 127.0.0.1 (the master challenges the HTTP peer).
# Port blocks sit below the ephemeral range, shifted per run so parallel runs rarely collide.
shift_by=$(( (RANDOM % 8) * 1000 ))
gs_lo=$((20000 + shift_by)); tw_lo=$((20500 + shift_by))
gs_farms=$(( (gs_count + 7) / 8 ))
step "starting $((gs_count + tw_count)) emulated servers ($gs_count gamespy1 in $gs_farms farms, $tw_count ddnet)"
cat >"$work/farm-ddnet.toml" <<EOF
seed = 6
bind = "127.0.0.1"
[[server]]
protocol = "teeworlds"
port = $((tw_lo + 499))
name = "Muster e2e target"
map = "ctf5"
max_players = 16
players = [{ name = "needle-player", score = 42 }, { name = "second", score = 3 }]
masters = ["ddnet:$base/ddnet/15/register"]
[[generate]]
protocol = "teeworlds"
count = $((tw_count - 1))
ports = "$tw_lo-$((tw_lo + 498))"
players = "0-16"
max_players = 16
charset = "utf8"
masters = ["ddnet:$base/ddnet/15/register"]
EOF
"$muster" emulate --config "$work/farm-ddnet.toml" >"$work/emulate-ddnet.log" 2>&1 &
pids+=($!)
left=$gs_count
for ((k = 1; k <= gs_farms; k++)); do
    n=$(( left < 8 ? left : 8 )); left=$((left - n))
    cat >"$work/farm-gs$k.toml" <<EOF
seed = $k
bind = "127.0.1.$k"
[[generate]]
protocol = "gamespy1"
count = $n
ports = "$gs_lo-$((gs_lo + 99))"
players = "0-16"
max_players = 16
charset = "latin1"
style = "ut99"
masters = ["gamespy:$gamespy"]
EOF
    "$muster" emulate --config "$work/farm-gs$k.toml" >"$work/emulate-gs$k.log" 2>&1 &
    pids+=($!)
done

step "waiting until the master lists them and has polled them"
want=$((gs_count + tw_count))
listed() { curl -fsS "$base/api/v1/servers?per_page=1$1" 2>/dev/null | sed -n 's/.*"total":\([0-9]*\).*/\1/p' || true; }
deadline=$((SECONDS + 150))
while ((SECONDS < deadline)); do
    all=$(listed ""); busy=$(listed "&non_empty=1"); target=$(listed "&q=needle-player")
    if [[ ${all:-0} -ge $want && ${busy:-0} -gt 0 && ${target:-0} -ge 1 ]]; then break; fi
    sleep 1
done
# A registration can lose a race with its port on a busy box: 90 % and the target server do.
if [[ ${all:-0} -lt $((want * 9 / 10)) || ${target:-0} -lt 1 || ${busy:-0} -lt 1 ]]; then
    curl -sS "$base/healthz" >&2 || true
    die "only ${all:-0} of $want servers listed (target: ${target:-0}) after 150 s"
fi
echo "    $all of $want listed, $busy with players"

step "driving chromium"
mkdir -p "$(dirname "$screenshot")"
MUSTER_URL=$base MUSTER_EXPECT=$all MUSTER_SCREENSHOT=$screenshot CHROMIUM=$chromium \
    node scripts/web/e2e.mjs
step "ok"
