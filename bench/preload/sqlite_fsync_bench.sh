#!/usr/bin/env bash
# SQLite's fsync-bound shape under the preload library: N autocommit inserts (each its own
# transaction), PRAGMA synchronous=FULL, rollback journal (journal_mode=DELETE: the journal is
# created, written, synced and deleted by every transaction), plain and under the preload with
# the database's directory routed. Interleaved (A B A B ...), medians of the rounds; each run
# starts from an empty directory, and every run's table is checked (count and sums).
#
#   bench/preload/sqlite_fsync_bench.sh [--lib PATH] [--before-lib PATH] [--rounds 5]
#                                       [--inserts 1500] [--dir DIR] [--counters]
#
# --before-lib adds a third variant, the same run under another build of the library (the
# branch point), so that a change is measured against its base in the same interleaving.
# --counters runs each variant once more under /usr/bin/time -v and strace -c -f and prints
# context switches and system calls per transaction.
set -euo pipefail
lib=build/release/src/preload/libtai-preload.so
before=""
rounds=5
inserts=1500
dir=${TMPDIR:-/var/tmp}/tai-sqlite-bench
counters=0
while [ $# -gt 0 ]; do
  case "$1" in
    --lib) lib=$2; shift 2;;
    --before-lib) before=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --inserts) inserts=$2; shift 2;;
    --dir) dir=$2; shift 2;;
    --counters) counters=1; shift;;
    *) echo "usage: $0 [--lib PATH] [--before-lib PATH] [--rounds N] [--inserts N] [--dir DIR] [--counters]" >&2; exit 2;;
  esac
done
command -v sqlite3 >/dev/null || { echo "sqlite_fsync_bench: sqlite3 not found (apt-get install sqlite3)" >&2; exit 1; }
[ -f "$lib" ] || { echo "sqlite_fsync_bench: $lib not found: build it first (make release)" >&2; exit 1; }
lib=$(realpath "$lib")
[ -z "$before" ] || before=$(realpath "$before")
mkdir -p "$dir/db"
sql="$dir/load.sql"
awk -v n="$inserts" -v jm=DELETE -f "$(dirname "${BASH_SOURCE[0]}")/sqlite_load.awk" >"$sql"
check_query="SELECT count(*), sum(x), total(length(y)) FROM t;"
expect=""

now() { date +%s.%N; }
declare -A times
variants=(libc preload)
[ -z "$before" ] || variants=(libc before preload)
cmd_of() {  # variant -> the command prefix
  case $1 in
    libc) echo "env" ;;
    preload) echo "env LD_PRELOAD=$lib TAI_PRELOAD_PATHS=$dir/db" ;;
    before) echo "env LD_PRELOAD=$before TAI_PRELOAD_PATHS=$dir/db" ;;
  esac
}
run() {  # variant [wrapper...]
  local v=$1; shift
  rm -rf "$dir/db" && mkdir -p "$dir/db"
  sync
  local t0 t1
  t0=$(now)
  "$@" $(cmd_of "$v") sqlite3 -bail "$dir/db/t.db" ".read '$sql'" >/dev/null
  t1=$(now)
  local got
  got=$(sqlite3 "$dir/db/t.db" "$check_query")
  if [ -z "$expect" ]; then expect=$got; fi
  [ "$got" = "$expect" ] || { echo "sqlite_fsync_bench: $v: the table differs ($got, expected $expect)" >&2; exit 1; }
  echo "$t0 $t1"
}
for ((r = 0; r < rounds; ++r)); do
  for v in "${variants[@]}"; do
    read -r t0 t1 < <(run "$v")
    times[$v]+="$(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.4f", a - b }') "
  done
done
# shellcheck source=bench_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"  # median, host_line
echo "sqlite3 $(sqlite3 --version | cut -d' ' -f1): $inserts autocommit inserts, synchronous=FULL, journal_mode=DELETE, in $dir/db"
host_line
printf '%-8s %9s %9s   %s\n' variant "median s" "libc/this" "runs (s)"
base=$(echo "${times[libc]}" | median)
for v in "${variants[@]}"; do
  m=$(echo "${times[$v]}" | median)
  printf '%-8s %9.3f %8.3fx   %s\n' "$v" "$m" "$(awk -v a="$base" -v b="$m" 'BEGIN { print a / b }')" "${times[$v]}"
done
if [ "$counters" = 1 ]; then
  echo
  echo "counters (two more runs each: /usr/bin/time -v, then strace -c -f; per transaction = per insert):"
  printf '%-8s %10s %10s %10s %10s %10s\n' variant "vol cs" "invol cs" "syscalls" futex fsync+fdatasync
  for v in "${variants[@]}"; do
    tv=$(mktemp) ts=$(mktemp)
    run "$v" /usr/bin/time -v -o "$tv" >/dev/null
    run "$v" strace -f -c -o "$ts" >/dev/null
    vol=$(awk -F: '/Voluntary context switches/ {print $2+0}' "$tv")
    inv=$(awk -F: '/Involuntary context switches/ {print $2+0}' "$tv")
    total=$(awk '$NF == "total" {print $4}' "$ts")
    fut=$(awk '$NF == "futex" {print $4}' "$ts")
    syn=$(awk '$NF == "fsync" || $NF == "fdatasync" {s += $4} END {print s+0}' "$ts")
    per() { awk -v a="${1:-0}" -v n="$inserts" 'BEGIN { printf "%.1f", a / n }'; }
    printf '%-8s %10s %10s %10s %10s %10s\n' "$v" "$(per "$vol")" "$(per "$inv")" "$(per "$total")" "$(per "$fut")" "$(per "$syn")"
    rm -f "$tv" "$ts"
  done
fi
