#!/usr/bin/env bash
# Starts guestlinkd on the embedded default (SQLite in $STATE_DIR, simulated
# backend, dashboard on $HTTP), launches one demo guest and says where to look.
# The daemon runs in the foreground until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE_DIR=${STATE_DIR:-$PWD/.run}
HTTP=${HTTP:-127.0.0.1:8080}
export GUESTLINK_STATE_DIR="$STATE_DIR"
mkdir -p "$STATE_DIR" && chmod go-w "$STATE_DIR" # guestlinkd refuses a state dir others can write

bin/guestlinkd --state-dir "$STATE_DIR" --http "$HTTP" --plugin-dir bin/plugins &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null' INT TERM EXIT

for _ in $(seq 1 100); do
  [ -S "$STATE_DIR/guestlink.sock" ] && bin/guestlink list >/dev/null 2>&1 && break
  kill -0 $daemon 2>/dev/null || { echo "guestlinkd exited; see above" >&2; exit 1; }
  sleep 0.1
done

# The demo guest runs the real agent and, like a service in a real image,
# declares itself Ready through /dev/lxd/sock once the host answers.
demo_cmd='"$GUESTLINK_AGENT" run & agent=$!; "$GUESTLINK_AGENT" wait-host --timeout 60s && sleep 3 && "$GUESTLINK_AGENT" ready; wait $agent'
if ! bin/guestlink info demo >/dev/null 2>&1; then
  bin/guestlink launch demo --backend sim -c "sim.command=$demo_cmd" -c user.greeting=hello
elif ! bin/guestlink info demo --format json | grep -q '"status": *"\(Running\|Ready\)"'; then
  bin/guestlink start demo
fi

cat <<MSG

guestlink is running.
  dashboard:  http://$HTTP/
  CLI:        GUESTLINK_STATE_DIR=$STATE_DIR bin/guestlink list
              GUESTLINK_STATE_DIR=$STATE_DIR bin/guestlink info demo
              GUESTLINK_STATE_DIR=$STATE_DIR bin/guestlink monitor
  guest API:  sock=\$(GUESTLINK_STATE_DIR=$STATE_DIR bin/guestlink info demo --format json | sed -n 's/.*"devlxd_socket": *"\\([^"]*\\)".*/\\1/p')
              curl --unix-socket "\$sock" lxd/1.0
Press Ctrl-C to stop the daemon (guests keep running; they are recovered at the next start).
MSG
wait $daemon
