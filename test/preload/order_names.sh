#!/usr/bin/env bash
# order_names.sh - the preload library under TAI_FSYNC=order syncs the directory of the names a
# program changes (rename, unlink, rmdir) and makes (a new file, mkdir, symlink) under TAI_PRELOAD_PATHS with the epoch
# they were made in, so that no later epoch's writes reach the device before the name change is
# durable; it syncs no directory outside those paths, and under `full` none at all. A Python program replaces a file atomically three times (write a
# temporary file, fsync, rename it over the current one, then a record in a log and an fsync) and
# unlinks the result; strace -y names the descriptor of every fsync, and the layer's own (its
# order thread's) fsyncs of the directory are counted in each mode. The files must hold what the
# program wrote.
#
# Environment: PRELOAD_LIB (empty: skip), WORK (scratch root), SANITIZER_RUNTIME (set in the
# sanitizer builds: skip).
# Exit: 0 pass, 1 fail, 77 skip (no library, a sanitizer build, no python3, no strace, or ptrace
# not permitted).
set -u -o pipefail
lib=${PRELOAD_LIB:-}
work=${WORK:-/tmp/tai-preload-work}/order_names
[ -n "$lib" ] && [ -f "$lib" ] || { echo "skip: no preload library in this build"; exit 77; }
[ -z "${SANITIZER_RUNTIME:-}" ] || { echo "skip: a sanitizer build (its runtime adds system calls; the release build counts them)"; exit 77; }
command -v python3 >/dev/null || { echo "skip: python3 not installed"; exit 77; }
command -v strace >/dev/null || { echo "skip: strace not installed"; exit 77; }
if ! strace -f -o /dev/null true 2>/dev/null; then echo "skip: strace cannot trace here (ptrace not permitted)"; exit 77; fi

program='
import os, sys
d, outside = sys.argv[1], sys.argv[2]
log = os.open(d + "/log", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
# A name changed outside TAI_PRELOAD_PATHS: not for the order mode to sync.
open(outside + "/a", "w").close()
os.rename(outside + "/a", outside + "/b")
for r in range(3):
    t = os.open(d + "/tmp", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(t, bytes([65 + r]) * 1000)
    os.fsync(t)
    os.close(t)
    os.rename(d + "/tmp", d + "/current")
    os.pwrite(log, b"record %d\n" % r, 9 * r)
    os.fsync(log)
os.unlink(d + "/current")
os.pwrite(log, b"done\n", 27)
os.fsync(log)
# Names made and a directory removed, each in a directory of its own (made before the run).
os.mkdir(d + "/made/new")
f = os.open(d + "/made/new/f", os.O_RDWR | os.O_CREAT, 0o644)
os.write(f, b"in a new directory\n")
os.fsync(f)
os.close(f)
os.symlink("../made/new/f", d + "/linked/ln")
os.rmdir(d + "/removed/old")
os.mkdir(outside + "/new")
os.pwrite(log, b"end\n", 32)
os.fsync(log)
os.close(log)
'
# fsyncs (and syncfs) in trace $1 of the directory $2 that succeeded (strace -y prints the
# canonical path of each descriptor).
syncs_of() {
  grep -E "^[0-9]+ +(fsync|syncfs)\(" "$1" | grep -cF "<$2>) = 0" || true  # grep -c says 0 and fails
}
# Runs the program under strace in mode $1; prints the layer's fsyncs of the directory, and of
# the one outside TAI_PRELOAD_PATHS.
directory_syncs() {
  local mode=$1 dir=$work/$1 outside=$work/outside-$1
  rm -rf "$dir" "$outside" && mkdir -p "$dir/made" "$dir/linked" "$dir/removed/old" "$outside"
  dir=$(cd "$dir" && pwd -P) outside=$(cd "$outside" && pwd -P)
  env LD_PRELOAD="$lib" TAI_PRELOAD_PATHS="$dir" TAI_PRELOAD_LOG=1 TAI_FSYNC="$mode" \
    strace -f -y -e trace=fsync,fdatasync,syncfs -o "$work/trace.$mode" python3 -c "$program" "$dir" "$outside" 2>"$work/log.$mode" || {
    echo "FAIL: the program failed under the preload library (TAI_FSYNC=$mode):" >&2; cat "$work/log.$mode" >&2; return 1; }
  grep -q "routed $dir/log" "$work/log.$mode" || { echo "FAIL: the log was not routed ($mode):" >&2; cat "$work/log.$mode" >&2; return 1; }
  [ "$(cat "$dir/log")" = "$(printf 'record 0\nrecord 1\nrecord 2\ndone\nend')" ] || { echo "FAIL: the log holds: $(cat "$dir/log") ($mode)" >&2; return 1; }
  [ ! -e "$dir/current" ] && [ ! -e "$dir/tmp" ] || { echo "FAIL: a name is left ($mode): $(ls "$dir")" >&2; return 1; }
  [ "$(cat "$dir/linked/ln")" = "in a new directory" ] && [ ! -e "$dir/removed/old" ] && [ -d "$outside/new" ] ||
    { echo "FAIL: mkdir, symlink or rmdir did not do their work ($mode): $(ls -lR "$dir")" >&2; return 1; }
  local t=$work/trace.$mode
  echo "$(syncs_of "$t" "$dir") $(syncs_of "$t" "$outside") $(syncs_of "$t" "$dir/made") $(syncs_of "$t" "$dir/linked") $(syncs_of "$t" "$dir/removed")"
}
rm -rf "$work" && mkdir -p "$work"
read -r full full_outside full_made full_linked full_removed < <(directory_syncs full) || exit 1
read -r order order_outside order_made order_linked order_removed < <(directory_syncs order) || exit 1
[ -n "$full_removed" ] && [ -n "$order_removed" ] || exit 1
echo "directory syncs: full $full, order $order (3 renames and an unlink, each in its own epoch); outside the routed directory: full $full_outside, order $order_outside"
echo "parents of a mkdir, a symlink and an rmdir: full $full_made $full_linked $full_removed, order $order_made $order_linked $order_removed"
[ "$full" -eq 0 ] && [ "$full_made" -eq 0 ] && [ "$full_linked" -eq 0 ] && [ "$full_removed" -eq 0 ] ||
  { echo "FAIL: the layer synced a directory under TAI_FSYNC=full"; exit 1; }
[ "$order_made" -ge 1 ] && [ "$order_linked" -ge 1 ] && [ "$order_removed" -ge 1 ] ||
  { echo "FAIL: under TAI_FSYNC=order the parent of a mkdir, symlink or rmdir was not synced:"; grep -E "fsync|syncfs" "$work/trace.order"; exit 1; }
[ "$order_outside" -eq 0 ] && [ "$full_outside" -eq 0 ] || { echo "FAIL: a directory outside TAI_PRELOAD_PATHS was synced"; exit 1; }
# Each replacement's rename and the next file's creation fall in the epoch that the log's fsync
# closes, and the unlink in the last one: at least one sync of the directory per round.
[ "$order" -ge 3 ] || { echo "FAIL: under TAI_FSYNC=order the directory was synced $order times (want at least 3):"; grep -E "fsync|syncfs" "$work/trace.order"; exit 1; }
echo "PASS"
