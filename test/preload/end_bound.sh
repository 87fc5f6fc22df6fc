#!/usr/bin/env bash
# end_bound.sh - the bound of the preload's end handlers: at a fatal signal the handler hands the
# routed files' cache to the kernel through the layer's keeper thread and waits for it at most
# 5 s; a write-back that cannot finish must not keep the program from ending, and the handler
# must say what it left behind (with TAI_PRELOAD_LOG=1).
#
# The write-back is made to hang by freezing the file system the routed files are on (fsfreeze
# on a loop-mounted ext4, loop_fs.sh): every write to it then blocks in the kernel until it is
# thawed. tai_preload_ends (way "wait") writes its files (cached: early write-back, idle flush,
# write-around and write-through off, the write-behind deadline 10 minutes) and waits; then
#   run A: plain, SIGTERM: the reference files;
#   run B: preloaded, SIGTERM, not frozen: the handler writes back, the files equal A's;
#   run C: preloaded, the file system frozen, SIGTERM: within 5 s + slack the handler says the
#          write-back did not finish, how long it waited and the age of the oldest write it
#          leaves behind, and the main thread has taken the default action (a zombie: only the
#          threads blocked in the frozen file system are left); after the thaw the process ends
#          with the status of SIGTERM (143).
# Environment: PRELOAD_LIB, ENDS, WORK, SANITIZER_RUNTIME as for run_program_case.sh;
# END_BOUND_SLACK seconds above the 5 s (default 3, 6 with a sanitizer runtime).
# Exit: 0 pass, 1 fail, 77 skip (no library, not root, no fsfreeze/mkfs.ext4/loop device, TSan).
set -u -o pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

