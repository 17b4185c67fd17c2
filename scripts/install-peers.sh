#!/usr/bin/env bash
# Install the real third-party peers Muster's conformance tests run against
# (see docs/protocols/peers.md and docs/peers.md):
#
#   Debian packages  qstat (binary: quakestat), teeworlds-server, ddnet-server, iproute2,
#                    openarena-server (a real ioquake3 server, ~400 MiB with its game data), and the
#                    Perl modules 333networks' Perl master needs
#   npm              gamedig, pinned in scripts/peers/package.json + package-lock.json -> .peers/node/
#   PyPI             opengsq, python-a2s and a2squery, pinned in scripts/peers/requirements.txt -> .peers/venv/
#   sources          DDNet's master server (ddnet/ddnet src/mastersrv), 333networks'
#                    Masterserver-Perl and dpmaster 2.2, unmodified, each pinned to one upstream
#                    commit                                                             -> .peers/src/<name>/
#   cargo            DDNet's mastersrv, built from .peers/src/ddnet-mastersrv          -> .peers/bin/mastersrv
#   make             dpmaster (the Quake III / DarkPlaces master), built from .peers/src/dpmaster
#                                                                                       -> .peers/bin/dpmaster
#   cargo            xash3d-master (FWGS's Half-Life / Xash3D master) and its xash3d-query tool, built
#                    from .peers/src/xash3d-master          -> .peers/bin/xash3d-master, .peers/bin/xash3d-query
#
# Where the two sources come from, the first that applies (see "third-party sources" below):
#   1. MUSTER_MASTERSRV_SRC / MUSTER_PERL_MASTER_SRC / MUSTER_DPMASTER_SRC: a folder holding that
#      one source;
#   2. MUSTER_PEERS_SRC: a folder holding them all, as MUSTER_PEERS_SRC/ddnet-mastersrv,
#      MUSTER_PEERS_SRC/333networks-masterserver-perl and MUSTER_PEERS_SRC/dpmaster;
#   3. the local mirror LOCAL_PEERS_MIRROR/<name> (below; beside the clone, or beside the local
#      checkout it was cloned from), when it exists;
#   4. otherwise GitHub: the pinned commit is fetched with git (shallow) and its commit id checked.
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
SRC_DIR="$PEERS/src"
MASTERSRV_BIN="$PEERS/bin/mastersrv"
XASH_BIN="$PEERS/bin/xash3d-master"
XASH_QUERY_BIN="$PEERS/bin/xash3d-query"
DPMASTER_BIN="$PEERS/bin/dpmaster"
# Local mirror of the two peer sources (unmodified, one folder per <name>): where the environment the
# project was started in keeps them, beside the clone. Used only when it exists; otherwise GitHub.
LOCAL_PEERS_MIRROR="$ROOT/../shared/peers"
# A clone of such a checkout made elsewhere (`git clone -q /path/to/checkout /tmp/x/m`) finds the
# mirror beside the checkout it was cloned from, when that is a local path.
if [ ! -d "$LOCAL_PEERS_MIRROR" ]; then
    origin_url="$(git -C "$ROOT" remote get-url origin 2>/dev/null || true)"
    origin_url="${origin_url#file://}"
    if [ -n "$origin_url" ] && [ -d "$origin_url/../shared/peers" ]; then
        LOCAL_PEERS_MIRROR="$(cd "$origin_url/../shared/peers" && pwd)"
    fi
fi

