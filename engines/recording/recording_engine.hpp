// engines/recording/recording_engine.hpp - the `recording` test engine: wraps any engine and
// logs every call that reaches it, in order, with a sequence number, so that tests can prove
// what reached the engine before what (durability of fsync, ordering barriers).
//
//     auto rec = tai::engines::make_recording(tai::engines::make_posix({}));
//     tai::engines::RecordingEngine* log = rec.get();
//     controller.add_engine("recording", std::move(rec));
//     ... open files with engine "recording", run a workload ...
//     const std::uint64_t mark = log->now();           // after a receipt finished
//     for (const auto& r : log->snapshot()) ...        // every request with its seqs and result
//
// Layering (engines/common/wrapper_engine.hpp, as engines/fault): the recording engine is a
// WrapperEngine, so its native layer is the inner engine's (Engine::native_*). Its own base
// class validates, bounces unaligned direct I/O, chains and continues short transfers; what it
// logs are the native requests that base hands over, i.e. exactly what the inner engine is asked
// to do. A request that never reaches the engine (invalid, zero-length, cancelled in a chain) is
// not logged. The wrapped files' engine() is the inner engine (owns() delegates), so the
// recording engine must be the outermost layer.
//
// Sequence numbers. One counter per recording engine, starting at 1, counts events: an open or
// close starting and returning, a request handed to the inner engine, a request completing.
// The counter is advanced before the event is visible to anyone (a request's submit seq is taken
// before the inner engine sees it; its completion seq is taken after the inner engine finished
// it and before the completion goes back to the caller). So:
//  * an event that happened before something that happened before a call to now() has a seq
//    below the value now() returns (the counter's coherence order follows happens-before);
//  * seq(A) < seq(B) for two events of the same thread in program order.
// Tests take `mark = now()` when they observe something (a receipt finished) and then know:
// every event with seq >= mark did NOT happen before that observation.
//
// Completion time. With an asynchronous inner engine (libaio, uring) a request completes when
// its completion is reaped from the inner engine (the earliest moment anyone can know). With a
// synchronous one (posix, null ...) the transfer runs inside the inner submit: the recording
// engine hands such requests over one at a time and takes the completion seq as soon as the
// transfer returns (the result itself is filled in when the completion is reaped; see
// RecordEntry::reap_seq). A batch of [write, fsync] on a synchronous engine is thus logged as
// the write completing before the fsync is submitted, which is what happened.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

#include "tai/engine.hpp"
#include "tai/engines/common/wrapper_engine.hpp"
#include "tai/error.hpp"

namespace tai::engines {

/// One logged call. Plain data (a copy in RecordingEngine::snapshot()).
struct RecordEntry {
  enum class Kind : std::uint8_t { open, close, request };
  Kind kind = Kind::request;

  /// Names the open file: assigned at a successful open (1, 2, 3 ...; a reopen of the same path
  /// gets a new id). 0 for a failed open and for requests on a file this engine did not open.
  std::uint64_t file_id = 0;
  std::string path;  ///< the file's path (open: the path asked for)

  /// open/close: the seq when the call started. request: the seq when it was handed to the
  /// inner engine.
  std::uint64_t submit_seq = 0;
  /// open/close: the seq when the call returned. request: the seq when it completed (see the
  /// file comment); 0 while it has not.
  std::uint64_t complete_seq = 0;
  /// request: the seq when its completion was reaped from the inner engine and handed to this
  /// engine's base (>= complete_seq); 0 while it has not.
  std::uint64_t reap_seq = 0;

  // open
  OpenMode mode;
  // open/close: the error (empty on success)
  std::error_code error;

  // request
  Op op = Op::read;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  bool link = false;          ///< Request::link as handed to the inner engine
  std::int64_t result = 0;    ///< bytes or -errno; valid once reap_seq != 0
  /// A copy of a write's bytes as handed to the inner engine, when data recording is on
  /// (RecordingEngine::set_record_data); empty otherwise.
  std::vector<std::byte> data;

  bool completed() const noexcept { return complete_seq != 0; }
  bool reaped() const noexcept { return reap_seq != 0; }
  /// A request that completed in full (a transfer of all `length` bytes, or a sync with 0).
  bool complete_ok() const noexcept {
    return kind == Kind::request && reaped() &&
           (op == Op::read || op == Op::write ? result == static_cast<std::int64_t>(length) : result == 0);
  }
  /// "write#12 /tmp/f [4096, +512) submit 40 complete 41 reap 41 -> 512" and the like.
  std::string to_string() const;
};

/// The recording engine. Capabilities, options and eventfd are the inner engine's; name() is
/// "recording(<inner>)".
/// Thread-safety: as tai::Engine for the Engine interface (submit/reap from the queue owner's
/// thread, open/close from any thread). now(), snapshot(), size(), set_record_data() and
/// clear() are safe from any thread at any time (the log is behind a mutex; now() is one atomic
/// load).
class RecordingEngine final : public WrapperEngine {
 public:
  explicit RecordingEngine(std::unique_ptr<Engine> inner);
  ~RecordingEngine() override;

  /// The next sequence number to be given out: every event that happened before this call
  /// returned has a smaller seq (see the file comment). Lock-free.
  std::uint64_t now() const noexcept;
  /// A copy of the log, in submit_seq order. Requests still in flight have complete_seq 0.
  std::vector<RecordEntry> snapshot() const;
  /// Entries logged so far.
  std::size_t size() const;
  /// Keep a copy of every write's bytes (RecordEntry::data) from now on. Off by default.
  void set_record_data(bool on) noexcept;
  /// Forgets the entries logged so far (the counter and file ids go on). Requests in flight
  /// stay tracked: their completions update nothing that a later snapshot shows.
  void clear();

  // inner(), eventfd() and owns() come from WrapperEngine.

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override;
  std::error_code do_close(EngineFile& file) override;
  std::size_t do_submit(const Request* requests, std::size_t n) override;
  std::size_t do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) override;

 private:
  struct FileInfo {
    std::uint64_t id;
    std::string path;
  };
  /// Gives out the next `n` sequence numbers; returns the first.
  std::uint64_t take_seq(std::uint64_t n = 1) noexcept;
  /// Appends the entry of a request the inner engine took (caller holds mutex_).
  void log_request(const Request& r, std::uint64_t submit_seq, std::uint64_t complete_seq, bool with_data);

  const bool inner_synchronous_;

  // Event counter. fetch_add (acq_rel) by the thread of the event, load (acquire) by now().
  // Correctness of "happened before now() => smaller seq" rests on the coherence of this one
  // atomic (any order would do); acq_rel/acquire are there so that a reader of now() also sees
  // the log entry of every seq it passed once it takes mutex_.
  std::atomic<std::uint64_t> next_seq_{1};
  // Relaxed: a switch read at submit; which of two racing submits sees it does not matter.
  std::atomic<bool> record_data_{false};

  mutable std::mutex mutex_;                             // guards everything below
  std::vector<RecordEntry> log_;                         // in append order
  std::uint64_t cleared_before_ = 0;                     // log_ index 0 is entry number cleared_before_
  std::unordered_map<const EngineFile*, FileInfo> files_;  // open files of this engine
  std::uint64_t next_file_id_ = 1;
  std::unordered_map<std::uint64_t, std::uint64_t> in_flight_;  // native user_data -> entry number
};

/// Wraps `inner` (which must not be used directly afterwards). Never fails.
std::unique_ptr<RecordingEngine> make_recording(std::unique_ptr<Engine> inner);

}  // namespace tai::engines
