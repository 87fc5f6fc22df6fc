#!/usr/bin/env bash
# The fsync modes of the preload library side by side, on the local disk: `full` (POSIX
# durability, the default), `order` (TAI_FSYNC=order: fsync is an ordering barrier, durability
# lags), `log` (order with TAI_FSYNC_LOG_DIR: the epochs queued behind the device go to a log in
# batches, one device sync per batch), and `none` (every fsync a no-op: the unsafe upper bound, for this benchmark only; it is
# switched on by TAI_FSYNC_BENCHMARK_ONLY_NONE=1, which is no user setting), and `floor`: no TAI,
# but a preloaded shim (fsync_floor_shim.c) that makes the program wait for the device exactly where
# the order mode's contract does (a close of a written file, an unlink, rename or truncation, exit:
# every file written before the last fsync is synced there) and nowhere else; what those waits cost by
# themselves, with the ordering between fsyncs free. Workloads:
#   sqlite-delete  N single-row transactions, journal_mode=DELETE, synchronous=FULL
#   sqlite-wal     N single-row transactions, journal_mode=WAL, synchronous=FULL
#   sqlite-wal-excl  the same with locking_mode=EXCLUSIVE (no record lock per transaction: a
#                  routed file's unlock must publish its writes to other processes, which under
#                  `order` waits for the epochs before it)
#   fdatasync      a loop of 4 KiB writes, each followed by fdatasync (a small C program)
#   serial-1/-30   tai-serial --mode posix, --fsync-every 1 and 30 (if built)
#   git            N commits of one small file each (git init, then add + commit per file, with
#                  core.fsync=all: every object, index and ref write synced), checked by git fsck
#                  and the tree of every commit
#   untar          tar extracting N small files (1-16 KiB, made once per run of this script) and
#                  syncing none: a program that never fsyncs, whose closes and exit must cost no
#                  device wait under `order` either (GNU tar, checked by the files' bytes)
# Interleaved (every workload and mode once per round, round after round), medians of the
# rounds; each run starts from an empty directory, and every SQLite table is checked. The last
# columns are `order`'s and `log`'s gains as fractions of `none`'s gain, all over `full`:
# (full/order - 1) / (full/none - 1); then of `floor`'s gain, the most the contract leaves to win.
#
#   bench/preload/fsync_modes_bench.sh [--lib PATH] [--serial PATH] [--rounds 3] [--txns 2000]
#                                      [--loops 2000] [--images 30] [--commits 500] [--files 2000]
#                                      [--dir DIR] [--only LIST]
set -euo pipefail
lib=build/release/src/preload/libtai-preload.so
serial=build/release/workloads/serial/tai-serial
rounds=3
txns=2000
loops=2000
images=30
commits=500
files=2000
dir=${TMPDIR:-/var/tmp}/tai-fsync-modes-bench
only="sqlite-delete sqlite-wal sqlite-wal-excl fdatasync serial-1 serial-30 git untar"
while [ $# -gt 0 ]; do
  case "$1" in
    --lib) lib=$2; shift 2;;
    --serial) serial=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --txns) txns=$2; shift 2;;
    --loops) loops=$2; shift 2;;
    --images) images=$2; shift 2;;
    --commits) commits=$2; shift 2;;
    --files) files=$2; shift 2;;
    --dir) dir=$2; shift 2;;
    --only) only=$2; shift 2;;
    *) echo "usage: $0 [--lib PATH] [--serial PATH] [--rounds N] [--txns N] [--loops N] [--images N] [--commits N] [--files N] [--dir DIR] [--only LIST]" >&2; exit 2;;
  esac
done
[ -f "$lib" ] || { echo "fsync_modes_bench: $lib not found: build it first (make release)" >&2; exit 1; }
lib=$(realpath "$lib")
workloads=()
for w in $only; do
  case $w in
    sqlite-*) command -v sqlite3 >/dev/null || { echo "fsync_modes_bench: sqlite3 not found: $w skipped" >&2; continue; } ;;
    serial-*) [ -x "$serial" ] || { echo "fsync_modes_bench: $serial not built: $w skipped" >&2; continue; } ;;
    fdatasync) command -v cc >/dev/null || { echo "fsync_modes_bench: no C compiler: $w skipped" >&2; continue; } ;;
    git) command -v git >/dev/null || { echo "fsync_modes_bench: git not found: $w skipped" >&2; continue; } ;;
    untar) command -v tar >/dev/null || { echo "fsync_modes_bench: tar not found: $w skipped" >&2; continue; } ;;
  esac
  workloads+=("$w")
