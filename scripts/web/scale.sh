#!/usr/bin/env bash
# The server browser with 10,000 registered servers, measured in headless Chromium. Not a
# timed test: it prints how long the page takes and how much memory it holds; it fails only
# when something does not work (a server count, a filter, a sort, a search is wrong, or the
# page throws).
#
#   scripts/web/scale.sh                       10,000 servers, target/debug/muster
#   MUSTER_BIN=target/release/muster MUSTER_WEB_SCALE=10000 scripts/web/scale.sh
#
# The servers: MUSTER_WEB_SCALE in total (default 10000): 500 Teeworlds servers registered over
# DDNet HTTP (one of them the search target), 320 GameSpy v1 servers (eight per 127.0.1.K: the
# GameSpy face keeps at most 8 challenges pending per IP) and the rest GameAgent servers, in
# farms of 250, 1000 per loopback address 127.0.2.K. Every port is below 32768, every address on
# 127.0.0.0/8. The master's per-source caps on registrations are lifted for loopback
# (scripts/web/lib.sh); it polls every server once a minute, so the list keeps changing under
# the page as on a live master.
#
# Environment:
#   MUSTER_WEB_SCALE=N         servers in total (default 10000)
#   MUSTER_WEB_HOLD=SECONDS    afterwards keep the master and the farms running this long, to
#                              open the page by hand or run scale.mjs again (see its header)
#   MUSTER_BIN, CHROMIUM, MUSTER_REQUIRE_PEERS, MUSTER_SKIP_PEERS: see scripts/web/lib.sh
# Takes a few minutes; not run by scripts/test.sh.
set -euo pipefail
web_name=scale
source "$(dirname "$0")/lib.sh"
cd "$web_root"

total=${MUSTER_WEB_SCALE:-10000}
((total >= 1000)) || die "MUSTER_WEB_SCALE must be at least 1000"
tw_count=$((total / 20)); ((tw_count > 500)) && tw_count=500
gs_count=$((total / 20)); ((gs_count > 320)) && gs_count=320
ga_count=$((total - tw_count - gs_count))
per_ga_farm=250
((ga_count <= 4 * 250 * per_ga_farm)) || die "at most $((4 * 250 * per_ga_farm)) GameAgent servers"

web_setup

step "starting muster serve"
start_master "
[poller]
interval = \"60s\"
# 10,000 servers once a minute.
max_per_second = 250
delist_after_failures = 1000
[lifetimes]
# A loaded box may answer a heartbeat late; nothing should expire during the run.
gamespy = \"30m\"
gameagent = \"30m\"
ddnet = \"5m\""

step "registering $total emulated servers ($ga_count gameagent, $gs_count gamespy1, $tw_count ddnet)"
# DDNet: one farm on 127.0.0.1, ports 22000-22999.
ddnet_farm "$tw_count" 22000 "Muster scale target" 1000
gamespy_farms "$gs_count" 20000 "0-16"

# Waits (at most $2 s) until at least $1 servers match the list query $3; prints how many do.
wait_listed() {
    local want=$1 deadline=$((SECONDS + $2)) n=0
    while ((SECONDS < deadline)); do
        n=$(listed "${3:-}"); n=${n:-0}
        ((n >= want)) && break
        sleep 0.2
    done
    echo "$n"
}
# GameAgent: $per_ga_farm servers per farm, four farms per loopback address 127.0.2.K, one farm
# after the other. A stock registrar sends its `q` once: a burst the master's socket buffer
# cannot hold loses servers for good, so a farm that falls short is stopped and started again
# (its listed servers just re-register).
left=$ga_count
for ((k = 0; left > 0; k++)); do
    n=$((left < per_ga_farm ? left : per_ga_farm)); left=$((left - n))
    ip=127.0.2.$((k / 4 + 1)) lo=$((20000 + (k % 4) * 2 * per_ga_farm))
    cat >"$work/farm-ga$k.toml" <<EOF
seed = $((100 + k))
bind = "$ip"
[[generate]]
protocol = "gameagent"
count = $n
ports = "$lo-$((lo + 2 * per_ga_farm - 1))"
players = "0-16"
max_players = 16
charset = "ascii"
masters = ["gameagent:$gameagent"]
EOF
    want=$(($(listed "&protocol=gameagent") + n))
    for attempt in 1 2 3 4; do
        start_farm "$work/farm-ga$k.toml"
        now=$(wait_listed "$want" 20 "&protocol=gameagent")
        ((now >= want)) && break
        echo "    gameagent farm $k on $ip: $now of $want listed; starting it again"
        kill "${pids[-1]}" 2>/dev/null || true
        wait "${pids[-1]}" 2>/dev/null || true
    done
done
echo "    $(listed "&protocol=gameagent") of $ga_count gameagent servers listed"

step "waiting until all $total are listed (at most 120 s)"
all=$(wait_listed "$total" 120)
echo "    $all of $total listed"
((all >= total * 99 / 100)) || die "only $all of $total servers listed"

step "measuring in chromium"
MUSTER_URL=$base MUSTER_EXPECT=$all CHROMIUM=$chromium node scripts/web/scale.mjs
if [[ ${MUSTER_WEB_HOLD:-0} -gt 0 ]]; then
    step "holding the master at $base/ and the farms for ${MUSTER_WEB_HOLD} s (Ctrl-C stops)"
    sleep "$MUSTER_WEB_HOLD" &
    pids+=($!)
    wait $! || true
fi
step "ok"
