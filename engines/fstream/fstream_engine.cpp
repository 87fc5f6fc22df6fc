// The fstream engine: see fstream_engine.hpp. What it shares with the cstdio engine (the request
// flow, the position, the failed-flush bookkeeping) is in engines/common/stream_file.cpp.
#include "engines/fstream/fstream_engine.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <new>
#include <utility>

#include "engines/common/posix_open.hpp"

namespace tai::engines {
namespace {

constexpr std::uint64_t kLargestOffset = static_cast<std::uint64_t>(std::numeric_limits<std::streamoff>::max());

int errno_or_eio() noexcept { return errno != 0 ? errno : EIO; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// FstreamFile

FstreamFile::FstreamFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, int sync_fd,
                         std::unique_ptr<char[]> stream_buffer)
    : StreamFile(engine, std::move(path), mode, caps, kLargestOffset),
      stream_buffer_(std::move(stream_buffer)),
      sync_fd_(sync_fd) {}

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

void FstreamFile::drop_buffered() noexcept {
  // The filebuf still holds the bytes it could not write, and the descriptor stands where the
  // written part ended: dropped here, a later flush cannot write them there.
  filebuf_.discard_pending();
  stream_.clear();
}

int FstreamFile::flush_stream() {
  if (filebuf_.pending() == 0) return 0;
  stream_.clear();  // flush() does nothing on a stream whose state is not good()
  errno = 0;
  stream_.flush();
  return stream_.bad() ? errno_or_eio() : 0;
}

int FstreamFile::seek_stream(std::uint64_t offset, LastOp op) {
  // Flush pending output explicitly first: a seek would do it too, but then its error could
  // not be told apart from a bad offset.
  if (last_op_locked() == LastOp::write) {
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
    forget_position_locked();
    return err;
  }
  return 0;
}

std::size_t FstreamFile::read_stream(void* buffer, std::uint64_t length, int& err) {
  errno = 0;
  stream_.read(static_cast<char*>(buffer), static_cast<std::streamsize>(length));
  const auto n = static_cast<std::size_t>(stream_.gcount());
  // libstdc++ sets badbit when the filebuf's read(2) fails (underflow error).
  if (stream_.bad()) err = errno_or_eio();
  stream_.clear();  // eof + fail at end of file: a short read, and the file may grow
  return n;
}

int FstreamFile::write_stream(const void* buffer, std::uint64_t length) {
  errno = 0;
  stream_.write(static_cast<const char*>(buffer), static_cast<std::streamsize>(length));
  // ostream::write does not say how much went out: the whole request failed, and the file's
  // contents in its range are unknown.
  return stream_.bad() ? errno_or_eio() : 0;
}

int FstreamFile::complete_dsync() {
  // The stream cannot carry O_DSYNC: the flushed bytes are made durable here.
  int rc;
  do {
    rc = ::fdatasync(sync_fd_);
  } while (rc != 0 && errno == EINTR);
  return rc != 0 ? errno : 0;
}

int FstreamFile::close_stream() {
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
  return err;
}

// ---------------------------------------------------------------------------------------------
// FstreamEngine

FstreamEngine::FstreamEngine(EngineOptions options) : StreamEngine("fstream", options) {}

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

  const FileCapabilities caps = file_capabilities(mode.flags);

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

std::unique_ptr<Engine> make_fstream(const EngineOptions& options) {
  return std::make_unique<FstreamEngine>(options);
}

}  // namespace tai::engines
