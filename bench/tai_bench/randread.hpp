// bench/tai_bench/randread.hpp - the randread benchmark (the ioqueue benchmark's table, side by side with fio),
// shared by the `randread` and `demo` subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tai::bench {

struct RandreadConfig {
  std::string file = "/var/tmp/tai-randread.dat";
  std::uint64_t size = 4ull << 30;  ///< bytes; the file is created (or recreated) at this size
  /// Engine names: "threads" = the thread pool over posix; any other name goes to make_engine.
  std::vector<std::string> engines = {"libaio", "uring", "threads"};
  std::vector<std::uint64_t> block_sizes = {512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144};
  unsigned depth = 32;
  std::uint64_t reqs = 0;   ///< requests per run; 0 = min(the ioqueue benchmark's count, what fits in `seconds`)
  double seconds = 2.0;     ///< target wall time of one run when reqs == 0
  bool fio = false;         ///< also run fio, interleaved (needs fio in $PATH)
  unsigned repeat = 0;      ///< runs per row (medians reported); 0 = 3 with fio, 1 without
  std::string csv;          ///< CSV output path, empty = none
  unsigned submit_batch = 0;  ///< IoQueueOptions::submit_batch (kernel-queue engines)
  std::uint64_t seed = 42;  ///< offsets are reproducible from it
  bool huge_pages = false;  ///< TAI's buffers in transparent huge pages (see ReadBuffers in randread.cpp)
  /// Also read through tai::Controller (--via controller): the same reads as the IoQueue cell,
  /// through File::read on a BTreeTrivial file, depth receipts in flight, interleaved with the
  /// queue's runs; the table gains a row per cell and the ratio controller / queue op/s.
  bool via_controller = false;
  unsigned ctl_workers = 0;         ///< --via controller: ControllerOptions::workers (0 = default)
  std::int64_t ctl_spin_ns = -1;    ///< ControllerOptions::spin_ns (-1 = default)
  std::int64_t ctl_io_spin_ns = -1; ///< ControllerOptions::io_spin_ns (-1 = default)
  int ctl_submit_batch = -1;        ///< ControllerOptions::engine_submit_batch (-1 = default)
  bool ctl_stats = false;           ///< print Controller::stats() of each controller cell
  std::string title = "randread";
};

/// Runs the benchmark and prints its table. Returns 0, or a non-zero exit status after printing
/// the reason on stderr (bad file, no engine available, read errors).
int run_randread(const RandreadConfig& config);

}  // namespace tai::bench