say() { echo "preload.end_bound: $*"; }
skip() {
  say "SKIP: $*"
  exit 77
}
fail() {
  say "FAIL: $*"
  for f in "${ROOT:-/nonexistent}"/*.stderr; do
    [[ -f $f ]] && { echo "----- $f -----"; tail -n 20 "$f"; }
  done
  exit 1
}

[[ -n ${PRELOAD_LIB:-} ]] || skip "PRELOAD_LIB is empty: this build has no tai_preload target"
[[ -f $PRELOAD_LIB ]] || fail "PRELOAD_LIB=$PRELOAD_LIB does not exist (build the tai_preload target first)"
[[ -n ${ENDS:-} && -x ${ENDS:-} ]] || fail "ENDS (tai_preload_ends) is not set or not executable: '${ENDS:-}'"
if [[ ${SANITIZER_RUNTIME:-} == *tsan* ]]; then
  skip "under ThreadSanitizer signal handlers run at TSan's next interceptor, not when the signal comes, so the handler's timing is TSan's; the release and ASan presets run it"
fi
[[ $(id -u) -eq 0 ]] || skip "freezing a file system (fsfreeze) and loop-mounting one need root"
for p in fsfreeze mkfs.ext4 mount umount timeout pgrep; do
  command -v "$p" >/dev/null 2>&1 || skip "$p is not installed"
done
PRELOAD=$(realpath "$PRELOAD_LIB")
if [[ -n ${SANITIZER_RUNTIME:-} ]]; then
  [[ -f $SANITIZER_RUNTIME ]] || skip "the sanitizer runtime '$SANITIZER_RUNTIME' was not found"
  PRELOAD="$SANITIZER_RUNTIME:$PRELOAD"
fi
BOUND_MS=5000
SLACK=${END_BOUND_SLACK:-3}
[[ -n ${SANITIZER_RUNTIME:-} && -z ${END_BOUND_SLACK:-} ]] && SLACK=6

WORK=${WORK:-/tmp/tai-preload-work}
mkdir -p "$WORK" || fail "cannot create WORK=$WORK"
ROOT=$(realpath "$WORK")/end_bound
FS=$ROOT/fs
pid=""
cleanup() {
  fsfreeze --unfreeze "$FS" >/dev/null 2>&1
  [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
  bash "$HERE/loop_fs.sh" umount "$FS" >/dev/null
}
trap cleanup EXIT
# ctest's timeout: never leave the file system frozen.
trap 'exit 1' TERM INT
rm -rf "$ROOT/A" "$ROOT"/*.stdout "$ROOT"/*.stderr
mkdir -p "$ROOT/A" "$FS" || fail "cannot create $ROOT"
bash "$HERE/loop_fs.sh" mount ext4 "$FS" >/dev/null
[[ -f $FS.skip ]] && skip "no ext4 to freeze: $(cat "$FS.skip")"
mkdir -p "$FS/B" "$FS/C" || fail "cannot create directories on the loop-mounted ext4"

TAI_ENV=(TAI_PRELOAD_LOG=1 TAI_START_WRITEBACK=0 TAI_FLUSH_IDLE_MS=off TAI_WRITE_AROUND=0 TAI_SYNC_THROUGH=0
         TAI_WRITE_BEHIND_MS=600000 ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0)

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# start NAME DIR [preloaded]: starts the program (under a 120 s deadline) waiting in DIR; sets
# pid (the program's own, below timeout) and tpid (timeout's).
start() {
  local name=$1 dir=$2
  if [[ ${3:-} == preloaded ]]; then
    timeout -s KILL 120 env LD_PRELOAD="$PRELOAD" TAI_PRELOAD_PATHS="$dir" "${TAI_ENV[@]}" "$ENDS" wait "$dir" \
      >"$ROOT/$name.stdout" 2>"$ROOT/$name.stderr" &
  else
    timeout -s KILL 120 "$ENDS" wait "$dir" >"$ROOT/$name.stdout" 2>"$ROOT/$name.stderr" &
  fi
  tpid=$!
  local i
  for ((i = 0; i < 300; i++)); do
    grep -q "waiting for a signal" "$ROOT/$name.stdout" 2>/dev/null && break
    sleep 0.1
  done
  grep -q "waiting for a signal" "$ROOT/$name.stdout" || fail "run $name did not get to wait for a signal in 30 s"
  pid=$(pgrep -P "$tpid" | head -n 1)
  [[ -n $pid ]] || fail "run $name: no program below timeout ($tpid)"
}
finish() {  # finish NAME: the status of the run, which must be SIGTERM's
  local rc=0
  wait "$tpid" || rc=$?
  pid=""
  ((rc == 143)) || fail "run $1 ended with status $rc, not 143 (SIGTERM's default action)"
}

# --- A: plain; B: preloaded, not frozen ------------------------------------------------------
start A "$ROOT/A"
kill -TERM "$pid"
finish A
start B "$FS/B" preloaded
kill -TERM "$pid"
finish B
for f in end.dat stream.dat; do
  cmp "$ROOT/A/$f" "$FS/B/$f" || fail "run B (preloaded, not frozen): $f differs from the plain run's"
done
grep -q "tai-preload: routed $FS/B/end.dat" "$ROOT/B.stderr" || fail "run B routed nothing under $FS/B"
grep -q "SIGTERM: every routed file's cache handed to the kernel" "$ROOT/B.stderr" ||
  fail "run B: the end handler did not report a finished write-back"

# --- C: preloaded, frozen --------------------------------------------------------------------
start C "$FS/C" preloaded
size=$(stat -c %s "$FS/C/end.dat") || fail "run C left no end.dat"
want=$(stat -c %s "$ROOT/A/end.dat")
((size < want)) || fail "run C: end.dat has its $want bytes in the kernel before the signal: nothing is left for the write-back to do, so this run proves nothing (is write-around or early write-back on?)"
fsfreeze --freeze "$FS" || skip "fsfreeze --freeze $FS was refused"
t0=$(now_ms)
kill -TERM "$pid"
limit=$((BOUND_MS + SLACK * 1000))
msg=""
while :; do
  msg=$(grep -F "SIGTERM: the write-back did not finish" "$ROOT/C.stderr")
  [[ -n $msg ]] && break
  (($(now_ms) - t0 > limit + 2000)) && break
  sleep 0.05
done
t1=$(now_ms)
[[ -n $msg ]] || fail "run C: no 'the write-back did not finish' message $((t1 - t0)) ms after SIGTERM (the bound is $BOUND_MS ms + $SLACK s)"
elapsed=$((t1 - t0))
((elapsed <= limit)) || fail "run C: the handler gave up $elapsed ms after SIGTERM, beyond $BOUND_MS ms + $SLACK s"
waited=$(sed -n 's/.*(waited \([0-9]*\) ms).*/\1/p' <<<"$msg")
[[ -n $waited ]] || fail "run C: the message does not say how long it waited: $msg"
((waited >= BOUND_MS && waited <= limit)) || fail "run C: the handler waited $waited ms, not $BOUND_MS ms (+ $SLACK s)"
age=$(sed -n 's/.*the oldest acknowledged \([0-9]*\) ms ago.*/\1/p' <<<"$msg")
[[ -n $age ]] || fail "run C: the message does not say what it left behind: $msg"
((age >= waited)) || fail "run C: the oldest write left behind is said to be $age ms old, younger than the $waited ms waited for it"
# The default action: the main thread ends now; threads blocked in the frozen file system are
# the kernel's to finish at the thaw.
state=""
for ((i = 0; i < 40; i++)); do
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
  [[ $state == Z || -z $state ]] && break
  sleep 0.05
done
[[ $state == Z || -z $state ]] || fail "run C: the main thread is in state '$state', 1 s after the handler gave up: the default action did not run"
say "run C: SIGTERM at a frozen file system; the handler gave up after $elapsed ms (waited $waited ms), main thread ${state:-gone}: $msg"
fsfreeze --unfreeze "$FS" || fail "fsfreeze --unfreeze $FS failed"
finish C
say "ok: bound $BOUND_MS ms + $SLACK s slack held ($elapsed ms); the unfrozen run kept every byte (cmp with the plain run)"
exit 0
