#!/usr/bin/env bash
# order_names.sh - the preload library under TAI_FSYNC=order syncs the directory of the names a
# program changes (rename, unlink) and makes (a new file) with the epoch they were made in, so
# that no later epoch's writes reach the device before the name change is durable; under `full`
# it adds no directory sync. A Python program replaces a file atomically three times (write a
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
d = sys.argv[1]
log = os.open(d + "/log", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
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
os.close(log)
'
# Runs the program under strace in mode $1; prints the layer's fsyncs of the directory.
directory_syncs() {
  local mode=$1 dir=$work/$1
  rm -rf "$dir" && mkdir -p "$dir"
  env LD_PRELOAD="$lib" TAI_PRELOAD_PATHS="$dir" TAI_PRELOAD_LOG=1 TAI_FSYNC="$mode" \
    strace -f -y -e trace=fsync,fdatasync,syncfs -o "$work/trace.$mode" python3 -c "$program" "$dir" 2>"$work/log.$mode" || {
    echo "FAIL: the program failed under the preload library (TAI_FSYNC=$mode):" >&2; cat "$work/log.$mode" >&2; return 1; }
  grep -q "routed $dir/log" "$work/log.$mode" || { echo "FAIL: the log was not routed ($mode):" >&2; cat "$work/log.$mode" >&2; return 1; }
  [ "$(cat "$dir/log")" = "$(printf 'record 0\nrecord 1\nrecord 2\ndone')" ] || { echo "FAIL: the log holds: $(cat "$dir/log") ($mode)" >&2; return 1; }
  [ ! -e "$dir/current" ] && [ ! -e "$dir/tmp" ] || { echo "FAIL: a name is left ($mode): $(ls "$dir")" >&2; return 1; }
  grep -cE "^[0-9]+ +(fsync|syncfs)\([0-9]+<${dir//\//\\/}>\) = 0" "$work/trace.$mode"  || true  # grep -c says 0 and fails
}
rm -rf "$work" && mkdir -p "$work"
full=$(directory_syncs full) || exit 1
order=$(directory_syncs order) || exit 1
echo "directory syncs: full $full, order $order (3 renames and an unlink, each in its own epoch)"
[ "$full" -eq 0 ] || { echo "FAIL: the layer synced the directory under TAI_FSYNC=full"; exit 1; }
# Each replacement's rename and the next file's creation fall in the epoch that the log's fsync
# closes, and the unlink in the last one: at least one sync of the directory per round.
[ "$order" -ge 3 ] || { echo "FAIL: under TAI_FSYNC=order the directory was synced $order times (want at least 3):"; grep -E "fsync|syncfs" "$work/trace.order"; exit 1; }
echo "PASS"
