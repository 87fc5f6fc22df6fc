#!/usr/bin/env bash
# sqlite_syscalls.sh - what the preload library adds to SQLite's system calls once its files
# are write-through (synced after little data, TAI_SYNC_THROUGH): SQLite's record locks and its
# fstat of the database go to the kernel without entering the layer (nothing is cached, so
# there is nothing to write back first and no cached size to add), a routed open asks for
# /proc/self/fd at most once, and the directory SQLite opens to sync is not looked up in /proc.
# Those are seen in a run with TAI_PRELOAD_SIGNAL_MASK=eager, whose two rt_sigprocmask calls
# mark every entry into the layer. A second run with the default (lazy) mask checks that the
# routed calls make no rt_sigprocmask at all (sqlite3 installs a SIGINT handler, so every
# routed call runs with a program handler that the layer must hold off).
# Runs sqlite3 with autocommit inserts (rollback journal, synchronous=FULL) under strace and
# counts.
#
# Environment: PRELOAD_LIB (empty: skip), WORK (scratch root), SANITIZER_RUNTIME (set in the
# sanitizer builds: skip).
# Exit: 0 pass, 1 fail, 77 skip (no library, a sanitizer build, no sqlite3, no strace, or ptrace
# not permitted).
set -u -o pipefail
lib=${PRELOAD_LIB:-}
work=${WORK:-/tmp/tai-preload-work}/sqlite_syscalls
[ -n "$lib" ] && [ -f "$lib" ] || { echo "skip: no preload library in this build"; exit 77; }
# An instrumented library needs its sanitizer runtime loaded first, and the runtime makes system
# calls of its own (and intercepts the ones counted here): the counts below are the plain
# library's, which the release build checks.
[ -z "${SANITIZER_RUNTIME:-}" ] || { echo "skip: a sanitizer build (its runtime adds and intercepts system calls; the release build counts them)"; exit 77; }
command -v sqlite3 >/dev/null || { echo "skip: sqlite3 not installed"; exit 77; }
command -v strace >/dev/null || { echo "skip: strace not installed"; exit 77; }
if ! strace -f -o /dev/null true 2>/dev/null; then echo "skip: strace cannot trace here (ptrace not permitted)"; exit 77; fi

rm -rf "$work" && mkdir -p "$work/db"
n=30
{
  echo "PRAGMA journal_mode=DELETE;"
  echo "PRAGMA synchronous=FULL;"
  echo "CREATE TABLE t(id INTEGER PRIMARY KEY, x INTEGER NOT NULL);"
  for ((i = 1; i <= n; ++i)); do echo "INSERT INTO t(x) VALUES($i);"; done
} >"$work/load.sql"
# The load under strace from an empty database directory, with the signal-mask mode given;
# the database must have been routed and hold every row.
traced_load() {  # trace-file mask-mode
  rm -rf "$work/db" && mkdir -p "$work/db"
  env LD_PRELOAD="$lib" TAI_PRELOAD_PATHS="$work/db" TAI_PRELOAD_LOG=1 TAI_PRELOAD_SIGNAL_MASK="$2" \
    strace -f -s 512 -o "$1" \
    sqlite3 -bail "$work/db/t.db" ".read '$work/load.sql'" >"$work/out" 2>"$work/log" || {
    echo "FAIL: sqlite3 under the preload library ($2 mask) failed:"; cat "$work/log"; exit 1; }
  grep -q "routed $work/db/t.db" "$work/log" || { echo "FAIL: t.db was not routed ($2 mask):"; cat "$work/log"; exit 1; }
  local got
  got=$(sqlite3 "$work/db/t.db" "SELECT count(*), sum(x) FROM t;")
  [ "$got" = "$n|$((n * (n + 1) / 2))" ] || { echo "FAIL: the table holds $got ($2 mask)"; exit 1; }
}
trace=$work/trace
traced_load "$trace" eager

