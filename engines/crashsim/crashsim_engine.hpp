// engines/crashsim/crashsim_engine.hpp - the `crashsim` test engine: wraps any engine, keeps a
// log of every write (offset and bytes) and every sync in completion order, plus user marks, so
// that engines/crashsim/crash_states.hpp can enumerate the disk images a power cut could leave
// and TAI's oracle (src/testing/crash_checker.hpp, above the controller) can judge them.
//
//     auto sim = tai::engines::make_crashsim(tai::make_engine("posix").value());
//     tai::engines::CrashSimEngine* log = sim.get();
//     controller.add_engine("crashsim", std::move(sim));
//     ... open files with engine "crashsim", run a workload; log->mark("receipt 3 ok") ...
//     tai::engines::CrashLog copy = log->snapshot();   // then enumerate_crash_states(copy, ...)
//
// Layering (engines/common/wrapper_engine.hpp, as fault and recording): the crashsim engine is a
// WrapperEngine, so its own base class validates, bounces unaligned direct I/O and chains; what
// it logs are the native requests that base hands to the inner engine, i.e. exactly what would
// reach the device (on a direct file: aligned whole blocks after read-modify-write). It must be
// the outermost layer.
//
// What a power cut is modelled on: the log is what the *device* was asked to do. A write is
// durable once a successful fsync/fdatasync of the same path was submitted after the write had
// completed (and that sync has completed); everything else submitted before the crash may or may
// not have reached the platter, in whole or per sector. The file is identified by its path: a
// reopen of the same path continues the same image (what the kernel does: fsync covers the
// inode, whichever descriptor wrote). Opening with Open::truncate logs a truncation to 0 bytes,
// which is itself a change that needs a sync to be durable.
//
// Sequence numbers, as the recording engine's: one counter, taken before a request reaches the
// inner engine (submit_seq) and after it finished (complete_seq; for an asynchronous inner engine
// when its completion is reaped, the earliest moment anyone can know). now() gives a program the
// same clock, so that it can say when it learned something (a receipt finished) in the log's time.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tai/engine.hpp"
#include "tai/engines/common/wrapper_engine.hpp"
#include "tai/error.hpp"

namespace tai::engines {

/// One entry of the crash log. Plain data (not synchronised).
struct CrashEvent {
  enum class Kind : std::uint8_t {
    write,     ///< a native write: `offset`, `data` (the bytes handed to the inner engine)
    sync,      ///< a native fsync or fdatasync (`op`)
    truncate,  ///< an open with Open::truncate: the file became 0 bytes long
    mark,      ///< CrashSimEngine::mark(): a persistence point of the program (`label`)
  };
  Kind kind = Kind::write;
  std::uint32_t file = 0;  ///< index into CrashLog::paths (unused by marks)
  Op op = Op::write;       ///< write, fsync or fdatasync
  std::uint64_t offset = 0;
  std::vector<unsigned char> data;
  /// Bytes written, 0 for a sync, or -errno. A write that failed or came back short may have
  /// changed any part of its range: the enumerator treats it as never durable.
  std::int64_t result = 0;
  std::uint64_t submit_seq = 0;    ///< before the inner engine saw it (marks: == complete_seq)
  std::uint64_t complete_seq = 0;  ///< after it finished
  std::string label;               ///< marks

  std::uint64_t end() const noexcept { return offset + data.size(); }
  /// A write that moved all its bytes, or a sync that succeeded; truncates and marks are ok.
  bool ok() const noexcept {
    return kind == Kind::write ? result == static_cast<std::int64_t>(data.size()) : result >= 0;
  }
  /// "write#3 f0 [4096, +512) seq 10..11 -> 512" and the like.
  std::string to_string() const;
};

/// A copy of the log: the paths seen and the events in completion order (complete_seq rising).
/// Plain data (not synchronised; const members may be used from several threads at once).
struct CrashLog {
  std::vector<std::string> paths;
  /// The content each path had when this engine first opened it (empty when it was created, or
  /// opened with Open::truncate, or could not be read): the image before any logged event.
  std::vector<std::vector<unsigned char>> initial;
  std::vector<CrashEvent> events;

