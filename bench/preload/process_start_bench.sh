#!/usr/bin/env bash
# What the preload library costs a short process: a job script's shells, coreutils and git
# commands each load it, and each that writes a routed file may make a controller. Variants,
# each N processes of `sh -c 'echo x >> FILE'` (an append: no truncation on the clock) or
# `sh -c 'echo x > FILE'` (the file remade):
#   plain     without the library (append)
#   loaded    LD_PRELOAD set, the file outside TAI_PRELOAD_PATHS (nothing routed; append)
#   routed    LD_PRELOAD set, an append to a routed file with bytes in it: it starts cached, so
#             the controller is made (its workers, engines and keeper), the write, exit
#   remade    LD_PRELOAD set, a routed file truncated by its open: an empty file starts
#             write-through (git's objects, refs and lock files are made so), no controller
# and, with --before LIB, the last three again with another build of the library. Interleaved
# rounds (every variant once per round), medians; per process: wall ms, CPU ms (user + system of
# the loop's children, from /usr/bin/time) and minor page faults. Then, if git is installed, a
# real program made of short processes: git committing one small file per commit
# (core.fsync=all) in a routed directory, alone and under each library, seconds per run.
#
#   bench/preload/process_start_bench.sh [--lib PATH] [--before PATH] [--runs 200] [--rounds 5]
#                                        [--git-commits 60 (0: none)] [--dir DIR]
set -euo pipefail
lib=build/release/src/preload/libtai-preload.so
before=""
runs=200
rounds=5
commits=60
dir=${TMPDIR:-/var/tmp}/tai-process-start-bench
while [ $# -gt 0 ]; do
  case "$1" in
    --lib) lib=$2; shift 2;;
    --before) before=$2; shift 2;;
    --runs) runs=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --git-commits) commits=$2; shift 2;;
    --dir) dir=$2; shift 2;;
    *) echo "usage: $0 [--lib PATH] [--before PATH] [--runs N] [--rounds N] [--git-commits N] [--dir DIR]" >&2; exit 2;;
  esac
done
[ -f "$lib" ] || { echo "process_start_bench: $lib not found: build it first (make release)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "process_start_bench: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
lib=$(realpath "$lib")
[ -z "$before" ] || before=$(realpath "$before")
rm -rf "$dir" && mkdir -p "$dir/routed" "$dir/other"
variants=(plain loaded routed remade)
[ -z "$before" ] || variants+=(loaded-before routed-before remade-before)
prefix_of() {  # variant -> the environment of each process; the redirection; the file it writes
  case $1 in
    plain) echo "env >> $dir/routed/x" ;;
    loaded) echo "env LD_PRELOAD=$lib TAI_PRELOAD_PATHS=$dir/routed >> $dir/other/x" ;;
    routed) echo "env LD_PRELOAD=$lib TAI_PRELOAD_PATHS=$dir/routed >> $dir/routed/x" ;;
    remade) echo "env LD_PRELOAD=$lib TAI_PRELOAD_PATHS=$dir/routed > $dir/routed/y" ;;
    loaded-before) echo "env LD_PRELOAD=$before TAI_PRELOAD_PATHS=$dir/routed >> $dir/other/x" ;;
    routed-before) echo "env LD_PRELOAD=$before TAI_PRELOAD_PATHS=$dir/routed >> $dir/routed/x" ;;
    remade-before) echo "env LD_PRELOAD=$before TAI_PRELOAD_PATHS=$dir/routed > $dir/routed/y" ;;
  esac
}
declare -A wall cpu faults
for ((r = 0; r < rounds; ++r)); do
  for v in "${variants[@]}"; do
    read -r -a p <<<"$(prefix_of "$v")"
    file=${p[-1]}
    redirect=${p[-2]}
    unset 'p[-1]'
    unset 'p[-1]'
    out=$(/usr/bin/time -f '%e %U %S %R' bash -c 'for ((i = 0; i < $1; ++i)); do "${@:4}" sh -c "echo x $2 $3"; done' \
          bench "$runs" "$redirect" "$file" "${p[@]}" 2>&1 >/dev/null | tail -1)
    read -r e u s f <<<"$out"
    wall[$v]+="$(awk -v e="$e" -v n="$runs" 'BEGIN { printf "%.3f", e * 1000 / n }') "
    cpu[$v]+="$(awk -v u="$u" -v s="$s" -v n="$runs" 'BEGIN { printf "%.3f", (u + s) * 1000 / n }') "
    faults[$v]+="$(awk -v f="$f" -v n="$runs" 'BEGIN { printf "%.0f", f / n }') "
  done
done
# shellcheck source=bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"  # median, host_line
echo "a short process under the preload library: $runs processes of sh -c 'echo x >> FILE' (remade: > FILE) per run, $rounds interleaved rounds, medians"
echo "$(host_line); $lib"
[ -z "$before" ] || echo "before: $before"
printf '%-14s %12s %12s %16s\n' variant "wall ms" "CPU ms" "minor faults"
for v in "${variants[@]}"; do
  printf '%-14s %12s %12s %16s\n' "$v" "$(echo "${wall[$v]}" | median)" "$(echo "${cpu[$v]}" | median)" "$(echo "${faults[$v]}" | median)"
done
echo "(per process, the loop's bash and env included alike; CPU = user + system of every child)"

command -v git >/dev/null || commits=0
[ "$commits" -gt 0 ] || exit 0
git_run() {  # library ("" for none) -> seconds for $commits commits in a fresh routed repository
  local repo=$dir/routed/repo
  rm -rf "$repo" && mkdir -p "$repo"
  git -C "$repo" init -q && git -C "$repo" config core.fsync all &&
    git -C "$repo" config user.email bench@localhost && git -C "$repo" config user.name bench
  local t0 t1
  t0=$(date +%s.%N)
  for ((i = 0; i < commits; ++i)); do
    echo "$i" >"$repo/f$i"
    if [ -n "$1" ]; then
      env LD_PRELOAD="$1" TAI_PRELOAD_PATHS="$dir/routed" git -C "$repo" add "f$i"
      env LD_PRELOAD="$1" TAI_PRELOAD_PATHS="$dir/routed" git -C "$repo" commit -qm "$i"
    else
      git -C "$repo" add "f$i" && git -C "$repo" commit -qm "$i"
    fi
  done
  t1=$(date +%s.%N)
  [ "$(git -C "$repo" rev-list --count HEAD)" = "$commits" ] || { echo "process_start_bench: git made the wrong number of commits" >&2; exit 1; }
  git -C "$repo" fsck --no-progress >/dev/null 2>&1 || { echo "process_start_bench: git fsck failed" >&2; exit 1; }
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}
gits=(alone after)
[ -z "$before" ] || gits+=(before)
declare -A gsec
for ((r = 0; r < rounds; ++r)); do
  for g in "${gits[@]}"; do
    case $g in alone) l="";; after) l=$lib;; before) l=$before;; esac
    gsec[$g]+="$(git_run "$l") "
  done
done
echo
echo "git $(git --version | cut -d' ' -f3): $commits commits of one small file each (git add, git commit; core.fsync=all) in a routed directory, seconds, $rounds interleaved rounds, medians"
for g in "${gits[@]}"; do printf '%-14s %8s   (%s)\n' "$g" "$(echo "${gsec[$g]}" | median)" "${gsec[$g]% }"; done
