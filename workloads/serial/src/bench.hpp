// `tai-serial bench`: every mode as a child process, interleaved and repeated per fsync
// frequency; the medians as a table (and CSV) with the ceiling of overlap.
#pragma once

#include <string>
#include <vector>

#include "options.hpp"
#include "outcome.hpp"

namespace serial {

// One row of the table: the medians of one mode's runs at one fsync frequency.
struct BenchRow {
  std::string mode;
  unsigned fsync_every = 0;
  bool direct = false;
  std::size_t runs = 0;
  double wall_s = 0, compute_s = 0, io_s = 0, fsync_s = 0;
  double images = 0, bytes = 0;
  double speedup = 0;       // posix's median wall / this one's (0: no posix row)
  std::string note;
  bool ceiling = false;     // the ceiling row: wall_s = max(C, P - C), speedup = the ceiling
};

// The rows of one fsync frequency from its runs (failed runs left out): every mode with at
// least one good run, in `modes` order, then the ceiling row when posix and compute-only ran.
std::vector<BenchRow> bench_rows(const std::vector<Mode>& modes, const std::vector<RunOutcome>& runs, unsigned fsync_every,
                                 bool direct);
std::string format_table(const std::vector<BenchRow>& rows);
std::string format_csv(const std::vector<BenchRow>& rows);

int run_bench(const RunOptions& base, const BenchOptions& bench, const std::string& command);

}  // namespace serial