# The pinned sources. *_CONTENT is the digest (tree_digest below, over *_PATHS) of the copy the
# conformance tests were written and measured against; a source that differs is used, with a note.
MASTERSRV_NAME=ddnet-mastersrv
MASTERSRV_REPO=https://github.com/ddnet/ddnet.git
MASTERSRV_COMMIT=28baa427bad88b7dd0b04eca370ab8c9daed9a7c
MASTERSRV_SUBDIR=src/mastersrv
MASTERSRV_PATHS=(Cargo.toml Cargo.lock src)
MASTERSRV_CONTENT=10af794dd8930222c5460fc9d4b400232be88ce057bcd65190e2b49dd50d6c37
PERL_NAME=333networks-masterserver-perl
PERL_REPO=https://github.com/333networks/Masterserver-Perl.git
PERL_COMMIT=7510e6780dd4c1f18e66c19dcd7bd401614c8a60
PERL_PATHS=(lib util data)
PERL_CONTENT=dfea04edee8ae16cfa978a8fb1606156ec4b55a8510a9b30c7476381a134f0dc
DPMASTER_NAME=dpmaster
DPMASTER_REPO=https://github.com/kphillisjr/dpmaster.git
DPMASTER_COMMIT=1c1bd46a78d41726f3c1d13cc27e41d2e7620e19
DPMASTER_PATHS=(src doc testsuite)
DPMASTER_CONTENT=cab071b9c3dcee5586e76f0eef61f34afa3db567629d6e7b149ad9235676caf9
XASH_NAME=xash3d-master
XASH_REPO=https://github.com/FWGS/xash3d-master.git
XASH_COMMIT=c669957e4d0640324f53151ab2eb189437ccf726
XASH_PATHS=(Cargo.toml crates)
XASH_CONTENT=fe16594223179a2c15ce2f32c62f70e8c2d9ac3b875819fc17dd642504d44692

DEB_PACKAGES=(qstat teeworlds-server ddnet-server iproute2 openarena-server)
# dpmaster's own test suite (Perl) needs Socket6.
DEB_PACKAGES+=(libsocket6-perl)
# 333networks' Masterserver-Perl (its README): AnyEvent, AnyEvent::Handle::UDP, DBI with SQLite,
# Switch, JSON. IP::Country::Fast is not packaged; the test harness stubs it.
DEB_PACKAGES+=(perl libanyevent-perl libanyevent-handle-udp-perl libdbi-perl libdbd-sqlite3-perl
    libswitch-perl libjson-perl sqlite3)

die() {
    echo "install-peers: ERROR: $*" >&2
    exit 1
}
say() { echo "install-peers: $*"; }

# tree_digest DIR [PATH...]: one SHA-256 over the files under PATH... (default: all) inside DIR, in
# byte order of their names, so the same tree gives the same digest on every machine.
tree_digest() {
    local dir="$1"
    shift
    [ "$#" -gt 0 ] || set -- .
    (cd "$dir" && find "$@" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum \
        | sha256sum | cut -d' ' -f1)
}

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

# --- Prometheus (Debian package): scrapes `muster exporter` in crates/cli/tests/conformance/exporter.rs --
# Only the server binary is used (no recommends: the node exporter is not needed); the test runs
# its own instance on loopback with a temporary storage directory.
if ! deb_installed prometheus; then
    say "installing Debian package: prometheus"
    PROM_SUDO=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "need root (or sudo) to apt-get install prometheus"
        PROM_SUDO=(sudo)
    fi
    DEBIAN_FRONTEND=noninteractive "${PROM_SUDO[@]}" apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive "${PROM_SUDO[@]}" apt-get install -y -qq --no-install-recommends \
        prometheus >/dev/null || die "apt-get install prometheus failed"
    deb_installed prometheus || die "Debian package prometheus is still not installed after apt-get install"
fi
command -v prometheus >/dev/null || die "prometheus is installed but not on PATH"

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

# --- opengsq, python-a2s, a2squery (PyPI, project-local venv) ----------------------------------------
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

# --- third-party sources (DDNet's mastersrv, 333networks' Masterserver-Perl) -----------------------------
# Both are third-party programs the tests run unmodified; they are installed as source under
# .peers/src/<name>/, and .peers/src/<name>.from records where the copy came from (line 1) and the digest
# of its pinned paths (line 2). A folder source is copied when its content differs from the copy; GitHub
# is asked only when no folder source exists and the copy is not already the pinned one.

