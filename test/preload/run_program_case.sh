#!/usr/bin/env bash
# run_program_case.sh <case> - runs one unmodified program twice and checks that the preload
# library changes nothing it can observe:
#   run A: plain, writing into $WORK/<case>/A;
#   run B: LD_PRELOAD=$PRELOAD_LIB TAI_PRELOAD_PATHS=<B> TAI_PRELOAD_LOG=1, writing into B;
# then every step's exit status must be 0 on both sides (or the status the step names: a program
# that ends by a signal), the outputs (stdout, with the output
# directory's name replaced) must be equal, the trees A and B must be byte-identical, and B's log
# must show at least one routed open under B - a library that routes nothing would pass
# everything else. Each command runs under `timeout`: a hang fails with its own message.
#
# Environment:
#   PRELOAD_LIB        the library (ctest: $<TARGET_FILE:tai_preload>); empty: skip
#   WORK               scratch root (ctest: <build>/test/preload/work); default /tmp/tai-preload-work
#   PROBE              tai_preload_probe, for the probe_* cases
#   ENDS               tai_preload_ends, for the end_* cases
#   SANITIZER_RUNTIME  libasan.so/libtsan.so when the library is instrumented: preloaded first
#   PRELOAD_DEADLINE   seconds for one command (default 60)
#   KEEP_WORK=1        keep A and B after a success too
#   PRELOAD_FS         xfs, btrfs or ext4: WORK is that file system, loop-mounted by loop_fs.sh
#                      (the preload.<fs>.* cases); where loop_fs.sh could not mount it, the
#                      reason is in $WORK.skip and the case skips with it
# Exit: 0 pass, 1 fail, 77 skip (program not installed; sanitizer runtime cannot host it).
# `run_program_case.sh --list` prints the cases, `--programs` the programs they run.
set -u -o pipefail

CASES=(dd_4k dd_1m cp_tree cat tar gzip gzip_own sqlite sqlite_wal python
       probe_fork probe_mmap probe_append probe_dup2stdout probe_stdio probe_signal probe_closerange
       end_exit end_return end__exit end__Exit end_exit_group end_quick_exit end_abort end_exec
       end_thread_exit end_vfork end_spawn end_sigterm end_sigint end_sighup end_sigquit end_sigpipe
       end_sigsegv end_sigbus end_sigfpe end_sigabrt end_sigxfsz end_virtual end_sigkill
       end_resethand end_sysv_signal end_bsd_signal end_sigset end_raw_sigaction end_inline_sigaction
       mawk_exit python_exit perl_sigterm sigpipe_tee append_procs
       meta_tar meta_cp meta_touch meta_python
       yes_head sed_inplace perl_inplace install_backup sort_o awk_files split_join gcc_objects
       xz bzip2 zstd cpio zip sqlite_mmap git sqlite_order sqlite_wal_order git_order shell_order
       end_exit_order end_thread_exit_order end_sync_exit end_sync_exit_order)

needs_of() {  # needs_of CASE: sets need=(the programs it runs)
    need=()
    case $1 in
    dd_*) need=(dd) ;;
    cp_tree) need=(cp diff) ;;
    cat) need=(bash cat wc) ;;
    tar) need=(tar mkdir diff) ;;
    gzip) need=(bash gzip cmp) ;;
    gzip_own) need=(gzip cp cmp) ;;
    sqlite*) need=(sqlite3) ;;
    python | python_exit | meta_python) need=(python3) ;;
    probe_* | end_*) need=() ;;
    mawk_exit) need=(bash seq awk) ;;
    perl_sigterm) need=(perl) ;;
    sigpipe_tee) need=(bash yes tee head wc rm) ;;
    append_procs) need=(bash sort uniq wc rm) ;;
    meta_tar) need=(tar mkdir bash find sort xargs stat) ;;
    meta_cp) need=(cp stat) ;;
    meta_touch) need=(bash touch stat) ;;
    yes_head) need=(bash yes head wc) ;;
    sed_inplace) need=(cp sed) ;;
    perl_inplace) need=(cp perl) ;;
    install_backup) need=(install cp ls stat) ;;
    sort_o) need=(sort) ;;
    awk_files) need=(awk) ;;
    split_join) need=(split bash cat cmp) ;;
    gcc_objects) need=(gcc as ld ar) ;;
    xz) need=(xz tar cp bash cmp) ;;
    bzip2) need=(bzip2 cp bash cmp) ;;
    zstd) need=(zstd cp cmp) ;;
    cpio) need=(cpio bash find sort mkdir stat) ;;
    zip) need=(zip unzip mkdir diff) ;;
    sqlite_mmap) need=(sqlite3) ;;
    shell_order) need=(bash) ;;
    git | git_order) need=(git cp) ;;
  esac
}

# --programs: the distinct programs the cases run (besides this project's probe and ends
# programs), one per line.
if [[ ${1:-} == --programs ]]; then
  for c in "${CASES[@]}"; do
    needs_of "$c"
    printf '%s\n' "${need[@]}"
  done | sort -u
  exit 0
fi
if [[ ${1:-} == --list ]]; then
  printf '%s\n' "${CASES[@]}"
  exit 0
