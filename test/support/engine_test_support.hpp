// test/support/engine_test_support.hpp - what the per-engine tests (posix, cstdio, fstream,
// null, libaio, uring) share: one request run to completion, a file as the kernel has it, the
// page cache and eventfd probes, and the "create the engine or skip" macro for engines the kernel
// may refuse.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tai/engine.hpp"
#include "tai/error.hpp"

namespace tai::test {

/// Submits one request, reaps its completion (waiting for it) and checks that it is this
/// request's. Thread-safety: as Engine::submit/reap (the queue owner's thread).
inline Completion run_request(Engine& engine, Op op, EngineFile* file, const void* buffer, std::uint64_t offset,
                              std::uint64_t length) {
  constexpr std::uint64_t kUserData = 77;
  Request r{op, file, const_cast<void*>(buffer), offset, length, kUserData};
  EXPECT_EQ(engine.submit(&r, 1), 1u);
  Completion c;
  EXPECT_EQ(engine.reap(&c, 1, 1), 1u);
  EXPECT_EQ(c.user_data, kUserData);
  return c;
}

/// Engine options with only the depth set. Thread-safe.
inline EngineOptions depth(unsigned d) {
  EngineOptions o;
  o.depth = d;
  return o;
}

/// True when `fd` becomes readable within `timeout_ms`. Thread-safe.
inline bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

/// Reads a nonblocking eventfd until it is empty. Thread-safe.
inline void drain_eventfd(int fd) {
  std::uint64_t v;
  while (::read(fd, &v, sizeof v) == static_cast<ssize_t>(sizeof v)) {
  }
}

/// Pages of [offset, offset + length) of `path` that are in the page cache (mincore on a
/// shared read-only mapping, which itself faults nothing in). Thread-safe.
inline std::size_t resident_pages(const std::string& path, std::uint64_t offset, std::uint64_t length) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset));
  ::close(fd);
  if (map == MAP_FAILED) return 0;
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((length + page - 1) / page);
  std::size_t n = 0;
  if (::mincore(map, length, vec.data()) == 0)
    for (unsigned char v : vec) n += v & 1;
  ::munmap(map, length);
  return n;
}

/// Why POSIX_FADV_DONTNEED cannot drop the clean pages of a file in `dir` ("" when it can): on
/// tmpfs and ramfs the page cache is the file's only copy, so tests of the dontneed hint depend on
/// the file system the scratch directory is on. Probed: 1 MiB written, fsync'ed, advised
/// DONTNEED, then counted with mincore.
inline std::string page_cache_not_droppable_reason(const std::string& dir) {
  const std::string path = dir + "/tai-dontneed-probe-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create " + path + ": " + std::strerror(errno);
  constexpr std::size_t kProbe = 1 << 20;
  const std::vector<char> data(kProbe, 'p');
  const bool written = ::write(fd, data.data(), kProbe) == static_cast<ssize_t>(kProbe) && ::fsync(fd) == 0 &&
                       ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  const std::size_t left = written ? resident_pages(path, 0, kProbe) : 0;
  ::unlink(path.c_str());
  if (!written) return "the page-cache probe in " + dir + " failed: " + std::strerror(errno);
  if (left > 0)
    return "clean pages of files in " + dir +
           " stay cached after POSIX_FADV_DONTNEED (tmpfs or ramfs: the page cache is the file's only copy); "
           "set TAI_TEST_DIR to a directory on a disk file system";
  return "";
}

/// The file's bytes as a new descriptor sees them: what the kernel has, not what a stream
/// engine still buffers. "<open failed: reason>" when it cannot be opened. Thread-safe.
inline std::string kernel_view(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "<open failed: " + std::string(std::strerror(errno)) + ">";
  std::string s;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return s;
}

/// True when `e` carries one of `codes` (errno values). Thread-safe.
inline bool error_is_one_of(const Error& e, std::initializer_list<int> codes) {
  for (int code : codes)
    if (e.code.value() == code) return true;
  return false;
}

/// Writes `data` at `offset` through `engine` in requests of at most `piece` bytes (the buffer of a
/// stream engine keeps small ones); a test failure names the piece that did not complete.
inline void write_in_pieces(Engine& engine, EngineFile* f, const std::string& data, std::uint64_t offset,
                            std::size_t piece) {
  for (std::size_t at = 0; at < data.size(); at += piece) {
    const std::size_t n = std::min(piece, data.size() - at);
    ASSERT_EQ(run_request(engine, Op::write, f, data.data() + at, offset + at, n).result, static_cast<std::int64_t>(n))
        << "piece at " << offset + at;
  }
}

}  // namespace tai::test

/// Declares `std::unique_ptr<EngineType> var` made by EngineType::create(options), or skips the
/// test with "the kernel refuses <what> here" when creation fails with one of the errnos after
/// `what` (the kernel or a sandbox refuses the facility), or fails the test on any other error.
#define TAI_CREATE_ENGINE_OR_SKIP(var, EngineType, options, what, ...)                    \
  auto var##_made = EngineType::create(options);                                          \
  if (!var##_made) {                                                                      \
    if (::tai::test::error_is_one_of(var##_made.error(), {__VA_ARGS__}))                   \
      GTEST_SKIP() << "the kernel refuses " what " here: " << var##_made.error().message; \
    FAIL() << var##_made.error().message;                                                 \
  }                                                                                       \
  std::unique_ptr<EngineType> var = std::move(var##_made).value()

/// Makes `std::unique_ptr<engines::UringEngine> var`, or skips the test when the kernel (or a
/// sandbox's seccomp filter) refuses io_uring here. The includer includes the engine's header.
#define MAKE_URING_OR_SKIP(var, options) \
  TAI_CREATE_ENGINE_OR_SKIP(var, ::tai::engines::UringEngine, options, "io_uring", EPERM, ENOSYS, EOPNOTSUPP)

/// Makes `std::unique_ptr<engines::LibaioEngine> var`, or skips the test when the kernel refuses
/// AIO here (EAGAIN: aio-max-nr is used up by other processes). The includer includes the
/// engine's header.
#define MAKE_LIBAIO_OR_SKIP(var, options) \
  TAI_CREATE_ENGINE_OR_SKIP(var, ::tai::engines::LibaioEngine, options, "AIO", EPERM, ENOSYS, EAGAIN)
