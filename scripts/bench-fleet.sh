#!/bin/sh
# bench-fleet.sh: BenchmarkFleet (e2e/bench_fleet_test.go), issue 14's
# scale targets with FLEET_N fleet guests (default 10,000) on one daemon.
# The pprof top-lists of the idle and storm phases go to docs/profiles/;
# the output ends with one "TARGET <name> <value> <unit> met|missed" line
# per target. Needs bin/ (make build).
set -eu
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
GUESTLINK_BIN="$PWD/bin" FLEET_PROFILES="$PWD/docs/profiles" \
	${GO:-go} test -count=1 -vet=off -timeout 90m -run '^$' -bench '^BenchmarkFleet$' -benchtime 1x ./e2e >"$log" 2>&1 || status=$?
grep -v '^TARGET ' "$log" || true
grep '^TARGET ' "$log" || true
exit "$status"