done
[ -x "$serial" ] && serial=$(realpath "$serial")
mkdir -p "$dir"
modes=(full order log none)
floor_lib=$dir/fsync_floor_shim.so
if command -v cc >/dev/null && cc -O2 -shared -fPIC -o "$floor_lib" "$(dirname "${BASH_SOURCE[0]}")/fsync_floor_shim.c" -ldl; then
  modes+=(floor)
else
  echo "fsync_modes_bench: the floor shim could not be built (no C compiler?): no floor column" >&2
fi

for jm in DELETE WAL WAL-EXCL; do
  awk -v n="$txns" -v jm="$jm" -f "$(dirname "${BASH_SOURCE[0]}")/sqlite_load.awk" >"$dir/load-$jm.sql"
done
loop_bin=$dir/fdatasync_loop
cat >"$dir/fdatasync_loop.c" <<'EOF'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const long n = atol(argv[2]);
  const int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) { perror("open"); return 1; }
  char buf[4096];
  for (long i = 0; i < n; ++i) {
    memset(buf, (int)(i % 251) + 1, sizeof buf);
    if (pwrite(fd, buf, sizeof buf, (off_t)i * 4096) != (ssize_t)sizeof buf) { perror("pwrite"); return 1; }
    if (fdatasync(fd) != 0) { perror("fdatasync"); return 1; }
  }
  return close(fd) == 0 ? 0 : 1;
}
EOF
if [[ " ${workloads[*]} " == *" fdatasync "* ]]; then cc -O2 -o "$loop_bin" "$dir/fdatasync_loop.c"; fi
if [[ " ${workloads[*]} " == *" untar "* ]]; then
  # $files files of 1-16 KiB in 20 directories, the same bytes for every run of this script.
  rm -rf "$dir/untar-src" && mkdir -p "$dir/untar-src"
  awk -v n="$files" -v d="$dir/untar-src" 'BEGIN {
    srand(7)
    for (i = 0; i < 20; ++i) system("mkdir -p " d "/d" i)
    for (i = 0; i < n; ++i) {
      f = d "/d" (i % 20) "/f" i ".txt"; size = 1024 + int(rand() * 15360); line = ""
      while (length(line) < size) line = line sprintf("%d %d\n", i, length(line))
      printf "%s", line > f; close(f)
    }
  }'
  tar cf "$dir/untar.tar" -C "$dir/untar-src" .
fi

