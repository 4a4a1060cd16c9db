#!/bin/bash
# guest-image-debian.sh PKGDIR OUTDIR [SUITE]: build a Debian guest disk
# image, Debian 12 (SUITE bookworm, the default) as OUTDIR/debian-12.img or
# Debian 13 (SUITE trixie, systemd 257) as OUTDIR/debian-13.img (raw ext4,
# the kernel and initrd in /boot) with mmdebstrap: systemd, udev, cloud-init, openssh-server, the cloud
# kernel, locales with en_US.UTF-8 generated (cloud-init's default locale,
# which its locale module sets with update-locale) and the
# guestlink-agent package from PKGDIR. No loop mounts:
# mkfs.ext4 -d fills the filesystem from the tree. OUTDIR/debian-N.json
# records the inputs (package versions, agent package hash, script hash).
# Both suites come from the same Debian archive with the host's
# debian-archive-keyring (bookworm's knows trixie's signing keys).
#
# The image is cached outside the tree under
# ${XDG_CACHE_HOME:-$HOME/.cache}/guestlink/images/debian-N-<key>, key =
# sha256 of this script, the agent package, the package list, the suite,
# the mirror and the size; a hit only copies it.
#
# guest-image-debian.sh --check: exit 1 naming each program a build needs
# and lacks, with its Debian package (guestlink image build asks first).
# guest-image-debian.sh --key PKGDIR [SUITE]: print the image's cache
# directory name (debian-N-<key>) without building.
set -euo pipefail

# check_tools names every missing build program with its Debian package,
# and the command that installs them; it fails if one is missing.
check_tools() {
	local missing=() pkgs=() tool pkg
	for tool in mmdebstrap:mmdebstrap mkfs.ext4:e2fsprogs; do
		pkg=${tool#*:} tool=${tool%%:*}
		if ! command -v "$tool" >/dev/null 2>&1; then
			missing+=("$tool not found in PATH (Debian package $pkg)")
			pkgs+=("$pkg")
		fi
	done
	[ "${#missing[@]}" -eq 0 ] && return 0
	echo "guest-image-debian: cannot build the image: $(printf '%s; ' "${missing[@]}")install: sudo apt-get install ${pkgs[*]}, or make deps (installs everything the VM path needs)" >&2
	return 1
}
# mkfs.ext4 is in /sbin, which a user's PATH may lack.
export PATH=$PATH:/usr/sbin:/sbin
if [ "${1:-}" = --check ]; then
	check_tools
	exit
fi
print_key=
if [ "${1:-}" = --key ]; then
	print_key=1
	shift
	set -- "${1:-}" "" "${2:-}"
fi
pkgdir=${1:?usage: guest-image-debian.sh PKGDIR OUTDIR [bookworm|trixie]}
out=${2:-}
[ -n "$print_key" ] || [ -n "$out" ] || { echo "usage: guest-image-debian.sh PKGDIR OUTDIR [bookworm|trixie]" >&2; exit 2; }
deb=$(ls "$pkgdir"/guestlink-agent_*_amd64.deb | tail -n1)
suite=${3:-bookworm}
case $suite in
bookworm) release=12 ;;
trixie) release=13 ;;
*)
	echo "guest-image-debian: unknown suite \"$suite\": want bookworm (Debian 12) or trixie (Debian 13)" >&2
	exit 2
	;;
esac
name=debian-$release
mirror=${GUESTLINK_DEBIAN_MIRROR:-}
packages=systemd,systemd-sysv,udev,dbus,cloud-init,openssh-server,linux-image-cloud-amd64,initramfs-tools,sudo,iproute2,netbase,ca-certificates,curl,locales
size=${GUESTLINK_DEBIAN_SIZE:-2G}

