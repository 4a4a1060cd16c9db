#!/usr/bin/env bash
# Runs the three-member cluster of docs/cluster.md on one machine: a private
# PostgreSQL server (initdb in a temporary directory, listening only on a
# Unix socket there), then host1, host2 and host3 (guestlinkd, SQLite-free,
# the simulated backend), host2 and host3 joining with one-time tokens from
# `guestlink cluster add`. It prints the commands that reach each member and
# waits until Ctrl-C (or SIGTERM); then it stops the daemons, the database and
# removes everything it made.
#
#   scripts/cluster-demo.sh           # make cluster-demo
#   scripts/cluster-demo.sh --check   # set up, launch a guest on host3 from host1, list it, tear down
#
# Needs PostgreSQL's server binaries (Debian package postgresql; make deps
# installs them) and make build's bin/. Run as root, the database server runs
# as the postgres system user (it refuses root).
set -euo pipefail
cd "$(dirname "$0")/.."
check=false
case ${1:-} in
--check) check=true ;;
"") ;;
*)
  echo "usage: scripts/cluster-demo.sh [--check]" >&2
  exit 2
  ;;
esac

pgbin=${GUESTLINK_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)}
if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ]; then
  echo "cluster-demo: PostgreSQL's server binaries are missing: apt-get install postgresql (or make deps)" >&2
  exit 1
fi
for b in guestlinkd guestlink; do
  [ -x "bin/$b" ] || {
    echo "cluster-demo: bin/$b is missing: run make build first" >&2
    exit 1
  }
done

# A short path: Unix socket paths (PostgreSQL's, the admin sockets) must fit in 108 bytes.
dir=$(mktemp -d /tmp/guestlink-cluster.XXXXXX)
chmod 0755 "$dir"
pids=()
as_pg=()
if [ "$(id -u)" = 0 ]; then
  as_pg=(runuser -u postgres --)
fi
# pg runs a PostgreSQL program (as the postgres user when root) from $dir,
# a directory that user can enter.
pg() { (cd "$dir" && "${as_pg[@]}" "$@"); }
pg_started=false
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if $pg_started; then
    pg "$pgbin/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

# listening PORT reports whether something accepts connections on 127.0.0.1:PORT.
listening() { timeout 2 bash -c ': <"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null; }
# free_port prints the first port from $1 that nothing listens on and that
# this script has not handed out yet.
taken=" "
free_port() {
  local p=$1
  while listening "$p" || [[ $taken == *" $p "* ]]; do p=$((p + 1)); done
  taken+="$p "
  echo "$p"
}

echo "cluster-demo: PostgreSQL in $dir/pg (Unix socket only)"
mkdir -p "$dir/pg"
[ ${#as_pg[@]} -eq 0 ] || chown postgres: "$dir/pg"
pg "$pgbin/initdb" -D "$dir/pg/data" -U guestlink -A trust --no-sync >"$dir/initdb.log" 2>&1 ||
  {
    cat "$dir/initdb.log" >&2
    exit 1
  }
pg "$pgbin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -w \
  -o "-c listen_addresses='' -k $dir/pg -c fsync=off" start >/dev/null
pg_started=true
pg "$pgbin/createdb" -h "$dir/pg" -U guestlink guestlink
# The URL goes to a file only this user reads, never on a command line.
(
  umask 077
  echo "postgres:///guestlink?host=$dir/pg&user=guestlink" >"$dir/database"
)

# member NAME [JOIN-FILE] starts guestlinkd as NAME and waits until its
# admin socket answers. Another program may take the port picked for its
# cluster address before the daemon binds it: then it tries the next one.
member() {
  local name=$1 join=${2:-} state port attempt i
  state=$dir/$name
  mkdir -p "$state" && chmod 0700 "$state"
  for attempt in 1 2 3 4 5; do
    port=$(free_port "$next_port")
    next_port=$((port + 1))
    bin/guestlinkd --state-dir "$state" --plugin-dir bin/plugins --database-file "$dir/database" \
      --name "$name" --cluster-address "127.0.0.1:$port" ${join:+--join-file "$join"} \
      >"$dir/$name.log" 2>&1 &
    pids+=($!)
    for i in $(seq 1 300); do
      if bin/guestlink --state-dir "$state" cluster list >/dev/null 2>&1; then
        echo "cluster-demo: $name is up (cluster address 127.0.0.1:$port, state $state)"
        return 0
      fi
      kill -0 "${pids[-1]}" 2>/dev/null || break
      sleep 0.1
    done
    kill -TERM "${pids[-1]}" 2>/dev/null || true # still starting after 30 s: give up on it
    wait "${pids[-1]}" 2>/dev/null || true
    unset 'pids[-1]'
    grep -q "address already in use" "$dir/$name.log" || break
  done
  echo "cluster-demo: guestlinkd $name did not start:" >&2
  cat "$dir/$name.log" >&2
  exit 1
}

# Members' cluster ports start at a random place, so that two demos (or a
# demo and a test) rarely reach for the same one.
next_port=$((20000 + RANDOM % 20000))
member host1
for h in host2 host3; do
  (
    umask 077
    bin/guestlink --state-dir "$dir/host1" cluster add "$h" >"$dir/$h.token"
  )
  member "$h" "$dir/$h.token"
done

gl() { bin/guestlink --state-dir "$dir/host1" "$@"; }
gl cluster list

if $check; then
  gl launch web1 --backend sim --target host3 -c sim.command='sleep 600'
  gl list
  bin/guestlink --state-dir "$dir/host2" info web1 --format json >"$dir/web1.json"
  grep -q '"location": *"host3"' "$dir/web1.json" && grep -q '"status": *"Running"' "$dir/web1.json" || {
    echo "cluster-demo: web1, read through host2, is not Running on host3:" >&2
    cat "$dir/web1.json" >&2
    exit 1
  }
  gl delete web1 --force
  echo "cluster-demo: check passed"
  exit 0
fi

cat <<EOF

Three members share one PostgreSQL database. Any member answers for the whole cluster:
  bin/guestlink --state-dir $dir/host1 cluster list
  bin/guestlink --state-dir $dir/host2 launch web1 --target host3
  bin/guestlink --state-dir $dir/host3 list            # LOCATION column
Logs: $dir/host{1,2,3}.log. Ctrl-C stops the members and the database and removes $dir.
EOF
# Until Ctrl-C (the trap exits, and cleanup runs), or until a member exits on its own.
wait -n "${pids[@]}" || true
echo "cluster-demo: a member exited; see its log below" >&2
tail -n 20 "$dir"/host*.log >&2
exit 1
