#!/bin/sh
# bench-fleet.sh: BenchmarkFleet (e2e/bench_fleet_test.go), issue 14's
# scale targets with FLEET_N fleet guests (default 10,000) on one daemon.
# The pprof top-lists of its phases go to $FLEET_PROFILES (default
# bin/bench/profiles/, ignored by git: a run leaves the tree clean); the
# output ends with one "TARGET <name> <value> <goal> met|missed" line per
# target. Needs bin/ (make build).
set -eu
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
FLEET_PROFILES="${FLEET_PROFILES:-$PWD/bin/bench/profiles}"
mkdir -p "$FLEET_PROFILES"
GUESTLINK_BIN="$PWD/bin" FLEET_PROFILES="$FLEET_PROFILES" \
	${GO:-go} test -count=1 -vet=off -timeout 90m -run '^$' -bench '^BenchmarkFleet$' -benchtime 1x ./e2e >"$log" 2>&1 || status=$?
cp "$log" "$FLEET_PROFILES/bench-fleet.out" # the raw output, beside the profiles
grep -v '^TARGET ' "$log" || true
grep '^TARGET ' "$log" || true
exit "$status"