  /// The index of `path` in `paths`, or -1.
  int file_index(const std::string& path) const;
};

/// Plain data (not synchronised).
struct CrashSimOptions {
  /// Hand fsync/fdatasync to the inner engine (true), or complete them at once with success
  /// without asking it (false). The crash states come from the log either way; not forwarding
  /// saves the device's sync latency (about 4 ms per fdatasync on the development VM's ext4)
  /// when a suite runs thousands of workloads, at the cost of not exercising the inner engine's
  /// sync path.
  bool forward_syncs = true;
};

/// The crash-simulation engine. Capabilities, options and eventfd are the inner engine's;
/// name() is "crashsim(<inner>)".
/// Thread-safety: as tai::Engine for the Engine interface (submit/reap from the queue owner's
/// thread, open/close from any thread). now(), mark(), snapshot(), size() and clear() are safe
/// from any thread at any time (the log is behind a mutex; now() is one atomic load).
class CrashSimEngine final : public WrapperEngine {
 public:
  explicit CrashSimEngine(std::unique_ptr<Engine> inner, CrashSimOptions options = {});
  ~CrashSimEngine() override;
  const CrashSimOptions& crash_options() const noexcept { return options_; }

  /// The next sequence number: every logged event that happened before this call returned has
  /// a smaller one. Lock-free, thread-safe.
  std::uint64_t now() const noexcept;
  /// Takes a sequence number of its own, as an event would: every event that happened before
  /// this call has a smaller seq and every event after it a larger one. The clock of a
  /// ProgramLog (two ticks are never equal, so two program operations are always ordered by
  /// their times). Lock-free, thread-safe.
  std::uint64_t tick() noexcept { return take_seq(); }
  /// Logs a persistence point of the program (e.g. "fsync receipt 4 ok"); returns its seq.
  /// Thread-safe.
  std::uint64_t mark(std::string label);
  /// Logs a truncation of `path` to 0 bytes made behind this engine, which no request of it
  /// carries: the drop-in layer's ftruncate runs on the program's descriptor (tai/posix.hpp).
  /// The caller logs it after the truncation returned and before anything later reaches the
  /// file; like a truncating open it needs a later sync of the path to be durable. Returns its
  /// seq. Thread-safe.
  std::uint64_t log_truncate(const std::string& path);
  /// Writes and syncs made behind this engine, on another descriptor of a file (the drop-in
  /// layer's write-through files reach the kernel on their own descriptors): the rig that sees
  /// them logs them here, in the same log and on the same clock, so that a crash state covers
  /// both ways to the device. register_path names a file before anything of it is logged (its
  /// image before any event is what it holds now). log_write: a write of iov's segments at
  /// `offset`, `submit_seq` a tick() taken before the system call (the completion's is taken
  /// now); `result` bytes or -errno, each segment its own write as a pwritev's (a short write
  /// logged as the bytes it wrote). log_sync: an fsync or fdatasync (`op`) of the path, 0 or errno, returns the event's completion seq;
  /// log_write returns the number of write events it logged (one per segment it wrote).
  /// Thread-safe.
  void register_path(const std::string& path);
  std::size_t log_write(const std::string& path, std::uint64_t offset, const struct iovec* iov, int iovcnt,
                          std::int64_t result, std::uint64_t submit_seq);
  std::uint64_t log_sync(const std::string& path, Op op, int err, std::uint64_t submit_seq);
  /// A copy of the log (events sorted by complete_seq). Thread-safe.
  CrashLog snapshot() const;
  /// Events logged so far. Thread-safe.
  std::size_t size() const;
  /// Forgets the events and paths logged so far (requests in flight are logged when they
  /// complete; files still open keep their index only until their next request names a path
  /// again). Meant for between workloads, with no file open. Thread-safe.
  void clear();

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override;
  std::error_code do_close(EngineFile& file) override;
  std::size_t do_submit(const Request* requests, std::size_t n) override;
  std::size_t do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) override;