main=$(awk 'NR == 1 {print $1; exit}' "$trace")
# A record lock right after the layer blocked signals and restored the mask with no system call
# in between (a write-back of every file that found nothing to do) went through the layer.
read -r locks masked < <(awk -v p="$main" '$1 == p {
    if ($0 ~ /fcntl\([0-9]+, F_(OFD_)?SETLKW?,/) {
      ++locks
      if (prev ~ /rt_sigprocmask\(SIG_SETMASK/ && prev2 ~ /rt_sigprocmask\(SIG_BLOCK/) ++masked
    }
    prev2 = prev; prev = $0 }
  END { print locks + 0, masked + 0 }' "$trace")
# fstat of a routed descriptor (the database, once per transaction) inside the mask: the layer's.
read -r fstats fmasked < <(awk -v p="$main" '$1 == p {
    if ($0 ~ /newfstatat\([0-9]+, "", .*AT_EMPTY_PATH/) { ++fstats; if (prev ~ /rt_sigprocmask\(SIG_BLOCK/) ++fmasked }
    prev = $0 }
  END { print fstats + 0, fmasked + 0 }' "$trace")
proc=$(grep -c 'access("/proc/self/fd"' "$trace")
# The path of a new descriptor is read from /proc only for regular files (the journal, once per
# transaction), not for the directory SQLite opens to sync it.
dirlinks=$(awk -v p="$main" -v d="$work/db\"" '$1 == p && /readlink\("\/proc\/self\/fd\// && index($0, d) {++n} END {print n + 0}' "$trace")
echo "$n transactions: $locks record locks, $masked of them inside the layer's signal mask; $fstats fstat of a descriptor, $fmasked of them inside the mask; $proc access(/proc/self/fd); $dirlinks /proc lookups of the directory's path"
fail=0
[ "$locks" -ge "$n" ] || { echo "FAIL: expected at least one record lock per transaction"; fail=1; }
# The first transactions run before the database went write-through; after that none.
[ $((masked * 4)) -lt "$locks" ] || { echo "FAIL: record locks on write-through files still pass through the layer"; fail=1; }
[ $((fmasked * 4)) -lt "$fstats" ] || { echo "FAIL: fstat of write-through files still passes through the layer"; fail=1; }
[ "$dirlinks" = 0 ] || { echo "FAIL: the directory's path was read from /proc $dirlinks times"; fail=1; }
[ "$proc" -le 1 ] || { echo "FAIL: /proc/self/fd asked for $proc times (once is enough)"; fail=1; }

# The default, lazy mask: the same load from an empty directory.
lazy=$work/trace.lazy
traced_load "$lazy" lazy
grep -q 'rt_sigaction(SIGINT, {sa_handler=' "$lazy" || echo "note: sqlite3 installed no SIGINT handler in this run"
lmain=$(awk 'NR == 1 {print $1; exit}' "$lazy")
masks=$(awk -v p="$lmain" '$1 == p && /rt_sigprocmask\(/ {++n} END {print n + 0}' "$lazy")
emasks=$(awk -v p="$main" '$1 == p && /rt_sigprocmask\(/ {++n} END {print n + 0}' "$trace")
echo "rt_sigprocmask calls of the main thread: $emasks with the eager mask, $masks with the lazy one ($n transactions)"
# A handful at start (the end handlers, the program's SIGINT handler, TAI's threads made with
# every signal blocked): fewer than one per transaction, where the eager mask makes about 36.
[ "$masks" -lt "$n" ] || { echo "FAIL: the lazy mask still makes rt_sigprocmask calls per routed call"; fail=1; }
[ "$emasks" -gt "$n" ] || { echo "FAIL: the eager mask made only $emasks rt_sigprocmask calls: TAI_PRELOAD_SIGNAL_MASK=eager not honoured"; fail=1; }
[ "$fail" = 0 ] && rm -rf "$work"
exit "$fail"