fi
if [[ $# -ne 1 ]]; then
  echo "usage: $0 <case> | --list" >&2
  exit 2
fi
CASE=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEADLINE=${PRELOAD_DEADLINE:-60}

say() { echo "preload.$CASE: $*"; }
skip() {
  say "SKIP: $*"
  exit 77
}
fail() {
  say "FAIL: $*"
  exit 1
}

known=0
for c in "${CASES[@]}"; do [[ $c == "$CASE" ]] && known=1; done
((known)) || fail "unknown case (known: ${CASES[*]})"

[[ -n ${PRELOAD_LIB:-} ]] || skip "PRELOAD_LIB is empty: this build has no tai_preload target"
[[ -f $PRELOAD_LIB ]] || fail "PRELOAD_LIB=$PRELOAD_LIB does not exist (build the tai_preload target first)"
PRELOAD_LIB=$(realpath "$PRELOAD_LIB")

# --- the programs a case runs: a missing one skips the case ------------------------------------
needs_of "$CASE"
for p in "${need[@]}" timeout cmp diff awk; do
  command -v "$p" >/dev/null 2>&1 || skip "$p is not installed"
done
if [[ $CASE == probe_* ]]; then
  [[ -n ${PROBE:-} && -x ${PROBE:-} ]] || fail "PROBE (tai_preload_probe) is not set or not executable: '${PROBE:-}'"
fi
if [[ $CASE == end_* ]]; then
  [[ -n ${ENDS:-} && -x ${ENDS:-} ]] || fail "ENDS (tai_preload_ends) is not set or not executable: '${ENDS:-}'"
fi
PYTHON=""
if [[ $CASE == python || $CASE == python_exit || $CASE == meta_python ]]; then
  # The interpreter itself, not a wrapper script (pyenv's shim is a bash script): the preload
  # then goes into the program under test and not into a launcher first.
  PYTHON=$(python3 -c 'import sys; print(sys.executable)') || fail "python3 does not run"
fi

# How to start each program with nothing but a trivial job (for the sanitizer check below).
trivial_command() {
  case $1 in
    bash) echo "bash -c true" ;;
    python3) echo "$PYTHON -c pass" ;;
    probe) echo "$PROBE --version" ;;
    awk) echo "awk BEGIN{}" ;;  # mawk has no --version
    unzip) echo "unzip -v" ;;   # --version is an error to unzip
    # split allocates its buffer with aligned_alloc(page, 128 KiB + 1), which ASan refuses
    # (the size is not a multiple of the alignment): an empty input still allocates it.
    split) echo "split -b 4096 /dev/null /nonexistent-dir/x" ;;
    *) echo "$1 --version" ;;
  esac
}

# --- ThreadSanitizer ------------------------------------------------------------------------------
# TSan supports programs that are instrumented as a whole. Preloaded (libtsan first, then the
# instrumented library) into the system's uninstrumented cp, tar, gzip, sqlite3 and python3 it
# crashed in its own stack depot (a CHECK on a 65,642-frame stack: interceptors calling each
# other) right after the first routed open; and it runs a program's signal handlers at its next
# interceptor, which may be inside the layer, where the kernel's signal mask (the layer's
# guarantee) would have held them back. So under TSan only the probe, built with
# -fsanitize=thread by this project, runs; its signal case is left out for the second reason. The
# release and ASan presets run every case.
if [[ ${SANITIZER_RUNTIME:-} == *tsan* ]]; then
  if [[ $CASE != probe_* ]]; then
    skip "under ThreadSanitizer only the instrumented probe runs: TSan cannot host the uninstrumented $CASE program with an instrumented library (it crashes in its stack depot); the release and ASan presets run it"
  fi
  if [[ $CASE == probe_signal ]]; then
    skip "under ThreadSanitizer signal handlers run at TSan's next interceptor, possibly inside the layer, where the kernel's signal mask would have held them back; the release and ASan presets run it"
  fi
fi

# AddressSanitizer handles SIGSEGV, SIGBUS and SIGFPE itself (a report, then exit 1) in the
# instrumented ends program, plain or preloaded: the default action these cases check never runs.
if [[ ${SANITIZER_RUNTIME:-} == *asan* && ( $CASE == end_sigsegv || $CASE == end_sigbus || $CASE == end_sigfpe ) ]]; then
  skip "under AddressSanitizer the instrumented program's SIGSEGV/SIGBUS/SIGFPE go to ASan's own handler (a report and exit 1, with and without the library), not to the default action this case checks; the release preset runs it"
fi

# --- sanitizer builds ----------------------------------------------------------------------------
# An instrumented library in an uninstrumented program needs the sanitizer runtime loaded first.
# Some programs cannot host a runtime at all: check each with the runtime alone, so that a skip
# says exactly which program and why, and a failure with the library is the library's.
PRELOAD=$PRELOAD_LIB
if [[ -n ${SANITIZER_RUNTIME:-} ]]; then
  [[ -f $SANITIZER_RUNTIME ]] || skip "the sanitizer runtime '$SANITIZER_RUNTIME' was not found (the compiler's -print-file-name did not give a file)"
  PRELOAD="$SANITIZER_RUNTIME:$PRELOAD_LIB"
  hosts=("${need[@]}")
  [[ $CASE == probe_* ]] && hosts=(probe)
  [[ $CASE == end_* ]] && hosts=()  # built here with the same flags as the probe
  for p in "${hosts[@]}"; do
    [[ $p == diff || $p == cmp || $p == wc ]] && continue  # verification only, run plain
    cmd=$(trivial_command "$p")
    err=$(timeout -k 5 30 env LD_PRELOAD="$SANITIZER_RUNTIME" ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 \
          $cmd 2>&1 >/dev/null)
    rc=$?
    if ((rc != 0)); then
      why="exit $rc"
      ((rc > 128)) && why="killed by SIG$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128)))"
      ((rc == 124)) && why="did not finish in 30 s"
      extra=""
      if [[ $p == bash && $SANITIZER_RUNTIME == *tsan* && $rc == 139 ]]; then
        extra=" (bash calls __sigsetjmp in main(); libtsan's interceptor jumps through its pointer to the real function, still null in a program not built with -fsanitize=thread: SIGSEGV at address 0)"
      fi
      skip "'$cmd' does not run with only $(basename "$SANITIZER_RUNTIME") preloaded, before any TAI code: $why$extra${err:+; stderr: $(echo "$err" | head -3 | tr '\n' ' ')}"
    fi
  done
