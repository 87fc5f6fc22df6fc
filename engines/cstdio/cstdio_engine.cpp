// The cstdio engine: see cstdio_engine.hpp.
#include "engines/cstdio/cstdio_engine.hpp"

#include <fcntl.h>
#include <stdio_ext.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <utility>

#include "engines/common/posix_open.hpp"
#include "engines/common/segments.hpp"

namespace tai::engines {
namespace {

Capabilities cstdio_capabilities() {
  Capabilities c;
  c.vectored_writes = true;
  c.asynchronous = false;
  c.direct_io = false;  // stdio buffers everything; O_DIRECT underneath would break it
  c.durable_sync = true;
  return c;
}

const char* fdopen_mode(Open flags) noexcept {
  // fdopen never truncates or creates (open(2) did that); "w" only states the access.
  const bool r = has(flags, Open::read);
  const bool w = has(flags, Open::write);
  return (r && w) ? "r+b" : w ? "wb" : "rb";
}

constexpr std::uint64_t kLargestOffset = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());

}  // namespace

// ---------------------------------------------------------------------------------------------
// CstdioFile

CstdioFile::CstdioFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, std::FILE* stream,
                       std::unique_ptr<char[]> stream_buffer)
    : EngineFile(engine, std::move(path), mode, caps),
      stream_(stream),
      stream_buffer_(std::move(stream_buffer)),
      fd_(::fileno(stream)) {}

CstdioFile::~CstdioFile() {
  // Destroyed without Engine::close: flush and close; errors have nobody to go to here.
  std::lock_guard<std::mutex> lock(mutex_);
  (void)close_locked();
}

void CstdioFile::flush_failed_locked(int err, bool completed_writes_lost) noexcept {
  if (completed_writes_lost && unreported_error_ == 0) unreported_error_ = err;
  // glibc and musl have already dropped the buffer's bytes; purging makes that certain, so that
  // no libc writes them later at a position nobody asked for. The stream stands where the
  // written part ended, not where the buffered writes did: forget the position, the next
  // transfer seeks. Clearing the error flag lets the next transfer try again.
  ::__fpurge(stream_);
  ::clearerr(stream_);
  position_ = kUnknownPosition;
  last_op_ = LastOp::none;
}

int CstdioFile::seek_locked(std::uint64_t offset, LastOp op) {
  if (last_op_ == op && position_ == offset) return 0;
  if (offset > kLargestOffset) return EINVAL;
  if (::fseeko(stream_, static_cast<off_t>(offset), SEEK_SET) != 0) {
    const int err = errno ? errno : EIO;
    if (last_op_ == LastOp::write) {
      // The seek flushes the buffered writes first, and that flush failed (EIO, ENOSPC): the
      // bytes of completed writes are gone.
      flush_failed_locked(err, /*completed_writes_lost=*/true);
    } else {
      ::clearerr(stream_);
      position_ = kUnknownPosition;
      last_op_ = LastOp::none;
    }
    return err;
  }
  position_ = offset;
  last_op_ = op;
  return 0;
}

std::int64_t CstdioFile::read_locked(void* buffer, std::uint64_t offset, std::uint64_t length) {
  if (int err = seek_locked(offset, LastOp::read)) return -err;
  errno = 0;
  const std::size_t n = std::fread(buffer, 1, length, stream_);
  if (n < length) {
    const bool failed = std::ferror(stream_) != 0;
    const int err = errno ? errno : EIO;
    ::clearerr(stream_);  // end of file is not sticky for us: the file may grow
    if (failed) {
      position_ = kUnknownPosition;
      last_op_ = LastOp::none;
      if (n == 0) return -err;
      return static_cast<std::int64_t>(n);  // the bytes that did arrive; the next call reports
    }
  }
  position_ = offset + n;
  if (n > 0 && has(mode().flags, Open::dontneed)) detail::apply_dontneed(fd(), offset, n);
  return static_cast<std::int64_t>(n);
}

