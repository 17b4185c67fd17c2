#!/usr/bin/env bash
# End-to-end test of the server browser in a real headless Chromium.
#
#   scripts/web/e2e.sh             build muster, start `muster serve` and a farm of emulated
#                                  servers on loopback, drive Chromium through the page
#
# Installs what it needs when missing (scripts/web/lib.sh): Debian `chromium` and `nodejs`/`npm`
# (apt-get, needs root or sudo) and playwright-core (pinned in package.json / package-lock.json,
# `npm ci` into scripts/web/node_modules). Saves screenshots to docs/screenshots/.
#
# First the page with no server listed (it explains how servers register, per bound face),
# then with the farm: the list, filters, sort, search, the URL, favourites, copying, the
# detail view, live additions, changes and removals through the management face, regions.
#
# Environment:
#   MUSTER_WEB_GAMESPY=N       emulated GameSpy v1 servers (default 160, 8 per 127.0.1.K)
#   MUSTER_WEB_GAMEAGENT=N     emulated GameAgent servers (default 40)
#   MUSTER_WEB_DDNET=N         emulated Teeworlds servers registered over DDNet HTTP (default 60)
#   MUSTER_WEB_SCREENSHOTS=DIR where the screenshots go (default docs/screenshots; "" for none;
#                              MUSTER_WEB_SCREENSHOT is the older name, still read)
#   MUSTER_BIN, CHROMIUM, MUSTER_REQUIRE_PEERS, MUSTER_SKIP_PEERS: see scripts/web/lib.sh
#
# Exit status: 0 passed; 77 skipped (a prerequisite is missing and cannot be installed, and
# MUSTER_REQUIRE_PEERS is not 1); anything else failed. Every process it started is stopped on
# exit; every wait is bounded.
set -euo pipefail
web_name=e2e
source "$(dirname "$0")/lib.sh"
cd "$web_root"

gs_count=${MUSTER_WEB_GAMESPY:-160}
ga_count=${MUSTER_WEB_GAMEAGENT:-40}
tw_count=${MUSTER_WEB_DDNET:-60}
shots=${MUSTER_WEB_SCREENSHOTS-${MUSTER_WEB_SCREENSHOT-$web_root/docs/screenshots}}
((tw_count >= 1)) || die "MUSTER_WEB_DDNET must be at least 1 (the target server is a DDNet one)"

web_setup

# Locations of the loopback addresses in use, so that the page has regions to show and filter.
printf '%s\n' network,location 127.0.1.0/28,eu:de 127.0.1.16/28,eu:fr 127.0.0.1,na:us \
    127.0.5.0/24,as:jp >"$work/locations.csv"

step "starting muster serve"
start_master "
[poller]
interval = \"5s\"
max_per_second = 1000
# Polls on a loaded 2-core CI box can time out; the test is about the page, not de-listing.
delist_after_failures = 1000
[ddnet]
locations = \"$work/locations.csv\""
[[ -n $shots ]] && mkdir -p "$shots"
export MUSTER_URL=$base MUSTER_MGMT=$mgmt MUSTER_SCREENSHOTS=$shots CHROMIUM=$chromium

step "driving chromium: the empty page"
MUSTER_PHASE=empty node scripts/web/e2e.mjs

# Port blocks sit below the ephemeral range (32768+), shifted per run so that parallel runs
# rarely collide: GameSpy on 127.0.1.K, DDNet and GameAgent on 127.0.0.1 (DDNet servers must
# register from 127.0.0.1: the master challenges the HTTP peer's address).
shift_by=$(((RANDOM % 8) * 1000))
gs_lo=$((20000 + shift_by)) tw_lo=$((20100 + shift_by)) ga_lo=$((20600 + shift_by))
step "starting $((gs_count + ga_count + tw_count)) emulated servers ($gs_count gamespy1, $ga_count gameagent, $tw_count ddnet)"
ddnet_farm "$tw_count" "$tw_lo" "Muster e2e target" 500
if ((ga_count > 0)); then
    cat >"$work/farm-ga.toml" <<EOF
seed = 7
bind = "127.0.0.1"
[[generate]]
protocol = "gameagent"
count = $ga_count
ports = "$ga_lo-$((ga_lo + 399))"
players = "0-16"
max_players = 16
charset = "ascii"
masters = ["gameagent:$gameagent"]
EOF
    start_farm "$work/farm-ga.toml"
fi
gamespy_farms "$gs_count" "$gs_lo" "0-16"

step "waiting until the master lists them and has polled them"
want=$((gs_count + ga_count + tw_count))
# A port taken by another process, or a registration datagram dropped on a loaded box (the
# server tries again only with its next heartbeat, up to 60 s later), loses a server for a
# while: 90 % and the target server do, once nothing new was listed for 15 s.
deadline=$((SECONDS + 90)) last=-1 since=$SECONDS
while ((SECONDS < deadline)); do
    all=$(listed ""); busy=$(listed "&non_empty=1"); target=$(listed "&q=needle-player")
    all=${all:-0} busy=${busy:-0} target=${target:-0}
    ((all >= want && busy > 0 && target >= 1)) && break
    ((all != last)) && { last=$all; since=$SECONDS; }
    ((all >= want * 9 / 10 && busy > 0 && target >= 1 && SECONDS - since >= 15)) && break
    sleep 0.25
done
if ((all < want * 9 / 10 || target < 1 || busy < 1)); then
    curl -sS --max-time 10 "$base/healthz" >&2 || true
    die "only $all of $want servers listed (target: $target, with players: $busy) after 90 s"
fi
if ((all < want)); then
    n_gs=$(listed "&protocol=gamespy") n_ga=$(listed "&protocol=gameagent") n_tw=$(listed "&protocol=ddnet")
    echo "    not listed: $((gs_count - ${n_gs:-0})) gamespy, $((ga_count - ${n_ga:-0})) gameagent, $((tw_count - ${n_tw:-0})) ddnet"
fi
echo "    $all of $want listed, $busy with players"

step "driving chromium: the list"
MUSTER_PHASE=list MUSTER_EXPECT=$all node scripts/web/e2e.mjs
step "ok"
