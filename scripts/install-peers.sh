#!/usr/bin/env bash
# Install the real third-party peers Muster's conformance tests run against
# (see docs/protocols/peers.md and docs/peers.md):
#
#   Debian packages  qstat (binary: quakestat), teeworlds-server, ddnet-server, iproute2, and the
#                    Perl modules 333networks' Perl master needs (run from ../shared/peers, unmodified)
#   npm              gamedig, pinned in scripts/peers/package.json + package-lock.json -> .peers/node/
#   PyPI             opengsq, pinned in scripts/peers/requirements.txt                -> .peers/venv/
#   cargo            DDNet's master server (mastersrv), built from the unmodified source in
#                    ../shared/peers/ddnet-mastersrv (MUSTER_MASTERSRV_SRC overrides)  -> .peers/bin/mastersrv
#
# Idempotent: every step checks first and installs only what is missing or at the wrong version, so a
# second run takes about a second. `apt-get update` runs only when a Debian package must be installed.
# Exits non-zero with a message naming the step when an install fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PINS="$ROOT/scripts/peers"
PEERS="$ROOT/.peers"
NODE_DIR="$PEERS/node"
VENV="$PEERS/venv"
MASTERSRV_SRC="${MUSTER_MASTERSRV_SRC:-$ROOT/../shared/peers/ddnet-mastersrv}"
MASTERSRV_BIN="$PEERS/bin/mastersrv"

DEB_PACKAGES=(qstat teeworlds-server ddnet-server iproute2)
# 333networks' Masterserver-Perl (its ORIGIN.md): AnyEvent, AnyEvent::Handle::UDP, DBI with SQLite,
# Switch, JSON. IP::Country::Fast is not packaged; the test harness stubs it.
DEB_PACKAGES+=(perl libanyevent-perl libanyevent-handle-udp-perl libdbi-perl libdbd-sqlite3-perl
    libswitch-perl libjson-perl sqlite3)

die() {
    echo "install-peers: ERROR: $*" >&2
    exit 1
}
say() { echo "install-peers: $*"; }

deb_installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

# --- Debian packages -------------------------------------------------------------------------------
missing=()
for p in "${DEB_PACKAGES[@]}"; do
    deb_installed "$p" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "need root (or sudo) to apt-get install ${missing[*]}"
        SUDO=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq || die "apt-get update failed"
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
    for p in "${missing[@]}"; do
        deb_installed "$p" || die "Debian package $p is still not installed after apt-get install"
    done
fi

