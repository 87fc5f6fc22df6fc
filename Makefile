# TAI - the two quick-start commands and their helpers. CMake (CMakePresets.json) does the real
# work; this file only chains the steps a new user or CI would otherwise type by hand.
#
#   make demo    install missing packages, build `tai-augment` (release), run the image workload
#   make test    install missing packages, then the quick check: build + ctest the release preset at
#                reduced counts, then ASan+UBSan and TSan builds of only the suites they run there
#   make check   what CI runs: the API reference (make docs), every target and every test of the
#                release preset at CI's counts, then the asan and tsan presets over the suites CI
#                checks under them (the full sanitizer presets are part of `make soak`)
#
# Other targets: deps, release, debug, asan, tsan, package, soak, fuzz, fuzz-merge, bench, slowdev, docs, clean, help.
# Variables: JOBS (parallel build jobs, default `nproc`), TEST_PRESETS (make test's presets, default:
# release asan tsan), CHECK_PRESETS (make check's, the same), CHECK_FULL_PRESETS (run in full by
# make check, default: release).

SHELL := /bin/bash
.DEFAULT_GOAL := release

JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PRESETS := release debug asan tsan
TEST_PRESETS ?= release asan tsan
CHECK_PRESETS ?= release asan tsan
# make check: these presets in full; the others of CHECK_PRESETS over the suites CI checks under
# them (test/run_presets.sh ci).
CHECK_FULL_PRESETS ?= release
CHECK_CI_PRESETS := $(filter-out $(CHECK_FULL_PRESETS),$(CHECK_PRESETS))
# make test's own sanitizer builds (CMakePresets.json), removed by make clean with the presets'.
QUICK_BUILD_DIRS := asan-quick tsan-quick
BENCH := build/release/bench/tai-bench
AUGMENT := build/release/workloads/augment/tai-augment
# The demo: the image-augmentation workload on its built-in synthetic images, 1 and 2 compute
# threads, every write overwritten at once, fsync after about every 30 writes, three interleaved
# runs of every row and the median shown (about 2 minutes on 2 cores: a single run moves by a
# tenth between runs on a VM, more than the I/O this regime has to hide). Override e.g.
# `make demo DEMO_ARGS="--threads 1 --images 60"`.
DEMO_ARGS ?= --threads 1,2 --images 120 --repeat 3 --method posix,cstdio,aio,tai-triv,tai-def --overwrite --fsync-every 30 --verify
# The demo's second table, the regime TAI is for: an fsync after every record (a program that may
# not lose one), where the posix method waits for the device at each record and TAI's methods
# hand the wait to their workers and keep computing.
DEMO_SYNC_ARGS ?= --threads 1,2 --images 60 --repeat 3 --method posix,aio,tai-triv,tai-def --overwrite --fsync-every 1 --verify

# The image workload's full sweep (figures 3.1-3.8 of the TAI paper, 1 GiB per point, 3 repeats):
# hours on 2 cores. Its tables and figures are committed under docs/results/augment/.
SWEEP_OUT ?= docs/results/augment
SWEEP_ARGS ?= --repeats 3 --mib-per-point 1024 --images 200

# Debian 12 package names (checked with apt-cache policy). What each is for:
#   toolchain: build-essential cmake ninja-build pkg-config clang libomp-dev (OpenMP)
#   library:   libboost-dev (Boost.Lockfree) libaio-dev liburing-dev
#   TAI's programs: libjemalloc-dev (allocator) libpapi-dev (benchmarks)
#   tests/benchmarks: libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libfmt-dev fio gnuplot-nox
#   image workload:   libpng-dev libjpeg62-turbo-dev
#   API reference:    doxygen
#   test scripts:     python3 (the workload's JSON/CSV reports are parsed back)
#   preload tests:    sqlite3 (a real program run under libtai-preload.so)
#   real-error tests: e2fsprogs (mkfs.ext4 for the loop-mounted ext4 that fills up and is shut down)
#                     xfsprogs, btrfs-progs (mkfs.xfs, mkfs.btrfs: the same tests on XFS and
#                     btrfs, and the preload.xfs.* / preload.btrfs.* cases run in one of each)
#   preload tests' other programs (a missing one skips its case): cpio, git, xz-utils, bzip2,
#                     zstd, zip, unzip, gcc (build-essential)
#   make fuzz:        libclang-rt-14-dev (clang 14's sanitizer and libFuzzer runtimes, which
#                     -fsanitize=fuzzer,address,undefined links; clang only recommends it, and
#                     deps installs without recommendations)
#   image workload's MPI mode (tai-augment --mpi, its tests): openmpi-bin libopenmpi-dev
#   make package and its test (cmake_smoke.debian_packages): lintian (dpkg-dev, for
#                     dpkg-shlibdeps, comes with build-essential)
DEPS_PACKAGES := build-essential cmake ninja-build pkg-config clang libomp-dev \
  libboost-dev libjemalloc-dev libpapi-dev libaio-dev liburing-dev \
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libfmt-dev fio gnuplot-nox \
  libpng-dev libjpeg62-turbo-dev doxygen python3 sqlite3 e2fsprogs libclang-rt-14-dev \
  openmpi-bin libopenmpi-dev xfsprogs btrfs-progs cpio git xz-utils bzip2 zstd zip unzip lintian