fi

# --- directories ---------------------------------------------------------------------------------
WORK=${WORK:-/tmp/tai-preload-work}
if [[ -n ${PRELOAD_FS:-} ]]; then
  [[ -f $WORK.skip ]] && skip "no $PRELOAD_FS file system to run in: $(cat "$WORK.skip")"
  got=$(stat -f -c %T "$WORK" 2>/dev/null) || fail "PRELOAD_FS=$PRELOAD_FS but WORK=$WORK does not exist (is the preload_$PRELOAD_FS fixture's mount test run?)"
  [[ $PRELOAD_FS == ext4 && $got == ext2/ext3 ]] && got=ext4  # stat's name for the ext family
  [[ $got == "$PRELOAD_FS" ]] || fail "PRELOAD_FS=$PRELOAD_FS but WORK=$WORK is on $got (loop_fs.sh mount did not run or was undone)"
fi
mkdir -p "$WORK" || fail "cannot create WORK=$WORK"
ROOT=$(realpath "$WORK")/$CASE
rm -rf "$ROOT"
mkdir -p "$ROOT/in" "$ROOT/A" "$ROOT/B" || fail "cannot create $ROOT"
IN=$ROOT/in
# The cases that end by SIGQUIT, SIGSEGV, SIGABRT... would leave core files (or wait for a
# core handler): none wanted.
ulimit -c 0
# Resolved paths: the library matches TAI_PRELOAD_PATHS against realpath()s.
A=$(realpath "$ROOT/A")
B=$(realpath "$ROOT/B")

# --- deterministic inputs ------------------------------------------------------------------------
# gen_text BYTES SEED: exactly BYTES of hex text from a Park-Miller generator (products stay below
# 2^53, so awk's doubles compute them exactly and every awk gives the same bytes).
gen_text() {
  awk -v n="$1" -v x="$2" 'BEGIN {
    total = 0
    while (total < n) {
      line = ""
      for (i = 0; i < 7; i++) { x = (x * 16807) % 2147483647; line = line sprintf("%08x ", x) }
      line = line "\n"
      if (total + length(line) > n) line = substr(line, 1, n - total)
      printf "%s", line
      total += length(line)
    }
  }'
}
# Text, a run of zero bytes, text: neither size a multiple of 4 KiB nor of 1 MiB.
make_input() {  # make_input FILE
  { gen_text 3000000 11; head -c 262144 /dev/zero; gen_text 1801234 12; } >"$1"
}
make_tree() {  # make_tree DIR
  mkdir -p "$1/sub/deeper" "$1/many" "$1/emptydir"
  gen_text 100000 21 >"$1/a.txt"
  make_input "$1/sub/b.bin"
  gen_text 4096 22 >"$1/sub/exactly-4k"
  gen_text 1048577 23 >"$1/sub/deeper/one-mib-and-one"
  : >"$1/empty"
  ln -s a.txt "$1/link-to-a"
  for i in $(seq 1 60); do gen_text $((i * 97)) $((100 + i)) >"$1/many/f$i"; done
}

# The transcripts name the side's output directory (variable d): replaced by <OUT> before they
# are compared.
NORMALIZE='{ while ((i = index($0, d)) > 0) $0 = substr($0, 1, i - 1) "<OUT>" substr($0, i + length(d)); print }'

# --- running a step on one side ------------------------------------------------------------------
SIDE=""
OUT=""
step_no=0
# run CMD...: one command on the current side. stdout goes to the side's transcript (compared
# later), stderr to its log; a status other than $EXPECT_RC (0 unless run_status set it) or a
# hang ends the case.
EXPECT_RC=0
# run_status STATUS CMD...: run, for a command that must end with STATUS on both sides (128 + the
# signal number for one killed by a signal).
run_status() {
  EXPECT_RC=$1
  shift
  run "$@"
  EXPECT_RC=0
}
run() {
  step_no=$((step_no + 1))
  local rc=0
  echo "--- step $step_no: $*" >>"$ROOT/$SIDE.stdout"
  echo "--- step $step_no: $*" >>"$ROOT/$SIDE.stderr"
  if [[ $SIDE == A ]]; then
    timeout -k 5 "$DEADLINE" env -u LD_PRELOAD "$@" >>"$ROOT/$SIDE.stdout" 2>>"$ROOT/$SIDE.stderr" || rc=$?
  else
    # detect_leaks=0: the uninstrumented programs (bash, python) do not free at exit, which is
    # theirs, not the library's. verify_asan_link_order=0: the runtime is preloaded, not linked.
    # The *_order cases: the same programs with fsync as an ordering barrier (TAI_FSYNC=order):
    # the result must be the same bytes once the programs exit.
    timeout -k 5 "$DEADLINE" env LD_PRELOAD="$PRELOAD" TAI_PRELOAD_PATHS="$B" TAI_PRELOAD_LOG=1 \
      TAI_FSYNC="$([[ $CASE == *_order ]] && echo order || echo full)" \
      ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:verify_asan_link_order=0" \
      "$@" >>"$ROOT/$SIDE.stdout" 2>>"$ROOT/$SIDE.stderr" || rc=$?
  fi
  echo "--- exit status $rc" >>"$ROOT/$SIDE.stdout"
  if ((rc != EXPECT_RC && (rc == 124 || rc == 137))); then
    show_logs
    fail "HANG: run $SIDE step $step_no did not finish within $DEADLINE s and was killed: $*"
  fi
  if ((rc != EXPECT_RC)); then
    show_logs
    if [[ $SIDE == A ]]; then
      fail "the plain run (A) failed with exit status $rc (expected $EXPECT_RC) in step $step_no: $* - the environment or the harness is broken, not the library"
    fi
    # What the two runs printed up to here (A ran every step; B stopped at this one).
    awk -v d="$A" -f /dev/stdin "$ROOT/A.stdout" <<<"$NORMALIZE" >"$ROOT/A.stdout.norm"
    awk -v d="$B" -f /dev/stdin "$ROOT/B.stdout" <<<"$NORMALIZE" >"$ROOT/B.stdout.norm"
    echo "----- output of the plain run (-) and the preloaded run (+) -----"
    diff -u "$ROOT/A.stdout.norm" "$ROOT/B.stdout.norm" | head -n 60
    local why="exit status $rc"
    ((rc > 128)) && why="killed by SIG$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128)))"
    fail "the preloaded run (B) failed in step $step_no with $why (the plain run gave $EXPECT_RC): $*"
  fi
}

