#!/usr/bin/env bash
# Runs every cargo-fuzz target for a given number of seconds on the stable toolchain.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     default: 20 seconds, every target
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

failed=()
for t in "${targets[@]}"; do
    mkdir -p "$scratch/$t" "fuzz/corpus/$t"
    echo "--- fuzz $t for ${seconds}s"
    if ! (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" "$scratch/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 2>"$scratch/$t.log"); then
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
