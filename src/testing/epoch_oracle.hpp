// tai/testing/epoch_oracle.hpp - the oracle of the drop-in layer's TAI_FSYNC=order (tai/posix.hpp,
// DESIGN section 3 "fsync modes of the drop-in"), a MultiCrashChecker for
// enumerate_multi_crash_states (crash_states.hpp).
//
//     std::vector<tai::engines::EpochOp> ops;    // what the program did, with crash-log times
//     tai::engines::EpochOracle oracle(sim->snapshot(), ops);
//     enumerate_multi_crash_states(log, options, oracle, print_violation);
//
// The program log. Each write names its file (its path in the crash log), offset, bytes and
// epoch: the number of epoch-closing calls (fsync, fdatasync, sync_now, close of a cached file)
// made on any routed file before it. A truncation to 0 (ftruncate) has an epoch too. A *sync
// point* says that once the call had returned (its `end` time), every write of epochs below
// `required_epoch` is durable: sync_now and a cached file's close (every write before them:
// the current epoch + 1), ftruncate in order mode and a write-through file's close (they wait for
// every closed epoch: the current epoch). An fsync in order mode is no sync point: it returns at
// once. The crash log holds the engine's requests and, for write-through files, the layer's own
// kernel writes and syncs (posix::detail::KernelObserver, which the rig logs). An exit (the
// exit handler's work with files open) is a sync point for the closed epochs, as ftruncate.
//
// The rule, for a state of every file at crash time c: there is some k such that every write of
// epochs < k is present in its file (each byte reads as its value, or as that of a later write or
// truncation of the byte), and nothing of epochs > k is (only some of epoch k may be), with k at
// least every required_epoch of a sync point that returned before c. Per byte x of a file, with
// the sources of x in program order (the file's initial content, then every write covering x and
// every truncation), the value allowed at k is that of the last source of an epoch < k, or of any
// source of epoch k; a truncation's value is "0 or past the end of file". The checker computes,
// per file, the set of k (a 64-bit mask: epochs 0..63) that explain every byte, intersects them
// over the files and the sync points, and reports a state whose set is empty. Bytes are compared
// in pieces that no source boundary and no 512-byte boundary cross (a torn write persists whole
// sectors, so a piece comes from one source).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tai/engines/crashsim/crash_states.hpp"

namespace tai::engines {

/// One operation of the program under TAI_FSYNC=order. Plain data.
struct EpochOp {
  enum class Kind : std::uint8_t { write, truncate, sync_point };
  Kind kind = Kind::write;
  std::string path;  ///< the file's path in the crash log (write, truncate)
  std::uint64_t offset = 0;
  std::vector<unsigned char> data;
  unsigned epoch = 0;           ///< write, truncate: below 63
  unsigned required_epoch = 0;  ///< sync_point: every write of an epoch below it is durable
  std::uint64_t begin = 0, end = 0;  ///< on the crash log's clock (CrashSimEngine::tick)
  std::string label;                 ///< for messages ("fsync f1", "sync_now")
};

/// Not thread-safe (one per thread).
class EpochOracle : public MultiCrashChecker {
 public:
  /// `log` must outlive the oracle. Throws std::invalid_argument for an epoch above 62 or a path
  /// the log does not have.
  EpochOracle(const CrashLog& log, std::vector<EpochOp> ops);
  ~EpochOracle() override;
  /// The durability bound at seq (the largest required_epoch of a sync point done before it).
  std::uint64_t context(std::uint64_t seq) const override;
  void check(const MultiCrashState& state, std::vector<std::string>& out) override;

 private:
  struct FileModel;
  unsigned required_at(std::uint64_t seq) const;
  const CrashLog& log_;
  std::vector<EpochOp> ops_;
  std::vector<std::unique_ptr<FileModel>> files_;  // per CrashLog::paths (null: no program op)
};

}  // namespace tai::engines