# copy_folder NAME FROM: make .peers/src/NAME an exact copy of folder FROM.
copy_folder() {
    local name="$1" from="$2" dest="$SRC_DIR/$1"
    if [ -d "$dest" ] && [ "$(tree_digest "$from")" = "$(tree_digest "$dest")" ]; then
        return 0
    fi
    say "copying the $name source from $from"
    rm -rf "$dest.new"
    mkdir -p "$dest.new"
    cp -R "$from/." "$dest.new/" || die "copying $from to $dest failed"
    rm -rf "$dest"
    mv "$dest.new" "$dest"
}

# fetch_pinned NAME REPO COMMIT SUBDIR LICENCE: make .peers/src/NAME the folder SUBDIR (empty: the
# whole tree) of REPO at COMMIT, fetched with git (depth 1; with SUBDIR a partial clone that downloads
# only the files checked out, falling back to a plain depth-1 fetch when the server refuses the filter).
# LICENCE (with SUBDIR) is `FILE:COPY`: the repository's licence FILE, kept beside the source as COPY.
# NOT RUN on the project machine (it has no internet access): written to the git documentation and
# exercised only against a local file:// repository; the commit-id check below is what verifies it.
fetch_pinned() {
    local name="$1" repo="$2" commit="$3" subdir="$4" licence="$5"
    local dest="$SRC_DIR/$1" work="$SRC_DIR/.fetch-$1"
    command -v git >/dev/null || die "git is not on PATH (needed to fetch the $name source from $repo)"
    say "fetching the $name source from $repo at $commit"
    rm -rf "$work"
    mkdir -p "$work"
    local -a g=(git -C "$work" -c advice.detachedHead=false)
    export GIT_TERMINAL_PROMPT=0
    "${g[@]}" init -q || die "git init in $work failed"
    "${g[@]}" remote add origin "$repo"
    local -a want=(.)
    if [ -n "$subdir" ]; then
        want=("$subdir")
        if [ -n "$licence" ]; then
            want+=("${licence%%:*}")
        fi
        "${g[@]}" config remote.origin.promisor true
        "${g[@]}" config remote.origin.partialclonefilter blob:none
        if ! "${g[@]}" fetch -q --depth 1 --filter=blob:none origin "$commit"; then
            say "the filtered fetch failed; fetching the whole commit (depth 1)"
            "${g[@]}" config --unset remote.origin.promisor
            "${g[@]}" config --unset remote.origin.partialclonefilter
            "${g[@]}" fetch -q --depth 1 origin "$commit" \
                || die "git fetch of $commit from $repo failed"
        fi
    else
        "${g[@]}" fetch -q --depth 1 origin "$commit" || die "git fetch of $commit from $repo failed"
    fi
    local got
    got="$("${g[@]}" rev-parse --verify 'FETCH_HEAD^{commit}')" || die "git fetched no commit from $repo"
    [ "$got" = "$commit" ] || die "git fetched $got from $repo, not the pinned $commit"
    "${g[@]}" checkout -q FETCH_HEAD -- "${want[@]}" \
        || die "git checkout of ${want[*]} at $commit failed"
    rm -rf "$dest.new"
    if [ -n "$subdir" ]; then
        cp -R "$work/$subdir" "$dest.new"
        if [ -n "$licence" ]; then
            cp "$work/${licence%%:*}" "$dest.new/${licence#*:}"
        fi
    else
        rm -rf "$work/.git"
        cp -R "$work" "$dest.new"
    fi
    rm -rf "$dest" "$work"
    mv "$dest.new" "$dest"
}

