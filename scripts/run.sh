#!/usr/bin/env bash
# Starts guestlinkd on the embedded default (SQLite in $STATE_DIR, simulated
# backend, dashboard on $HTTP), launches one demo guest and says where to look.
# The daemon runs until Ctrl-C (or SIGTERM); then the script says which guests
# keep running and how to stop them, stops the daemon and exits 0.
#
# HTTP is the dashboard's address. With PICK_PORT=1 (make run without HTTP=)
# it is only the first one tried: when something listens there, the next
# free port of the following 19 is taken; an HTTP given by the user is used
# as given, and refused if taken.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE_DIR=${STATE_DIR:-$PWD/.run}
HTTP=${HTTP:-127.0.0.1:8080}
PICK_PORT=${PICK_PORT:-}
export GUESTLINK_STATE_DIR="$STATE_DIR"

# listening HOST PORT reports whether something accepts connections there
# (a wildcard address is tried on loopback, where the daemon would collide).
listening() {
  local host=${1#[} port=$2
  host=${host%]}
  case $host in "" | 0.0.0.0) host=127.0.0.1 ;; "::") host=::1 ;; esac
  timeout 2 bash -c ': <"/dev/tcp/$0/$1"' "$host" "$port" 2>/dev/null
}
http_host=${HTTP%:*} http_port=${HTTP##*:}
if ! [[ $http_port =~ ^[0-9]+$ ]] || [ "$http_host" = "$HTTP" ]; then
  echo "make run: HTTP=$HTTP is not HOST:PORT (e.g. make run HTTP=127.0.0.1:8090)" >&2
  exit 2
fi
if listening "$http_host" "$http_port"; then
  if [ -z "$PICK_PORT" ]; then
    echo "make run: $HTTP is taken (something listens there); give a free address: make run HTTP=$http_host:PORT" >&2
    exit 1
  fi
  first=$HTTP
  for port in $(seq $((http_port + 1)) $((http_port + 19))); do
    if ! listening "$http_host" "$port"; then
      HTTP=$http_host:$port
      break
    fi
  done
  if [ "$HTTP" = "$first" ]; then
    echo "make run: $first and the 19 ports after it are taken; give a free address: make run HTTP=$http_host:PORT" >&2
    exit 1
  fi
  echo "make run: $first is taken; the dashboard is on http://$HTTP/ instead"
fi
mkdir -p "$STATE_DIR" && chmod go-w "$STATE_DIR" # guestlinkd refuses a state dir others can write

# On a terminal, job control puts the daemon in its own process group and
# the wait below in the foreground one: Ctrl-C then ends only the wait, not
# the daemon and not make (which would report "Error 1" or "Interrupt").
terminal=false
if [ -t 0 ] && [ -t 1 ]; then
  terminal=true
  set -m
fi

bin/guestlinkd --state-dir "$STATE_DIR" --http "$HTTP" --plugin-dir bin/plugins &
daemon=$!
stop_daemon() {
  kill -TERM "$daemon" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
}
trap stop_daemon EXIT

for _ in $(seq 1 100); do
  [ -S "$STATE_DIR/guestlink.sock" ] && bin/guestlink list >/dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || { echo "guestlinkd exited; see above" >&2; exit 1; }
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

# The dashboard needs a session: a one-time login URL signs the browser in.
login=$(bin/guestlink dashboard --print-url 2>/dev/null || echo "http://$HTTP/ (run bin/guestlink dashboard --print-url for a login URL)")

cat <<MSG

guestlink is running.
  dashboard:  $login
              (one-time login URL; bin/guestlink dashboard --print-url prints a new one)
  CLI:        export GUESTLINK_STATE_DIR=$STATE_DIR
              bin/guestlink list
              bin/guestlink info demo
              bin/guestlink monitor --since 0
  guest API:  sock=\$(bin/guestlink info demo --format json | sed -n 's/.*"devlxd_socket": *"\\([^"]*\\)".*/\\1/p' | head -n1)
              curl -s --unix-socket "\$sock" lxd/1.0
Press Ctrl-C to stop the daemon (guests keep running; they are recovered at the next start).
MSG

code=0
if $terminal; then
  # The foreground job: it ends on Ctrl-C, or when the daemon exits. The
  # trap keeps bash from ending itself when its foreground job dies of SIGINT.
  trap : INT
  tail --pid="$daemon" -f /dev/null || true
else
  trap : INT TERM # interrupts the wait below
  wait "$daemon" || code=$?
fi
if ! kill -0 "$daemon" 2>/dev/null; then
  trap - EXIT
  $terminal && { wait "$daemon" || code=$?; }
  echo "guestlinkd exited with status $code; see above" >&2
  exit "$code"
fi

running=$(bin/guestlink list --status running 2>/dev/null | tail -n +2 | awk '{print $1}' | paste -sd' ' || true)
stop_daemon
trap - EXIT
echo
echo "guestlinkd stopped."
if [ -n "$running" ]; then
  echo "These guests keep running without it: $running"
  echo "The next 'make run' recovers them; to stop them all: make stop (or, with the daemon running, bin/guestlink stop --all)."
else
  echo "No guest is running."
fi
exit 0
