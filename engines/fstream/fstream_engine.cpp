// The fstream engine: see fstream_engine.hpp.
#include "engines/fstream/fstream_engine.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <new>
#include <utility>

#include "engines/common/posix_open.hpp"
#include "engines/common/segments.hpp"

namespace tai::engines {
namespace {

Capabilities fstream_capabilities() {
  Capabilities c;
  c.vectored_writes = true;
  c.asynchronous = false;
  c.direct_io = false;
  c.durable_sync = true;  // through the kept descriptor, see the header
  return c;
}

constexpr std::uint64_t kLargestOffset = static_cast<std::uint64_t>(std::numeric_limits<std::streamoff>::max());

int errno_or_eio() noexcept { return errno != 0 ? errno : EIO; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// FstreamFile

FstreamFile::FstreamFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, int sync_fd,
                         std::unique_ptr<char[]> stream_buffer)
    : EngineFile(engine, std::move(path), mode, caps), stream_buffer_(std::move(stream_buffer)), sync_fd_(sync_fd) {}

FstreamFile::~FstreamFile() {
  std::lock_guard<std::mutex> lock(mutex_);
  (void)close_locked();  // destroyed without Engine::close: nobody to report errors to
}

int FstreamFile::open_stream(std::ios::openmode how) {
  // pubsetbuf must come before open() to take effect in libstdc++.
  if (stream_buffer_) filebuf_.pubsetbuf(stream_buffer_.get(), FstreamEngine::kStreamBufferSize);
  errno = 0;
  if (filebuf_.open(path(), how) == nullptr) return errno_or_eio();
  return 0;
}

void FstreamFile::flush_failed_locked(int err, bool completed_writes_lost) {
  if (completed_writes_lost && unreported_error_ == 0) unreported_error_ = err;
  // The filebuf still holds the bytes it could not write, and the descriptor stands where the
  // written part ended: dropped here, a later flush cannot write them there. The next transfer
  // seeks.
  filebuf_.discard_pending();
  stream_.clear();
  position_ = kUnknownPosition;
  last_op_ = LastOp::none;
}

int FstreamFile::flush_locked(bool completed_writes_lost) {
  if (filebuf_.pending() == 0) return 0;
  stream_.clear();  // flush() does nothing on a stream whose state is not good()
  errno = 0;
  stream_.flush();
  if (stream_.bad()) {
    const int err = errno_or_eio();
    flush_failed_locked(err, completed_writes_lost);
    return err;
  }
  return 0;
}

int FstreamFile::seek_locked(std::uint64_t offset, LastOp op) {
  if (last_op_ == op && position_ == offset) return 0;
  if (offset > kLargestOffset) return EINVAL;
  // Flush pending output explicitly first: a seek would do it too, but then its error could
  // not be told apart from a bad offset.
  if (last_op_ == LastOp::write) {
    // The bytes pending are those of writes already reported complete.
    if (int err = flush_locked(/*completed_writes_lost=*/true)) return err;
  }
  stream_.clear();
  errno = 0;
  if (op == LastOp::read) {
    stream_.seekg(static_cast<std::streamoff>(offset), std::ios::beg);
  } else {
    stream_.seekp(static_cast<std::streamoff>(offset), std::ios::beg);
  }
  if (stream_.fail()) {
    const int err = errno_or_eio();
    stream_.clear();
    position_ = kUnknownPosition;
    last_op_ = LastOp::none;
    return err;
  }
  position_ = offset;
  last_op_ = op;
  return 0;
}

std::int64_t FstreamFile::read_locked(void* buffer, std::uint64_t offset, std::uint64_t length) {
  if (int err = seek_locked(offset, LastOp::read)) return -err;
  errno = 0;
  stream_.read(static_cast<char*>(buffer), static_cast<std::streamsize>(length));
  const auto n = static_cast<std::uint64_t>(stream_.gcount());
  if (stream_.bad()) {
    // libstdc++ sets badbit when the filebuf's read(2) fails (underflow error).
    const int err = errno_or_eio();
    stream_.clear();
    position_ = kUnknownPosition;
    last_op_ = LastOp::none;
    return n == 0 ? -err : static_cast<std::int64_t>(n);
  }
  stream_.clear();  // eof + fail at end of file: a short read, and the file may grow
  position_ = offset + n;
  if (n > 0 && has(mode().flags, Open::dontneed)) detail::apply_dontneed(sync_fd_, offset, n);
  return static_cast<std::int64_t>(n);
}

std::int64_t FstreamFile::write_locked(const void* buffer, std::uint64_t offset, std::uint64_t length) {
  if (int err = seek_locked(offset, LastOp::write)) return -err;
  // Bytes of earlier writes, already reported complete, that a flush inside this write may drop.
  const bool earlier_bytes_buffered = filebuf_.pending() > 0;
  errno = 0;
  stream_.write(static_cast<const char*>(buffer), static_cast<std::streamsize>(length));
  if (stream_.bad()) {
    // ostream::write does not say how much went out: the whole request failed, and the file's
    // contents in its range are unknown.
    const int err = errno_or_eio();
    flush_failed_locked(err, earlier_bytes_buffered);
    return -err;
  }
  position_ = offset + length;
  if (has(mode().flags, Open::dsync)) {
    // Emulated O_DSYNC: the stream cannot carry the flag, so flush and fdatasync each write.
    // Every earlier write was flushed and synced when it completed: a failure here loses only
    // this write's bytes, and fails only this write.
    if (int err = flush_locked(/*completed_writes_lost=*/false)) return -err;
    int rc;
    do {
      rc = ::fdatasync(sync_fd_);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) return -errno;
    if (has(mode().flags, Open::dontneed)) detail::apply_dontneed(sync_fd_, offset, length);
  }
  return static_cast<std::int64_t>(length);
}

std::int64_t FstreamFile::sync_locked(bool data_only) {
  (void)flush_locked(/*completed_writes_lost=*/true);  // its error is remembered, and reported below
  int rc;
  do {
    rc = data_only ? ::fdatasync(sync_fd_) : ::fsync(sync_fd_);
  } while (rc != 0 && errno == EINTR);
  const int sync_err = rc != 0 ? errno : 0;
  // Reported once, as the kernel reports a write-back error to one fsync: this failure tells the
  // caller to write again everything since its last good sync (TAI's tree does, from its cache).
  // Keeping it would fail every later sync, even after that rewrite succeeded, for the life of
  // the stream (a disk that was full and then freed could never be synced again).
  const int err = unreported_error_ ? unreported_error_ : sync_err;
  unreported_error_ = 0;
  return -err;
}

std::error_code FstreamFile::close_locked() {
  if (closed_) return std::error_code(EBADF, std::generic_category());
  closed_ = true;
  int err = 0;
  if (filebuf_.is_open()) {
    // A failed flush drops the bytes, so the filebuf's close has nothing left to write again.
    err = flush_locked(/*completed_writes_lost=*/true);
    stream_.clear();
    errno = 0;
    if (filebuf_.close() == nullptr && err == 0) err = errno_or_eio();
  }
  if (sync_fd_ >= 0) {
    if (::close(sync_fd_) != 0 && err == 0 && errno != EINTR) err = errno;
    sync_fd_ = -1;
  }
  // A failed flush that no sync reported: its bytes are lost, and this is the last chance to say so.
  if (unreported_error_ != 0) err = unreported_error_;
  unreported_error_ = 0;
  return err ? std::error_code(err, std::generic_category()) : std::error_code();
}

// ---------------------------------------------------------------------------------------------
// FstreamEngine

FstreamEngine::FstreamEngine(EngineOptions options) : SyncEngine("fstream", fstream_capabilities(), options) {}

Result<std::unique_ptr<EngineFile>> FstreamEngine::do_open(const std::string& path, OpenMode mode) {
  if (auto refused = detail::refuse_direct(path, mode.flags, "fstream", "std::filebuf")) return *refused;
  // The open(2) that creates/truncates with the requested permissions, checks access with a
  // precise errno, and stays open for fsync. O_DSYNC is not asked of it: it never writes.
  OpenMode descriptor_mode = mode;
  descriptor_mode.flags = static_cast<Open>(static_cast<std::uint32_t>(mode.flags) &
                                            ~static_cast<std::uint32_t>(Open::dsync));
  Result<int> fd = detail::open_descriptor(path, descriptor_mode, "fstream");
  if (!fd) return fd.error();
  if (has(mode.flags, Open::willneed)) (void)::posix_fadvise(*fd, 0, 0, POSIX_FADV_WILLNEED);

  FileCapabilities caps;
  caps.engine = capabilities();
  caps.direct = false;
  caps.dsync = has(mode.flags, Open::dsync);

  std::unique_ptr<FstreamFile> file;
  try {
    auto buffer = std::unique_ptr<char[]>(new (std::nothrow) char[kStreamBufferSize]);
    file = std::make_unique<FstreamFile>(*this, path, mode, caps, *fd, std::move(buffer));
  } catch (const std::bad_alloc&) {
    ::close(*fd);
    return Error::from_errno(ENOMEM, "engine 'fstream': open '" + path + "'");
  }

  // Never plain `out`: it means "w" and would truncate. The file exists now (open(2) above).
  std::ios::openmode how = std::ios::binary;
  const bool r = has(mode.flags, Open::read);
  const bool w = has(mode.flags, Open::write);
  how |= w ? (std::ios::in | std::ios::out) : std::ios::in;
  if (int err = file->open_stream(how)) {
    return Error::from_errno(err, "engine 'fstream': std::fstream could not open '" + path + "'" +
                                      (w && !r ? " (for writing, fstream needs read permission too)" : ""));
  }

  // The stream opened the path anew: make sure it is the file the descriptor holds.
  struct stat by_path {}, by_fd {};
  if (::stat(path.c_str(), &by_path) != 0 || ::fstat(*fd, &by_fd) != 0 || by_path.st_dev != by_fd.st_dev ||
      by_path.st_ino != by_fd.st_ino) {
    return Error{std::error_code(EAGAIN, std::generic_category()),
                 "engine 'fstream': open '" + path + "': the path was renamed or replaced while it was being opened"};
  }
  return std::unique_ptr<EngineFile>(std::move(file));
}

std::error_code FstreamEngine::do_close(EngineFile& file) {
  auto& f = static_cast<FstreamFile&>(file);
  std::lock_guard<std::mutex> lock(f.mutex_);
  return f.close_locked();
}


std::int64_t FstreamEngine::transfer(const Request& request) {
  auto& f = static_cast<FstreamFile&>(*request.file);
  std::lock_guard<std::mutex> lock(f.mutex_);
  if (f.closed_) return -EBADF;
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
  } catch (const std::bad_alloc&) {  // a filebuf without our buffer allocates its own
    return -ENOMEM;
  }
  return -EINVAL;
}

std::unique_ptr<Engine> make_fstream(const EngineOptions& options) {
  return std::make_unique<FstreamEngine>(options);
}

}  // namespace tai::engines