# install_source NAME OVERRIDE_VAR REPO COMMIT SUBDIR LICENCE MARKER CONTENT PATH...: put the source
# of NAME at .peers/src/NAME (see the header for where it comes from); MARKER is a file every copy
# must hold; CONTENT is the pinned digest of PATH... (see *_CONTENT above).
install_source() {
    local name="$1" override="$2" repo="$3" commit="$4" subdir="$5" licence="$6" marker="$7" content="$8"
    shift 8
    local dest="$SRC_DIR/$name" from="" origin=""
    if [ -n "${!override:-}" ]; then
        from="${!override}"
        origin="$override"
    elif [ -n "${MUSTER_PEERS_SRC:-}" ]; then
        from="$MUSTER_PEERS_SRC/$name"
        origin=MUSTER_PEERS_SRC
    elif [ -d "$LOCAL_PEERS_MIRROR/$name" ]; then
        from="$LOCAL_PEERS_MIRROR/$name"
        origin="the local mirror"
    fi
    mkdir -p "$SRC_DIR"
    if [ -n "$from" ]; then
        [ -f "$from/$marker" ] || die "no $name source at $from (from $origin): $marker is missing"
        from="$(cd "$from" && pwd)"
        copy_folder "$name" "$from"
        printf 'folder %s\n%s\n' "$from" "$(tree_digest "$dest" "$@")" > "$dest.from"
    else
        # Keep the copy when it is the pinned content, or what an earlier run fetched at the pinned commit.
        local kind="" recorded="" now=""
        if [ -f "$dest.from" ]; then
            kind="$(sed -n 1p "$dest.from")"
            recorded="$(sed -n 2p "$dest.from")"
        fi
        if [ -f "$dest/$marker" ]; then
            now="$(tree_digest "$dest" "$@")"
        fi
        if [ -n "$now" ] && { [ "$now" = "$content" ] \
            || { [ "$kind" = "git $repo $commit" ] && [ "$now" = "$recorded" ]; }; }; then
            printf '%s\n%s\n' "${kind:-kept}" "$now" > "$dest.from"
        else
            fetch_pinned "$name" "$repo" "$commit" "$subdir" "$licence"
            [ -f "$dest/$marker" ] || die "the fetched $name source has no $marker"
            printf 'git %s %s\n%s\n' "$repo" "$commit" "$(tree_digest "$dest" "$@")" > "$dest.from"
        fi
    fi
    local have
    have="$(sed -n 2p "$dest.from")"
    if [ "$have" != "$content" ]; then
        say "note: the $name source ($(sed -n 1p "$dest.from")) differs from the copy the tests were" \
            "written against (digest $have, pinned $content); using it as it is"
    fi
}

install_source "$MASTERSRV_NAME" MUSTER_MASTERSRV_SRC "$MASTERSRV_REPO" "$MASTERSRV_COMMIT" \
    "$MASTERSRV_SUBDIR" license.txt:LICENSE-ddnet.txt Cargo.toml "$MASTERSRV_CONTENT" "${MASTERSRV_PATHS[@]}"
install_source "$PERL_NAME" MUSTER_PERL_MASTER_SRC "$PERL_REPO" "$PERL_COMMIT" \
    "" "" util/masterserver.pl "$PERL_CONTENT" "${PERL_PATHS[@]}"
install_source "$DPMASTER_NAME" MUSTER_DPMASTER_SRC "$DPMASTER_REPO" "$DPMASTER_COMMIT" \
    "" "" src/dpmaster.c "$DPMASTER_CONTENT" "${DPMASTER_PATHS[@]}"
install_source "$XASH_NAME" MUSTER_XASH_MASTER_SRC "$XASH_REPO" "$XASH_COMMIT" \
    "" "" crates/xash3d-master/Cargo.toml "$XASH_CONTENT" "${XASH_PATHS[@]}"

# --- DDNet's mastersrv (cargo, project-local) ------------------------------------------------------
# Built from .peers/src/ddnet-mastersrv with its own lock file (--locked, so nothing in the source is
# written) into its own target folder. The source's digest marks what is built: a changed source rebuilds.
MASTERSRV_SRC="$SRC_DIR/$MASTERSRV_NAME"
command -v cargo >/dev/null || die "cargo is not on PATH (needed to build mastersrv)"
want_mastersrv="$(tree_digest "$MASTERSRV_SRC" "${MASTERSRV_PATHS[@]}")"
have_mastersrv="$(cat "$PEERS/mastersrv.sha256" 2>/dev/null || true)"
rm -rf "$PEERS/mastersrv-src"   # the build copy earlier versions of this script made
if [ ! -x "$MASTERSRV_BIN" ] || [ "$have_mastersrv" != "$want_mastersrv" ]; then
    say "building DDNet mastersrv from $MASTERSRV_SRC (about a minute)"
    mkdir -p "$PEERS/bin"
    cargo build --quiet --release --locked \
        --manifest-path "$MASTERSRV_SRC/Cargo.toml" \
        --target-dir "$PEERS/mastersrv-target" \
        || die "cargo build of mastersrv failed"
    cp "$PEERS/mastersrv-target/release/mastersrv" "$MASTERSRV_BIN"
    echo "$want_mastersrv" > "$PEERS/mastersrv.sha256"
