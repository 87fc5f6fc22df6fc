// The cstdio engine: see cstdio_engine.hpp. What it shares with the fstream engine (the request
// flow, the position, the failed-flush bookkeeping) is in engines/common/stream_file.cpp.
#include "engines/cstdio/cstdio_engine.hpp"

#include <fcntl.h>
#include <stdio_ext.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <new>
#include <utility>

#include "engines/common/posix_open.hpp"

namespace tai::engines {
namespace {

const char* fdopen_mode(Open flags) noexcept {
  // fdopen never truncates or creates (open(2) did that); "w" only states the access.
  const bool r = has(flags, Open::read);
  const bool w = has(flags, Open::write);
  return (r && w) ? "r+b" : w ? "wb" : "rb";
}

constexpr std::uint64_t kLargestOffset = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());

int errno_or_eio() noexcept { return errno != 0 ? errno : EIO; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// CstdioFile

CstdioFile::CstdioFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, std::FILE* stream,
                       std::unique_ptr<char[]> stream_buffer)
    : StreamFile(engine, std::move(path), mode, caps, kLargestOffset),
      stream_(stream),
      stream_buffer_(std::move(stream_buffer)),
      fd_(::fileno(stream)) {}

CstdioFile::~CstdioFile() {
  // Destroyed without Engine::close: flush and close; errors have nobody to go to here.
  std::lock_guard<std::mutex> lock(mutex_);
  (void)close_locked();
}

void CstdioFile::drop_buffered() noexcept {
  // glibc and musl have already dropped the buffer's bytes; purging makes that certain, so that
  // no libc writes them later at a position nobody asked for. Clearing the error flag lets the
  // next transfer try again.
  ::__fpurge(stream_);
  ::clearerr(stream_);
}

int CstdioFile::seek_stream(std::uint64_t offset, LastOp /*op*/) {
  if (::fseeko(stream_, static_cast<off_t>(offset), SEEK_SET) == 0) return 0;
  const int err = errno_or_eio();
  if (last_op_locked() == LastOp::write) {
    // The seek flushes the buffered writes first, and that flush failed (EIO, ENOSPC): the
    // bytes of completed writes are gone.
    flush_failed_locked(err, /*completed_writes_lost=*/true);
  } else {
    ::clearerr(stream_);
    forget_position_locked();
  }
  return err;
}

std::size_t CstdioFile::read_stream(void* buffer, std::uint64_t length, int& err) {
  errno = 0;
  const std::size_t n = std::fread(buffer, 1, length, stream_);
  if (n < length) {
    const bool failed = std::ferror(stream_) != 0;
    const int e = errno_or_eio();
    ::clearerr(stream_);  // end of file is not sticky for us: the file may grow
    if (failed) err = e;
  }
  return n;
}

int CstdioFile::write_stream(const void* buffer, std::uint64_t length) {
  errno = 0;
  // fwrite falls short only when a flush fails.
  return std::fwrite(buffer, 1, length, stream_) < length ? errno_or_eio() : 0;
}

std::size_t CstdioFile::pending() const { return ::__fpending(stream_); }

int CstdioFile::flush_stream() { return std::fflush(stream_) != 0 ? errno_or_eio() : 0; }

int CstdioFile::close_stream() {
  int err = 0;
  if (std::fflush(stream_) != 0) err = errno_or_eio();
  // fclose closes the descriptor too; like close(2), it has released it even when it fails.
  if (std::fclose(stream_) != 0 && err == 0 && errno != EINTR) err = errno_or_eio();
  stream_ = nullptr;
  fd_.store(-1, std::memory_order_relaxed);
  return err;
}

// ---------------------------------------------------------------------------------------------
// CstdioEngine

CstdioEngine::CstdioEngine(EngineOptions options) : StreamEngine("cstdio", options) {}

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

  return std::unique_ptr<EngineFile>(std::make_unique<CstdioFile>(*this, path, mode, file_capabilities(mode.flags),
                                                                  stream, std::move(buffer)));
}

std::unique_ptr<Engine> make_cstdio(const EngineOptions& options) {
  return std::make_unique<CstdioEngine>(options);
}

}  // namespace tai::engines
