// The naive serial program's loop: one thread, one output file, for every image make its record
// and pwrite it (amplify copies), fsync every F images, then fsync and close. serial_loop.cpp is
// compiled twice: against libc (namespace serial::libc_calls) and against tai/posix.hpp
// (namespace serial::drop_in); the two objects differ only in which `io::` functions they call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "record.hpp"
#include "records.hpp"

namespace serial {

struct LoopSettings {
  std::string path;           // the output file (created and truncated)
  std::size_t images = 0;     // positions 0..images-1 of the record source
  unsigned amplify = 1;       // each record written this many times, one after the other
  unsigned fsync_every = 0;   // fsync after every F images; 0: only the final one
  bool direct = false;        // O_DIRECT (the records are then aligned, see RecordSource)
};

struct LoopResult {
  std::string error;          // empty on success: the first failing call, with its errno text
  double wall_s = 0;          // open to close, everything included
  double compute_s = 0;       // in the record source (decode, transform, encode, CRC32C)
  double io_s = 0;            // in open, pwrite, fsync and close
  double fsync_s = 0;         // in fsync (the final one included)
  std::size_t images = 0;     // records written (each `amplify` times)
  std::size_t skipped = 0;    // images that did not decode
  std::uint64_t bytes = 0;    // the output file's size
  std::uint64_t writes = 0, fsyncs = 0;  // calls that returned, the final fsync counted
  std::vector<augment::IndexEntry> index;  // every record copy written, in offset order
  bool ok() const { return error.empty(); }
};

// Called with the descriptor right after the open succeeded (the drop-in driver asks whether
// TAI routed it); may be empty.
using OpenObserver = std::function<void(int fd)>;

namespace libc_calls {
LoopResult run_serial_loop(const LoopSettings& settings, RecordSource& records, const OpenObserver& on_open);
}
namespace drop_in {
LoopResult run_serial_loop(const LoopSettings& settings, RecordSource& records, const OpenObserver& on_open);
}

}  // namespace serial
