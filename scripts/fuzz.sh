#!/usr/bin/env bash
# Runs every cargo-fuzz target for a given number of seconds on the stable toolchain.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     default: 20 seconds, every target
#   MUSTER_FUZZ_JOBS=N                        targets run at once (default: one per core)
#
# cargo-fuzz needs unstable rustc flags; RUSTC_BOOTSTRAP=1 is set on the fuzz command line only,
# never in a config file, so nothing unstable reaches the crates we ship. The committed corpus in
# fuzz/corpus/<target>/ seeds each run; new inputs go to a scratch folder, not into git.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-20}
shift || true

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "installing cargo-fuzz from crates.io"
    cargo install cargo-fuzz --locked --quiet
fi

if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    mapfile -t targets < <(cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz list)
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

(cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz build)

# Targets run side by side, one per core (MUSTER_FUZZ_JOBS overrides): each fuzzer is one
# process on one core, so one at a time left the other cores idle for the whole smoke.
jobs=${MUSTER_FUZZ_JOBS:-$(nproc)}
[[ $jobs -ge 1 ]] || jobs=1

# run_one TARGET: fuzz it; its exit status goes to $scratch/TARGET.rc.
run_one() {
    local t=$1 rc=0
    mkdir -p "$scratch/$t" "fuzz/corpus/$t"
    (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" "$scratch/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 2>"$scratch/$t.log") \
        >"$scratch/$t.out" 2>&1 || rc=$?
    echo "$rc" >"$scratch/$t.rc"
}

echo "fuzzing ${#targets[@]} targets for ${seconds}s each, $jobs at a time"
for t in "${targets[@]}"; do
    while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do
        wait -n || true
    done
    run_one "$t" &
done
wait

failed=()
for t in "${targets[@]}"; do
    echo "--- fuzz $t for ${seconds}s"
    if [[ $(cat "$scratch/$t.rc" 2>/dev/null || echo missing) != 0 ]]; then
        cat "$scratch/$t.out" >&2
        tail -n 40 "$scratch/$t.log" >&2
        failed+=("$t")
    else
        grep -E 'stat::number_of_executed_units|Done [0-9]+ runs' "$scratch/$t.log" | tail -n 1 || true
    fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz targets failed: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} targets ran ${seconds}s each without a finding"