show_logs() {
  local side
  for side in A B; do
    [[ -f $ROOT/$side.stderr ]] || continue
    local lines
    lines=$(wc -l <"$ROOT/$side.stderr")
    echo "----- stderr of run $side ($lines lines; last 150; all in $ROOT/$side.stderr) -----"
    tail -n 150 "$ROOT/$side.stderr"
  done
  echo "----- end of logs -----"
}

# --- the cases: each runs on the current side with $OUT as its output directory ------------------
prepare_inputs() {
  case $CASE in
    dd_* | gzip* | cat) make_input "$IN/input" && gen_text 77777 31 >"$IN/input2" ;;
    cp_tree | tar) make_tree "$IN/tree" ;;
    sqlite | sqlite_wal | sqlite_mmap | sqlite_order | sqlite_wal_order) write_sql ;;
    yes_head | sed_inplace | perl_inplace | install_backup | sort_o | awk_files | split_join | xz | bzip2 | zstd)
      gen_text 600000 51 >"$IN/text" && gen_text 70000 52 >"$IN/text2" ;;
    gcc_objects) write_c_sources ;;
    cpio | zip | git | git_order) make_tree "$IN/tree" ;;
    meta_tar) make_tree "$IN/tree" && chmod 0640 "$IN/tree/a.txt" && chmod 0751 "$IN/tree/sub/b.bin" ;;
    meta_cp | meta_touch) gen_text 300000 41 >"$IN/src" && chmod 0751 "$IN/src" && touch -d @1234567 "$IN/src" ;;
  esac || fail "could not generate the inputs in $IN"
}

# C sources for gcc_objects: two translation units and a main, deterministic output.
write_c_sources() {
  cat >"$IN/sum.c" <<'C'
unsigned long tai_sum(const unsigned char* p, unsigned long n) {
  unsigned long s = 0;
  for (unsigned long i = 0; i < n; ++i) s = s * 31 + p[i];
  return s;
}
C
  cat >"$IN/table.c" <<'C'
const unsigned char tai_table[] = {
C
  awk 'BEGIN { x = 5; for (i = 0; i < 20000; i++) { x = (x * 16807) % 2147483647; printf "%d,%s", x % 256, (i % 16 == 15) ? "\n" : " " } }' >>"$IN/table.c"
  cat >>"$IN/table.c" <<'C'
};
const unsigned long tai_table_size = sizeof tai_table;
C
  cat >"$IN/main.c" <<'C'
#include <stdio.h>
extern const unsigned char tai_table[];
extern const unsigned long tai_table_size;
unsigned long tai_sum(const unsigned char* p, unsigned long n);
int main(void) {
  printf("%lu bytes, sum %lu\n", tai_table_size, tai_sum(tai_table, tai_table_size));
  return 0;
}
C
}

# SQL: a table with an index, filled in transactions of 1000 rows, then updates, deletes and a
# VACUUM; the rows come from a generator, so both runs execute identical SQL.
write_sql() {
  local txns=100 mode=""
  if [[ $CASE == sqlite_wal || $CASE == sqlite_wal_order ]]; then
    txns=30
    mode="PRAGMA journal_mode=WAL;"
  fi
  if [[ $CASE == sqlite_mmap ]]; then
    # SQLite reads the database through a shared mapping and writes it with pwrite.
    txns=30
    mode="PRAGMA mmap_size=268435456;"
  fi
  awk -v txns="$txns" -v mode="$mode" 'BEGIN {
    if (mode != "") print mode
    print "CREATE TABLE t(id INTEGER PRIMARY KEY, x INTEGER NOT NULL, y TEXT NOT NULL);"
    print "CREATE INDEX t_x ON t(x);"
    s = 7
    for (t = 0; t < txns; t++) {
      print "BEGIN;"
      for (i = 0; i < 1000; i++) {
        s = (s * 16807) % 2147483647
        printf "INSERT INTO t(x, y) VALUES(%d, %c%s%c);\n", s % 1000003, 39, substr("abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789", 1, 1 + s % 70), 39
      }
      print "COMMIT;"
    }
    print "BEGIN;"
    print "UPDATE t SET y = y || '"'"'-updated'"'"' WHERE id % 7 = 0;"
    print "DELETE FROM t WHERE id % 13 = 0;"
    print "COMMIT;"
    if (mode == "") print "VACUUM;"
  }' >"$IN/load.sql"
}

