#!/usr/bin/env bash
# The preload library's cost and gain on dd, interleaved (A B A B ...), medians of N rounds.
#
#   bench/preload/dd_bench.sh [--lib build/release/src/preload/libtai-preload.so] [--rounds 5]
#                             [--mib 512] [--dir DIR] [--csv FILE]
#
# Rows:
#   routed     dd if=input of=DIR/routed/out bs=4k conv=fsync, plain and under the preload with
#              TAI_PRELOAD_PATHS=DIR/routed (the output is routed through TAI)
#   not-routed the same dd under the preload with TAI_PRELOAD_PATHS naming another directory
#              (every call passes through: the interposers' own cost on file I/O)
#   dev-null   dd if=/dev/zero of=/dev/null bs=512 count=2M, plain and preloaded (the cost of
#              the interposers on calls they do not route: one check per read and write)
# The input is made once from /dev/urandom and evicted from the page cache before every run
# (so that reads come from the device for every variant alike); outputs are removed between runs.
set -euo pipefail
lib=build/release/src/preload/libtai-preload.so
rounds=5
mib=512
dir=${TMPDIR:-/var/tmp}/tai-preload-bench
csv=""
while [ $# -gt 0 ]; do
  case "$1" in
    --lib) lib=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --mib) mib=$2; shift 2;;
    --dir) dir=$2; shift 2;;
    --csv) csv=$2; shift 2;;
    *) echo "usage: $0 [--lib PATH] [--rounds N] [--mib N] [--dir DIR] [--csv FILE]" >&2; exit 2;;
  esac
done
[ -f "$lib" ] || { echo "dd_bench: $lib not found: build it first (make release)" >&2; exit 1; }
lib=$(realpath "$lib")
mkdir -p "$dir/routed" "$dir/other"
input="$dir/input.bin"
if [ ! -f "$input" ] || [ "$(stat -c %s "$input")" -ne $((mib * 1048576)) ]; then
  head -c $((mib * 1048576)) /dev/urandom > "$input"
  sync
fi

evict() {  # drop the input's pages (clean: dd wrote it long ago and we synced)
  python3 - "$1" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
PY
}

now() { date +%s.%N; }
declare -A times
run() {  # name, command...
  local name=$1; shift
  rm -f "$dir/routed/out"
  evict "$input"
  local t0 t1
  t0=$(now)
  "$@" >/dev/null 2>&1
  t1=$(now)
  times[$name]+="$(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.6f", a - b }') "
  if [[ $name == routed-* || $name == not-routed ]]; then
    cmp -s "$input" "$dir/routed/out" || { echo "dd_bench: $name: output differs from the input" >&2; exit 1; }
  fi
}

dd_file=(dd "if=$input" "of=$dir/routed/out" bs=4k conv=fsync status=none)
dd_null=(dd if=/dev/zero of=/dev/null bs=512 count=2097152 status=none)
for ((r = 0; r < rounds; ++r)); do
  run routed-plain "${dd_file[@]}"
  run routed-preload env LD_PRELOAD="$lib" TAI_PRELOAD_PATHS="$dir/routed" "${dd_file[@]}"
  run not-routed env LD_PRELOAD="$lib" TAI_PRELOAD_PATHS="$dir/other" "${dd_file[@]}"
  run null-plain "${dd_null[@]}"
  run null-preload env LD_PRELOAD="$lib" TAI_PRELOAD_PATHS="$dir/other" "${dd_null[@]}"
done

# shellcheck source=bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"  # median
declare -A med
for k in "${!times[@]}"; do med[$k]=$(echo "${times[$k]}" | median); done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
printf '# dd under libtai-preload.so: %d MiB input, %d interleaved rounds, median seconds (lower is better)\n' "$mib" "$rounds"
printf '# %s\n' "$(uname -r), $(nproc) cores, dir $dir"
printf '%-12s %-44s %10s %10s %12s\n' case what plain preload "preload/plain"
printf '%-12s %-44s %10.3f %10.3f %12s\n' routed "dd bs=4k conv=fsync, output routed" "${med[routed-plain]}" "${med[routed-preload]}" "$(ratio "${med[routed-preload]}" "${med[routed-plain]}")"
printf '%-12s %-44s %10.3f %10.3f %12s\n' not-routed "the same, output not under the paths" "${med[routed-plain]}" "${med[not-routed]}" "$(ratio "${med[not-routed]}" "${med[routed-plain]}")"
printf '%-12s %-44s %10.3f %10.3f %12s\n' dev-null "dd /dev/zero to /dev/null bs=512 x 2M" "${med[null-plain]}" "${med[null-preload]}" "$(ratio "${med[null-preload]}" "${med[null-plain]}")"
if [ -n "$csv" ]; then
  {
    echo "case,plain_s,preload_s,ratio"
    echo "routed,${med[routed-plain]},${med[routed-preload]},$(ratio "${med[routed-preload]}" "${med[routed-plain]}")"
    echo "not-routed,${med[routed-plain]},${med[not-routed]},$(ratio "${med[not-routed]}" "${med[routed-plain]}")"
    echo "dev-null,${med[null-plain]},${med[null-preload]},$(ratio "${med[null-preload]}" "${med[null-plain]}")"
  } > "$csv"
fi
