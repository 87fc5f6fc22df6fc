#!/usr/bin/env bash
# Builds and tests CMake presets one after the other; what `make test` and `make check` run.
#
#   test/run_presets.sh quick|full JOBS PRESET...
#
# full   (make check, CI): every target of each preset, then `ctest --preset P`: every test at
#        CI's counts.
# quick  (make test): `ctest --preset P-quick` (CMakePresets.json): the randomized suites at a
#        quarter of their counts (TAI_TEST_DEPTH=quick), and under the sanitizers only the suites
#        they can say something about, so only those targets are built (QUICK_TARGETS below).
#
# Stops at the first failure and names the preset; on a test failure the failed tests run again
# alone with their whole output (a pass there means a flaky test). Prints the time of each step.
# ThreadSanitizer (gcc 12) cannot map its shadow memory when the kernel randomises mmap with more
# than 28 bits (vm.mmap_rnd_bits = 32 on some newer kernels): there the tests run under
# `setarch -R`, which turns address randomisation off for that process tree only.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode=${1:?usage: run_presets.sh quick|full JOBS PRESET...}
jobs=${2:?usage: run_presets.sh quick|full JOBS PRESET...}
shift 2
case "$mode" in quick|full) ;; *) echo "run_presets.sh: mode must be quick or full, not '$mode'" >&2; exit 2;; esac

# What a quick run builds under a sanitizer: the binaries of the suites its ctest preset keeps
# (the library's units, the drop-in layer, the reliability suites and the preload under ASan; the
# concurrent suites under TSan). The workloads, examples and benchmarks are left to the release
# preset and to `make check`. tai_tests runs tai-bench, so it is built as its dependency.
declare -A QUICK_TARGETS=(
  [asan]="tai_tests tai_posix_tests tai_model_tests tai_kill_tests tai_kill_child tai_real_fs_tests
          tai_shared_writers_tests btree_fuzz_replay controller_fuzz_replay tai_preload tai_preload_probe
          tai_preload_ends"
  [tsan]="tai_tests tai_posix_tests tai_shared_writers_tests btree_fuzz_replay controller_fuzz_replay"
)

total_start=$(date +%s)
for preset in "$@"; do
  start=$(date +%s)
  targets=()
  test_preset=$preset
  if [ "$mode" = quick ]; then
    test_preset=$preset-quick
    # shellcheck disable=SC2206  # the lists above are plain words
    [ -n "${QUICK_TARGETS[$preset]:-}" ] && targets=(--target ${QUICK_TARGETS[$preset]})
  fi
  echo "==> [$preset] configure + build${targets:+ (${targets[*]:1})}"
  if ! { cmake --preset "$preset" && cmake --build --preset "$preset" -j "$jobs" "${targets[@]}"; }; then
    echo "run_presets: FAILED to build preset '$preset'"; exit 1
  fi
  built=$(date +%s)
  runner=()
  if [ "$preset" = tsan ] && [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)" -gt 28 ] \
     && command -v setarch >/dev/null 2>&1; then runner=(setarch "$(uname -m)" -R); fi
  echo "==> [$preset] ctest --preset $test_preset${runner:+ (under ${runner[*]})}"
  if ! "${runner[@]}" ctest --preset "$test_preset"; then
    failed_list=$(cat "build/$preset/Testing/Temporary/LastTestsFailed.log" 2>/dev/null || true)
    echo "==> [$preset] the failed tests again, alone, with their whole output (a pass here means a flaky test):"
    "${runner[@]}" ctest --preset "$test_preset" --rerun-failed -j 1 --output-on-failure || true
    echo "==> [$preset] failed in the full run:"; echo "$failed_list"
    echo "run_presets: tests FAILED under preset '$test_preset'"; exit 1
  fi
  done_at=$(date +%s)
  echo "==> [$preset] ok: build $((built - start)) s, tests $((done_at - built)) s"
done
echo "run_presets: all presets passed ($mode: $*) in $(( $(date +%s) - total_start )) s"
