#!/usr/bin/env bash
# Stops every running guest of the `make run` state directory. If the daemon
# is not running it starts it for the time it takes (it recovers the guests
# the last run left behind), stops them all, and stops it again.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE_DIR=${STATE_DIR:-$PWD/.run}
export GUESTLINK_STATE_DIR="$STATE_DIR"

if [ -S "$STATE_DIR/guestlink.sock" ] && bin/guestlink list >/dev/null 2>&1; then
  exec bin/guestlink stop --all
fi
[ -f "$STATE_DIR/guestlink.db" ] || { echo "no state in $STATE_DIR: nothing to stop"; exit 0; }

# held_by_another reports whether a process holds the state directory's
# lock (guestlinkd takes it before opening anything in the directory).
held_by_another() {
  [ -f "$STATE_DIR/guestlinkd.lock" ] && command -v flock >/dev/null && ! flock -n "$STATE_DIR/guestlinkd.lock" true
}

bin/guestlinkd --state-dir "$STATE_DIR" --plugin-dir bin/plugins --log-level warn &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null || true; wait $daemon 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  [ -S "$STATE_DIR/guestlink.sock" ] && bin/guestlink list >/dev/null 2>&1 && break
  # Refused because another daemon holds the state directory (it said
  # which; e.g. make run starting): stop the guests through that one.
  kill -0 "$daemon" 2>/dev/null || held_by_another || { echo "guestlinkd exited; see above" >&2; exit 1; }
  sleep 0.1
done
bin/guestlink stop --all