env_of() {  # mode -> environment
  case $1 in
    full) echo "TAI_FSYNC=full" ;;
    order) echo "TAI_FSYNC=order" ;;
    log) echo "TAI_FSYNC=order TAI_FSYNC_LOG_DIR=$dir/order-log" ;;
    none) echo "TAI_FSYNC=full TAI_FSYNC_BENCHMARK_ONLY_NONE=1" ;;
    floor) echo "LD_PRELOAD=$floor_lib" ;;  # after the library's LD_PRELOAD: replaces it
  esac
}
now() { date +%s.%N; }
declare -A times expect
run() {  # workload mode -> seconds on stdout
  local w=$1 m=$2 out=$dir/out
  rm -rf "$out" "$dir/order-log" && mkdir -p "$out" "$dir/order-log"
  sync
  local pre="env LD_PRELOAD=$lib TAI_PRELOAD_PATHS=$out $(env_of "$m")"
  local t0 t1 got=""
  t0=$(now)
  case $w in
    sqlite-delete) timeout 1200 $pre sqlite3 -bail "$out/t.db" ".read '$dir/load-DELETE.sql'" >/dev/null 2>"$dir/err" ;;
    sqlite-wal) timeout 1200 $pre sqlite3 -bail "$out/t.db" ".read '$dir/load-WAL.sql'" >/dev/null 2>"$dir/err" ;;
    sqlite-wal-excl) timeout 1200 $pre sqlite3 -bail "$out/t.db" ".read '$dir/load-WAL-EXCL.sql'" >/dev/null 2>"$dir/err" ;;
    fdatasync) timeout 1200 $pre "$loop_bin" "$out/f.dat" "$loops" 2>"$dir/err" ;;
    serial-*) timeout 1200 $pre "$serial" --mode posix --images "$images" --fsync-every "${w#serial-}" --output "$out/s" >/dev/null 2>"$dir/err" ;;
    git) timeout 1200 $pre bash -c '
           set -e
           git init -q "$1/repo" && cd "$1/repo"
           git config core.fsync all && git config user.name bench && git config user.email bench@localhost
           for ((i = 1; i <= $2; ++i)); do
             echo "file $i" >"f$i.txt"
             git add "f$i.txt"
             git commit -q -m "commit $i"
           done' git-bench "$out" "$commits" 2>"$dir/err" ;;
    untar) timeout 1200 $pre tar xf "$dir/untar.tar" -C "$out" 2>"$dir/err" ;;
  esac
  t1=$(now)
  grep -v "benchmark-only mode" "$dir/err" >&2 || true
  case $w in
    sqlite-*) got=$(sqlite3 "$out/t.db" "PRAGMA integrity_check; SELECT count(*), sum(x), total(length(y)) FROM t;" | tr '\n' ' ') ;;
    fdatasync) got=$(cksum <"$out/f.dat") ;;
    serial-*) got=$(cat "$out"/s/* 2>/dev/null | cksum) ;;
    git) got=$(git -C "$out/repo" fsck --strict >/dev/null 2>&1 && git -C "$out/repo" log --format=%T | cksum) ;;
    untar) got=$(cd "$out" && find . -type f | LC_ALL=C sort | xargs cat | cksum) ;;
  esac
  if [ -z "${expect[$w]:-}" ]; then expect[$w]=$got; fi
  [ "$got" = "${expect[$w]}" ] || { echo "fsync_modes_bench: $w under $m: the output differs ($got, expected ${expect[$w]})" >&2; exit 1; }
  awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.4f", a - b }'
}
for ((r = 0; r < rounds; ++r)); do
  for w in "${workloads[@]}"; do
    for m in "${modes[@]}"; do
      t=$(run "$w" "$m")
      times[$w.$m]+="$t "
    done
  done
done
# shellcheck source=bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"  # median, host_line
echo "fsync modes under the preload ($lib), $rounds interleaved rounds, medians; in $dir"
echo "sqlite3 $(sqlite3 --version 2>/dev/null | cut -d' ' -f1): $txns transactions per run; fdatasync loop: $loops x 4 KiB; tai-serial: $images images; $(git --version 2>/dev/null): $commits commits; untar: $files files"
echo "$(host_line); file system $(stat -f -c %T "$dir")"
printf '%-14s %8s %8s %8s %8s %8s %10s %10s %10s %10s %10s %10s %10s %10s\n' workload "full s" "order s" \
  "log s" "none s" "floor s" "full/order" "full/log" "full/none" "full/floor" "order/none" "log/none" "order/floor" "log/floor"
gain() { awk -v s="$1" -v c="$2" 'BEGIN { printf "%.2f", (c > 1 ? (s - 1) / (c - 1) : 0) }'; }
for w in "${workloads[@]}"; do
  f=$(echo "${times[$w.full]}" | median)
  o=$(echo "${times[$w.order]}" | median)
  l=$(echo "${times[$w.log]}" | median)
  n=$(echo "${times[$w.none]}" | median)
  c=$(echo "${times[$w.floor]:-}" | median)
  [ -n "$c" ] || c=$f  # no floor run: its columns say 1.00x and 0
  read -r so sl sn sc < <(awk -v f="$f" -v o="$o" -v l="$l" -v n="$n" -v c="$c" 'BEGIN { print f / o, f / l, f / n, f / c }')
  printf '%-14s %8.3f %8.3f %8.3f %8.3f %8.3f %9.2fx %9.2fx %9.2fx %9.2fx %10s %10s %10s %10s\n' "$w" "$f" "$o" "$l" "$n" "$c" \
    "$so" "$sl" "$sn" "$sc" "$(gain "$so" "$sn")" "$(gain "$sl" "$sn")" "$(gain "$so" "$sc")" "$(gain "$sl" "$sc")"
done
echo
echo "runs (s):"
for w in "${workloads[@]}"; do
  for m in "${modes[@]}"; do printf '  %-14s %-6s %s\n' "$w" "$m" "${times[$w.$m]}"; done
done
