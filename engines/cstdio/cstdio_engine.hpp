// engines/cstdio/cstdio_engine.hpp - the `cstdio` engine: C stdio streams (FILE*).
//
// Positioned I/O on a FILE* is fseeko + fread/fwrite, two calls that must not be separated by
// another thread's seek: every file has a mutex around the pair (the paper's warning: "people
// forget the lock around seek and write"). The stream is fdopen()ed on an open(2) descriptor so
// that create, truncate, permissions and O_DSYNC behave exactly as in the posix engine.
//
// What a completion means here:
//  * write: the bytes are in the stdio buffer (or the kernel, for large writes); a read through
//    the same file sees them (the stream is flushed by the seek between a write and a read, as C
//    requires). Other descriptors of the same file see them after fsync/fdatasync, or at once
//    when the file was opened with Open::dsync, where every write is flushed before it completes
//    (O_DSYNC alone would only apply when stdio decides to flush).
//  * fsync / fdatasync: fflush + fsync / fdatasync of the descriptor.
//  * A failed flush (EIO, ENOSPC). stdio drops the buffered bytes when a flush fails (glibc and
//    musl; the engine purges the buffer to be sure) and leaves the stream where the written part
//    ended: the engine clears the stream's error flag and forgets its position, so the next
//    transfer seeks and the stream works again once the condition is gone (a full disk freed).
//    The error is reported on the request whose flush failed: a write (its fwrite flushed), a
//    read or write that had to seek (the seek flushed), an fsync or fdatasync, a close. When the
//    dropped bytes include those of earlier writes, already reported complete, the next fsync or
//    fdatasync fails with it too (or the close, when no sync comes first).
//  * A sync reports such an error once, as the kernel reports a write-back error to one fsync;
//    a later sync succeeds when everything since was flushed and synced. So, as with the posix
//    engine, the caller must write the data a failed sync covered again before it trusts a
//    later sync: TAI's tree does that from its cache and keeps the error until then (or for the
//    life of the handle when it cannot), see "Failed engine syncs" in include/tai/btree.hpp.
//    Keeping the error in the engine instead would fail every sync after the rewrite too.
//  * A write whose fwrite falls short fails as a whole (-errno), never with a count: fwrite's
//    count includes bytes it copied into the buffer that the failed flush then dropped.
// No direct I/O: opening with Open::direct fails with EINVAL. Hints: sequential, random, noreuse
// and willneed are applied at open; dontneed after each read, and after each write when dsync.
// Buffered files get write-behind (EngineOptions::start_writeback_bytes) after each write.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "tai/engine.hpp"
#include "tai/engines/common/stream_file.hpp"

namespace tai::engines {

/// A file of the cstdio engine. Thread-safety: fd() is safe from any thread; every stream
/// operation (CstdioEngine::transfer, close) runs under the file's mutex.
class CstdioFile final : public StreamFile {
 public:
  CstdioFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, std::FILE* stream,
             std::unique_ptr<char[]> stream_buffer);
  ~CstdioFile() override;

  /// The descriptor under the stream (fileno), or -1 once closed. Writing to it directly
  /// bypasses the stdio buffer; TAI never does.
  int fd() const noexcept override { return fd_.load(std::memory_order_relaxed); }

 private:
  // StreamFile's hooks (stream_file.hpp), on the FILE*.
  bool stream_closed() const noexcept override { return stream_ == nullptr; }
  int sync_descriptor() const noexcept override { return fd(); }
  int seek_stream(std::uint64_t offset, LastOp op) override;
  std::size_t read_stream(void* buffer, std::uint64_t length, int& err) override;
  int write_stream(const void* buffer, std::uint64_t length) override;
  std::size_t pending() const override;
  int flush_stream() override;
  void drop_buffered() noexcept override;
  int close_stream() override;

  std::FILE* stream_;  // guarded by mutex_
  std::unique_ptr<char[]> stream_buffer_;  // setvbuf's buffer: must outlive the stream
  // Relaxed: a plain value for fd(); written under mutex_ at close only.
  std::atomic<int> fd_;
};

/// The cstdio engine. Thread-safety: as tai::SyncEngine; requests on one file serialize on its
/// mutex, requests on different files run in parallel.
class CstdioEngine final : public StreamEngine {
 public:
  explicit CstdioEngine(EngineOptions options);

  /// Size of each file's stdio buffer (setvbuf, fully buffered).
  static constexpr std::size_t kStreamBufferSize = 64 * 1024;

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override;
};

/// Creates a cstdio engine. Never fails.
std::unique_ptr<Engine> make_cstdio(const EngineOptions& options);

}  // namespace tai::engines
