// tai-serial's command line, its modes, and the arithmetic of the comparison (medians, the
// ceiling of overlap): the pure parts, which the unit tests check.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "median.hpp"
#include "overlap_ceiling.hpp"

namespace serial {

// What one run does; see README.md for what each really runs.
enum class Mode { posix, drop_in, preload, async, compute_only, io_only };

const char* mode_name(Mode mode);                       // "posix", "drop-in", ...
std::optional<Mode> parse_mode(const std::string& name);
const std::vector<Mode>& all_modes();                   // in the bench's order

// One run's settings (also what the bench hands to each of its child runs).
struct RunOptions {
  Mode mode = Mode::posix;
  std::size_t images = 400;
  std::string sizes = "256x256,320x240,512x384,640x480";
  unsigned fsync_every = 30;          // 0: only the final fsync
  bool direct = false;
  std::string output = "serial-out";
  unsigned amplify = 0;               // 0: enough copies that a run writes min_mib
  double min_mib = 256;
  std::uint64_t seed = 1;
  int png_level = 6;
  bool verify = false;
  unsigned tai_workers = 2;           // async: the controller's workers (drop-in and preload: TAI_WORKERS)
  std::string engine = "auto";        // async: the controller's engine (drop-in and preload: TAI_ENGINE)
  std::size_t batch = 1000;           // async: images between waits for the receipts
  std::string preload_lib;            // preload: the library; empty: the one this build made, if any
  // Internal (the bench's child runs): write the result line to this file instead of a report.
  std::string result_file;
  std::string run_name;               // the output file's stem; empty: the mode's name
};

struct BenchOptions {
  std::vector<unsigned> fsync_list = {1, 30, 300};
  unsigned repeats = 3;
  std::vector<Mode> modes = all_modes();
  std::string csv;                    // write the table as CSV here too
  bool keep = false;                  // keep every run's output files (default: removed after its check)
};

struct CommandLine {
  bool bench = false;
  RunOptions run;
  BenchOptions bench_options;
};

// Parses argv. Returns std::nullopt with the command line filled, or the exit code to return at
// once (0 after --help, non-zero after a usage error, whose message was printed).
std::optional<int> parse_command_line(int argc, const char* const* argv, CommandLine& out);

// Parses "1,30,300" (each 0..1000000); false on anything else.
bool parse_unsigned_list(const std::string& text, std::vector<unsigned>& out);

// The ceiling of overlap (overlap_ceiling.hpp), with C the compute-only run's time.
using augment::overlap_ceiling;

// The median tai-augment reports too (0 for none).
using augment::median;

// The order of the modes in repeat r: rotated by r, so that across repeats every mode runs
// early and late (A B C, B C A, C A B, ...).
std::vector<Mode> interleaved_order(const std::vector<Mode>& modes, unsigned repeat);

}  // namespace serial
