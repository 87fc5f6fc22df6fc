// bench/tai_bench/commands.hpp - the subcommands of tai-bench, one per source file.
//
// Adding a subcommand is a two-line change outside its own file:
//   1. declare `void add_<name>_command(CLI::App& app);` below;
//   2. call it from main.cpp (the list in register_commands).
// Then write bench/tai_bench/<name>_cmd.cpp (or <name>.cpp; the CMake glob picks it up) defining
// it: create the subcommand with app.add_subcommand("<name>", "what it does"), add its options,
// and set its callback. A callback reports failure by throwing CLI::RuntimeError(exit_code)
// after printing its own message to stderr; main() turns that into the exit status.
#pragma once

namespace CLI {
class App;
}

namespace tai::bench {

/// `tai-bench engines`: every engine, available or not with the reason, and its capabilities.
void add_engines_command(CLI::App& app);

/// `tai-bench randread`: the ioqueue benchmark's random-read table through tai::IoQueue, beside fio; --via controller adds
/// the same reads through tai::Controller (randread.cpp).
void add_randread_command(CLI::App& app);

/// `tai-bench demo`: randread on a generated 1 GiB file, 4k and 64k, what `make demo` runs (demo.cpp).
void add_demo_command(CLI::App& app);

/// `tai-bench latency`: the io_uring/mmap latency study's per-read latency percentiles by read method (latency.cpp).
void add_latency_command(CLI::App& app);

/// `tai-bench write`: the direct-I/O write study's append-only writes, buffered + fsync vs O_DIRECT, beside fio (write.cpp).
void add_write_command(CLI::App& app);

/// `tai-bench fadvise`: the fadvise note's FADV_NOREUSE / FADV_DONTNEED reads vs O_DIRECT, O_DSYNC vs O_DIRECT writes (fadvise.cpp).
void add_fadvise_command(CLI::App& app);

/// `tai-bench overhead`: a small request's cost through tai::Controller, beside glibc AIO and pwrite (overhead.cpp).
void add_overhead_command(CLI::App& app);

/// `tai-bench idle`: CPU used by an idle controller, and right after a burst (idle.cpp).
void add_idle_command(CLI::App& app);

/// `tai-bench memory`: peak RSS and heap while writing far more than a small quota (memory.cpp).
void add_memory_command(CLI::App& app);

/// `tai-bench crash`: the crash-state suite for longer than CI runs it (crash.cpp; needs tai::testing).
void add_crash_command(CLI::App& app);

}  // namespace tai::bench