 private:
  std::uint64_t take_seq(std::uint64_t n = 1) noexcept;
  /// The path index of `file` (caller holds mutex_).
  std::uint32_t path_index_locked(const std::string& path, bool created);
  /// A logged event for request `r` (caller holds mutex_).
  CrashEvent event_for(const Request& r, std::uint64_t submit_seq);
  void append_locked(CrashEvent e);

  /// Increments the inner engine's eventfd so that a poll loop wakes for absorbed syncs.
  void signal_local() noexcept;

  const CrashSimOptions options_;
  const bool inner_synchronous_;
  // The clock. fetch_add (acq_rel) by the thread of the event; see the file comment.
  std::atomic<std::uint64_t> next_seq_{1};

  mutable std::mutex mutex_;  // guards everything below
  CrashLog log_;
  std::unordered_map<std::string, std::uint32_t> path_ids_;
  std::unordered_map<std::uint64_t, CrashEvent> in_flight_;  // native user_data -> its event
  /// Logs a completed write event; a vectored one (segments non-empty) as the writes it is
  /// made of, one event per segment with the same times, each with its share of the result.
  void append_write_locked(CrashEvent e, const std::vector<std::uint64_t>& segments);
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> segments_;  // vectored: segment lengths
  // Completions of absorbed syncs (forward_syncs == false), returned by the next do_reap. Only
  // the queue owner's thread touches it (submit and reap are single-threaded by contract).
  std::vector<Completion> local_;
};

/// Wraps `inner` (which must not be used directly afterwards). Never fails.
std::unique_ptr<CrashSimEngine> make_crashsim(std::unique_ptr<Engine> inner, CrashSimOptions options = {});

/// The crash-simulation engine over a synchronous inner engine (posix, cstdio, fstream), and a
/// synchronous engine itself. Why a second kind: the controller makes a buffered file's large
/// writes on the submitting thread through SyncEngine::execute when the file's engine is
/// synchronous (ControllerOptions::caller_writes); CrashSimEngine, a WrapperEngine, is
/// asynchronous to the controller, so those writes never happen under it and its crash states
/// never contain one. Under this engine the caller's writes and the workers' requests are
/// logged alike, each on the thread that makes it, into log(): a CrashSimEngine that carries no
/// request of its own (it wraps the null engine) and lends its log, clock and API (snapshot,
/// tick, mark, clear) through log_write, log_sync and log_truncate. What is logged is what this
/// engine's base hands the inner engine (native requests, as under CrashSimEngine); a write's
/// submit_seq is taken before the inner transfer and its complete_seq after it.
/// Thread-safety: as SyncEngine (execute from any number of threads at once; submit/reap from
/// the queue owner's thread; open/close from any thread); log() is safe from any thread.
class CrashSimSyncEngine final : public SyncEngine {
 public:
  CrashSimSyncEngine(std::unique_ptr<SyncEngine> inner, CrashSimOptions options = {});
  ~CrashSimSyncEngine() override;
  /// The log every request of this engine goes to. Thread-safe.
  CrashSimEngine& log() noexcept { return *log_; }
  /// Delegates: the files are the inner engine's (as WrapperEngine). Thread-safe.
  bool owns(const EngineFile& file) const noexcept override { return inner_->owns(file); }

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override;
  std::error_code do_close(EngineFile& file) override;
  std::int64_t transfer(const Request& request) override;

 private:
  const CrashSimOptions options_;
  std::unique_ptr<SyncEngine> inner_;
  std::unique_ptr<CrashSimEngine> log_;
};

/// Wraps `inner` (which must not be used directly afterwards) when it is a synchronous engine;
/// nullptr when it is not (an asynchronous engine needs make_crashsim).
std::unique_ptr<CrashSimSyncEngine> make_crashsim_sync(std::unique_ptr<Engine> inner, CrashSimOptions options = {});

}  // namespace tai::engines
