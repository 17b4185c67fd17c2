#!/usr/bin/env bash
# Fails when a lower layer gains a dependency that belongs to a layer above it:
#
#   muster-proto  the wire formats: no I/O crate at all (no tokio, mio, socket2)
#   muster-core   the master's core: no socket, HTTP or web crate (tokio without its `net`
#                 feature, no mio networking, no hyper, axum, tower, reqwest)
#
# The compiler already stops an import running back up between crates; this stops the
# dependency that would let one in. Run from the workspace root.
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0

# The normal (non-dev) dependencies of a package with their resolved features, one per line.
# A failing `cargo tree` (a stale Cargo.lock, say) fails the check: an empty tree is no proof.
tree() {
    local out
    if ! out=$(cargo tree -p "$1" -e normal,features --prefix none --locked); then
        echo "error: cargo tree -p $1 failed" >&2
        exit 1
    fi
    printf '%s\n' "$out"
}

proto=$(tree muster-proto)
if grep -Eq '^(tokio|mio|socket2|async-std) ' <<<"$proto"; then
    echo "error: muster-proto depends on an I/O crate:" >&2
    grep -E '^(tokio|mio|socket2|async-std) ' <<<"$proto" | sort -u >&2
    fail=1
fi

core=$(tree muster-core)
if grep -Eq '^(hyper|hyper-util|axum|axum-core|tower|tower-http|reqwest|socket2|tokio-postgres|mio) ' <<<"$core"; then
    echo "error: muster-core depends on a socket, HTTP or web crate:" >&2
    grep -E '^(hyper|hyper-util|axum|axum-core|tower|tower-http|reqwest|socket2|tokio-postgres|mio) ' <<<"$core" | sort -u >&2
    fail=1
fi
if grep -Eq '^tokio feature "net"' <<<"$core"; then
    echo "error: muster-core enables tokio's \"net\" feature (sockets belong to muster-faces)" >&2
    cargo tree -p muster-core -e normal,features -i tokio --locked >&2 || true
    fail=1
fi

if [[ $fail == 0 ]]; then
    echo "ok: muster-proto has no I/O crate; muster-core has no socket, HTTP or web crate"
fi
exit "$fail"
