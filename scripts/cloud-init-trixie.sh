#!/bin/bash
# cloud-init-trixie.sh: print the directory of a Debian 13 (trixie) root
# filesystem with cloud-init (its LXD datasource, which retries a 500), for
# the daemon test that runs that datasource against a sim guest's devlxd
# socket (TestDevlxdCloudInitTrixie). Built with mmdebstrap (minbase plus
# cloud-init), root or unprivileged (unshare mode).
#
# The tree is cached outside the source tree under
# ${XDG_CACHE_HOME:-$HOME/.cache}/guestlink/rootfs/trixie-cloud-init-<key>,
# key = sha256 of the build's inputs: the recipe version (bump it when the
# mmdebstrap command changes), the suite, the packages and the mirror; a
# hit prints it at once. A build goes to a temporary directory renamed into
# place when complete, so an interrupted one leaves nothing half made.
#
# cloud-init-trixie.sh --check: exit 1 naming mmdebstrap if it is missing.
set -euo pipefail

if ! command -v mmdebstrap >/dev/null 2>&1; then
	echo "cloud-init-trixie: mmdebstrap not found in PATH (Debian package mmdebstrap; make deps installs it)" >&2
	exit 1
fi
[ "${1:-}" = --check ] && exit 0

suite=trixie
mirror=${GUESTLINK_DEBIAN_MIRROR:-}
packages=cloud-init,python3
recipe=1
key=$(echo "$recipe $packages $suite $mirror" | sha256sum | cut -c1-16)
base=${XDG_CACHE_HOME:-$HOME/.cache}/guestlink/rootfs
cache=$base/trixie-cloud-init-$key
if [ -x "$cache/usr/bin/cloud-init" ]; then
	echo "$cache"
	exit 0
fi
mkdir -p "$base"
work=$(mktemp -d "$base/.building-trixie-XXXXXX")
trap 'rm -rf "$work"' EXIT
mode=root
[ "$(id -u)" -eq 0 ] || mode=unshare
# The tree is only read: a socket's directory is bind-mounted into it (on
# /mnt) and the datasource's python runs in it (chroot).
mmdebstrap --quiet --mode="$mode" --variant=minbase --include="$packages" \
	--customize-hook='chroot "$1" dpkg-query -W -f="\${Package}=\${Version}\n" cloud-init python3 > "$1"/usr/share/guestlink-packages.txt' \
	"$suite" "$work/root" $mirror >&2
rm -rf "$cache"
mv "$work/root" "$cache"
echo "cloud-init-trixie: built $cache ($(tr '\n' ' ' < "$cache/usr/share/guestlink-packages.txt"))" >&2
echo "$cache"
