#!/usr/bin/env bash
# What the preload library costs a short process: a job script's shells, coreutils and git
# commands each load it, and each that writes a routed file makes a controller. Three variants,
# each N processes of `sh -c 'echo x >> FILE'` (an append: no truncation on the clock):
#   plain     without the library
#   loaded    LD_PRELOAD set, the file outside TAI_PRELOAD_PATHS (nothing routed)
#   routed    LD_PRELOAD set, the file routed (the controller made, the write, exit)
# and, with --before LIB, the last two again with another build of the library. Interleaved
# rounds (every variant once per round), medians; per process: wall ms, CPU ms (user + system of
# the loop's children, from /usr/bin/time) and minor page faults.
#
#   bench/preload/process_start_bench.sh [--lib PATH] [--before PATH] [--runs 200] [--rounds 5] [--dir DIR]
set -euo pipefail
lib=build/release/src/preload/libtai-preload.so
before=""
runs=200
rounds=5
dir=${TMPDIR:-/var/tmp}/tai-process-start-bench
while [ $# -gt 0 ]; do
  case "$1" in
    --lib) lib=$2; shift 2;;
    --before) before=$2; shift 2;;
    --runs) runs=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --dir) dir=$2; shift 2;;
    *) echo "usage: $0 [--lib PATH] [--before PATH] [--runs N] [--rounds N] [--dir DIR]" >&2; exit 2;;
  esac
done
[ -f "$lib" ] || { echo "process_start_bench: $lib not found: build it first (make release)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "process_start_bench: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
lib=$(realpath "$lib")
[ -z "$before" ] || before=$(realpath "$before")
rm -rf "$dir" && mkdir -p "$dir/routed" "$dir/other"
variants=(plain loaded routed)
[ -z "$before" ] || variants+=(loaded-before routed-before)
prefix_of() {  # variant -> the environment of each process; the file it appends to
  case $1 in
    plain) echo "env $dir/routed/x" ;;
    loaded) echo "env LD_PRELOAD=$lib TAI_PRELOAD_PATHS=$dir/routed $dir/other/x" ;;
    routed) echo "env LD_PRELOAD=$lib TAI_PRELOAD_PATHS=$dir/routed $dir/routed/x" ;;
    loaded-before) echo "env LD_PRELOAD=$before TAI_PRELOAD_PATHS=$dir/routed $dir/other/x" ;;
    routed-before) echo "env LD_PRELOAD=$before TAI_PRELOAD_PATHS=$dir/routed $dir/routed/x" ;;
  esac
}
declare -A wall cpu faults
for ((r = 0; r < rounds; ++r)); do
  for v in "${variants[@]}"; do
    read -r -a p <<<"$(prefix_of "$v")"
    file=${p[-1]}
    unset 'p[-1]'
    out=$(/usr/bin/time -f '%e %U %S %R' bash -c 'for ((i = 0; i < $1; ++i)); do "${@:3}" sh -c "echo x >> $2"; done' \
          bench "$runs" "$file" "${p[@]}" 2>&1 >/dev/null | tail -1)
    read -r e u s f <<<"$out"
    wall[$v]+="$(awk -v e="$e" -v n="$runs" 'BEGIN { printf "%.3f", e * 1000 / n }') "
    cpu[$v]+="$(awk -v u="$u" -v s="$s" -v n="$runs" 'BEGIN { printf "%.3f", (u + s) * 1000 / n }') "
    faults[$v]+="$(awk -v f="$f" -v n="$runs" 'BEGIN { printf "%.0f", f / n }') "
  done
done
# shellcheck source=bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"  # median
echo "a short process under the preload library: $runs processes of sh -c 'echo x >> FILE' per run, $rounds interleaved rounds, medians"
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg); $lib"
[ -z "$before" ] || echo "before: $before"
printf '%-14s %12s %12s %16s\n' variant "wall ms" "CPU ms" "minor faults"
for v in "${variants[@]}"; do
  printf '%-14s %12s %12s %16s\n' "$v" "$(echo "${wall[$v]}" | median)" "$(echo "${cpu[$v]}" | median)" "$(echo "${faults[$v]}" | median)"
done
echo "(per process, the loop's bash and env included alike; CPU = user + system of every child)"