body() {
  case $CASE in
    dd_4k | dd_1m)
      local bs=4k
      [[ $CASE == dd_1m ]] && bs=1M
      run dd if="$IN/input" of="$OUT/out.dat" bs=$bs conv=fsync status=none
      # Overwrite blocks in the middle of the routed file, keeping the rest (notrunc).
      run dd if="$IN/input2" of="$OUT/out.dat" bs=$bs seek=3 count=5 conv=notrunc,fsync status=none
      # Read the routed file back into another routed file.
      run dd if="$OUT/out.dat" of="$OUT/copy.dat" bs=64k status=none
      run cmp "$OUT/out.dat" "$OUT/copy.dat"
      ;;
    cp_tree)
      run cp -r "$IN/tree" "$OUT/tree"
      # Routed to routed (coreutils may use copy_file_range between the two descriptors).
      run cp "$OUT/tree/sub/b.bin" "$OUT/b-copy.bin"
      run diff -r --no-dereference "$IN/tree" "$OUT/tree"
      run cmp "$IN/tree/sub/b.bin" "$OUT/b-copy.bin"
      ;;
    cat)
      # The shell opens the output files, so the shell runs preloaded too; cat inherits the fd.
      run bash -c 'cat "$1" "$2" > "$3/cat.out" && cat "$1" >> "$3/cat.out" && wc -c < "$3/cat.out"' \
        _ "$IN/input" "$IN/input2" "$OUT"
      # Builtin echo (the shell writes) and cat (a child writes) on one descriptor.
      run bash -c 'exec 3> "$2/fd3.out"; echo "from the shell" >&3; cat "$1" >&3; echo "shell again" >&3; exec 3>&-; wc -c < "$2/fd3.out"' \
        _ "$IN/input2" "$OUT"
      ;;
    tar)
      run tar --sort=name -cf "$OUT/tree.tar" -C "$IN" tree
      run mkdir "$OUT/x"
      run tar -xf "$OUT/tree.tar" -C "$OUT/x"
      run tar -tf "$OUT/tree.tar"
      run diff -r --no-dereference "$IN/tree" "$OUT/x/tree"
      ;;
    gzip)
      run bash -c 'gzip -c "$1" > "$2/out.gz"' _ "$IN/input" "$OUT"
      run gzip -t "$OUT/out.gz"
      run bash -c 'gzip -dc "$1" > "$2/out.raw"' _ "$OUT/out.gz" "$OUT"
      run cmp "$IN/input" "$OUT/out.raw"
      ;;
    gzip_own)
      # gzip opening its own files, no shell in between (so this case also runs where a shell
      # cannot host a sanitizer runtime). -n: no name or time stamp in the header, since the
      # two copies' time stamps differ.
      run cp "$IN/input" "$OUT/own.dat"
      run gzip -n -9 -k "$OUT/own.dat"
      run gzip -t "$OUT/own.dat.gz"
      run cp "$OUT/own.dat.gz" "$OUT/again.dat.gz"
      # Decompresses into again.dat and unlinks the routed again.dat.gz.
      run gzip -d "$OUT/again.dat.gz"
      run cmp "$IN/input" "$OUT/again.dat"
      ;;
    sqlite | sqlite_wal | sqlite_mmap | sqlite_order | sqlite_wal_order)
      run sqlite3 -bail "$OUT/t.db" ".read '$IN/load.sql'"
      # A second process opens the database: what the first left must be complete.
      run sqlite3 -bail "$OUT/t.db" "PRAGMA integrity_check;" \
        "SELECT count(*), sum(x), total(length(y)), sum(id * x % 1000003) FROM t;" \
        "SELECT count(*) FROM t WHERE y LIKE '%-updated';"
      ;;
    python)
      run "$PYTHON" "$HERE/python_rw.py" "$OUT"
      ;;
    probe_*)
      run "$PROBE" "${CASE#probe_}" "$OUT"
      ;;
    end_*)
      # Each way of ending, with the status the kernel gives it (128 + signal when killed).
      # end_<way>_order: the same end with fsync as an ordering barrier (TAI_FSYNC=order).
      local way=${CASE#end_} status=0
      way=${way%_order}
      case $way in
        abort | sigabrt) status=134 ;;
        sigterm | virtual | resethand | sysv_signal | bsd_signal | sigset | raw_sigaction | inline_sigaction) status=143 ;;
        sigint) status=130 ;;
        sighup) status=129 ;;
        sigquit) status=131 ;;
        sigpipe) status=141 ;;
        sigsegv) status=139 ;;
        sigbus) status=135 ;;
        sigfpe) status=136 ;;
        sigxfsz) status=153 ;;
      esac
      run_status $status "$ENDS" "$way" "$OUT"
      ;;
    mawk_exit)
      # mawk writes its last buffer and ends without the stdio flush the layer's exit handler
      # would see last.
      run bash -c 'seq 100000 | awk "{print \$1*3}" > "$1/awk.out"' _ "$OUT"
      ;;
    python_exit)
      run "$PYTHON" -c 'import os, sys
fd = os.open(sys.argv[1] + "/py.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, bytes(range(256)) * 400)
os._exit(0)' "$OUT"
      ;;
    perl_sigterm)
      run_status 143 perl -e 'open(my $f, ">", "$ARGV[0]/pl.out") or die "open: $!";
