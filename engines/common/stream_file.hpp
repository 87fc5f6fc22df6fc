// engines/common/stream_file.hpp - what the cstdio and fstream engines share: positioned I/O on
// a buffered stream, one request at a time per file, and one way to survive a failed flush.
//
// Both engines run a request as a seek and a transfer on a stream that buffers writes, skip the
// seek when a transfer continues where the last one of the same direction stopped (so that
// sequential writes stay buffered), and treat a failed flush (EIO, ENOSPC) alike: the buffered
// bytes are dropped, the stream's error state is cleared and its position forgotten, and the
// error goes to the request whose flush failed and, when the dropped bytes include those of
// writes already reported complete, to the next fsync or fdatasync (or the close). What each
// engine means by that is described in its header (cstdio_engine.hpp, fstream_engine.hpp).
//
// Buffered files get write-behind (EngineOptions::start_writeback_bytes) on the sync descriptor
// after each write: the kernel starts what it holds below the highest end less one interval (the
// stream's own buffer, 64 KiB, is far less than an interval, so that is everything there).
//
// The stream calls themselves differ (fseeko and fread on a FILE*, seekg and read on a
// std::filebuf) and stay in each engine, behind the hooks below. Installed with the two engine
// headers, which derive from these classes; the definitions are in libtai (stream_file.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <system_error>

#include "tai/engine.hpp"
#include "tai/engines/common/write_behind.hpp"

namespace tai::engines {

/// A file of a stream engine. Thread-safety: every stream operation (StreamEngine::transfer,
/// close) runs under the file's mutex; the EngineFile accessors are safe from any thread.
class StreamFile : public EngineFile {
 protected:
  enum class LastOp { none, read, write };

  /// `largest_offset`: the largest offset the stream's seek takes (off_t, std::streamoff).
  StreamFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, std::uint64_t largest_offset);

  // Hooks, called with mutex_ held.
  /// Whether close_stream() has run.
  virtual bool stream_closed() const noexcept = 0;
  /// The descriptor that fsync, fdatasync and the dontneed hint go to.
  virtual int sync_descriptor() const noexcept = 0;
  /// Moves the stream to `offset` for `op` (a continuing transfer never gets here). Returns 0 or
  /// an errno value; on failure the stream's state is cleared and the position forgotten
  /// (flush_failed_locked when the failure was the flush of buffered writes).
  virtual int seek_stream(std::uint64_t offset, LastOp op) = 0;
  /// Reads up to `length` bytes at the stream's position; returns how many arrived. A read error
  /// (not the end of file) sets `err` to an errno value. Leaves the stream's state cleared.
  virtual std::size_t read_stream(void* buffer, std::uint64_t length, int& err) = 0;
  /// Writes all `length` bytes into the stream; 0, or an errno value when a flush inside failed.
  virtual int write_stream(const void* buffer, std::uint64_t length) = 0;
  /// Bytes buffered and not yet handed to the kernel.
  virtual std::size_t pending() const = 0;
  /// Hands the buffered bytes to the kernel; 0 or an errno value (flush_locked handles it).
  virtual int flush_stream() = 0;
  /// Drops the buffered bytes after a failed flush, so that no later flush writes them at a
  /// position nobody asked for, and clears the stream's error state.
  virtual void drop_buffered() noexcept = 0;
  /// What a write of a file opened with Open::dsync does after its flush, to be durable; 0 or an
  /// errno value. By default nothing: the descriptor was opened with O_DSYNC.
  virtual int complete_dsync() { return 0; }
  /// Closes the stream (and its descriptors); 0 or an errno value. Runs once.
  virtual int close_stream() = 0;

  /// flush_stream(), and flush_failed_locked when it fails; 0 or an errno value.
  /// `completed_writes_lost`: whether the buffered bytes belong to writes already reported
  /// complete.
  int flush_locked(bool completed_writes_lost);
  /// After a failed flush or write: remembers `err` for the next sync when
  /// `completed_writes_lost`, drops the buffered bytes, clears the stream's state and forgets
  /// the position.
  void flush_failed_locked(int err, bool completed_writes_lost) noexcept;
  /// The next transfer seeks.
  void forget_position_locked() noexcept;
  LastOp last_op_locked() const noexcept { return last_op_; }

  /// Closes the file for good: the destructors of the engines' files call it (an error has
  /// nobody to go to there), Engine::close through StreamEngine::do_close.
  std::error_code close_locked();

  std::mutex mutex_;  // guards the stream and everything below

 private:
  friend class StreamEngine;
  static constexpr std::uint64_t kUnknownPosition = ~std::uint64_t{0};

  std::int64_t read_locked(void* buffer, std::uint64_t offset, std::uint64_t length);
  std::int64_t write_locked(const void* buffer, std::uint64_t offset, std::uint64_t length);
  std::int64_t sync_locked(bool data_only);
  /// Positions the stream at `offset` for `op`, skipping the seek when a same-direction
  /// transfer continues where the last one stopped. Returns 0 or an errno value.
  int seek_locked(std::uint64_t offset, LastOp op);

  const std::uint64_t largest_offset_;
  std::uint64_t position_ = kUnknownPosition;
  LastOp last_op_ = LastOp::none;
  tai::detail::WriteBehind behind_;  // EngineOptions::start_writeback_bytes, advanced after each write
  int unreported_error_ = 0;  // first failed flush that dropped completed writes; cleared by the sync that reports it
};

/// The engine of StreamFiles: capabilities, close and transfer; each engine opens its own files.
/// Thread-safety: as tai::SyncEngine; requests on one file serialize on its mutex, requests on
/// different files run in parallel.
class StreamEngine : public SyncEngine {
 protected:
  StreamEngine(std::string name, EngineOptions options);

  /// The capabilities of a file opened with `flags`.
  FileCapabilities file_capabilities(Open flags) const;

  std::error_code do_close(EngineFile& file) final;
  std::int64_t transfer(const Request& request) final;
};

}  // namespace tai::engines
