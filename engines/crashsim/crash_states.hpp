// engines/crashsim/crash_states.hpp - from a crash log (crashsim_engine.hpp), the disk images a
// power cut could leave, one file at a time or every file at once.
//
//     tai::engines::CrashStateOptions opt;                  // any-subset, torn 512-byte sectors
//     auto stats = tai::engines::enumerate_crash_states(log, file, opt, checker, visit);
//
// Crash points. A crash may happen just before each logged event completes, and after the last
// one: point k (k = 0 .. events.size()) has the time seq(k) = events[k].complete_seq (or +inf).
// At point k, for the chosen file:
//  * durable: every write/truncate that completed before the submit of a successful sync of the
//    file that completed before seq(k). Always in the image (they are a prefix in completion
//    order among the successful events).
//  * candidates: every other write/truncate submitted before seq(k): completed since the last
//    durable sync, or still in flight, or failed (a failed or short write is never durable: it
//    may have changed any part of its range). Each may or may not have reached the disk.
// Which candidate subsets are possible (CrashStateOptions::order):
//  * any_subset: any subset of the candidates (a device with a volatile write cache that
//    reorders freely; what SQLite's crash VFS does without SQLITE_IOCAP_SEQUENTIAL).
//  * sequential: only prefixes of the candidates in completion order (an in-order device).
// Torn writes (CrashStateOptions::sector_size > 0): a candidate write is split at sector
// boundaries of the file (sector_size apart, absolute offsets) and each sector persists or not on
// its own (any_subset), or the last write of a prefix persists any subset of its sectors
// (sequential). A persisted piece extends the file to its end; bytes up to there that nothing
// persisted read as 0 (a hole). A truncate is never torn.
// The image is built by applying the durable events and the chosen pieces in completion order
// (a later write wins where two overlap) on the file's initial content.
//
// Exhaustive or sampled. With u units (pieces, or candidates when not torn) a point has 2^u
// subsets (any_subset) or u+1 prefixes (sequential, not torn). When u <= exhaustive_bound every
// one is built; above it `samples` random ones (each unit persists with probability 1/2, plus
// the two extremes: none and all), drawn from a generator seeded with (seed, point), so the same
// seed gives the same states. Identical states are removed by hashing the image together with
// the checker's context for the point (CrashChecker::context: what the program knew by then;
// two equal images under the same knowledge get the same verdict): only unique states are
// checked and counted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tai/engines/crashsim/crashsim_engine.hpp"