syswrite($f, "perl " x 14000) == 70000 or die "syswrite: $!";
kill "TERM", $$; sleep 10; exit 3;' "$OUT"
      ;;
    sigpipe_tee)
      # tee writes the file, then dies by SIGPIPE when head has had its fill; how far tee got
      # varies from run to run, so only the first million bytes (always written) are compared.
      run bash -c 'yes | tee "$1/yes.out" | head -c 1000000 > "$1/head.out"' _ "$OUT"
      run bash -c 'head -c 1000000 "$1/yes.out" > "$1/yes.first" && wc -c < "$1/yes.first" && rm "$1/yes.out"' _ "$OUT"
      ;;
    append_procs)
      # Four processes append 10,000 lines each to one file at once (bash's builtin echo: one
      # write(2) per line, on a descriptor opened with O_APPEND and routed in each process):
      # every line must be there exactly once. The order varies: the sorted file is compared.
      run bash -c 'for p in 1 2 3 4; do
  bash -c "for ((i = 0; i < 10000; i++)); do echo \"process $p line \$i\"; done" >> "$1/app.log" &
done
wait' _ "$OUT"
      run bash -c 'wc -l < "$1/app.log"; sort "$1/app.log" | uniq -d | wc -l; sort "$1/app.log" > "$1/app.sorted"; rm "$1/app.log"' _ "$OUT"
      ;;
    meta_tar)
      # tar sets each file's time (here 0) and mode after writing it: a later write-back of
      # the data would set the time to that moment.
      run tar --mtime=@0 --sort=name -cf "$OUT/m.tar" -C "$IN" tree
      run mkdir "$OUT/x"
      run tar -xf "$OUT/m.tar" -C "$OUT/x"
      run bash -c 'cd "$1/x" && find . -type f -print0 | sort -z | xargs -0 stat -c "%Y %a %s %n"' _ "$OUT"
      ;;
    meta_cp)
      run cp -p "$IN/src" "$OUT/cp.dat"
      run stat -c "%Y %a %s" "$OUT/cp.dat"
      ;;
    meta_touch)
      # The shell keeps the file open and written while touch -r sets its time.
      run bash -c 'exec 3> "$1/t.dat"; printf "%s\n" hello there >&3; touch -r "$2" "$1/t.dat"; exec 3>&-; stat -c "%Y %s" "$1/t.dat"' _ "$OUT" "$IN/src"
      ;;
    meta_python)
      # One process writes and sets times, mode and names itself, by path and by descriptor.
      run "$PYTHON" -c 'import os, sys
