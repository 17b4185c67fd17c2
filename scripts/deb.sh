#!/usr/bin/env bash
# Builds the Debian package of `muster` with dpkg-deb (Debian's own packer, no other tool):
# the binary, its manual pages and shell completions (made by the binary itself), the
# systemd unit and the default configuration from packaging/debian/ and examples/.
#
#   scripts/deb.sh                      release build (cargo build --release -p muster), then
#                                       target/debian/muster_<version>_<arch>.deb
#   scripts/deb.sh --binary PATH        package a binary already built instead (the package
#                                       test uses target/debug/muster: no release build)
#   scripts/deb.sh --compress none      dpkg-deb's compressor (default xz; none is fastest)
#
# Prints the path of the package on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

binary=""
compress=xz
while [[ $# -gt 0 ]]; do
    case $1 in
        --binary) binary=$2; shift 2 ;;
        --compress) compress=$2; shift 2 ;;
        *) echo "usage: $0 [--binary PATH] [--compress xz|gzip|zstd|none]" >&2; exit 2 ;;
    esac
done
if [[ -z $binary ]]; then
    cargo build --release --locked -p muster >&2
    binary=target/release/muster
fi
[[ -x $binary ]] || { echo "error: $binary is not an executable" >&2; exit 2; }

version=$("$binary" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
out=target/debian
root=$out/muster_${version}_${arch}
rm -rf "$root"
install -d -m 0755 "$root" "$root/DEBIAN"

# Files are installed with their final modes; dpkg-deb --root-owner-group makes root own them.
install -D -m 0755 "$binary" "$root/usr/bin/muster"
install -d -m 0755 "$root/usr/share/man/man1"
"$binary" man --dir "$root/usr/share/man/man1"
gzip -9n "$root"/usr/share/man/man1/*.1
chmod 0644 "$root"/usr/share/man/man1/*
install -d -m 0755 "$root/usr/share/bash-completion/completions" \
    "$root/usr/share/zsh/vendor-completions" "$root/usr/share/fish/vendor_completions.d"
"$binary" completions bash >"$root/usr/share/bash-completion/completions/muster"
"$binary" completions zsh >"$root/usr/share/zsh/vendor-completions/_muster"
"$binary" completions fish >"$root/usr/share/fish/vendor_completions.d/muster.fish"
install -D -m 0644 packaging/debian/muster.service "$root/lib/systemd/system/muster.service"
# The default configuration: every key with its default and a comment, the registry where
# the unit's StateDirectory is.
install -d -m 0755 "$root/etc/muster"
sed 's|^data_dir = .*|data_dir = "/var/lib/muster"|' examples/muster.toml >"$root/etc/muster/muster.toml"
chmod 0644 "$root"/etc/muster/muster.toml "$root"/usr/share/*/*/muster* \
    "$root"/usr/share/zsh/vendor-completions/_muster
install -D -m 0644 packaging/debian/copyright "$root/usr/share/doc/muster/copyright"
for script in postinst prerm postrm; do
    install -m 0755 "packaging/debian/$script" "$root/DEBIAN/$script"
done
echo /etc/muster/muster.toml >"$root/DEBIAN/conffiles"

installed_size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: muster
Version: $version
Architecture: $arch
Maintainer: Muster developers <muster@example.invalid>
Installed-Size: $installed_size
Depends: libc6, libgcc-s1, adduser
Section: games
Priority: optional
Homepage: https://example.invalid/muster
Description: game-server discovery: query servers, read master lists, run masters
 Muster queries game servers (GameAgent, GameSpy v1, Unreal Engine 2, Teeworlds and
 DDNet), reads master server lists, and runs a master daemon with every master
 protocol behind one registry and a web server browser (muster.service).
EOF

deb=$out/muster_${version}_${arch}.deb
dpkg-deb --root-owner-group -Z"$compress" --build "$root" "$deb" >&2
rm -rf "$root"
echo "$deb"
