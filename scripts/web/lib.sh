# Shared by scripts/web/e2e.sh and scripts/web/scale.sh (sourced, not run): prerequisites,
# the master under test, the emulated farms, cleanup.
#
# Environment read here:
#   MUSTER_BIN=PATH            a prebuilt muster binary (default: cargo build, target/debug/muster)
#   CHROMIUM=PATH              the browser (default /usr/bin/chromium)
#   MUSTER_REQUIRE_PEERS=1     a prerequisite that cannot be installed fails (exit 1) instead of
#                              skipping (exit 77); CI sets it
#   MUSTER_SKIP_PEERS=1        do not install anything; what is missing skips (or fails, above)

web_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
chromium=${CHROMIUM:-/usr/bin/chromium}
t_start=$SECONDS

step() { printf '==> [%3ss] %s\n' "$((SECONDS - t_start))" "$*"; }
die() { printf '%s: %s\n' "${web_name:-web}" "$*" >&2; exit 1; }
# A prerequisite is missing and cannot be installed: exit 77 (skip), or fail when required.
missing() {
    if [[ ${MUSTER_REQUIRE_PEERS:-0} == 1 ]]; then die "$* (MUSTER_REQUIRE_PEERS=1)"; fi
    printf '%s: SKIP: %s\n' "${web_name:-web}" "$*" >&2
    exit 77
}
as_root() {
    if [[ $(id -u) == 0 ]]; then "$@"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo "$@"
    else return 1; fi
}
apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 ||
        { as_root apt-get update -qq >/dev/null 2>&1 &&
            as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
}

# Debian chromium, node, playwright-core at the version pinned in scripts/web/package.json.
web_prereqs() {
    local install=1
    [[ ${MUSTER_SKIP_PEERS:-0} == 1 ]] && install=0
    if [[ ! -x $chromium ]]; then
        [[ $install == 1 ]] || missing "no chromium at $chromium (MUSTER_SKIP_PEERS=1)"
        step "installing Debian chromium"
        apt_install chromium || missing "chromium missing at $chromium and apt-get install chromium failed (needs root or sudo)"
        [[ -x $chromium ]] || missing "chromium installed but $chromium is missing"
    fi
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        [[ $install == 1 ]] || missing "node/npm missing (MUSTER_SKIP_PEERS=1)"
        step "installing Debian nodejs and npm"
        apt_install nodejs npm || missing "node/npm missing and apt-get install nodejs npm failed"
    fi
    local dir=$web_root/scripts/web want have=""
    want=$(sed -n 's/.*"playwright-core": *"\([^"]*\)".*/\1/p' "$dir/package.json" | head -n 1)
    [[ -n $want ]] || die "no playwright-core pin in $dir/package.json"
    if [[ -f $dir/node_modules/playwright-core/package.json ]]; then
        have=$(node -p 'require(process.argv[1]).version' "$dir/node_modules/playwright-core/package.json" 2>/dev/null || true)
    fi
    if [[ $have != "$want" ]]; then
        [[ $install == 1 ]] || missing "playwright-core $want not installed in $dir/node_modules (MUSTER_SKIP_PEERS=1)"
        step "installing playwright-core $want (npm ci)"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
            missing "npm ci (playwright-core $want) failed in $dir"
    fi
}

# $muster: the binary under test.
web_binary() {
    if [[ -n ${MUSTER_BIN:-} ]]; then
        muster=$MUSTER_BIN
        [[ -x $muster ]] || die "MUSTER_BIN=$muster is not an executable"
    else
        step "building muster"
        (cd "$web_root" && cargo build -q -p muster --bin muster) || die "cargo build failed"
        muster=$web_root/target/debug/muster
    fi
}

# Everything a browser run needs before its master starts: prerequisites, $muster, $work.
web_setup() {
    web_prereqs
    web_binary
    web_workdir
}

# $work: a temporary directory; every pid in $pids is stopped on exit, the logs shown on failure.
web_workdir() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/muster-${web_name:-web}.XXXXXX")
    pids=()
    trap web_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}
