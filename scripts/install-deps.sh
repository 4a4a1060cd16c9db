#!/usr/bin/env bash
# Installs what building and testing guestlink needs on a Debian 12 machine:
# system packages (PostgreSQL for the store tests, QEMU and a guest kernel for
# the VM tests, Chromium for the browser tests) and the npm packages. Safe to
# run again; it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_pkgs=(postgresql qemu-system-x86 qemu-utils busybox-static chromium cpio cloud-init curl e2fsprogs mmdebstrap genisoimage bash-completion)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
# Fresh package lists also matter when nothing is missing: the guest image
# downloads the current cloud kernel, and Debian drops superseded versions.
# apt waits for a lock another apt holds (a fresh machine's daily update,
# a second checkout installing at the same time) instead of failing.
apt_opts=(-o DPkg::Lock::Timeout=600)
apt_retry() {
  local i
  for i in $(seq 1 60); do
    "$@" && return 0
    pgrep -x 'apt-get|apt|dpkg|unattended-upgr' >/dev/null || return 1
    echo "install-deps: apt is busy (another apt runs); retrying in 10 s" >&2
    sleep 10
  done
  return 1
}
apt_retry $SUDO apt-get "${apt_opts[@]}" update -qq
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_retry $SUDO apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -f package-lock.json ] && [ ! -d node_modules/playwright-core ]; then
  # npm ci refuses this lock file (npm 11 wants every platform's optional
  # tailwind binary listed); npm install follows the lock for what is listed.
  npm install --no-audit --no-fund --loglevel=error
fi
go mod download
