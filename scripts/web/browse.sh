#!/usr/bin/env bash
# Page mode of `muster browse` in a real headless Chromium.
#
#   scripts/web/browse.sh          build muster, start a few emulated servers of several
#                                  protocols on loopback, run `muster browse --web` on them
#                                  (a --servers file), drive Chromium through its page
#
# Checks the ping column (shown, filled, sortable), the star (saved in the profile file, the
# favourites filter) and the phone layout's ping; saves docs/screenshots/browse-web-desktop.png
# and browse-web-phone.png. Installs what it needs as scripts/web/e2e.sh does (lib.sh).
#
# Environment: MUSTER_WEB_SCREENSHOTS=DIR (default docs/screenshots; "" for none), and
# MUSTER_BIN, CHROMIUM, MUSTER_REQUIRE_PEERS, MUSTER_SKIP_PEERS as in scripts/web/lib.sh.
# Exit status: 0 passed; 77 skipped (a prerequisite is missing); anything else failed.
set -euo pipefail
web_name=browse
source "$(dirname "$0")/lib.sh"
cd "$web_root"
shots=${MUSTER_WEB_SCREENSHOTS-$web_root/docs/screenshots}

web_setup
[[ -n $shots ]] && mkdir -p "$shots"

# Ports below the ephemeral range, shifted per run so that parallel runs rarely collide.
lo=$((23000 + (RANDOM % 8) * 100))
servers=$work/servers.txt
: >"$servers"
emulate() { # PROTOCOL PORT QUERY-PORT NAME MAP PLAYERS MAX [extra flags]
    local proto=$1 port=$2 query=$3 name=$4 map=$5 players=$6 max=$7
    shift 7
    "$muster" emulate --protocol "$proto" --port "$port" --name "$name" --map "$map" \
        --players "$players" --max-players "$max" "$@" >"$work/emulate-$port.log" 2>&1 &
    pids+=($!)
    echo "$proto 127.0.0.1:$query" >>"$servers"
}
step "starting 7 emulated servers"
emulate teeworlds $lo $lo "Muster Tee Arena" dm1 6 16
emulate teeworlds $((lo + 2)) $((lo + 2)) "Quiet Tee" ctf2 0 8
emulate quake3 $((lo + 4)) $((lo + 4)) "Muster Q3 Duel" q3dm17 2 4
emulate quake3 $((lo + 6)) $((lo + 6)) "Rocket Garden" q3dm6 9 16 --bots 3
emulate a2s $((lo + 8)) $((lo + 8)) "Muster Source Night" cp_badlands 18 24
emulate a2s $((lo + 10)) $((lo + 10)) "Full House" de_dust2 12 12
# A GameAgent server is named by its game port (queried at the next one).
emulate gameagent $((lo + 12)) $((lo + 12)) "Serious Sam Coop" Karnak 3 16

step "starting muster browse --web"
"$muster" browse --web --listen 127.0.0.1:0 --servers "$servers" --profile "$work/profile" \
    --refresh 1s --timeout 500ms --retries 1 >"$work/browse.log" 2>&1 &
pids+=($!)
url=$(wait_line "$work/browse.log" 20 '^http://') || die "muster browse printed no address"
echo "    $url"

step "driving chromium: the browse page"
MUSTER_URL=$url MUSTER_PROFILE=$work/profile/profile.json MUSTER_EXPECT=7 MUSTER_SCREENSHOTS=$shots \
    CHROMIUM=$chromium node scripts/web/browse.mjs
step "ok"
