// tai/testing/crash_checker.hpp - what the program was told (ProgramLog) and TAI's oracle
// (TaiCrashOracle), a CrashChecker for crash_states.hpp.
//
//     tai::engines::ProgramLog prog([sim] { return sim->tick(); });   // the crash log's clock
//     auto i = prog.begin_write(path, offset, data, n);
//     tai::Receipt r = file.write(offset, data, n);
//     prog.submitted(i);
//     prog.track(i, r);                    // records when and how the receipt finished
//     ...
//     tai::engines::TaiCrashOracle oracle(sim->snapshot(), prog.ops());
//     enumerate_crash_states(log, file_index, options, oracle, print_violation);
//
// Time. Every operation of the program gets three times on the crash log's clock: submit_begin
// (taken before the call that submits it), submit_end (after that call returned) and done_seq
// (when its receipt finished, taken in the receipt's continuation; 0: never). Operation A is
// *before* B when A.submit_end < B.submit_begin: program order within a thread, and real-time
// order across threads between a write and a sync or barrier (DESIGN section 2: a sync covers
// every write submitted before it); two writes of different threads are never ordered (DESIGN:
// operations from different threads may interleave). The oracle can be told to order only
// operations of the same thread (TaiCrashOracle's order_across_threads).
//
// The oracle (DESIGN section 2, "Order", "Durability", File::barrier), for a state of one file at
// crash time c; "sources" of a byte x are the file's initial content and every write or truncate
// covering x that was submitted (submit_begin < c):
//  1. Durability and provenance. A source V is *required* when a sync (fsync, fdatasync or
//     barrier) of the same path whose receipt succeeded before c was submitted after V (V before
//     the sync). Byte x must read as the value of a source that is not before any required source
//     covering x: the last durably acknowledged write, or something at least as new. This also
//     rejects bytes no submitted write put there (garbage, data of later operations, a file
//     longer than every write) and stale bytes written back over newer durable ones.
//  2. Barriers. For a barrier B submitted before c: if some byte can only be explained by a write
//     submitted after B, every write submitted before B must be wholly present (each of its bytes
//     reads as its value or as that of a source not before it).
// Truncates (an open with Open::truncate) are sources whose value is "0 or past the end of file".
// Past the end of every write the file may hold zeros (the padding of a direct-I/O write whose
// trim is not in the log, see crash_checker.cpp), nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tai/engines/crashsim/crash_states.hpp"
#include "tai/receipt.hpp"

namespace tai::engines {

/// One operation of the program. Plain data (not synchronised).
struct ProgramOp {
  enum class Kind : std::uint8_t { write, truncate, fsync, fdatasync, barrier, close };
  Kind kind = Kind::write;
  std::string path;
  std::uint64_t offset = 0;
  std::vector<unsigned char> data;  ///< write
  unsigned thread = 0;              ///< the caller's label, for messages
  std::uint64_t submit_begin = 0, submit_end = 0;
  std::uint64_t done_seq = 0;  ///< when its receipt finished (0: never, or not tracked)
  bool ok = false;             ///< the receipt's outcome (when done_seq != 0)
  std::string error;

  bool is_sync() const noexcept { return kind == Kind::fsync || kind == Kind::fdatasync || kind == Kind::barrier; }
  /// "write#3 t0 [0, +4096)", "fsync#4 t0 (ok at seq 17)".
  std::string to_string(std::size_t index) const;
};

/// The program side of a crash test. Thread-safe: every member may be called from any thread at
/// once (one mutex).
class ProgramLog {
 public:
  /// `clock` takes a time on the crash log's clock (CrashSimEngine::tick: a fresh seq per call,
  /// so that an operation's times are never equal to an event's or another operation's); it
  /// must be thread-safe.
  explicit ProgramLog(std::function<std::uint64_t()> clock);

  /// Starts an operation: records it with submit_begin = now. Returns its index.
  std::size_t begin(ProgramOp op);
  std::size_t begin_write(const std::string& path, std::uint64_t offset, const void* data, std::size_t n,
                          unsigned thread = 0);
  std::size_t begin_op(ProgramOp::Kind kind, const std::string& path, unsigned thread = 0);
  /// The call that submitted operation `index` returned: submit_end = now.
  void submitted(std::size_t index);
  /// Operation `index` finished with `ok` (and `error` when not): done_seq = now.
  void finished(std::size_t index, bool ok, std::string error = {});
  /// Calls finished() from `receipt`'s continuation (on the worker that finishes it, or at once
  /// if it has). The receipt must have no continuation yet; returns false otherwise.
  bool track(std::size_t index, Receipt& receipt);
  /// A copy of the operations, in begin() order.
  std::vector<ProgramOp> ops() const;

 private:
  std::function<std::uint64_t()> clock_;
  mutable std::mutex mutex_;
  std::vector<ProgramOp> ops_;
};

/// TAI's oracle (see the file comment). Not thread-safe (it caches per crash point); one per
/// thread.
class TaiCrashOracle : public CrashChecker {
 public:
  /// `log` must outlive the oracle. Two writes are ordered only when one thread made both
  /// (DESIGN: "operations from different threads may interleave"). A write and a sync or
  /// barrier are ordered when the first one's submission returned before the second's began:
  /// whatever their threads with `order_across_threads` (DESIGN's "every write submitted before
  /// it"; true), or only within one thread (false). The log's clock is one acq_rel counter, so
  /// "returned before began" is also a happens-before between the two submissions, which is
  /// what TAI's admission order follows.
  TaiCrashOracle(const CrashLog& log, std::vector<ProgramOp> ops, bool order_across_threads = true);
  ~TaiCrashOracle() override;

  /// Hash of (operations of the file submitted before seq, receipts finished before seq).
  std::uint64_t context(std::uint32_t file, std::uint64_t seq) const override;
  void check(const CrashState& state, std::vector<std::string>& out) override;

 private:
  struct FileModel;
  FileModel& model(std::uint32_t file);
  bool before(std::uint64_t a_end, unsigned a_thread, std::uint64_t b_begin, unsigned b_thread) const;
  static bool write_before(std::uint64_t a_end, unsigned a_thread, std::uint64_t b_begin, unsigned b_thread);
  const CrashLog& log_;
  std::vector<ProgramOp> ops_;
  std::unordered_map<std::uint32_t, std::unique_ptr<FileModel>> models_;
  bool order_across_threads_;
};

}  // namespace tai::engines