web_cleanup() {
    local rc=$? p
    trap - EXIT
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    # Emulated servers say goodbye to the master on SIGTERM; give them 5 s, then SIGKILL.
    for ((i = 0; i < 50; i++)); do
        local alive=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [[ $alive == 0 ]] && break
        sleep 0.1
    done
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [[ $rc != 0 && $rc != 77 ]]; then
        # The last lines of each log that say more than `listening …`.
        for f in "$work"/*.log; do
            [[ -f $f ]] && grep -qv '^listening ' "$f" && { echo "--- $f"; grep -v '^listening ' "$f" | tail -n 20; }
        done
    fi
    rm -rf "$work"
    exit "$rc"
}

# Waits up to $2 seconds for a line matching $3 in file $1; prints the last match.
wait_line() {
    local file=$1 secs=$2 pattern=$3 i
    for ((i = 0; i < secs * 10; i++)); do
        if grep -q -- "$pattern" "$file" 2>/dev/null; then grep -- "$pattern" "$file" | tail -n 1; return 0; fi
        sleep 0.1
    done
    return 1
}

# Starts `muster serve` on loopback with the per-source caps on registrations lifted: all
# emulated servers share a few loopback sources. The HTTP list API keeps its default bucket:
# the page must live with it. $1: extra TOML appended to the config. Sets $base (the HTTP face),
# $gamespy and $gameagent (heartbeat addresses) and $mgmt (the management face).
start_master() {
    cat >"$work/master.toml" <<EOF
data_dir = "$work/data"
[listen]
gameagent = "127.0.0.1:0"
gamespy_udp = "127.0.0.1:0"
gamespy_tcp = "off"
teeworlds07 = "off"
teeworlds06 = "off"
quake3 = "off"
valve = "off"
http = "127.0.0.1:0"
mgmt = "127.0.0.1:0"
[limits]
heartbeat_burst = 1000000
heartbeat_refill = "1us"
challenge_burst = 1000000
challenge_refill = "1us"
list_bytes_burst = 1099511627776
list_bytes_per_sec = 1099511627776
servers_per_source = 1000000
pending_per_ip = 1000000
pending_per_prefix = 1000000
egress_bytes_per_sec = 1099511627776
tcp_max_per_source = 1024
# Every DDNet server POSTs from 127.0.0.1, each with two streams (0.6, 0.7) that each need a
# UDP challenge: with the defaults (16 challenges, then one a second) 60 servers take minutes.
ddnet_register_burst = 1000000
ddnet_register_refill = "1us"
ddnet_challenge_burst = 1000000
ddnet_challenge_refill = "1us"
${1:-}
EOF
    "$muster" serve --config "$work/master.toml" >"$work/serve.log" 2>&1 &
    pids+=($!)
    local http
    http=$(wait_line "$work/serve.log" 30 "^listening http tcp " | awk '{print $4}') || die "serve did not start"
    gamespy=$(wait_line "$work/serve.log" 5 "^listening gamespy-udp udp " | awk '{print $4}') || die "no gamespy face"
    gameagent=$(wait_line "$work/serve.log" 5 "^listening gameagent udp " | awk '{print $4}') || die "no gameagent face"
    mgmt=$(wait_line "$work/serve.log" 5 "^listening mgmt tcp " | awk '{print $4}') || die "no mgmt face"
    base="http://$http"
    echo "    master at $base, heartbeats: gamespy $gamespy, gameagent $gameagent; management $mgmt"
}

# Total of a list query ($1: extra query string, e.g. "&non_empty=1"); empty on failure.
listed() {
    curl -fsS --max-time 10 "$base/api/v1/servers?per_page=1$1" 2>/dev/null |
        sed -n 's/.*"total":\([0-9]*\).*/\1/p' || true
}

# Starts one `muster emulate` for farm file $1 (log next to it).
start_farm() {
    "$muster" emulate --config "$1" >"${1%.toml}.log" 2>&1 &
    pids+=($!)
}

# GameSpy farms: $1 servers, eight per loopback address 127.0.1.K (the GameSpy face keeps at
# most 8 challenges pending per IP, as it should), game ports from $2, player counts $3. The
# farms start 50 ms apart, so that their first heartbeats do not arrive as one burst.
gamespy_farms() {
    local count=$1 lo=$2 players=$3 left=$1 k n
    for ((k = 1; left > 0; k++)); do
        n=$((left < 8 ? left : 8)); left=$((left - n))
        cat >"$work/farm-gs$k.toml" <<EOF
seed = $k
bind = "127.0.1.$k"
[[generate]]
protocol = "gamespy1"
count = $n
ports = "$lo-$((lo + 99))"
players = "$players"
max_players = 16
charset = "latin1"
style = "ut99"
masters = ["gamespy:$gamespy"]
EOF
        start_farm "$work/farm-gs$k.toml"
        sleep 0.05
    done
}

# The DDNet farm: $1 Teeworlds servers on 127.0.0.1 (the master challenges the HTTP peer's
# address) registering over DDNet HTTP, in the $4 game ports from $2: one search target named
# $3 with the players `needle-player` and `second` on the last port, the others before it.
ddnet_farm() {
    local count=$1 lo=$2 target=$3 span=$4
    cat >"$work/farm-ddnet.toml" <<EOF
seed = 6
bind = "127.0.0.1"
[[server]]
protocol = "teeworlds"
port = $((lo + span - 1))
name = "$target"
map = "ctf5"
max_players = 16
players = [{ name = "needle-player", score = 42 }, { name = "second", score = 3 }]
masters = ["ddnet:$base/ddnet/15/register"]
EOF
    if ((count > 1)); then cat >>"$work/farm-ddnet.toml" <<EOF
[[generate]]
protocol = "teeworlds"
count = $((count - 1))
ports = "$lo-$((lo + span - 2))"
players = "0-16"
max_players = 16
charset = "utf8"
masters = ["ddnet:$base/ddnet/15/register"]
EOF
    fi
    start_farm "$work/farm-ddnet.toml"
}
