#!/usr/bin/env bash
# Runs a test command and checks that it left nothing behind:
#
#   scripts/check-leftovers.sh run -- COMMAND [ARGS...]
#
# Before COMMAND it records the time and `git status` and exports
# GLTEST_RUN_ID into the environment every test process inherits (not
# GUESTLINK_*: the daemon tests strip those from their children; sim VMMs
# and guests, whose environment is built from nothing, never carry it:
# docs/environment.md). TMPDIR is
# left alone: Unix socket paths in the tests are near their 107-byte limit.
# After COMMAND it fails (listing them) if
#   - a process started during the run is still alive (zombies aside) and
#     belongs to the run: its environment holds the run id, or its
#     executable or command line lies under this tree's bin/; with CI=true
#     (a machine running nothing else) also any process started since whose
#     executable or command line lies under a test's temporary directory
#     ($TMPDIR/go-build*, $TMPDIR/Test*) or that is a sleep, qemu-system-*,
#     guestlink*, postgres or chromium;
#   - `git status --porcelain` (and the diff) changed: a test rewrote or
#     created a file in the tree.
# The exit status is COMMAND's if it failed, else 1 on leftovers, else 0.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

[ "${1:-}" = run ] && [ "${2:-}" = -- ] && [ $# -ge 3 ] || {
  echo "usage: $0 run -- COMMAND [ARGS...]" >&2
  exit 2
}
shift 2

# starttime (field 22 of /proc/PID/stat, clock ticks since boot) of pid $1,
# and its state (field 3), as "START STATE"; empty if it is gone.
proc_start_state() {
  local stat rest
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  rest=${stat##*) } # the command name is in parentheses and may hold spaces
  read -r -a f <<<"$rest"
  echo "${f[19]} ${f[0]}"
}

tree_status() { git status --porcelain --untracked-files=all 2>/dev/null; }
tree_diff() { git diff HEAD 2>/dev/null | sha256sum; }

read -r mark _ < <(proc_start_state $$)
before=$(tree_status)
before_diff=$(tree_diff)
run_id="$$-$mark"
tmp=${TMPDIR:-/tmp}
tmp=${tmp%/}

GLTEST_RUN_ID=$run_id "$@"
status=$?

# Ancestors of this script (make, a CI runner) are not leftovers.
declare -A mine=()
p=$$
while [ "${p:-0}" -gt 1 ]; do
  mine[$p]=1
  stat=$(cat "/proc/$p/stat" 2>/dev/null) || break
  read -r -a f <<<"${stat##*) }"
  p=${f[1]}
done

leftovers=()
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [ -n "${mine[$pid]:-}" ] && continue
  read -r start state < <(proc_start_state "$pid") || continue
  [ -n "${start:-}" ] && [ "$start" -gt "$mark" ] || continue
  [ "$state" = Z ] || [ "$state" = X ] && continue
  # The process may end while we look: every read tolerates that.
  exe=$(readlink "$d/exe" 2>/dev/null || true)
  cmdline=$( { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null || true)
  ours=""
  env_id=$( { tr '\0' '\n' <"$d/environ"; } 2>/dev/null | sed -n 's/^GLTEST_RUN_ID=//p' | head -n1)
  if [ "$env_id" = "$run_id" ]; then
    ours=env
  elif [ -n "$env_id" ]; then
    ours="" # another run's process (a second checkout testing at the same time)
  elif [[ "$exe" == "$root/bin/"* || "$cmdline" == *"$root/bin/"* ]]; then
    ours=path
  elif [ "${CI:-}" = true ]; then
    if [[ "$exe $cmdline" == *"$tmp/go-build"* || "$exe $cmdline" == *"$tmp/Test"* ]]; then
      ours=tempdir
    else
      case "$(basename "${exe:-none}")" in
        sleep | qemu-system-* | guestlink* | postgres | chromium*) ours=name ;;
      esac
    fi
  fi
  if [ -n "$ours" ]; then
    # Where it runs and who adopted it say which test started it.
    read -r -a f < <(cat "$d/stat" 2>/dev/null | sed 's/.*) //')
    cwd=$(readlink "$d/cwd" 2>/dev/null || true)
    leftovers+=("  pid $pid ($ours, ppid ${f[1]:-?}, cwd ${cwd:-?}): ${cmdline:0:200}")
  fi
done

after=$(tree_status)
after_diff=$(tree_diff)

bad=0
if [ "${#leftovers[@]}" -gt 0 ]; then
  echo "check-leftovers: ${#leftovers[@]} process(es) started by the tests are still running:" >&2
  printf '%s\n' "${leftovers[@]}" >&2
  bad=1
fi
if [ "$before" != "$after" ]; then
  echo "check-leftovers: the tests changed the tree (git status, < before / > after):" >&2
  diff <(echo "$before") <(echo "$after") | sed -n 's/^[<>]/ &/p' >&2
  bad=1
elif [ "$before_diff" != "$after_diff" ]; then
  echo "check-leftovers: the tests rewrote files that were already modified:" >&2
  echo "$after" >&2
  bad=1
fi
[ "$status" -ne 0 ] && exit "$status"
exit "$bad"