.PHONY: help deps $(PRESETS) demo test check package soak fuzz fuzz-merge bench bench-dropin slowdev docs clean sweep

help:
	@echo "make demo      deps + release build of tai-augment + two runs: '$(AUGMENT) $(DEMO_ARGS)' and '... $(DEMO_SYNC_ARGS)'"
	@echo "make test      deps + the quick check: release at reduced counts, ASan+UBSan and TSan builds of the suites they run there (docs/testing.md gives its time)"
	@echo "make check     deps + docs + every target and test of the release preset at CI's counts, then asan and tsan over the suites CI checks under them (what CI runs)"
	@echo "make package   release build + Debian packages (CPack): libtai-dev and tai-tools into build/release/packages"
	@echo "make sweep     the image workload's full sweep (the TAI paper's figures; hours) into $(SWEEP_OUT)"
	@echo "make bench     release build + '$(BENCH) randread' with its defaults"
	@echo "make soak      the reliability suites at soak size (10,000,000 model operations per engine, 5x the kills, 500 sqlite3 kills per TAI_FSYNC=order journal test, the I/O-error loop twice over, twice the controller order runs), then every target and test of the asan and tsan presets (hours)"
	@echo "make fuzz      clang build (preset fuzz) of the libFuzzer targets ($(FUZZ_TARGETS)), each run FUZZ_SECONDS=$(FUZZ_SECONDS) s on its corpus; new inputs go to $(FUZZ_NEW)/<target>"
	@echo "make fuzz-merge  minimise $(FUZZ_NEW)/<target> into the committed corpora (libFuzzer -merge=1)"
	@echo "make bench-dropin  the drop-in benchmarks: the serial program (every mode, fsync every 1, 30, 300) and dd under the preload"
	@echo "make slowdev   the slow-storage profile (root): a throttled loop device (ext4/XFS), fio calibration, tai-serial bench and tai-augment on it, into $(SLOWDEV_OUT)"
	@echo "make docs      the API reference (Doxygen over include/tai) into build/docs/html; warnings fail"
	@echo "make deps      apt-get install the missing Debian packages (idempotent)"
	@echo "make release|debug|asan|tsan   configure + build that preset into build/<preset>"
	@echo "make clean     remove build/<preset> for: $(PRESETS) $(QUICK_BUILD_DIRS)"
	@echo "JOBS=$(JOBS) (override: make JOBS=4 test)"

# deps: dpkg-query first (fast, no network), `apt-get update` + install only when something is
# missing. Root runs apt-get directly; otherwise sudo when it exists (non-interactive without a
# terminal, so CI never hangs on a password prompt). On failure it names the missing packages.
deps:
	@set -u; \
	if ! command -v dpkg-query >/dev/null 2>&1; then \
	  echo "deps: not a Debian-based system (no dpkg-query); make sure these (or your distribution's"; \
	  echo "      equivalents) are installed: $(DEPS_PACKAGES)"; \
	  exit 0; \
	fi; \
	missing=""; \
	for pkg in $(DEPS_PACKAGES); do \
	  status=$$(dpkg-query -W -f='$${db:Status-Abbrev}' "$$pkg" 2>/dev/null || true); \
	  case "$$status" in ii*) ;; *) missing="$$missing $$pkg";; esac; \
	done; \
	if [ -z "$$missing" ]; then echo "deps: all $(words $(DEPS_PACKAGES)) packages are installed"; exit 0; fi; \
	echo "deps: missing:$$missing"; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null 2>&1; then \
	  if [ -t 0 ]; then sudo="sudo"; else sudo="sudo -n"; fi; \
	else \
	  echo "deps: cannot install: not root and no sudo. As root, run:"; \
	  echo "      apt-get update && apt-get install -y$$missing"; \
	  exit 1; \
	fi; \
	if ! $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q; then \
	  echo "deps: 'apt-get update' failed; cannot install:$$missing"; exit 1; \
	fi; \
	if ! $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; then \
	  echo "deps: 'apt-get install' failed; these packages are still missing:$$missing"; exit 1; \
	fi; \
	echo "deps: installed:$$missing"

