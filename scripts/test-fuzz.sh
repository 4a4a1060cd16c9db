#!/usr/bin/env bash
# test-fuzz.sh: run every fuzz target of the repository (each `func FuzzX`
# in a _test.go file of any module) for a bounded time, one after the other:
#
#   scripts/test-fuzz.sh [FUZZTIME]      (default 10s a target)
#
# Each target first runs its seed corpus (the f.Add seeds and the files
# checked in under testdata/fuzz/FuzzX/), then mutates for FUZZTIME. The
# fuzzer's working corpus goes to a temporary -test.fuzzcachedir removed at
# the end, so a run writes nothing into the tree and each run starts from
# the checked-in seeds alone; only a failing input is written, to
# testdata/fuzz/FuzzX/ of its package (go test's rule): fix the bug and
# commit that file as a seed. The exit status is 1 if any target failed.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
fuzztime=${1:-10s}
cache=$(mktemp -d "${TMPDIR:-/tmp}/guestlink-fuzz.XXXXXX")
trap 'rm -rf "$cache"' EXIT

failed=()
n=0
while IFS=: read -r file name; do
	dir=$(dirname "$file")
	mod=$dir # the module holding the package: the nearest go.mod upwards
	while [ ! -f "$mod/go.mod" ]; do mod=$(dirname "$mod"); done
	pkg=./${dir#"$mod"}
	pkg=${pkg/#.\/\//./}
	echo "== $name ($dir, $fuzztime)"
	n=$((n + 1))
	if ! (cd "$mod" && $GO test -count=1 -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" \
		"$pkg" -test.fuzzcachedir "$cache/$name"); then
		failed+=("$name ($dir)")
	fi
done < <(git grep -o -E '^func Fuzz[A-Za-z0-9_]+' -- '*_test.go' | sed -e 's/:func /:/')

if [ "$n" -eq 0 ]; then
	echo "test-fuzz: no fuzz target found" >&2
	exit 1
fi
if [ "${#failed[@]}" -gt 0 ]; then
	echo "test-fuzz: ${#failed[@]} of $n targets failed: ${failed[*]}" >&2
	exit 1
fi
echo "test-fuzz: $n targets, $fuzztime each, no failure"
