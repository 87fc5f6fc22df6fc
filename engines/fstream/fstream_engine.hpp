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
//  * write-behind (EngineOptions::start_writeback_bytes) after each write, through the kept
//    descriptor.
// Positioned I/O is seekg+read / seekp+write under a per-file mutex, with clear() before each
// step so one failed or end-of-file read does not poison the next request.
//
// A failed flush (EIO, ENOSPC), as in cstdio. libstdc++'s filebuf keeps the bytes of a failed
// write(2) in its put area, and the descriptor's offset stays where the written part ended: a
// later flush (a seek, a sync, the close) would write them again, at that offset, and fail for
// as long as they do not fit. The engine drops them from the put area (the filebuf's pptr goes
// back to pbase), clears the stream's state and forgets the position, so the next transfer seeks
// and the stream works again once the condition is gone (a full disk freed). The error is
// reported on the request whose flush failed (a write, a read or write that had to seek, an
// fsync or fdatasync, a close); when the dropped bytes include those of earlier writes, already
// reported complete, the next fsync or fdatasync fails with it too (or the close, when no sync
// comes first). A sync reports it once, as the kernel reports a write-back error to one fsync:
// the caller writes the data again (TAI's tree does, from its cache) and a later sync succeeds.
// A write that fails fails as a whole (ostream::write does not say how much went out).
// No direct I/O: Open::direct fails with EINVAL. fd() returns -1.
#pragma once

#include <cstdint>
#include <fstream>
#include <istream>
#include <memory>
#include <string>

#include "tai/engine.hpp"
#include "tai/engines/common/stream_file.hpp"

namespace tai::engines {

/// A file of the fstream engine. Thread-safety: every stream operation (transfer, close) runs
/// under the file's mutex; the EngineFile accessors are safe from any thread.
class FstreamFile final : public StreamFile {
 public:
  FstreamFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, int sync_fd,
              std::unique_ptr<char[]> stream_buffer);
  ~FstreamFile() override;

 private:
  friend class FstreamEngine;

  /// std::filebuf, and what the standard keeps protected: the bytes waiting in the put area, and
  /// dropping them after a failed flush (so that no later flush writes them at the wrong offset).
  class Filebuf final : public std::filebuf {
   public:
    std::size_t pending() const { return static_cast<std::size_t>(pptr() - pbase()); }
    void discard_pending() { setp(pbase(), epptr()); }
  };

  /// Opens the stream on path() with `how`, in place (the filebuf's buffer is set before open).
  /// Returns 0 or an errno value. Called once, by FstreamEngine::do_open, before publication.
  int open_stream(std::ios::openmode how);

  // StreamFile's hooks (stream_file.hpp), on the filebuf and the kept descriptor.
  bool stream_closed() const noexcept override { return closed_; }
  int sync_descriptor() const noexcept override { return sync_fd_; }
  /// seekg for reads, seekp for writes: one position in a filebuf.
  int seek_stream(std::uint64_t offset, LastOp op) override;
  std::size_t read_stream(void* buffer, std::uint64_t length, int& err) override;
  int write_stream(const void* buffer, std::uint64_t length) override;
  std::size_t pending() const override { return filebuf_.pending(); }
  int flush_stream() override;
  void drop_buffered() noexcept override;
  /// Emulated O_DSYNC: fdatasync of the kept descriptor.
  int complete_dsync() override;
  int close_stream() override;

  // Guarded by mutex_.
  std::unique_ptr<char[]> stream_buffer_;  // the filebuf's buffer: declared first, outlives filebuf_
  Filebuf filebuf_;
  std::iostream stream_{&filebuf_};  // formatted-free access to filebuf_: write, read, seekp, flush
  int sync_fd_;  // the open(2) descriptor kept for fsync/fdatasync/fadvise; -1 once closed
  bool closed_ = false;
};

/// The fstream engine. Thread-safety: as tai::SyncEngine; requests on one file serialize on its
/// mutex, requests on different files run in parallel.
class FstreamEngine final : public StreamEngine {
 public:
  explicit FstreamEngine(EngineOptions options);

  /// Size of each file's filebuf buffer (pubsetbuf before open).
  static constexpr std::size_t kStreamBufferSize = 64 * 1024;

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override;
};

/// Creates an fstream engine. Never fails.
std::unique_ptr<Engine> make_fstream(const EngineOptions& options);

}  // namespace tai::engines
