// One run of one mode: the workload (synthetic input, record settings, amplification) and the
// code that runs a mode over it, in this process or, for the preload mode, in a child.
#pragma once

#include <string>
#include <vector>

#include "image.hpp"
#include "options.hpp"
#include "outcome.hpp"
#include "run.hpp"

namespace serial {

struct Workload {
  std::vector<augment::EncodedImage> input;
  augment::RunConfig config;  // seed, PNG level, content (what the records depend on)
  unsigned amplify = 1;
};

// The synthetic input set of `options` and its amplification (--amplify, or enough copies for
// --min-mib, measured by encoding a sample). False and *err on bad --sizes.
bool make_workload(const RunOptions& options, Workload& workload, std::string* err);

// The output directory exists (made when missing); false and *err otherwise.
bool ensure_directory(const std::string& dir, std::string* err);

// Runs options.mode once over `workload` and writes the output's index and run manifest after
// the clock. The preload mode runs the posix mode in a child process under the preload library.
RunOutcome run_mode(const RunOptions& options, const Workload& workload);

// The preload library this build made, or empty when it made none.
std::string built_preload_library();

// Runs `tai-serial --mode <mode> ...` (this very program) as a child with `extra_env` added to
// its environment and returns what it wrote to its result file. The run's output goes to
// options.output with the stem options.run_name.
RunOutcome run_child(const RunOptions& options, Mode child_mode, const std::vector<std::string>& extra_env,
                     unsigned amplify);

// Reads the output back (augment's verify: CRCs, index, PNG decode, every image amplify times).
// Empty when it holds, else what is wrong.
std::string verify_output(const RunOutcome& outcome);
// Removes the output file, its index and the run manifest.
void remove_output(const RunOutcome& outcome);

}  // namespace serial
