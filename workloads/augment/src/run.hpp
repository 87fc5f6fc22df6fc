// One measured run: every input image through decode, transform, encode and one I/O method.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "image.hpp"
#include "method.hpp"

namespace augment {

struct RunConfig {
  unsigned threads = 1;
  std::size_t batch = 1000;
  std::uint64_t seed = 1;
  int png_level = 6;
  TransformOptions transform;
  MethodConfig method;
};

struct RunResult {
  std::string method;        // as asked, e.g. "tai-def:uring"
  std::string note;          // what the method says really ran
  std::string path;          // the output file
  std::string error;         // empty when the run succeeded
  std::string refused;       // set when this machine refuses the method (the run was skipped)
  std::size_t images = 0;    // records written
  std::size_t skipped = 0;   // inputs that failed to decode (counted, not written)
  std::uint64_t bytes = 0;   // bytes written (headers included)
  double wall_s = 0;         // open excluded; every write, end of batch, fsync and close included
  double compute_s = 0;      // decode + transform + encode, summed over the compute threads
  double io_s = 0;           // time the compute threads spent in write/end_batch/finish, summed
  // getrusage(RUSAGE_SELF) over the clocked part: the whole process (TAI's workers, glibc's AIO
  // threads and the kernel work they cause included).
  double user_s = 0, sys_s = 0;
  long voluntary_switches = 0, involuntary_switches = 0, minor_faults = 0;
  bool ok() const { return error.empty(); }
};

// The record of one image as every method writes it (decode, transform, encode, header):
// deterministic in (seed, id). False (and *err) when the input does not decode.
bool make_output_record(const EncodedImage& in, const RunConfig& config, Bytes& record, std::string* err,
                        std::size_t alignment = 1);

RunResult run_method(const std::vector<EncodedImage>& input, const std::string& spec, const std::string& path,
                     const RunConfig& config);

}  // namespace augment