# Configure (cheap when the cache exists; re-applies the preset's variables) and build.
$(PRESETS): deps
	cmake --preset $@
	cmake --build --preset $@ -j $(JOBS)

# Debian packages of the release build (cmake/TaiPackage.cmake): libtai-dev (headers, libtai.a,
# the CMake package, pkg-config) and tai-tools (tai-bench, tai-augment, tai-serial,
# libtai-preload.so). cmake_smoke.debian_packages installs them into an empty root and checks them.
package: release
	cd build/release && cpack -B packages
	@ls -l build/release/packages/*.deb

sweep: deps
	cmake --preset release
	cmake --build --preset release -j$(JOBS) --target tai-augment
	$(AUGMENT) sweep --out $(SWEEP_OUT) --work build/release/augment-sweep $(SWEEP_ARGS)

# Builds only what the demo needs; the randread demo stays available as `tai-bench demo`.
demo: deps
	cmake --preset release
	cmake --build --preset release -j $(JOBS) --target tai-augment
	@if [ ! -x $(AUGMENT) ]; then echo "make demo: tai-augment was not built (see the configure output: libpng, libjpeg, OpenMP?)"; exit 1; fi
	@echo "== make demo, table 1 of 2: an fsync after about every 30 records"
	$(AUGMENT) $(DEMO_ARGS) --output build/release/augment-demo
	@echo "== make demo, table 2 of 2: an fsync after every record (the device's wait to hide)"
	$(AUGMENT) $(DEMO_SYNC_ARGS) --output build/release/augment-demo-sync

# The reliability suites beyond CI's counts: the model-based random operations at 10,000,000 per
# engine (CI: 1,000,000 for the buffered engines, 200,000 for the O_DIRECT ones), the I/O-error
# loop with each workload on two configurations (CI: one) and five times
# CI's process kills (about an hour on 2 cores, most of it in the O_DIRECT engines), the
# controller's order runs at twice CI's operations; then the
# sanitizer presets in full: every target (the workloads and benchmarks too) and every test at
# CI's counts (about another hour: make check runs them over the suites CI checks under them, at
# a quarter of the randomized counts, to stay in CI's time).
# The sqlite3 kills under TAI_FSYNC=order (500 per journal test, half with a power cut) run the
# test binary itself: ctest gives each kill test 120 s.
soak: release
	TAI_MODEL_OPS=10000000 ctest --test-dir build/release -R '^model\.' -j2 --output-on-failure
	TAI_KILL_SCALE=5 ctest --test-dir build/release -R '^kill\.' -j2 --output-on-failure
	TAI_ORDER_KILLS=500 build/release/test/kill/tai_kill_tests --gtest_filter='PreloadKill.Sqlite3*OrderMode*'
	TAI_IOERR_SCALE=2 ctest --test-dir build/release -R 'IoErrorLoopSuite|^crashsim\.' -j2 --output-on-failure
	TAI_CONTROLLER_ORDER_SCALE=2 ctest --test-dir build/release -R 'ControllerOrder\.' -j2 --output-on-failure
	test/run_presets.sh full $(JOBS) $(CHECK_CI_PRESETS)

# libFuzzer (docs/testing.md): the fuzz preset builds the targets with clang and
# -fsanitize=fuzzer,address,undefined (the library with fuzzer-no-link, for its coverage); each
# runs FUZZ_SECONDS on its committed corpus (test/<target>/corpus, read only: libFuzzer writes
# new inputs into the first directory it is given, FUZZ_NEW/<target>). A crash leaves
# build/fuzz/<target>-crash-<sha1> and stops; `make fuzz-merge` minimises what a run found into the
# committed corpora. CI does not fuzz: every preset's ctest replays the corpora
# (btree_fuzz.corpus, controller_fuzz.corpus).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := btree_fuzz controller_fuzz
FUZZ_NEW := build/fuzz/new-corpus
FUZZ_ARGS ?=
fuzz: deps
	cmake --preset fuzz
	cmake --build --preset fuzz -j $(JOBS) --target $(FUZZ_TARGETS)
	@set -eu; \
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_NEW)/$$t; \
	  echo "==> $$t for $(FUZZ_SECONDS) s"; \
	  build/fuzz/test/$$t/$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=build/fuzz/$$t- \
	    $(FUZZ_ARGS) $(FUZZ_NEW)/$$t test/$$t/corpus; \
	done

# -use_counters=0: an input is kept for a new edge, not for a new hit count of a known one (the
# controller's corpus: 139 files instead of 755, same edges), so that the replay stays seconds.
fuzz-merge:
	@set -eu; \
	for t in $(FUZZ_TARGETS); do \
	  if [ -d $(FUZZ_NEW)/$$t ]; then build/fuzz/test/$$t/$$t -merge=1 -use_counters=0 test/$$t/corpus $(FUZZ_NEW)/$$t; fi; \
	done

# The drop-in benchmarks (docs/results/README.md): tai-serial's modes interleaved,
# medians of 3, and dd with and without libtai-preload.so. Minutes; a quiet machine matters.
SERIAL := build/release/workloads/serial/tai-serial
bench-dropin: release
	$(SERIAL) bench --images 100 --fsync-every 1,30,300 --repeats 3 --output build/release/serial-bench --csv build/release/serial-bench.csv
	bench/preload/dd_bench.sh --lib build/release/src/preload/libtai-preload.so --rounds 5 --mib 512 --csv build/release/dd-bench.csv

# The slow-storage profile (bench/slowdev/, docs/results/slow-storage.md): a file-backed loop device
# with ext4 or XFS, throttled by the kernel's block throttle (cgroup v1 blkio.throttle.* at the
# root, or v2 io.max), calibrated with fio; then tai-serial bench and tai-augment run on it and
# bench/slowdev/summarize.py draws the speed-up against posix's share of time in I/O. Needs root.
# The device is taken down at the end, also on failure; `bench/slowdev/slowdev.sh down --name
# tai-slowdev-bench` cleans up after a killed run. E.g. SLOWDEV_ARGS="--fs ext4,xfs --rates 20,40".
SLOWDEV_OUT ?= build/release/slowdev
SLOWDEV_ARGS ?= --fs ext4 --rates 20 --repeats 3
slowdev: deps
	cmake --preset release
	cmake --build --preset release -j $(JOBS) --target tai-serial tai-augment tai_preload
	bench/slowdev/bench.sh --out $(SLOWDEV_OUT) --build build/release $(SLOWDEV_ARGS)

bench: release
	$(BENCH) engines
	$(BENCH) randread
	$(BENCH) latency
	$(BENCH) write --fio
	$(BENCH) fadvise
	@if [ -x build/release/bench/tai-micro ]; then build/release/bench/tai-micro; fi

# The API reference: Doxygen over the public headers and docs/api.md (docs/Doxyfile). Any warning
# (a broken reference, a bad command) fails it; `make check` runs it first.
docs: deps
	@rm -rf build/docs && mkdir -p build/docs
	doxygen docs/Doxyfile
	@echo "docs: build/docs/html/index.html"

# make test: a developer's check, meant to take at most 20 minutes on 2 cores from a fresh clone
# (docs/testing.md gives what was measured): the release preset with its suites at a quarter of
# their randomized counts (TAI_TEST_DEPTH=quick), then ASan+UBSan over the library's units, the
# drop-in layer, the model suite and a dozen preload cases, and TSan over the concurrent suites,
# each in a build of only those tests (the presets asan-quick and tsan-quick, CMakePresets.json).
# make check: the run CI makes, within its 45 minutes: the API reference, every target of the
# release preset and every test at CI's counts, then the asan and tsan presets over the suites CI
# checks under them (ctest presets asan-ci, tsan-ci; make soak runs those presets in full). Both
# stop at the first failure and print each step's wall and CPU time (test/run_presets.sh).
test: deps
	test/run_presets.sh quick $(JOBS) $(TEST_PRESETS)

check: deps docs
	test/run_presets.sh full $(JOBS) $(CHECK_FULL_PRESETS)
	$(if $(CHECK_CI_PRESETS),test/run_presets.sh ci $(JOBS) $(CHECK_CI_PRESETS))

# Only the preset directories: other build/<name> directories belong to their owners.
clean:
	rm -rf $(addprefix build/,$(PRESETS) $(QUICK_BUILD_DIRS))
