// engines/posix/posix_engine.hpp - the `posix` engine: open/pread/pwrite/fsync/fdatasync.
//
// Synchronous: each request runs on the calling thread (submit() or SyncEngine::execute()).
// Supports O_DIRECT (alignment from tai::detail::discover_alignment), O_DSYNC, and the
// posix_fadvise hints of tai::Open: sequential/random/noreuse/willneed at open, dontneed on each
// transferred range right after the read or write (the fadvise note's cache-bypassing reads).
// Buffered files get write-behind (EngineOptions::start_writeback_bytes).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "tai/engines/common/write_behind.hpp"
#include "tai/engine.hpp"

namespace tai::engines {

/// A file of the posix engine: one kernel descriptor.
/// Thread-safety: fd() is safe from any thread; the descriptor is closed by Engine::close
/// (no request in flight, by contract) or by the destructor.
class PosixFile final : public EngineFile {
 public:
  PosixFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, int fd);
  ~PosixFile() override;

  int fd() const noexcept override { return fd_.load(std::memory_order_relaxed); }

  /// Closes the descriptor once; returns the error of close(2) (EIO from write-back) or EBADF
  /// when already closed. Called by PosixEngine::do_close and the destructor. Thread-safe
  /// (an atomic exchange picks the one caller that closes), but no transfer may be running.
  std::error_code close_descriptor() noexcept;

  /// The file's write-behind count (EngineOptions::start_writeback_bytes). Thread-safe.
  tai::detail::WriteBehind& write_behind() noexcept { return behind_; }

 private:
  tai::detail::WriteBehind behind_;
  // Relaxed: the descriptor value carries no data; whoever hands this file to another thread
  // (submit, the queue) already orders its construction before the use. Written only by
  // close_descriptor, which the Engine::close contract keeps apart from every transfer.
  std::atomic<int> fd_;
};

/// The posix engine. Thread-safety: as tai::SyncEngine (transfer() is thread-safe: pread and
/// pwrite carry their own offsets, nothing is shared between requests).
class PosixEngine final : public SyncEngine {
 public:
  explicit PosixEngine(EngineOptions options);

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override;
  std::error_code do_close(EngineFile& file) override;
  std::int64_t transfer(const Request& request) override;
};

/// Creates a posix engine. Never fails: open/pread/pwrite exist everywhere.
std::unique_ptr<Engine> make_posix(const EngineOptions& options);

}  // namespace tai::engines
