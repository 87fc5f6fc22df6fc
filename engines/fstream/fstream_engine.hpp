// engines/fstream/fstream_engine.hpp - the `fstream` engine: one std::fstream per file.
//
// C++ streams know neither create-with-permissions, nor truncate-without-write-only, nor fsync.
// This engine fills the gaps the way a careful C++ program would:
//  * create/truncate: the file is first opened with open(2) (O_CREAT/O_TRUNC and the requested
//    permissions), then the fstream opens the same path (in|out: plain `out` would truncate).
//  * durable sync "through the path": the descriptor of that first open(2) is kept (read-only
//    or as requested, never used for data) and fsync/fdatasync go to it after the stream's
//    flush(). It is kept rather than reopened at each sync because a descriptor opened later
//    might miss a write-back error already reported elsewhere, and a path renamed or replaced
//    in between would sync the wrong file. After the fstream has opened, the path is checked to
//    still name the same inode.
//  * dsync: emulated: every write is flushed and fdatasync'ed before it completes.
//  * hints: willneed at open and dontneed after each read (and each dsync write) act on the
//    file's page cache through the kept descriptor; sequential, random and noreuse are per open
//    file description in Linux and cannot reach the stream's own descriptor: they are accepted
//    and ignored.
// Positioned I/O is seekg+read / seekp+write under a per-file mutex, with clear() before each
// step so one failed or end-of-file read does not poison the next request. As in cstdio, a
// failed flush is reported on the request that caused it and then on every later fsync,
// fdatasync and close. No direct I/O: Open::direct fails with EINVAL. fd() returns -1.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>

#include "tai/engine.hpp"

namespace tai::engines {

/// A file of the fstream engine. Thread-safety: every stream operation (transfer, close) runs
/// under the file's mutex; the EngineFile accessors are safe from any thread.
class FstreamFile final : public EngineFile {
 public:
  FstreamFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, int sync_fd,
              std::unique_ptr<char[]> stream_buffer);
  ~FstreamFile() override;

 private:
  friend class FstreamEngine;
  static constexpr std::uint64_t kUnknownPosition = ~std::uint64_t{0};
  enum class LastOp { none, read, write };

  /// Opens stream_ on path() with `how`, in place (the filebuf's buffer is set before open).
  /// Returns 0 or an errno value. Called once, by FstreamEngine::do_open, before publication.
  int open_stream(std::ios::openmode how);
  std::int64_t read_locked(void* buffer, std::uint64_t offset, std::uint64_t length);
  std::int64_t write_locked(const void* buffer, std::uint64_t offset, std::uint64_t length);
  std::int64_t sync_locked(bool data_only);
  std::error_code close_locked();
  /// Positions the stream (seekg for reads, seekp for writes: one position in a filebuf),
  /// skipping the seek when a same-direction transfer continues where the last one stopped.
  /// Returns 0 or an errno value.
  int seek_locked(std::uint64_t offset, LastOp op);
  /// flush() of pending output; 0 or an errno value (also remembered).
  int flush_locked();
  void remember_write_error(int err) noexcept {
    if (write_error_ == 0) write_error_ = err;
  }

  std::mutex mutex_;  // guards everything below
  std::unique_ptr<char[]> stream_buffer_;  // the filebuf's buffer: declared first, outlives stream_
  std::fstream stream_;
  int sync_fd_;  // the open(2) descriptor kept for fsync/fdatasync/fadvise; -1 once closed
  bool closed_ = false;
  std::uint64_t position_ = kUnknownPosition;
  LastOp last_op_ = LastOp::none;
  int write_error_ = 0;  // first failed flush or sync; sticky
};

/// The fstream engine. Thread-safety: as tai::SyncEngine; requests on one file serialize on its
/// mutex, requests on different files run in parallel.
class FstreamEngine final : public SyncEngine {
 public:
  explicit FstreamEngine(EngineOptions options);

  /// Size of each file's filebuf buffer (pubsetbuf before open).
  static constexpr std::size_t kStreamBufferSize = 64 * 1024;

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override;
  std::error_code do_close(EngineFile& file) override;
  std::int64_t transfer(const Request& request) override;
};

/// Creates an fstream engine. Never fails.
std::unique_ptr<Engine> make_fstream(const EngineOptions& options);

}  // namespace tai::engines
