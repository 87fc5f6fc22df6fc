// tai-augment --mpi: the workload scaled out over MPI ranks sharing one storage (the TAI paper,
// section 3.2). Every producing rank takes its shard of the input set (ids in a fixed mixed order, dealt round-robin),
// runs the pipeline with its own OpenMP threads and its own TAI controller, fsyncs, and then
// signals that its records are ready: a barrier for a whole stage, or point-to-point messages
// after every durable batch (streaming). The next stage, on the same ranks or on a second set of
// ranks, reads every record another rank wrote, checks its CRCs and decodes it. See README.md,
// "Scale-out over MPI".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "image.hpp"
#include "run.hpp"

namespace augment {

struct MpiSettings {
  std::vector<std::string> methods;   // run one after the other, each by every rank
  unsigned threads = 1;               // OpenMP compute threads per rank
  unsigned tai_workers = 2;
  std::size_t images = 400;           // the whole synthetic set, or per producing rank (below)
  bool images_per_rank = false;       // weak scaling: the set has images x producers images
  std::vector<Size> sizes;
  std::string sizes_text;
  std::string input_dir;              // a directory tree instead of the synthetic set
  std::uint64_t input_budget = std::uint64_t(1) << 30;  // encoded bytes of input_dir held in memory
  std::string output;                 // a directory every rank can reach
  bool shared_file = false;           // every rank writes into one file per output (disjoint chunks)
  std::uint64_t chunk_bytes = 1 << 20;  // --shared-file: the unit of reservation per rank
  std::string handoff = "barrier";    // barrier | stream
  std::string stage2 = "same";        // same (the producing ranks check each other) | separate
  int fault_rank = -1;                // this rank's TAI controller gets a fault engine (tests)
  std::string fault_rules;            // fault engine rules, e.g. "write:nth=3:errno=EIO"
  bool decode = true;                 // stage 2 decodes every payload as a PNG
  // Skips the refusal of --shared-file --direct with chunks that are not block-aligned: only to
  // show that the shared-file check catches the clobbering it prevents.
  bool allow_unsafe_shared_direct = false;
  RunConfig config;                   // the workload's knobs (seed, PNG level, batch, fsyncs, ...)
};

// True when this build has the MPI mode; else why_not says what is missing.
bool mpi_mode_built(std::string* why_not);

// Runs the MPI mode in this process (one rank): MPI_Init, the methods, stage 2, the report on
// rank 0, MPI_Finalize. Returns the process's exit status: 0 when every rank and every check of
// every method succeeded, 1 when something failed (each failure printed by rank 0 with its
// rank), 2 for a configuration refused before any I/O.
int run_mpi_mode(int& argc, char**& argv, const MpiSettings& settings);

}  // namespace augment
