// tai/controller_stats.hpp - tai::ControllerStats, a snapshot of a controller's counters.
//
// Controller::stats() fills it; print it (operator<< or table()) for a human-readable table.
// Counters are totals since the controller was made; "now" fields are instantaneous. Each worker
// keeps its own counters (written by that worker only) so that counting costs no shared cache
// line; a snapshot sums them, so it is consistent only when the controller is idle.
//
// Thread-safety: ControllerStats is a plain value (no shared state); Controller::stats() may be
// called from any thread at any time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace tai {

/// Latency of one kind of request, submit to finish, in power-of-two nanosecond buckets:
/// bucket i counts latencies in [2^i, 2^(i+1)) ns (bucket 0 also holds 0).
struct LatencyHistogram {
  static constexpr std::size_t kBuckets = 40;  // up to ~9 minutes
  std::array<std::uint64_t, kBuckets> counts{};

  std::uint64_t count() const noexcept;
  /// The upper bound of the bucket holding the p-th quantile (0 < p <= 1); 0 when empty.
  std::uint64_t quantile_ns(double p) const noexcept;
  LatencyHistogram& operator+=(const LatencyHistogram& o) noexcept;
};

/// Request kinds with their own counters and histogram.
enum class RequestKind : std::uint8_t { read, write, fsync, fdatasync, barrier, hook, task, close, flush };
inline constexpr std::size_t kRequestKinds = 9;
const char* to_string(RequestKind k) noexcept;

struct ControllerStats {
  unsigned workers = 0;

  // Requests, counted when a worker takes them; bytes as transferred (reads stop at end of file).
  std::array<std::uint64_t, kRequestKinds> requests{};  ///< by RequestKind
  std::uint64_t rejected = 0;                           ///< never started (closed file, shutdown, ...)
  std::uint64_t failed = 0;                             ///< finished with an error
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
  /// Writes the submitting thread carried out itself (ControllerOptions::caller_writes); also
  /// counted in requests, bytes_written and failed. Not in the latency histograms.
  std::uint64_t caller_writes = 0;
  std::array<LatencyHistogram, kRequestKinds> latency{};  ///< by RequestKind (when enabled)

  // Engines and cache (summed over every tree, open or closed).
  std::uint64_t engine_reads = 0, engine_writes = 0, engine_syncs = 0;
  /// submit() calls made to asynchronous engines (ControllerOptions::engine_submit_batch
  /// bounds the requests per call).
  std::uint64_t engine_submit_calls = 0;
  std::uint64_t bytes_from_engine = 0, bytes_to_engine = 0;
  std::uint64_t cache_hits = 0, fills = 0, merges = 0, merged_bytes = 0, write_throughs = 0;
  std::uint64_t reroutes = 0;        ///< pieces sent to the engine because the strict quota refused a block
  std::uint64_t quota_denials = 0;   ///< allocations the strict quota refused
  std::uint64_t evictions = 0;       ///< blocks evicted by recycle rounds
  std::uint64_t uncached = 0;        ///< pieces sent to the engine because no tree node may hold them
  std::uint64_t restructures = 0;    ///< whole-node overwrites that dropped children
  std::uint64_t quiesces = 0;        ///< ... of which had to wait for earlier steps below
  std::uint64_t write_back_errors = 0;  ///< failed write-backs
  std::uint64_t inline_ops = 0;      ///< reads/writes a tree did at once, without steps
  std::uint64_t size_refreshes = 0;  ///< reads past a file's known size that found it grown by another writer
  std::uint64_t collects = 0;        ///< tree collect operations (freeing nodes that hold nothing)
  std::uint64_t write_arounds = 0;   ///< write pieces sent to the engine uncached by the write-around rule (BTreeOptions::write_around_bytes)
  std::uint64_t gathered_blocks = 0; ///< blocks written back as part of a gathered engine write (one write, many blocks)
  std::uint64_t cached_bytes = 0, dirty_bytes = 0;  ///< now (open files)
  std::uint64_t blocks = 0, dirty_blocks = 0;       ///< now (open files): cache blocks, and those with dirty ranges
  std::uint64_t nodes = 0, node_bytes = 0;          ///< now (open files): tree nodes and their heap bytes (estimate)
  std::uint64_t quota_used = 0, quota_peak = 0, quota_weak = 0, quota_strict = 0;

  // Write copies (ControllerOptions::write_copy_budget).
  std::uint64_t write_copy_bytes = 0;   ///< now: bytes of write data held for unfinished writes
  std::uint64_t write_copy_budget = 0;  ///< the option's value
  std::uint64_t write_copy_waits = 0;   ///< writes whose submitter had to wait for room
  std::uint64_t write_copy_pooled = 0;  ///< now: bytes the copy arena has mapped and not lent (ready for reuse)
  std::uint64_t write_copy_mapped = 0;  ///< now: bytes the copy arena has mapped (at most the budget; kept until the controller goes)
  std::uint64_t write_copy_reuses = 0;  ///< large copies (above 16 KiB) from pages the arena had mapped already
  std::uint64_t write_copy_allocations = 0;  ///< large copies that needed a new arena chunk or the allocator

  // Rounds and workers.
  std::uint64_t rounds_normal = 0, rounds_recycle = 0, rounds_flush = 0, rounds_idle = 0, rounds_close = 0;
  std::uint64_t steps = 0;           ///< tree steps run
  std::uint64_t steals = 0;          ///< lanes of steps run by a worker that does not own them
  std::uint64_t sleeps = 0;          ///< times a worker went to sleep after its spin budget
  std::uint64_t max_pending = 0;     ///< the most tasks one worker took from its Pending queue in one round
  std::uint64_t max_ready = 0;       ///< the most steps one round ran
  std::uint64_t async_in_flight = 0; ///< engine requests at asynchronous engines now
  std::uint64_t open_files = 0;

  /// A table, one "name value" per line, latency quantiles per kind.
  std::string table() const;
};

std::ostream& operator<<(std::ostream& os, const ControllerStats& s);

}  // namespace tai
