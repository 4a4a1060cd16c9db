#!/bin/bash
# guest-image.sh GO OUTDIR: build the busybox test guest (make guest-image)
# into OUTDIR (bin/guest), cached outside the tree under
# ${XDG_CACHE_HOME:-$HOME/.cache}/guestlink/images/busybox-<key>, key = sha256
# of every file it is built from (the image builder, its rootfs, the agent's
# sources, go.sum) and of the busybox binary. A cache hit only copies.
set -euo pipefail
go=${1:?usage: guest-image.sh GO OUTDIR}
out=${2:?usage: guest-image.sh GO OUTDIR}
inputs=$(git ls-files -- plugins/shared/guestimage agent api link cmd/guestlink-agent internal go.mod go.sum scripts/guest-image.sh 2>/dev/null || true)
if [ -z "$inputs" ]; then # not a git checkout: no cache
	exec $go run ./plugins/shared/guestimage/cmd -out "$out"
fi
key=$( { for f in $inputs; do [ -f "$f" ] && sha256sum "$f"; done; sha256sum /bin/busybox 2>/dev/null || true; } | sha256sum | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/guestlink/images/busybox-$key
if [ -f "$cache/.complete" ]; then
	mkdir -p "$out"
	cp -a "$cache"/. "$out"/
	rm -f "$out/.complete"
	echo "guest-image: cached $cache"
	exit 0
fi
$go run ./plugins/shared/guestimage/cmd -out "$out"
mkdir -p "$cache.tmp"
cp -a "$out"/. "$cache.tmp"/
touch "$cache.tmp/.complete"
rm -rf "$cache"
mv "$cache.tmp" "$cache"