namespace tai::engines {

/// Plain data (not synchronised).
struct CrashStateOptions {
  enum class Order : std::uint8_t { any_subset, sequential };
  Order order = Order::any_subset;
  /// Torn writes at this granularity (512 or 4096 are the useful values); 0: writes are atomic.
  std::uint32_t sector_size = 512;
  /// Up to this many units per point, enumerate every state; above, sample. At most 20.
  unsigned exhaustive_bound = 12;
  /// States drawn per point when sampling.
  unsigned samples = 256;
  /// Seed of the sampling.
  std::uint64_t seed = 0;
  /// Stop after this many unique states in total (0: no limit).
  std::uint64_t max_states = 0;
};
/// "any-subset" or "sequential". Thread-safe.
const char* to_string(CrashStateOptions::Order order) noexcept;

/// One candidate state handed to the checker. Valid only during the call; not synchronised.
struct CrashState {
  std::uint32_t file = 0;        ///< index into CrashLog::paths
  std::size_t point = 0;         ///< crash just before events[point] completes (== size: after all)
  std::uint64_t seq = 0;         ///< the point's time (UINT64_MAX after all)
  const std::vector<unsigned char>* image = nullptr;  ///< the file as it would read after the crash
  bool sampled = false;          ///< drawn at random (the point has more units than the bound)
  /// The log events whose pieces are in the image beyond the durable ones, e.g.
  /// "durable up to seq 40; +write f0 [0, +4096) sectors {0,3}; +truncate f0" (built on demand:
  /// call describe()).
  std::function<std::string()> describe;
};

/// What judges a state. Implementations say whether they are thread-safe; the enumerator calls
/// them from the calling thread only.
class CrashChecker {
 public:
  virtual ~CrashChecker() = default;
  /// A key of what the program knew at time `seq` (receipts finished, operations submitted):
  /// states with equal images and equal keys get one check. Default: 0 (images alone).
  virtual std::uint64_t context(std::uint32_t file, std::uint64_t seq) const;
  /// Appends one line per violation of `state` to `out` (nothing: the state is fine).
  virtual void check(const CrashState& state, std::vector<std::string>& out) = 0;
};

/// Counts of one enumeration (add them up with +=). Plain data (not synchronised).
struct CrashStats {
  std::uint64_t points = 0;        ///< crash points visited (with at least one state)
  std::uint64_t exhaustive_points = 0;
  std::uint64_t sampled_points = 0;
  std::uint64_t generated = 0;     ///< states built, duplicates included
  std::uint64_t unique = 0;        ///< states checked (distinct image and context)
  std::uint64_t violations = 0;    ///< lines the checker returned
  std::uint64_t max_units = 0;     ///< the most units one point had
  CrashStats& operator+=(const CrashStats& o);
};

/// Enumerates the states of `file` in `log` (see the file comment), hands each unique one to
/// `checker`, and calls `on_violation(state, lines)` for each state the checker objects to
/// (may be empty). Thread-safe for distinct checkers (it keeps no state of its own).
CrashStats enumerate_crash_states(const CrashLog& log, std::uint32_t file, const CrashStateOptions& options,
                                  CrashChecker& checker,
                                  const std::function<void(const CrashState&, const std::vector<std::string>&)>&
                                      on_violation = {});

// Every file at once (enumerate_multi_crash_states): one crash point, the same for all files,
// and per file the durable image plus a subset of that file's candidates, as above (each file's
// durable cut comes from its own syncs). The units of all files form one set: a point is
// enumerated exhaustively when all of them together are at most exhaustive_bound, else sampled.
// Only any_subset (a sequential device orders one queue of all files; not modelled). For
// properties across files: the drop-in layer's TAI_FSYNC=order (test/posix_layer/).

/// One multi-file state handed to the checker. Valid only during the call; not synchronised.
struct MultiCrashState {
  std::size_t point = 0;  ///< crash just before events[point] completes (== size: after all)
  std::uint64_t seq = 0;  ///< the point's time (UINT64_MAX after all)
  /// Per file of CrashLog::paths, the file as it would read after the crash.
  const std::vector<std::vector<unsigned char>>* images = nullptr;
  bool sampled = false;
  /// The events persisted beyond the durable ones, per file (built on demand).
  std::function<std::string()> describe;
};

/// What judges a multi-file state. The enumerator calls it from the calling thread only.
class MultiCrashChecker {
 public:
  virtual ~MultiCrashChecker() = default;
  /// A key of what the program knew at time `seq` (see CrashChecker::context). Default: 0.
  virtual std::uint64_t context(std::uint64_t seq) const;
  /// Appends one line per violation of `state` to `out`.
  virtual void check(const MultiCrashState& state, std::vector<std::string>& out) = 0;
};

/// Enumerates the multi-file states of `log` (every file in CrashLog::paths; see above), hands
/// each unique one (all images and the context hashed together) to `checker`. options.order must
/// be any_subset. Thread-safe for distinct checkers.
CrashStats enumerate_multi_crash_states(
    const CrashLog& log, const CrashStateOptions& options, MultiCrashChecker& checker,
    const std::function<void(const MultiCrashState&, const std::vector<std::string>&)>& on_violation = {});

/// A 64-bit hash of bytes (for deduplication; not cryptographic). Thread-safe.
std::uint64_t hash_bytes(const unsigned char* data, std::size_t n, std::uint64_t seed = 0) noexcept;

}  // namespace tai::engines
