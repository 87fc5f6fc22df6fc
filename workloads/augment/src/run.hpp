// One measured run: every input image through decode, transform, encode and one I/O method.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cache_counters.hpp"
#include "image.hpp"
#include "method.hpp"
#include "record.hpp"
#include "run_meter.hpp"

namespace augment {

struct RunConfig {
  unsigned threads = 1;
  std::size_t batch = 1000;
  std::uint64_t seed = 1;
  int png_level = 6;
  TransformOptions transform;
  MethodConfig method;
  unsigned amplify = 1;       // each record written this many times, at that many offsets
  bool overwrite = false;     // each write followed at once by a second write of the same bytes
  unsigned fsync_every = 0;   // after each record (all its writes), a sync with probability 1/F; 0: none
  unsigned files = 1;         // records spread over this many files (image id mod files)
  bool read_input = false;    // read each input image from its path inside the loop
  std::string content;        // what the records depend on (seed, input, level, grey): the manifest's
  const CacheCounters* cache_counters = nullptr;  // the process's PAPI counters (started in main), or null
  std::string progress_label; // a progress line on a terminal for runs longer than 2 s; empty: none

  // Hooks of the MPI mode (mpi_mode.cpp); a plain run leaves them empty.
  //
  // reserve_offset(file, size): where the next record of `size` bytes goes in `file`, called by
  // any compute thread (so it must be thread-safe); kNoOffset fails the run (a record that does
  // not fit the caller's scheme). Empty: records back to back from offset 0.
  std::function<std::uint64_t(unsigned file, std::uint64_t size)> reserve_offset;
  std::string reserve_refusal;  // why reserve_offset refuses (appended to the run's error)
  // Called once on the loop's thread after every output is open and before the clock starts
  // (a shared output file: every rank has opened, and so truncated, it before anyone writes).
  std::function<void()> after_open;
  // When set, every batch ends with a sync of every output file through the method (waited for)
  // and then this is called on the loop's thread with the batch's records, which are durable:
  // the streaming hand-off. Not called once the method has failed.
  std::function<void(const std::vector<std::pair<unsigned, IndexEntry>>& durable)> on_batch_durable;
  // False: no index or manifest is written after the clock (the MPI shared-file mode writes a
  // per-rank index itself from RunResult::index).
  bool write_artifacts = true;
  // False: the indexes are written but no manifest (the MPI mode's own files: rank 0 writes one
  // manifest for the whole job, over every rank's files).
  bool write_manifest = true;
};

// reserve_offset's refusal.
constexpr std::uint64_t kNoOffset = std::numeric_limits<std::uint64_t>::max();

struct RunResult {
  std::string method;        // as asked, e.g. "tai-def:uring"
  std::string note;          // what the method says really ran
  std::string library_stats; // the method's own counters (Method::stats)
  std::string manifest;      // the run's manifest (lists its record files)
  std::vector<std::string> files;
  std::string error;         // empty when the run succeeded
  std::string refused;       // set when this machine refuses the method (the run was skipped)
  unsigned threads = 0;
  std::size_t images = 0;    // images written (each `amplify` times)
  std::size_t skipped = 0;   // inputs that failed to decode (counted, not written)
  std::uint64_t bytes = 0;   // bytes of output, overwrites not counted (headers and padding included)
  std::uint64_t bytes_issued = 0;  // bytes handed to the method, overwrites included
  std::uint64_t writes = 0, syncs = 0;  // write and sync calls (the final fsync per file not counted)
  double wall_s = 0;         // open excluded; every write, end of batch, fsync and close included
  double compute_s = 0;      // decode + transform + encode (+ CRC32C), summed over the compute threads
  double io_s = 0;           // time the compute threads spent in write/sync/end_batch/finish, summed
  double input_s = 0;        // time spent reading input files inside the loop (streamed inputs)
  // The inputs whose encoded bytes were in memory before the clock, and those read from their
  // file inside the loop (beyond the input budget, or every one with --read-input).
  std::size_t input_held = 0, input_streamed = 0;
  // The whole process over the clocked part (TAI's workers, glibc's AIO threads and the kernel
  // work they cause included): getrusage, /proc/self/io, peak RSS, PAPI cache misses.
  RunMeasurement measured;
  double user_s = 0, sys_s = 0;
  long voluntary_switches = 0, involuntary_switches = 0, minor_faults = 0;
  // Wall-clock instants (seconds since the epoch, CLOCK_REALTIME) for figures across processes:
  // the clock's start, the return of the last write call, the end (finish: final fsync done).
  double start_epoch_s = 0, last_write_epoch_s = 0, end_epoch_s = 0;
  // Every record written, per output file, sorted by offset (the indexes' content).
  std::vector<std::vector<IndexEntry>> index;
  bool ok() const { return error.empty(); }
};

// The record of one image as every method writes it (decode, transform, encode, header):
// deterministic in (seed, id). False (and *err) when the input does not decode.
bool make_output_record(const EncodedImage& in, const RunConfig& config, Bytes& record, std::string* err,
                        std::size_t alignment = 1);

// Whether the record of (seed, id, copy) is followed by a sync: a seeded draw, true with
// probability 1/every (never when every is 0), the same for every method.
bool sync_after(std::uint64_t seed, std::uint64_t id, unsigned copy, unsigned every);

// Runs `spec` over `input`: the record files are `<stem>.taia` (or `<stem>.f<j>.taia` for
// several files), their indexes `<file>.idx` and the manifest `<stem>.run`, written after the
// clock stops.
RunResult run_method(const std::vector<EncodedImage>& input, const std::string& spec, const std::string& stem,
                     const RunConfig& config);

}  // namespace augment
