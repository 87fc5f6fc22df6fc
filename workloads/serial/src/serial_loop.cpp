// The naive program's loop, written once and compiled twice (workloads/serial/CMakeLists.txt):
// SERIAL_LOOP_NS names the namespace of each build, and the block below is the only difference
// between them: which open/pwrite/fsync/close `io::` means.
#include "serial_loop.hpp"

#include <fcntl.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#ifndef SERIAL_LOOP_NS
#error "SERIAL_LOOP_NS must name the namespace of this build of the loop (libc_calls or drop_in)"
#endif

// ---- the one place where the two builds differ ----
#ifdef SERIAL_DROP_IN
#include "tai/posix.hpp"
namespace io = tai::posix;
#else
#include <unistd.h>
namespace io { using ::open; using ::pwrite; using ::fsync; using ::close; }
#endif
// ----------------------------------------------------

namespace serial::SERIAL_LOOP_NS {
namespace {
using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string call_failed(const char* call, const std::string& path, int err) {
  return std::string(call) + " " + path + ": " + std::strerror(err);
}

// pwrite until every byte is written: a short write is legal and is not an error.
bool pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t offset, int* err) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = io::pwrite(fd, p, n, off_t(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      return false;
    }
    if (w == 0) {
      *err = EIO;  // no progress: give up rather than spin
      return false;
    }
    p += w, n -= std::size_t(w), offset += std::uint64_t(w);
  }
  return true;
}
}  // namespace

LoopResult run_serial_loop(const LoopSettings& settings, RecordSource& records, const OpenObserver& on_open) {
  LoopResult res;
  const std::string& path = settings.path;
  const unsigned amplify = settings.amplify ? settings.amplify : 1;
  res.index.reserve(settings.images * amplify);
  int flags = O_WRONLY | O_CREAT | O_TRUNC;
  if (settings.direct) flags |= O_DIRECT;

  const auto t0 = Clock::now();
  auto io_t = Clock::now();
  const int fd = io::open(path.c_str(), flags, 0644);
  res.io_s += seconds(Clock::now() - io_t);
  if (fd < 0) {
    res.error = call_failed("open", path, errno);
    return res;
  }
  if (on_open) on_open(fd);

  std::uint64_t offset = 0;
  int err = 0;
  for (std::size_t i = 0; i < settings.images; ++i) {
    const auto c0 = Clock::now();
    PreparedRecord rec;
    const bool made = records.make(i, rec);
    res.compute_s += seconds(Clock::now() - c0);
    if (!made) {
      ++res.skipped;
    } else {
      io_t = Clock::now();
      for (unsigned copy = 0; copy < amplify; ++copy) {
        if (!pwrite_all(fd, rec.data, rec.size, offset, &err)) {
          res.error = call_failed("pwrite", path, err);
          break;
        }
        ++res.writes;
        res.index.push_back({rec.id, copy, offset, rec.size, rec.crc32c});
        offset += rec.size;
      }
      res.io_s += seconds(Clock::now() - io_t);
      if (!res.ok()) break;
      ++res.images;
    }
    if (settings.fsync_every && (i + 1) % settings.fsync_every == 0 && i + 1 < settings.images) {
      const auto s0 = Clock::now();
      const int rc = io::fsync(fd);
      const double s = seconds(Clock::now() - s0);
      res.io_s += s, res.fsync_s += s;
      if (rc != 0) {
        res.error = call_failed("fsync", path, errno);
        break;
      }
      ++res.fsyncs;
    }
  }

  // The end of the program: everything durable, then close (whose error counts too).
  const auto s0 = Clock::now();
  const int synced = res.ok() ? io::fsync(fd) : 0;
  const int sync_errno = errno;
  const double s = seconds(Clock::now() - s0);
  res.io_s += s, res.fsync_s += s;
  if (res.ok() && synced != 0) res.error = call_failed("fsync", path, sync_errno);
  if (res.ok()) ++res.fsyncs;
  io_t = Clock::now();
  const int closed = io::close(fd);
  const int close_errno = errno;
  res.io_s += seconds(Clock::now() - io_t);
  if (res.ok() && closed != 0) res.error = call_failed("close", path, close_errno);
  res.wall_s = seconds(Clock::now() - t0);
  res.bytes = offset;
  return res;
}

}  // namespace serial::SERIAL_LOOP_NS