# --- gamedig (npm, project-local) --------------------------------------------------------------------
command -v node >/dev/null || die "node is not on PATH (gamedig needs Node.js >= 16)"
command -v npm >/dev/null || die "npm is not on PATH"
want_gamedig="$(sed -n 's/.*"gamedig": *"\([^"]*\)".*/\1/p' "$PINS/package.json" | head -n1)"
[ -n "$want_gamedig" ] || die "no gamedig pin in $PINS/package.json"
have_gamedig=""
if [ -f "$NODE_DIR/node_modules/gamedig/package.json" ]; then
    have_gamedig="$(node -p 'require(process.argv[1]).version' "$NODE_DIR/node_modules/gamedig/package.json" 2>/dev/null || true)"
fi
if [ "$have_gamedig" != "$want_gamedig" ] \
    || ! cmp -s "$PINS/package-lock.json" "$NODE_DIR/package-lock.json"; then
    say "installing gamedig $want_gamedig into $NODE_DIR"
    mkdir -p "$NODE_DIR"
    cp "$PINS/package.json" "$PINS/package-lock.json" "$NODE_DIR/"
    (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) \
        || die "npm ci (gamedig $want_gamedig) failed in $NODE_DIR"
    # npm ci must not rewrite the lock; keep our pinned copy as the marker of what is installed.
    cp "$PINS/package-lock.json" "$NODE_DIR/package-lock.json"
fi
GAMEDIG_BIN="$NODE_DIR/node_modules/.bin/gamedig"
[ -x "$GAMEDIG_BIN" ] || die "gamedig installed but $GAMEDIG_BIN is missing"

# --- opengsq (PyPI, project-local venv) --------------------------------------------------------------
PYTHON="${PYTHON:-python3}"
command -v "$PYTHON" >/dev/null || die "$PYTHON is not on PATH (opengsq needs Python >= 3.8)"
want_opengsq="$(sed -n 's/^opengsq==\([^ ;]*\).*/\1/p' "$PINS/requirements.txt" | head -n1)"
[ -n "$want_opengsq" ] || die "no opengsq pin in $PINS/requirements.txt"
have_opengsq=""
if [ -x "$VENV/bin/python" ]; then
    have_opengsq="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("opengsq"))' 2>/dev/null || true)"
fi
if [ "$have_opengsq" != "$want_opengsq" ] || ! cmp -s "$PINS/requirements.txt" "$VENV/.muster-requirements.txt"; then
    say "installing opengsq $want_opengsq into $VENV"
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -m venv "$VENV" || die "python3 -m venv $VENV failed (Debian: apt-get install python3-venv)"
    fi
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        -r "$PINS/requirements.txt" || die "pip install -r scripts/peers/requirements.txt failed"
    cp "$PINS/requirements.txt" "$VENV/.muster-requirements.txt"
fi
OPENGSQ_BIN="$VENV/bin/opengsq"
[ -x "$OPENGSQ_BIN" ] || die "opengsq installed but $OPENGSQ_BIN is missing"

# --- DDNet's mastersrv (cargo, project-local) ------------------------------------------------------
# Built from a copy of the source (the shared folder is never written to), with its own lock file
# (--locked) and target folder. The source's digest marks what is built: a changed source rebuilds.
[ -f "$MASTERSRV_SRC/Cargo.toml" ] \
    || die "DDNet mastersrv source not found at $MASTERSRV_SRC (set MUSTER_MASTERSRV_SRC)"
command -v cargo >/dev/null || die "cargo is not on PATH (needed to build mastersrv)"
want_mastersrv="$(cd "$MASTERSRV_SRC" && find Cargo.toml Cargo.lock src -type f -print0 | sort -z \
    | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
have_mastersrv="$(cat "$PEERS/mastersrv.sha256" 2>/dev/null || true)"
if [ ! -x "$MASTERSRV_BIN" ] || [ "$have_mastersrv" != "$want_mastersrv" ]; then
    say "building DDNet mastersrv from $MASTERSRV_SRC (about a minute)"
    rm -rf "$PEERS/mastersrv-src"
    mkdir -p "$PEERS/mastersrv-src" "$PEERS/bin"
    cp -R "$MASTERSRV_SRC/Cargo.toml" "$MASTERSRV_SRC/Cargo.lock" "$MASTERSRV_SRC/src" "$PEERS/mastersrv-src/"
    cargo build --quiet --release --locked \
        --manifest-path "$PEERS/mastersrv-src/Cargo.toml" \
        --target-dir "$PEERS/mastersrv-target" \
        || die "cargo build of mastersrv failed"
    cp "$PEERS/mastersrv-target/release/mastersrv" "$MASTERSRV_BIN"
    echo "$want_mastersrv" > "$PEERS/mastersrv.sha256"
fi
[ -x "$MASTERSRV_BIN" ] || die "mastersrv built but $MASTERSRV_BIN is missing"

# --- where everything is -----------------------------------------------------------------------------
deb_version() { dpkg-query -W -f='${Version}' "$1"; }
deb_path() { dpkg -L "$1" | grep -m1 "/$2\$" || die "package $1 has no file named $2"; }

QSTAT="$(deb_path qstat quakestat)"
TW07="$(deb_path teeworlds-server teeworlds-server)"
DDNET="$(deb_path ddnet-server DDNet-Server)"
IP="$(command -v ip || deb_path iproute2 ip)"
[ -x "$QSTAT" ] && [ -x "$TW07" ] && [ -x "$DDNET" ] || die "a packaged peer binary is not executable"

printf '%-17s %-22s %s\n' \
    quakestat "$(deb_version qstat)" "$QSTAT" \
    teeworlds-server "$(deb_version teeworlds-server)" "$TW07" \
    DDNet-Server "$(deb_version ddnet-server)" "$DDNET" \
    ip "$(deb_version iproute2)" "$IP" \
    mastersrv "ddnet@$(cut -c1-12 "$PEERS/mastersrv.sha256")" "$MASTERSRV_BIN" \
    gamedig "$(node -p 'require(process.argv[1]).version' "$NODE_DIR/node_modules/gamedig/package.json")" "$GAMEDIG_BIN" \
    opengsq "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("opengsq"))')" "$OPENGSQ_BIN" \
    node "$(node --version)" "$(command -v node)" \
    python "$("$VENV/bin/python" -c 'import platform; print(platform.python_version())')" "$VENV/bin/python"