d = sys.argv[1]
fd = os.open(d + "/p1", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"one " * 5000)
os.utime(d + "/p1", ns=(0, 1234567 * 10**9))
os.chmod(d + "/p1", 0o640)
fd2 = os.open(d + "/p2", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd2, b"two " * 5000)
os.utime(fd2, ns=(0, 7654321 * 10**9))
os.fchmod(fd2, 0o604)
fd3 = os.open(d + "/p3", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd3, b"three " * 5000)
os.rename(d + "/p3", d + "/p3-renamed")
os.link(d + "/p3-renamed", d + "/p3-link")
os.utime(d + "/p3-link", ns=(0, 1111111 * 10**9))
for f in (fd, fd2, fd3): os.close(f)
for n in ("p1", "p2", "p3-renamed", "p3-link"):
    st = os.stat(d + "/" + n)
    print(n, st.st_mtime_ns // 10**9, oct(st.st_mode & 0o7777), st.st_size)' "$OUT"
      ;;
    yes_head)
      # yes dies of SIGPIPE once head has its lines; the shell's own routed descriptor 3 is
      # inherited by yes (which never writes it) and written by the shell before and after.
      run bash -c 'exec 3>"$1/shell.out"; echo before >&3; yes "tai yes line" | head -n 150000 >"$1/head.out"; echo "after: ${PIPESTATUS[*]}" >&3; exec 3>&-; wc -c <"$1/head.out"' _ "$OUT"
      ;;
    sed_inplace)
      # sed -i writes a temporary file beside its input and renames it over the input.
      run cp "$IN/text" "$OUT/s.txt"
      run sed -i -e 's/a/A/g' -e '/^0/d' "$OUT/s.txt"
      run sed -i.orig -e '1~3s/$/ third/' "$OUT/s.txt"
      ;;
    perl_inplace)
      # perl -i: renames the input away (or unlinks it), writes a new file under its name.
      run cp "$IN/text" "$OUT/p.txt"
      run perl -pi -e 's/(\w{8})/\U$1/g if $. % 2' "$OUT/p.txt"
      run perl -pi.bak -e '$_ = reverse($_) . "\n" if $. % 5 == 0; chomp if $. % 7 == 0' "$OUT/p.txt"
      ;;
    install_backup)
      # install and cp --backup rename the old file aside and write a new one.
      run install -m 0640 "$IN/text" "$OUT/inst"
      run install -b -m 0604 "$IN/text2" "$OUT/inst"
      run cp --backup=numbered "$IN/text" "$OUT/c"
      run cp --backup=numbered "$IN/text2" "$OUT/c"
      run cp --backup=numbered "$IN/text" "$OUT/c"
      run ls "$OUT"
      run stat -c '%a %s %n' "$OUT/inst" "$OUT/inst~" "$OUT/c" "$OUT/c.~1~" "$OUT/c.~2~"
      ;;
    sort_o)
      # sort writes through stdio; -o may name its own input (it reads everything first).
      run sort -o "$OUT/sorted" "$IN/text"
      run sort -r -o "$OUT/sorted" "$OUT/sorted"
      run sort -m -o "$OUT/merged" "$OUT/sorted" "$IN/text2"
      ;;
    awk_files)
      # awk keeps several stdio output streams open at once, and appends to one of them.
      run awk -v d="$OUT" '{ print > (d "/col" (NR % 7)); printf "%s|", $3 >> (d "/joined") } END { print NR }' "$IN/text"
      run awk -v d="$OUT" '{ print length($0) > (d "/col0") }' "$IN/text2"
      ;;
    split_join)
      run split -b 65536 -d -a 3 "$IN/text" "$OUT/part."
      run split -l 1000 "$IN/text2" "$OUT/lines."
      run bash -c 'cat "$1"/part.* > "$1/joined" && cmp "$2" "$1/joined" && ls "$1" | wc -l' _ "$OUT" "$IN/text"
      ;;
    gcc_objects)
      # The compiler driver, cc1, as, collect2 and ld write the objects, an archive and a program
      # in the routed directory (-save-temps=obj: the preprocessed and assembler files too).
      run gcc -O2 -c "$IN/sum.c" -o "$OUT/sum.o"
      run gcc -O1 -save-temps=obj -c "$IN/table.c" -o "$OUT/table.o"
      run ar rcs "$OUT/libtai.a" "$OUT/sum.o" "$OUT/table.o"
      run gcc -O2 "$IN/main.c" "$OUT/libtai.a" -o "$OUT/prog"
      run "$OUT/prog"
      ;;
    xz)
      run cp "$IN/text" "$OUT/x.txt"
      run xz -k -6 "$OUT/x.txt"
      run xz -t "$OUT/x.txt.xz"
      run bash -c 'xz -dc "$1/x.txt.xz" > "$1/x.back" && cmp "$2" "$1/x.back"' _ "$OUT" "$IN/text"
      # tar with xz as a child writing the archive through a pipe.
      run tar --sort=name --mtime=@0 --owner=0 --group=0 -cJf "$OUT/t.tar.xz" -C "$IN" text text2
      ;;
    bzip2)
      run cp "$IN/text" "$OUT/b.txt"
      run bzip2 -k -9 "$OUT/b.txt"
      run bzip2 -t "$OUT/b.txt.bz2"
      run bash -c 'bzip2 -dc "$1/b.txt.bz2" > "$1/b.back" && cmp "$2" "$1/b.back"' _ "$OUT" "$IN/text"
      ;;
    zstd)
      run cp "$IN/text" "$OUT/z.txt"
      run zstd -q -k -19 "$OUT/z.txt"
      run zstd -q -t "$OUT/z.txt.zst"
      run zstd -q -d "$OUT/z.txt.zst" -o "$OUT/z.back"
      run cmp "$IN/text" "$OUT/z.back"
      ;;
    cpio)
      # cpio -m sets each extracted file's time after writing its data.
      run bash -c 'cd "$1" && find tree | LC_ALL=C sort | cpio --quiet -o -H newc > "$2/t.cpio"' _ "$IN" "$OUT"
      run mkdir "$OUT/x"
      run bash -c 'cd "$1/x" && cpio --quiet -idm < "$1/t.cpio" && find . -type f | LC_ALL=C sort | xargs stat -c "%Y %a %s %n"' _ "$OUT"
      ;;
    zip)
      # zip writes a temporary file in the output directory and renames it; unzip sets times.
      run bash -c 'cd "$1" && zip -q -X -y -r "$2/t.zip" tree' _ "$IN" "$OUT"
      run mkdir "$OUT/x"
      run unzip -q -X "$OUT/t.zip" -d "$OUT/x"
      run diff -r --no-dereference "$IN/tree" "$OUT/x/tree"
      ;;
    shell_order)
      # A shell that exits with routed files still open on descriptors of its own (written,
      # never synced or closed): at its exit the library makes the open epoch durable, on a
      # thread whose libc calls are outside the library's depth count.
      run bash -c 'exec 3>"$1/kept.txt"; for i in 1 2 3; do echo "line $i" >&3; done' _ "$OUT"
      run bash -c 'exec 3>>"$1/kept.txt" 4>"$1/second.txt"; echo more >&3; echo other >&4; echo closed >"$1/closed.txt"' _ "$OUT"
      run bash -c 'cat "$1/kept.txt" "$1/second.txt" "$1/closed.txt"' _ "$OUT"
      ;;
    git | git_order)
      # A repository in the routed directory: objects written and renamed into place, the index
      # and refs through lock files, a pack read back through mmap by gc and fsck.
      run cp -r "$IN/tree" "$OUT/repo"
      run git init -q -b main "$OUT/repo"
      run git -C "$OUT/repo" add -A
      run git -C "$OUT/repo" commit -q -m "first"
      run git -C "$OUT/repo" rm -q -r many
      run git -C "$OUT/repo" commit -q -m "second"
      run git -C "$OUT/repo" -c gc.autoDetach=false -c pack.threads=1 gc -q
      run git -C "$OUT/repo" fsck --full --no-progress
      run git -C "$OUT/repo" log --format='%H %s'
      run git -C "$OUT/repo" ls-files -s
      ;;
  esac
}

if [[ $CASE == git || $CASE == git_order ]]; then
  # The same commits on both sides: fixed names and times, no user or system configuration.
  export GIT_AUTHOR_NAME=tai GIT_AUTHOR_EMAIL=tai@example.org GIT_AUTHOR_DATE='2001-02-03T04:05:06Z'
  export GIT_COMMITTER_NAME=tai GIT_COMMITTER_EMAIL=tai@example.org GIT_COMMITTER_DATE='2001-02-03T04:05:06Z'
  export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