std::int64_t CstdioFile::write_locked(const void* buffer, std::uint64_t offset, std::uint64_t length) {
  if (int err = seek_locked(offset, LastOp::write)) return -err;
  // Bytes of earlier writes, already reported complete, that a flush inside fwrite may drop.
  const bool earlier_bytes_buffered = ::__fpending(stream_) > 0;
  errno = 0;
  const std::size_t n = std::fwrite(buffer, 1, length, stream_);
  if (n < length) {
    // fwrite falls short only when a flush fails, and its count includes bytes it had copied
    // into the buffer that the failed flush then dropped: no part of this write may be
    // reported written (a count would let the caller go on as if the prefix were in the file).
    const int err = errno ? errno : EIO;
    flush_failed_locked(err, earlier_bytes_buffered);
    return -err;
  }
  position_ = offset + n;
  if (has(mode().flags, Open::dsync)) {
    // O_DSYNC makes write(2) durable, but stdio calls write(2) only when its buffer fills:
    // flush now so that "completed" means "durable", as the flag promises.
    if (std::fflush(stream_) != 0) {
      // Every earlier write was flushed when it completed: only this one's bytes are lost.
      const int err = errno ? errno : EIO;
      flush_failed_locked(err, /*completed_writes_lost=*/false);
      return -err;
    }
    if (has(mode().flags, Open::dontneed)) detail::apply_dontneed(fd(), offset, n);
  }
  return static_cast<std::int64_t>(n);
}

std::int64_t CstdioFile::sync_locked(bool data_only) {
  if (std::fflush(stream_) != 0) flush_failed_locked(errno ? errno : EIO, /*completed_writes_lost=*/true);
  int rc;
  do {
    rc = data_only ? ::fdatasync(fd()) : ::fsync(fd());
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

std::error_code CstdioFile::close_locked() {
  if (stream_ == nullptr) return std::error_code(EBADF, std::generic_category());
  int err = 0;
  if (std::fflush(stream_) != 0) err = errno ? errno : EIO;
  // fclose closes the descriptor too; like close(2), it has released it even when it fails.
  if (std::fclose(stream_) != 0 && err == 0 && errno != EINTR) err = errno ? errno : EIO;
  stream_ = nullptr;
  fd_.store(-1, std::memory_order_relaxed);
  // A failed flush that no sync reported: its bytes are lost, and this is the last chance to say so.
  if (unreported_error_ != 0) err = unreported_error_;
  unreported_error_ = 0;
  return err ? std::error_code(err, std::generic_category()) : std::error_code();
}

// ---------------------------------------------------------------------------------------------
// CstdioEngine

CstdioEngine::CstdioEngine(EngineOptions options) : SyncEngine("cstdio", cstdio_capabilities(), options) {}

Result<std::unique_ptr<EngineFile>> CstdioEngine::do_open(const std::string& path, OpenMode mode) {
  if (auto refused = detail::refuse_direct(path, mode.flags, "cstdio", "stdio")) return *refused;
  Result<int> fd = detail::open_descriptor(path, mode, "cstdio");
  if (!fd) return fd.error();
  detail::apply_open_hints(*fd, mode.flags);

  std::FILE* stream = ::fdopen(*fd, fdopen_mode(mode.flags));
  if (stream == nullptr) {
    const int err = errno;
    ::close(*fd);
    return Error::from_errno(err, "engine 'cstdio': fdopen '" + path + "'");
  }
  auto buffer = std::unique_ptr<char[]>(new (std::nothrow) char[kStreamBufferSize]);
  // Without the buffer stdio uses its own (st_blksize): slower, still correct.
  if (buffer) (void)std::setvbuf(stream, buffer.get(), _IOFBF, kStreamBufferSize);

  FileCapabilities caps;
  caps.engine = capabilities();
  caps.direct = false;
  caps.dsync = has(mode.flags, Open::dsync);
  return std::unique_ptr<EngineFile>(std::make_unique<CstdioFile>(*this, path, mode, caps, stream, std::move(buffer)));
}

std::error_code CstdioEngine::do_close(EngineFile& file) {
  auto& f = static_cast<CstdioFile&>(file);
  std::lock_guard<std::mutex> lock(f.mutex_);
  return f.close_locked();
}


std::int64_t CstdioEngine::transfer(const Request& request) {
  auto& f = static_cast<CstdioFile&>(*request.file);
  std::lock_guard<std::mutex> lock(f.mutex_);
  if (f.stream_ == nullptr) return -EBADF;
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
  return -EINVAL;
}

std::unique_ptr<Engine> make_cstdio(const EngineOptions& options) {
  return std::make_unique<CstdioEngine>(options);
}

}  // namespace tai::engines
