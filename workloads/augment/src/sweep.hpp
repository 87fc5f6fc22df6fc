// `tai-augment sweep`: the TAI paper's experiments (its figures 3.1-3.8), methods interleaved in a
// rotating order per repeat, medians reported, figures drawn with gnuplot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "image.hpp"
#include "run.hpp"

namespace augment {

struct SweepOptions {
  std::string out_dir = "sweep-out";  // .dat tables, gnuplot scripts, PNG figures, results.md
  std::string work_dir;               // where the runs write (their files are removed after each run)
  unsigned repeat = 3;
  std::uint64_t bytes_per_point = std::uint64_t{1} << 30;  // each run writes at least this (amplify)
  std::vector<unsigned> threads = {1, 2, 4, 8};
  std::vector<std::string> figures = {"3.1", "3.3", "3.4", "3.5", "3.6"};  // 3.2, 3.7, 3.8 reuse 3.1's runs
  std::vector<std::string> methods = {"posix", "cstdio", "aio", "tai-triv", "tai-def"};
  std::vector<unsigned> fsync_frequencies = {1, 10, 30, 100, 300, 0};  // figure 3.6; 0 = never
  std::string command;                // the command line, echoed into results.md
};

// Runs the sweep over `input` with `base` (seed, PNG level, batch, ...) and writes the results;
// returns the process exit code (0: every run succeeded and verified its record count).
int run_sweep(const std::vector<EncodedImage>& input, const RunConfig& base, const SweepOptions& options);

// The amplification that makes one run over `input` write at least `bytes` (records measured by
// encoding a sample of the input with `base`).
unsigned amplify_for(const std::vector<EncodedImage>& input, const RunConfig& base, std::uint64_t bytes);

}  // namespace augment