fi
prepare_inputs
for SIDE in A B; do
  step_no=0
  OUT=$ROOT/$SIDE
  : >"$ROOT/$SIDE.stdout"
  : >"$ROOT/$SIDE.stderr"
  body
done

# --- comparisons ---------------------------------------------------------------------------------
# The transcripts name the output directory; everything else in them must be equal.
awk -v d="$A" -f /dev/stdin "$ROOT/A.stdout" <<<"$NORMALIZE" >"$ROOT/A.stdout.norm"
awk -v d="$B" -f /dev/stdin "$ROOT/B.stdout" <<<"$NORMALIZE" >"$ROOT/B.stdout.norm"
if ! diff -u "$ROOT/A.stdout.norm" "$ROOT/B.stdout.norm" >"$ROOT/stdout.diff"; then
  head -n 100 "$ROOT/stdout.diff"
  show_logs
  fail "the programs printed different output with and without the preload library (diff above: - plain, + preloaded)"
fi
case $CASE in
  sqlite*)
    grep -qx ok "$ROOT/B.stdout" || { show_logs; fail "PRAGMA integrity_check did not print ok in the preloaded run"; }
    ;;
esac

# Byte-identical trees: the same files, directories and links, the same bytes. The .db files of
# the sqlite cases are compared too: deterministic SQL through the same SQLite version writes
# identical pages and an identical header (change counter, page counts), and a WAL is
# checkpointed and removed when the last connection closes.
# Exception: the signal probe's file depends on where the timer interrupted the main loop, so
# its content differs from run to run even without the library; the probe itself checks it
# (every record whole, size = records x record size) and prints only the verdicts.
varies=()
[[ $CASE == probe_signal ]] && varies=(signal.dat)
# How far the busy threads got when another thread called exit varies.
[[ $CASE == end_thread_exit* || $CASE == end_sync_exit* ]] && varies=(busy-1.dat busy-2.dat)
# The sigkill case's busy block: written back or not when the kill came (its deadline is what
# end.dat is about).
[[ $CASE == end_sigkill ]] && varies=(busy.dat)
# git's index records each file's inode, device and change time, which differ between A and B
# whatever the library does; ls-files -s and fsck above check what it says.
[[ $CASE == git || $CASE == git_order ]] && varies=(repo/.git/index)
# The busy threads' files: their length varies, but every byte is a 'b' they wrote. A zero
# would be a hole: a write acknowledged before a later one and lost at the end.
if [[ $CASE == end_thread_exit* || $CASE == end_sync_exit* ]]; then
  for f in busy-1.dat busy-2.dat; do
    other=$(tr -d b <"$B/$f" | wc -c)
    ((other == 0)) || { show_logs; fail "$f of the preloaded run holds $other bytes that are not the 'b' every write wrote (a lost write's hole)"; }
  done
fi
exclude=()
for f in "${varies[@]}"; do
  exclude+=(-x "${f##*/}")
  [[ -f $B/$f ]] || { show_logs; fail "the preloaded run left no $f"; }
done
if ! diff -rq --no-dereference "${exclude[@]}" "$A" "$B" >"$ROOT/tree.diff" 2>&1; then
  head -n 50 "$ROOT/tree.diff"
  (cd "$A" && find . -printf '%y %s %p\n' | sort) >"$ROOT/A.list"
  (cd "$B" && find . -printf '%y %s %p\n' | sort) >"$ROOT/B.list"
  diff "$ROOT/A.list" "$ROOT/B.list" | head -n 50
  # The first differing byte of each file present on both sides (cmp counts from 1).
  (cd "$A" && find . -type f | sed "s,^\./,,") | while read -r rel; do
    [[ -f $B/$rel ]] && { cmp "$A/$rel" "$B/$rel" || true; }
  done | head -n 20
  show_logs
  fail "the files written with the preload library differ from those written without it (diff -r $A $B)"
fi
nfiles=0
while IFS= read -r -d '' f; do
  rel=${f#"$A"/}
  for v in "${varies[@]}"; do [[ $rel == "$v" ]] && continue 2; done
  cmp -s "$f" "$B/$rel" || { show_logs; fail "cmp: $rel differs between A and B"; }
  nfiles=$((nfiles + 1))
done < <(find "$A" -type f -print0)

# The library must have routed something under B, else the comparison above proves nothing.
# ("not routed", should the library ever log its pass-through decisions, does not count.)
routed=$(grep -F 'tai-preload: ' "$ROOT/B.stderr" | grep -F 'routed' | grep -vF 'not routed' | grep -cF "$B/")
if ((routed == 0)); then
  show_logs
  fail "nothing was routed: no 'tai-preload: ... routed <path under $B>' line in the preloaded run's log (TAI_PRELOAD_PATHS=$B TAI_PRELOAD_LOG=1)"
fi

# The signal case proves the deferral only if its timer hit the layer: the library's count of
# signals that waited for their thread to leave it (lazy mask; about 98 of the 100 here).
if [[ $CASE == probe_signal ]]; then
  waited=$(sed -n 's/.*inside the layer and waited until it left: \([0-9]*\).*/\1/p' "$ROOT/B.stderr" | tail -1)
  if [[ -z $waited || $waited == 0 ]]; then
    show_logs
    fail "no SIGALRM found the main thread inside the layer (count: ${waited:-none}): the deferral was not exercised"
  fi
  say "$waited of the timer's signals waited for the main thread to leave the layer"
fi

say "ok: $step_no steps on each side, exit status 0, identical output, $nfiles identical files, $routed routed opens under B"
if [[ ${KEEP_WORK:-0} != 1 ]]; then
  rm -rf "$ROOT"
fi
exit 0