key=$( { sha256sum "$0" "$deb" | cut -d' ' -f1; echo "$packages $suite $mirror $size"; } | sha256sum | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/guestlink/images/$name-$key
if [ -n "$print_key" ]; then
	echo "$name-$key"
	exit 0
fi
mkdir -p "$out"
# "guestlink-stage: NAME" lines mark the stages: guestlink image build shows
# them as progress on a terminal.
if [ -f "$cache/$name.img" ] && [ -f "$cache/$name.json" ]; then
	echo "guestlink-stage: copy the cached image"
	echo "guest-image-debian: cached $cache"
	cp --sparse=always "$cache/$name.img" "$out/$name.img.tmp"
	cp "$cache/$name.json" "$out/$name.json"
	mv "$out/$name.img.tmp" "$out/$name.img"
	exit 0
fi

check_tools
work=$(mktemp -d "${TMPDIR:-/tmp}/guestlink-debian.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
start=$(date +%s)
cp "$deb" "$work/guestlink-agent.deb"
# The image declares Ready on its own once it is up: after multi-user.target
# and cloud-init's last stage (so a user-data runcmd has run), the agent's
# CLI waits for the host and declares Ready through /dev/lxd/sock. User-data
# that declares Ready itself switches this off with a file (docs/guests.md):
#   write_files: [{path: /etc/guestlink/ready.disabled, content: ""}]
cat >"$work/guestlink-ready.service" <<'UNIT'
[Unit]
Description=Declare this guest Ready to guestlink once it is up
After=multi-user.target cloud-final.service guestlink-agent.service
ConditionPathExists=!/etc/guestlink/ready.disabled

[Service]
Type=oneshot
ExecStart=/usr/bin/guestlink-agent wait-host --timeout 10m
ExecStart=/usr/bin/guestlink-agent ready

[Install]
WantedBy=multi-user.target
UNIT
# Boot does not wait on network-online for long, nor fail without a NIC:
# any one link up ends the wait, and after 10 s the wait gives up without
# failing the unit (a guest without a NIC is not "degraded").
cat >"$work/wait-online.conf" <<'UNIT'
[Service]
ExecStart=
ExecStart=-/lib/systemd/systemd-networkd-wait-online --any --timeout=10
UNIT
# The agent package is installed by dpkg inside the tree after apt's run;
# cloud-init looks for LXD first (the agent serves /dev/lxd/sock before
# cloud-init-local starts) and the network is systemd-networkd's.
echo "guestlink-stage: bootstrap and packages (mmdebstrap)"
mmdebstrap --variant=minbase --include="$packages" \
	--customize-hook='copy-in '"$work"'/guestlink-agent.deb /tmp' \
	--customize-hook='chroot "$1" dpkg -i /tmp/guestlink-agent.deb' \
	--customize-hook='rm -f "$1"/tmp/guestlink-agent.deb' \
	--customize-hook='printf "datasource_list: [ LXD, NoCloud, None ]\n" > "$1"/etc/cloud/cloud.cfg.d/90-guestlink.cfg' \
	--customize-hook='printf "/dev/vda / ext4 defaults,errors=remount-ro 0 1\n" > "$1"/etc/fstab' \
	--customize-hook='chroot "$1" systemctl enable systemd-networkd' \
	--customize-hook='sed -i "s/^# *en_US.UTF-8 UTF-8/en_US.UTF-8 UTF-8/" "$1"/etc/locale.gen && chroot "$1" locale-gen && printf "LANG=en_US.UTF-8\n" > "$1"/etc/default/locale' \
	--customize-hook='cp '"$work"'/guestlink-ready.service "$1"/etc/systemd/system/' \
	--customize-hook='chroot "$1" systemctl enable guestlink-ready.service' \
	--customize-hook='mkdir -p "$1"/etc/systemd/system/systemd-networkd-wait-online.service.d && cp '"$work"'/wait-online.conf "$1"/etc/systemd/system/systemd-networkd-wait-online.service.d/guestlink.conf' \
	--customize-hook='echo debian > "$1"/etc/hostname' \
	--customize-hook='chroot "$1" dpkg-query -W -f="\${Package}=\${Version}\n" > "$1"/usr/share/guestlink-packages.txt' \
	"$suite" "$root" $mirror
cp "$root/usr/share/guestlink-packages.txt" "$work/packages.txt"
echo "guestlink-stage: filesystem (mkfs.ext4)"
truncate -s "$size" "$work/$name.img"
mkfs.ext4 -q -F -L rootfs -d "$root" "$work/$name.img"
end=$(date +%s)

kernel=$(cd "$root/boot" && ls vmlinuz-* | sort | tail -n1)
{
	printf '{\n  "os": "debian",\n  "release": "%s",\n  "suite": "%s",\n' "$release" "$suite"
	# At 256 MiB the first boot's OOM killer takes cloud-init's config stage.
	printf '  "requirements.memory": "1GiB",\n'
	# The filesystem fills the disk: a smaller root disk cannot hold it.
	bytes=$(stat -c %s "$work/$name.img")
	if [ $((bytes % 1073741824)) -eq 0 ]; then disk="$((bytes / 1073741824))GiB"; else disk="$bytes"; fi
	printf '  "requirements.disk": "%s",\n' "$disk"
	if [ "$release" -ge 13 ]; then
		# systemd >= 254 sends READY=1 to vmm.notify_socket (docs/guest-link.md).
		printf '  "readiness": "self: guestlink-ready.service declares Ready after multi-user.target and cloud-final; systemd: READY=1 over vsock to vmm.notify_socket",\n'
	else
		printf '  "readiness": "self: guestlink-ready.service declares Ready after multi-user.target and cloud-final",\n'
	fi
	printf '  "kernel": "%s",\n' "$kernel"
	printf '  "agent_package": "%s",\n  "agent_package_sha256": "%s",\n' "$(basename "$deb")" "$(sha256sum "$deb" | cut -d' ' -f1)"
	printf '  "build_script_sha256": "%s",\n' "$(sha256sum "$0" | cut -d' ' -f1)"
	printf '  "mirror": "%s",\n  "build_seconds": "%s",\n' "${mirror:-default}" "$((end - start))"
	printf '  "packages": "%s"\n}\n' "$(tr '\n' ' ' < "$work/packages.txt" | sed 's/ $//')"
} > "$work/$name.json"
mkdir -p "$cache"
cp --sparse=always "$work/$name.img" "$cache/$name.img"
cp "$work/$name.json" "$cache/$name.json"
mv "$work/$name.img" "$out/$name.img"
cp "$work/$name.json" "$out/$name.json"
echo "guest-image-debian: built $out/$name.img in $((end - start)) s (cached in $cache)"
