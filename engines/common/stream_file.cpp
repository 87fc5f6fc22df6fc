// What the cstdio and fstream engines share: see stream_file.hpp.
#include "engines/common/stream_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <new>
#include <utility>

#include "engines/common/posix_open.hpp"
#include "engines/common/segments.hpp"

namespace tai::engines {
namespace {

Capabilities stream_capabilities() {
  Capabilities c;
  c.vectored_writes = true;
  c.asynchronous = false;
  c.direct_io = false;  // the stream buffers everything; O_DIRECT underneath would break it
  c.durable_sync = true;  // through the descriptor under the stream, or one kept beside it
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// StreamFile

StreamFile::StreamFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps,
                       std::uint64_t largest_offset)
    : EngineFile(engine, std::move(path), mode, caps), largest_offset_(largest_offset) {}

void StreamFile::forget_position_locked() noexcept {
  position_ = kUnknownPosition;
  last_op_ = LastOp::none;
}

void StreamFile::flush_failed_locked(int err, bool completed_writes_lost) noexcept {
  if (completed_writes_lost && unreported_error_ == 0) unreported_error_ = err;
  // The stream stands where the written part ended, not where the buffered writes did: forget
  // the position, the next transfer seeks.
  drop_buffered();
  forget_position_locked();
}

int StreamFile::flush_locked(bool completed_writes_lost) {
  const int err = flush_stream();
  if (err != 0) flush_failed_locked(err, completed_writes_lost);
  return err;
}

int StreamFile::seek_locked(std::uint64_t offset, LastOp op) {
  if (last_op_ == op && position_ == offset) return 0;
  if (offset > largest_offset_) return EINVAL;
  if (int err = seek_stream(offset, op)) return err;
  position_ = offset;
  last_op_ = op;
  return 0;
}

std::int64_t StreamFile::read_locked(void* buffer, std::uint64_t offset, std::uint64_t length) {
  if (int err = seek_locked(offset, LastOp::read)) return -err;
  int err = 0;
  const std::size_t n = read_stream(buffer, length, err);
  if (err != 0) {
    forget_position_locked();
    return n == 0 ? -err : static_cast<std::int64_t>(n);  // the bytes that did arrive; the next call reports
  }
  // A short read is the end of file, which is not sticky: the file may grow.
  position_ = offset + n;
  if (n > 0 && has(mode().flags, Open::dontneed)) detail::apply_dontneed(sync_descriptor(), offset, n);
  return static_cast<std::int64_t>(n);
}

std::int64_t StreamFile::write_locked(const void* buffer, std::uint64_t offset, std::uint64_t length) {
  if (int err = seek_locked(offset, LastOp::write)) return -err;
  // Bytes of earlier writes, already reported complete, that a flush inside this write may drop.
  const bool earlier_bytes_buffered = pending() > 0;
  if (int err = write_stream(buffer, length)) {
    // Neither stream says how much of a failed write reached the file (fwrite's count includes
    // bytes the failed flush dropped): no part of it may be reported written.
    flush_failed_locked(err, earlier_bytes_buffered);
    return -err;
  }
  position_ = offset + length;
  if (has(mode().flags, Open::dsync)) {
    // The stream hands bytes to the kernel only when its buffer fills: flush now so that
    // "completed" means "durable", as the flag promises. Every earlier write was flushed when
    // it completed: a failure here loses only this write's bytes, and fails only this write.
    if (int err = flush_locked(/*completed_writes_lost=*/false)) return -err;
    if (int err = complete_dsync()) return -err;
    if (has(mode().flags, Open::dontneed)) detail::apply_dontneed(sync_descriptor(), offset, length);
  } else if (const std::uint64_t every = engine().options().start_writeback_bytes;
             tai::detail::WriteBehind::applies(capabilities(), mode(), every)) {
    behind_.written(sync_descriptor(), offset, length, every);
  }
  return static_cast<std::int64_t>(length);
}

std::int64_t StreamFile::sync_locked(bool data_only) {
  (void)flush_locked(/*completed_writes_lost=*/true);  // its error is remembered, and reported below
  int rc;
  do {
    rc = data_only ? ::fdatasync(sync_descriptor()) : ::fsync(sync_descriptor());
  } while (rc != 0 && errno == EINTR);
  const int sync_err = rc != 0 ? errno : 0;
  // Reported once, as the kernel reports a write-back error to one fsync: this failure tells
  // the caller to write again everything since its last good sync (TAI's tree does, from its
  // cache, and keeps the error until then). Keeping it here as well would fail every later
  // sync, even after that rewrite succeeded, for the life of the stream (a disk that was full
  // and then freed could never be synced again).
  const int err = unreported_error_ ? unreported_error_ : sync_err;
  unreported_error_ = 0;
  return -err;
}

std::error_code StreamFile::close_locked() {
  if (stream_closed()) return std::error_code(EBADF, std::generic_category());
  int err = close_stream();
  // A failed flush that no sync reported: its bytes are lost, and this is the last chance to say so.
  if (unreported_error_ != 0) err = unreported_error_;
  unreported_error_ = 0;
  return err ? std::error_code(err, std::generic_category()) : std::error_code();
}

// ---------------------------------------------------------------------------------------------
// StreamEngine

StreamEngine::StreamEngine(std::string name, EngineOptions options)
    : SyncEngine(std::move(name), stream_capabilities(), options) {}

FileCapabilities StreamEngine::file_capabilities(Open flags) const {
  FileCapabilities caps;
  caps.engine = capabilities();
  caps.direct = false;
  caps.dsync = has(flags, Open::dsync);
  return caps;
}

std::error_code StreamEngine::do_close(EngineFile& file) {
  auto& f = static_cast<StreamFile&>(file);
  std::lock_guard<std::mutex> lock(f.mutex_);
  return f.close_locked();
}

std::int64_t StreamEngine::transfer(const Request& request) {
  auto& f = static_cast<StreamFile&>(*request.file);
  std::lock_guard<std::mutex> lock(f.mutex_);
  if (f.stream_closed()) return -EBADF;
  try {
    switch (request.op) {
      case Op::read:
        return f.read_locked(request.buffer, request.offset, request.length);
      case Op::write:
        return request.iov_count != 0
                   ? detail::write_segments(request, [&f](const void* b, std::uint64_t o, std::uint64_t n) {
                       return f.write_locked(b, o, n);
                     })
                   : f.write_locked(request.buffer, request.offset, request.length);
      case Op::fsync:
        return f.sync_locked(false);
      case Op::fdatasync:
        return f.sync_locked(true);
    }
  } catch (const std::bad_alloc&) {  // a std::filebuf without the engine's buffer allocates its own
    return -ENOMEM;
  }
  return -EINVAL;
}

}  // namespace tai::engines
