#!/usr/bin/env bash
# exit_destructors.sh - the preload library registers nothing for exit() to destroy but its exit
# handler. exit() from one thread runs the atexit list (and the shared objects' finalizers)
# while the program's other threads go on writing through the library; an object of the library
# destroyed there (a static with a destructor, a function-local static) is read by those threads
# afterwards, until the library's exit handler has shut the layer down. That crashed about one
# run in a hundred of the thread_exit end (a thread making the controller read the destroyed
# engine list and options). So every state the layer reads is a constant or never destroyed,
# and this test keeps it so: tai_preload_atexit_audit, preloaded in front of the library, logs
# each function the library registers with __cxa_atexit; the script names them from the
# library's symbol table and allows only the layer's exit handler and libstdc++'s error
# categories (constant_init: their destructors do nothing).
# Runs tai_preload_ends in ways that reach the controller, the engines and the order mode:
# exit and thread_exit, with TAI_FSYNC=full and order.
# Environment: PRELOAD_LIB, ENDS, AUDIT (the shim), WORK, SANITIZER_RUNTIME as for
# run_program_case.sh. Exit: 0 pass, 1 fail, 77 skip (no library, no nm, a sanitizer runtime).
set -u -o pipefail
lib=${PRELOAD_LIB:-}
ends=${ENDS:-}
audit=${AUDIT:-}
work=${WORK:-/tmp/tai-preload-work}/exit_destructors
[ -n "$lib" ] && [ -f "$lib" ] || { echo "skip: no preload library in this build"; exit 77; }
# A sanitizer runtime intercepts __cxa_atexit itself, in front of the shim.
[ -z "${SANITIZER_RUNTIME:-}" ] || { echo "skip: a sanitizer runtime interposes __cxa_atexit before the audit shim"; exit 77; }
command -v nm >/dev/null || { echo "skip: no nm (binutils) to name the registered functions"; exit 77; }
[ -n "$ends" ] && [ -x "$ends" ] || { echo "FAIL: ENDS not set to tai_preload_ends"; exit 1; }
[ -n "$audit" ] && [ -f "$audit" ] || { echo "FAIL: AUDIT not set to the audit shim"; exit 1; }
lib=$(realpath "$lib")
audit=$(realpath "$audit")
deadline=60

# offset -> name, from the symbol table (the build's library keeps it).
nm -C --defined-only "$lib" 2>/dev/null |
  awk '{ a = $1; sub(/^0+/, "", a); $1 = ""; $2 = ""; sub(/^  /, ""); print a "\t" $0 }' >"${TMPDIR:-/tmp}/tai-exit-syms.$$"
syms=${TMPDIR:-/tmp}/tai-exit-syms.$$
trap 'rm -f "$syms"' EXIT
[ -s "$syms" ] || { echo "skip: $lib has no symbol table (stripped) to name the registered functions"; exit 77; }

rm -rf "$work" && mkdir -p "$work"
fail=0
for run in "exit full" "exit order" "thread_exit full" "thread_exit order"; do
  read -r way mode <<<"$run"
  d=$work/$way-$mode
  mkdir -p "$d/files"
  env LD_PRELOAD="$audit:$lib" TAI_ATEXIT_AUDIT_LOG="$d/registered" TAI_ATEXIT_AUDIT_LIB="$lib" \
    TAI_PRELOAD_PATHS="$d/files" TAI_FSYNC="$mode" \
    timeout -s KILL "$deadline" "$ends" "$way" "$d/files" >"$d/out" 2>"$d/err"
  rc=$?
  if [ "$rc" != 0 ]; then
    echo "FAIL ($way, TAI_FSYNC=$mode): status $rc (137 after $deadline s: a hang)"; tail -5 "$d/err"; fail=1; continue
  fi
  handler=0 run_fail=0
  while read -r off; do
    name=$(awk -v o="$off" -F'\t' '$1 == o { print $2; exit }' "$syms")
    if [[ $name == "tai::posix::detail::at_exit()" ]]; then handler=1
    elif [[ $name == *constant_init* ]]; then :
    else
      echo "FAIL ($way, TAI_FSYNC=$mode): the library registers a destructor run by exit(): ${name:-<no symbol at offset 0x$off>}"
      echo "  (another thread may still read it: make it a constant or a never-destroyed `static auto* p = new T`)"
      run_fail=1
    fi
  done < <(sort -u "$d/registered" 2>/dev/null)
  if [ "$handler" = 0 ]; then
    echo "FAIL ($way, TAI_FSYNC=$mode): the shim did not see the layer's exit handler registered: the audit saw nothing"; fail=1
  elif [ "$run_fail" = 1 ]; then
    fail=1
  else
    echo "$way, TAI_FSYNC=$mode: $(sort -u "$d/registered" | wc -l) functions registered, none but the exit handler and constant ones"
  fi
done
[ "$fail" = 0 ] && rm -rf "$work"
exit "$fail"
