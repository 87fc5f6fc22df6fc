// The posix engine: see posix_engine.hpp.
#include "engines/posix/posix_engine.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "engines/common/alignment.hpp"
#include "engines/common/posix_open.hpp"
#include "engines/common/own_descriptors.hpp"

namespace tai::engines {
namespace {

Capabilities posix_capabilities() {
  Capabilities c;
  c.vectored_writes = true;
  c.asynchronous = false;
  c.direct_io = true;
  c.durable_sync = true;
  return c;
}

}  // namespace

PosixFile::PosixFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, int fd)
    : EngineFile(engine, std::move(path), mode, caps), fd_(fd) {}

PosixFile::~PosixFile() {
  // A file destroyed without Engine::close: release the descriptor. Errors cannot be reported
  // from a destructor; Engine::close is the way to learn about them.
  (void)close_descriptor();
}

std::error_code PosixFile::close_descriptor() noexcept {
  const int fd = fd_.exchange(-1, std::memory_order_relaxed);
  if (fd < 0) return std::error_code(EBADF, std::generic_category());
  // No retry on EINTR: Linux has released the descriptor by then, and a retry could close a
  // descriptor another thread has just been given.
  if (tai::detail::close_own_descriptor(fd) != 0 && errno != EINTR) return std::error_code(errno, std::generic_category());
  return {};
}

PosixEngine::PosixEngine(EngineOptions options) : SyncEngine("posix", posix_capabilities(), options) {}

Result<std::unique_ptr<EngineFile>> PosixEngine::do_open(const std::string& path, OpenMode mode) {
  Result<int> fd = detail::open_descriptor(path, mode, "posix");
  if (!fd) return fd.error();
  *fd = tai::detail::adopt_own_descriptor(*fd);  // out of the program's way
  detail::apply_open_hints(*fd, mode.flags);

  const FileCapabilities caps = detail::descriptor_capabilities(*fd, mode, capabilities());
  return std::unique_ptr<EngineFile>(std::make_unique<PosixFile>(*this, path, mode, caps, *fd));
}

std::error_code PosixEngine::do_close(EngineFile& file) {
  return static_cast<PosixFile&>(file).close_descriptor();
}

std::int64_t PosixEngine::transfer(const Request& request) {
  const int fd = request.file->fd();
  if (fd < 0) return -EBADF;
  const auto offset = static_cast<off_t>(request.offset);
  ssize_t n = 0;
  switch (request.op) {
    case Op::read:
      do {
        n = ::pread(fd, request.buffer, request.length, offset);
      } while (n < 0 && errno == EINTR);
      break;
    case Op::write:
      do {
        n = request.iov_count != 0 ? ::pwritev(fd, request.iov, static_cast<int>(request.iov_count), offset)
                                   : ::pwrite(fd, request.buffer, request.length, offset);
      } while (n < 0 && errno == EINTR);
      break;
    case Op::fsync:
      do {
        n = ::fsync(fd);
      } while (n < 0 && errno == EINTR);
      return n < 0 ? -errno : 0;
    case Op::fdatasync:
      do {
        n = ::fdatasync(fd);
      } while (n < 0 && errno == EINTR);
      return n < 0 ? -errno : 0;
  }
  if (n < 0) return -errno;
  if (n > 0 && has(request.file->mode().flags, Open::dontneed)) {
    detail::apply_dontneed(fd, request.offset, static_cast<std::uint64_t>(n));
  } else if (n > 0 && request.op == Op::write &&
             detail::WriteBehind::applies(request.file->capabilities(), request.file->mode(),
                                          options().start_writeback_bytes)) {
    static_cast<PosixFile&>(*request.file)
        .write_behind()
        .written(fd, request.offset, static_cast<std::uint64_t>(n), options().start_writeback_bytes);
  }
  return n;
}

std::unique_ptr<Engine> make_posix(const EngineOptions& options) {
  return std::make_unique<PosixEngine>(options);
}

}  // namespace tai::engines