fi
[ -x "$MASTERSRV_BIN" ] || die "mastersrv built but $MASTERSRV_BIN is missing"

# --- xash3d-master (cargo, project-local) ----------------------------------------------------------
# FWGS's Half-Life / Xash3D master. Its repository has no lock file: cargo resolves the crates it names
# when it builds (in the copy under .peers/src, never in the mirror), into its own target folder.
XASH_SRC="$SRC_DIR/$XASH_NAME"
want_xash="$(tree_digest "$XASH_SRC" "${XASH_PATHS[@]}")"
have_xash="$(cat "$PEERS/xash3d-master.sha256" 2>/dev/null || true)"
if [ ! -x "$XASH_BIN" ] || [ ! -x "$XASH_QUERY_BIN" ] || [ "$have_xash" != "$want_xash" ]; then
    say "building xash3d-master and xash3d-query from $XASH_SRC (about two minutes)"
    mkdir -p "$PEERS/bin"
    cargo build --quiet --release -p xash3d-master \
        --manifest-path "$XASH_SRC/Cargo.toml" \
        --target-dir "$PEERS/xash3d-master-target" \
        || die "cargo build of xash3d-master failed"
    # Its list/query tool, without the colour feature (one crate less to fetch).
    cargo build --quiet --release -p xash3d-query --no-default-features \
        --manifest-path "$XASH_SRC/Cargo.toml" \
        --target-dir "$PEERS/xash3d-master-target" \
        || die "cargo build of xash3d-query failed"
    cp "$PEERS/xash3d-master-target/release/xash3d-master" "$XASH_BIN"
    cp "$PEERS/xash3d-master-target/release/xash3d-query" "$XASH_QUERY_BIN"
    echo "$want_xash" > "$PEERS/xash3d-master.sha256"
fi
[ -x "$XASH_BIN" ] || die "xash3d-master built but $XASH_BIN is missing"
[ -x "$XASH_QUERY_BIN" ] || die "xash3d-query built but $XASH_QUERY_BIN is missing"

# --- dpmaster (make, project-local) ---------------------------------------------------------------
# Plain C, built with its own Makefile in a copy of .peers/src/dpmaster/src (the build writes object
# files, which must not change the source's digest). The source's digest marks what is built.
DPMASTER_SRC="$SRC_DIR/$DPMASTER_NAME"
command -v make >/dev/null || die "make is not on PATH (needed to build dpmaster)"
command -v cc >/dev/null || die "cc is not on PATH (needed to build dpmaster)"
want_dpmaster="$(tree_digest "$DPMASTER_SRC" "${DPMASTER_PATHS[@]}")"
have_dpmaster="$(cat "$PEERS/dpmaster.sha256" 2>/dev/null || true)"
if [ ! -x "$DPMASTER_BIN" ] || [ "$have_dpmaster" != "$want_dpmaster" ]; then
    say "building dpmaster from $DPMASTER_SRC"
    rm -rf "$PEERS/dpmaster-build"
    mkdir -p "$PEERS/bin" "$PEERS/dpmaster-build"
    cp -R "$DPMASTER_SRC/src/." "$PEERS/dpmaster-build/" || die "copying the dpmaster source failed"
    make -s -C "$PEERS/dpmaster-build" release >"$PEERS/dpmaster-build/make.log" 2>&1 \
        || { cat "$PEERS/dpmaster-build/make.log" >&2; die "make of dpmaster failed"; }
    cp "$PEERS/dpmaster-build/dpmaster" "$DPMASTER_BIN"
    echo "$want_dpmaster" > "$PEERS/dpmaster.sha256"
