#!/usr/bin/env bash
# The per-game pages and the server badges in a real headless Chromium.
#
#   scripts/web/games.sh           build muster, start `muster serve` and six emulated servers
#                                  in two games on loopback (one of them then killed, so that
#                                  its polls fail), wait for two closed history minutes,
#                                  drive Chromium through /games, a game's page and the badges
#
# Checks the overview's counts, the game page's counts, its players-over-time chart (drawn from
# /api/v1/games/{game}/history), its busiest servers, and the up, down and unknown badges.
# Saves docs/screenshots/games-all.png, games-live-48h.png, badge-up.png, badge-down.png and
# badge-unknown.png. Installs what it needs as scripts/web/e2e.sh does (lib.sh).
#
# Environment: MUSTER_WEB_SCREENSHOTS=DIR (default docs/screenshots; "" for none), and
# MUSTER_BIN, CHROMIUM, MUSTER_REQUIRE_PEERS, MUSTER_SKIP_PEERS as in scripts/web/lib.sh.
# Exit status: 0 passed; 77 skipped (a prerequisite is missing); anything else failed.
set -euo pipefail
web_name=games
source "$(dirname "$0")/lib.sh"
cd "$web_root"
shots=${MUSTER_WEB_SCREENSHOTS-$web_root/docs/screenshots}

web_setup
[[ -n $shots ]] && mkdir -p "$shots"

step "starting muster serve"
start_master "
[poller]
interval = \"2s\"
# The killed server stays listed, down, for the badge.
delist_after_failures = 1000"

# Ports below the ephemeral range, shifted per run so that parallel runs rarely collide.
lo=$((24000 + (RANDOM % 8) * 100))
emulate() { # STYLE PORT NAME MAP PLAYERS MAX
    "$muster" emulate --protocol gamespy1 --style "$1" --port "$2" --name "$3" --map "$4" \
        --players "$5" --max-players "$6" --master "gamespy:$gamespy" >"$work/emulate-$2.log" 2>&1 &
    pids+=($!)
}
step "starting 6 emulated servers in two games"
emulate ut99 "$lo" "Muster Busy Facing Worlds" CTF-Face 11 16
emulate ut99 $((lo + 10)) "Quiet Deck" DM-Deck16 2 12
emulate ut99 $((lo + 20)) "Empty Morpheus" DM-Morpheus 0 8
emulate ut99 $((lo + 30)) "Gone Away" DM-Gone 4 10
gone=${pids[-1]}
emulate ut2003 $((lo + 40)) "Muster Antalus" DM-Antalus 7 16
emulate ut2003 $((lo + 50)) "Small Rankin" CTF-Rankin 3 8

json() { curl -fsS --max-time 10 "$base$1" 2>/dev/null || true; }
step "waiting until the six are listed and polled"
for ((i = 0; i < 300; i++)); do
    n=$(json "/api/v1/servers?per_page=20" | { grep -o '"map":"[A-Z][^"]*"' || true; } | wc -l)
    ((n >= 6)) && break
    sleep 0.2
done
((n >= 6)) || die "only $n of 6 servers polled after 60 s"
# Killed without a goodbye: it stays listed and its next polls fail.
kill -9 "$gone"
# Two closed minutes, so that the chart has a line to draw.
step "waiting until its polls fail and two history minutes are closed (up to 150 s)"
for ((i = 0; i < 750; i++)); do
    down=$(json "/badge/127.0.0.1:$((lo + 30)).svg" | grep -c '>down<' || true)
    points=$(json "/api/v1/games/ut/history?range=48h" | { grep -o '"players_max"' || true; } | wc -l)
    ((down >= 1 && points >= 2)) && break
    sleep 0.2
done
((down >= 1)) || die "the killed server's badge never said down"
((points >= 2)) || die "$points history minute(s) of game ut after 150 s, not 2"

step "driving chromium: /games, /games/ut, the badges"
MUSTER_URL=$base MUSTER_DOWN=127.0.0.1:$((lo + 30)) MUSTER_BUSY=127.0.0.1:$lo MUSTER_SCREENSHOTS=$shots \
    CHROMIUM=$chromium node scripts/web/games.mjs
step "ok"
