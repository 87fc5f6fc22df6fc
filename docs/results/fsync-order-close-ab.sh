#!/usr/bin/env bash
# Usage: docs/results/fsync-order-close-ab.sh BEFORE.so AFTER.so [rounds] [commits] (after a run of
# bench/preload/fsync_modes_bench.sh, which makes untar.tar). Raw output: fsync-order-close-amd-f25.txt.
# A B comparison of two preload libraries under TAI_FSYNC=order (and full with the new one), on
# git (N commits, core.fsync=all) and tar extracting the fsync-modes benchmark's untar.tar.
set -euo pipefail
before=$1 after=$2 rounds=${3:-5} commits=${4:-100}
dir=/var/tmp/ab/run
tarball=/var/tmp/tai-fsync-modes-bench/untar.tar
declare -A t
one() {  # workload variant
  local w=$1 v=$2 lib mode
  case $v in before) lib=$before mode=order ;; after) lib=$after mode=order ;; full) lib=$after mode=full ;; esac
  rm -rf "$dir" && mkdir -p "$dir" && sync
  local s e
  s=$(date +%s.%N)
  case $w in
    git) env LD_PRELOAD=$lib TAI_PRELOAD_PATHS=$dir TAI_FSYNC=$mode bash -c '
           set -e; git init -q "$1/repo" && cd "$1/repo"
           git config core.fsync all && git config user.name b && git config user.email b@l
           for ((i = 1; i <= $2; ++i)); do echo "file $i" >"f$i.txt"; git add "f$i.txt"; git commit -q -m "c $i"; done' x "$dir" "$commits" ;;
    untar) env LD_PRELOAD=$lib TAI_PRELOAD_PATHS=$dir TAI_FSYNC=$mode tar xf "$tarball" -C "$dir" ;;
  esac
  e=$(date +%s.%N)
  case $w in
    git) git -C "$dir/repo" fsck --strict >/dev/null 2>&1 || { echo "fsck failed ($v)" >&2; exit 1; } ;;
    untar) [ "$(cd "$dir" && find . -type f | LC_ALL=C sort | xargs cat | cksum)" = "$want" ] || { echo "untar differs ($v)" >&2; exit 1; } ;;
  esac
  awk -v a="$e" -v b="$s" 'BEGIN { printf "%.3f", a - b }'
}
mkdir -p /var/tmp/ab/src && tar xf "$tarball" -C /var/tmp/ab/src
want=$(cd /var/tmp/ab/src && find . -type f | LC_ALL=C sort | xargs cat | cksum)
for ((r = 0; r < rounds; ++r)); do
  for w in git untar; do
    for v in before after full; do t[$w.$v]+="$(one $w $v) "; done
  done
done
med() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf '%-7s %-7s %8s   %s\n' workload variant "median s" "runs (s)"
for w in git untar; do for v in before after full; do printf '%-7s %-7s %8s   %s\n' $w $v "$(echo ${t[$w.$v]} | med)" "${t[$w.$v]}"; done; done
