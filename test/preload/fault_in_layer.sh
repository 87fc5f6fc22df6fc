#!/usr/bin/env bash
# fault_in_layer.sh - a fault inside the preload's layer, with the program's own SIGSEGV handler
# installed: tai_preload_probe fault writes from a buffer it cannot read (the kernel answers
# EFAULT), after a SIGSEGV handler that jumps out (siglongjmp). Under the library the buffer is
# copied inside the layer, where the copy faults; the program's handler must not run there (it
# would leave the layer's locks held and its depth counted for good: every later signal held
# back, the process hanging at exit), so the process takes the default action. Checked for both
# signal-mask modes (TAI_PRELOAD_SIGNAL_MASK=lazy, the default, and eager):
#   - the run ends within the deadline (no hang);
#   - it either prints what the plain run prints (the library passed the write to the kernel)
#     or ends by a signal without its SIGSEGV handler having run inside the layer.
# Environment: PRELOAD_LIB, PROBE, WORK, SANITIZER_RUNTIME as for run_program_case.sh.
# Exit: 0 pass, 1 fail, 77 skip (no library in this build).
set -u -o pipefail
lib=${PRELOAD_LIB:-}
probe=${PROBE:-}
work=${WORK:-/tmp/tai-preload-work}/fault_in_layer
[ -n "$lib" ] && [ -f "$lib" ] || { echo "skip: no preload library in this build"; exit 77; }
[ -n "$probe" ] && [ -x "$probe" ] || { echo "FAIL: PROBE not set to the probe program"; exit 1; }
preload=$lib
[ -z "${SANITIZER_RUNTIME:-}" ] || preload="$SANITIZER_RUNTIME:$lib"
deadline=60

rm -rf "$work" && mkdir -p "$work/plain"
timeout -s KILL "$deadline" "$probe" fault "$work/plain" >"$work/plain.out" 2>"$work/plain.err"
rc=$?
[ "$rc" = 0 ] || { echo "FAIL: the plain run failed ($rc):"; cat "$work/plain.err"; exit 1; }
grep -q "EFAULT" "$work/plain.out" || { echo "FAIL: the plain run did not get EFAULT:"; cat "$work/plain.out"; exit 1; }

fail=0
for mode in lazy eager; do
  d=$work/$mode
  mkdir -p "$d"
  start=$(date +%s)
  # ASan's own SEGV report (abort_on_error) is a death by signal too.
  env LD_PRELOAD="$preload" TAI_PRELOAD_PATHS="$d" TAI_PRELOAD_SIGNAL_MASK=$mode \
    timeout -s KILL "$deadline" "$probe" fault "$d" >"$d.out" 2>"$d.err"
  rc=$?
  took=$(( $(date +%s) - start ))
  if [ "$rc" = 137 ] && [ "$took" -ge "$deadline" ]; then
    echo "FAIL ($mode): HANG: the run did not end within $deadline s"; fail=1
  elif [ "$rc" = 0 ] && cmp -s "$work/plain.out" "$d.out"; then
    echo "$mode: ended as the plain run (the write reached the kernel, EFAULT)"
  elif [ "$rc" -gt 128 ] && ! grep -q "SIGSEGV handler ran" "$d.out"; then
    echo "$mode: ended by signal $((rc - 128)) in ${took} s, the program's handler not run inside the layer"
  else
    echo "FAIL ($mode): status $rc after ${took} s; output:"; cat "$d.out"; tail -5 "$d.err"; fail=1
  fi
done
[ "$fail" = 0 ] && rm -rf "$work"
exit "$fail"