fi
[ -x "$DPMASTER_BIN" ] || die "dpmaster built but $DPMASTER_BIN is missing"

# --- tmux (Debian): the terminal that drives `muster browse --tui` in its tests -------------------
if ! command -v tmux >/dev/null; then
    say "installing Debian package: tmux"
    TMUX_SUDO=()
    [ "$(id -u)" -eq 0 ] || TMUX_SUDO=(sudo)
    DEBIAN_FRONTEND=noninteractive "${TMUX_SUDO[@]}" apt-get install -y -qq --no-install-recommends tmux \
        >/dev/null || { "${TMUX_SUDO[@]}" apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive "${TMUX_SUDO[@]}" apt-get install -y -qq --no-install-recommends tmux \
        >/dev/null; } || die "apt-get install tmux failed"
fi
command -v tmux >/dev/null || die "tmux is still not on PATH after installing it"

# --- where everything is -----------------------------------------------------------------------------
deb_version() { dpkg-query -W -f='${Version}' "$1"; }
deb_path() { dpkg -L "$1" | grep -m1 "/$2\$" || die "package $1 has no file named $2"; }
# source_version NAME CONTENT: how a source was got (folder, git, kept) and whether it is the pinned one.
source_version() {
    local kind digest
    kind="$(sed -n 1p "$SRC_DIR/$1.from" | cut -d' ' -f1)"
    digest="$(sed -n 2p "$SRC_DIR/$1.from")"
    if [ "$digest" = "$2" ]; then echo "$kind,pinned"; else echo "$kind,${digest:0:12}"; fi
}

QSTAT="$(deb_path qstat quakestat)"
TW07="$(deb_path teeworlds-server teeworlds-server)"
DDNET="$(deb_path ddnet-server DDNet-Server)"
IP="$(command -v ip || deb_path iproute2 ip)"
OPENARENA="$(deb_path openarena-server games/openarena-server)"
[ -x "$QSTAT" ] && [ -x "$TW07" ] && [ -x "$DDNET" ] && [ -x "$OPENARENA" ] \
    || die "a packaged peer binary is not executable"

printf '%-17s %-22s %s\n' \
    quakestat "$(deb_version qstat)" "$QSTAT" \
    teeworlds-server "$(deb_version teeworlds-server)" "$TW07" \
    DDNet-Server "$(deb_version ddnet-server)" "$DDNET" \
    ip "$(deb_version iproute2)" "$IP" \
    openarena-server "$(deb_version openarena-server)" "$OPENARENA" \
    mastersrv "ddnet@$(cut -c1-12 "$PEERS/mastersrv.sha256")" "$MASTERSRV_BIN" \
    mastersrv-src "$(source_version "$MASTERSRV_NAME" "$MASTERSRV_CONTENT")" "$SRC_DIR/$MASTERSRV_NAME" \
    masterserver-perl "$(source_version "$PERL_NAME" "$PERL_CONTENT")" "$SRC_DIR/$PERL_NAME" \
    dpmaster "$(source_version "$DPMASTER_NAME" "$DPMASTER_CONTENT")" "$DPMASTER_BIN" \
    xash3d-master "$(source_version "$XASH_NAME" "$XASH_CONTENT")" "$XASH_BIN" \
    xash3d-query "$(source_version "$XASH_NAME" "$XASH_CONTENT")" "$XASH_QUERY_BIN" \
    gamedig "$(node -p 'require(process.argv[1]).version' "$NODE_DIR/node_modules/gamedig/package.json")" "$GAMEDIG_BIN" \
    opengsq "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("opengsq"))')" "$OPENGSQ_BIN" \
    python-a2s "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("python-a2s"))')" "$VENV/bin/python" \
    node "$(node --version)" "$(command -v node)" \
    python "$("$VENV/bin/python" -c 'import platform; print(platform.python_version())')" "$VENV/bin/python"
