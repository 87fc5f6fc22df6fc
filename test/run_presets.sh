#!/usr/bin/env bash
# Builds and tests CMake presets one after the other; what `make test`, `make check` and `make
# soak` run.
#
#   test/run_presets.sh quick|ci|full JOBS PRESET...      (PRESET: release, debug, asan, tsan)
#
# quick  (make test): the release preset builds everything and runs `ctest --preset
#        release-quick`; the sanitizers build their own configure presets asan-quick and
#        tsan-quick (build/asan-quick, build/tsan-quick), which compile only the test files and
#        preload cases of their runs (TAI_TESTS_ONLY in CMakePresets.json), and run `ctest
#        --preset asan-quick` / `tsan-quick`. Randomized suites at a quarter of their counts
#        (TAI_TEST_DEPTH=quick).
# ci     (make check, CI, after the release preset in full): the asan and tsan presets build the
#        binaries of the suites CI checks under them (CI_TARGETS below) and run `ctest --preset
#        asan-ci` / `tsan-ci`; a preset without a -ci test preset runs as in full.
# full   (make check's release step, make soak): every target of the preset, then `ctest
#        --preset P`: every test at CI's counts.
#
# Stops at the first failure and names the preset; on a test failure the failed tests run again
# alone with their whole output (a pass there means a flaky test). Prints each step's wall time
# and its CPU time (user + system of everything it ran), which says how much of a slow run was
# other load on the machine.
# ThreadSanitizer (gcc 12) cannot map its shadow memory when the kernel randomises mmap with more
# than 28 bits (vm.mmap_rnd_bits = 32 on some newer kernels): there the tests run under
# `setarch -R`, which turns address randomisation off for that process tree only.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

usage="usage: run_presets.sh quick|ci|full JOBS PRESET..."
mode=${1:?$usage}
jobs=${2:?$usage}
shift 2
case "$mode" in quick|ci|full) ;; *) echo "run_presets.sh: mode must be quick, ci or full, not '$mode'" >&2; exit 2;; esac

# make test (quick): the configure and build presets of the sanitizer steps, and what they build
# there: the test binaries of their ctest presets and what those tests run. The preload library
# is the preload cases' subject; controller_fuzz_replay replays the controller corpus (one and two
# threads).
declare -A QUICK_CONFIGURE=([asan]=asan-quick [tsan]=tsan-quick)
declare -A QUICK_TARGETS=(
  [asan]="tai_tests tai_posix_tests tai_model_tests btree_fuzz_replay controller_fuzz_replay tai_preload
          tai_preload_probe tai_preload_ends"
  [tsan]="tai_tests tai_posix_tests tai_shared_writers_tests controller_fuzz_replay"
)
# make check (ci): the binaries of the suites the asan-ci and tsan-ci test presets run (the
# library's units, the drop-in layer, the reliability suites and the preload under ASan; the
# concurrent suites under TSan). The workloads, examples and benchmarks are left to the release
# preset and to `make soak`. tai_tests runs tai-bench, so it is built as its dependency.
declare -A CI_TARGETS=(
  [asan]="tai_tests tai_posix_tests tai_model_tests tai_kill_tests tai_kill_child tai_real_fs_tests
          tai_shared_writers_tests btree_fuzz_replay controller_fuzz_replay tai_preload tai_preload_probe
          tai_preload_ends tai_preload_atexit_audit"
  [tsan]="tai_tests tai_posix_tests tai_shared_writers_tests btree_fuzz_replay controller_fuzz_replay"
)

# CPU seconds (user + system) of this script's finished children and theirs, in hundredths.
clk_tck=$(getconf CLK_TCK 2>/dev/null || echo 100)
cpu_centis() {
  local stat fields
  stat=$(cat /proc/$$/stat 2>/dev/null) || { echo 0; return; }
  read -r -a fields <<< "${stat##*) }"  # the fields after the command name; cutime, cstime: 14, 15
  echo $(( (fields[13] + fields[14]) * 100 / clk_tck ))
}
secs() { printf '%d.%02d' $(( $1 / 100 )) $(( $1 % 100 )); }

total_start=$(date +%s)
for preset in "$@"; do
  configure=$preset
  targets=()
  test_preset=$preset
  if [ "$mode" = quick ]; then
    configure=${QUICK_CONFIGURE[$preset]:-$preset}
    test_preset=$preset-quick
    # shellcheck disable=SC2206  # the lists above are plain words
    [ -n "${QUICK_TARGETS[$preset]:-}" ] && targets=(--target ${QUICK_TARGETS[$preset]})
  elif [ "$mode" = ci ] && [ -n "${CI_TARGETS[$preset]:-}" ]; then
    test_preset=$preset-ci
    # shellcheck disable=SC2206
    targets=(--target ${CI_TARGETS[$preset]})
  fi
  start=$(date +%s) cpu_start=$(cpu_centis)
  echo "==> [$preset] configure + build: preset $configure${targets:+ (${targets[*]:1})}"
  if ! { cmake --preset "$configure" && cmake --build --preset "$configure" -j "$jobs" "${targets[@]}"; }; then
    echo "run_presets: FAILED to build preset '$configure'"; exit 1
  fi
  built=$(date +%s) cpu_built=$(cpu_centis)
  runner=()
  if [ "$preset" = tsan ] && [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)" -gt 28 ] \
     && command -v setarch >/dev/null 2>&1; then runner=(setarch "$(uname -m)" -R); fi
  echo "==> [$preset] ctest --preset $test_preset${runner:+ (under ${runner[*]})}"
  if ! "${runner[@]}" ctest --preset "$test_preset"; then
    failed_list=$(cat "build/$configure/Testing/Temporary/LastTestsFailed.log" 2>/dev/null || true)
    echo "==> [$preset] the failed tests again, alone, with their whole output (a pass here means a flaky test):"
    "${runner[@]}" ctest --preset "$test_preset" --rerun-failed -j 1 --output-on-failure || true
    echo "==> [$preset] failed in the full run:"; echo "$failed_list"
    echo "run_presets: tests FAILED under preset '$test_preset'"; exit 1
  fi
  done_at=$(date +%s) cpu_done=$(cpu_centis)
  echo "==> [$preset] ok: build $((built - start)) s (CPU $(secs $((cpu_built - cpu_start))) s)," \
       "tests $((done_at - built)) s (CPU $(secs $((cpu_done - cpu_built))) s); load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "run_presets: all presets passed ($mode: $*) in $(( $(date +%s) - total_start )) s"
