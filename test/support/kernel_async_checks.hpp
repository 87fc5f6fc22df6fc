// Checks the engines on the kernel's asynchronous interfaces (libaio, uring) share: the eventfd
// follows the completions, reap on an idle engine does not wait, and a read with Open::dontneed drops the range it read from the page
// cache, and only that range.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/engine_configs.hpp"
#include "support/engine_test_support.hpp"
#include "tai/engine.hpp"

namespace tai::test {

/// The eventfd of `engine` is not readable before a request, becomes readable when a write of
/// `length` bytes to `file` completes (user_data 5), and is not readable once drained and the
/// completion reaped with nothing in flight.
inline void expect_eventfd_follows_a_write(Engine& engine, EngineFile* file, std::uint64_t length) {
  EXPECT_FALSE(readable(engine.eventfd(), 0)) << "readable before any request";
  TestBuffer buf(length);
  fill_pattern(buf.at(), 0, length, 1);
  Request w = make_request(Op::write, file, buf.at(), 0, length, 5);
  ASSERT_EQ(engine.submit(&w, 1), 1u);
  EXPECT_TRUE(readable(engine.eventfd(), 5000)) << "eventfd not readable 5 s after a write of " << length << " bytes";
  drain_eventfd(engine.eventfd());
  Completion c;
  ASSERT_EQ(engine.reap(&c, 1, 1, std::chrono::seconds(5)), 1u);
  EXPECT_EQ(c.user_data, 5u);
  EXPECT_EQ(c.result, static_cast<std::int64_t>(length));
  EXPECT_FALSE(readable(engine.eventfd(), 0)) << "still readable after it was drained and nothing is in flight";
}

/// reap() with nothing in flight returns 0 at once, whatever its minimum and timeout: there is
/// nothing the kernel could complete.
inline void expect_idle_reap_returns_at_once(Engine& engine) {
  Completion c[4];
  EXPECT_EQ(engine.reap(c, 4, 0), 0u);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(engine.reap(c, 4, 1), 0u) << "min = 1 with nothing in flight must not wait";
  EXPECT_EQ(engine.reap(c, 4, 1, std::chrono::seconds(5)), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
}

/// 4 MiB, of which the first 2 MiB are read: DONTNEED cannot drop part of a large folio, and the
/// page cache may use folios of up to 2 MiB.
inline constexpr std::uint64_t kDontneedFileSize = std::uint64_t{4} << 20;
inline constexpr std::uint64_t kDontneedReadRange = std::uint64_t{2} << 20;

/// Writes the check's file at `path` and brings it into the page cache clean (fsync first), so
/// that DONTNEED can drop its pages at once. The caller checks resident_pages() afterwards.
inline void write_clean_cached_file(const std::string& path) {
  write_file(path, pattern(0, kDontneedFileSize, 30));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fsync(fd), 0);
  std::vector<std::uint8_t> tmp(kDontneedFileSize);
  ASSERT_EQ(::pread(fd, tmp.data(), tmp.size(), 0), static_cast<ssize_t>(tmp.size()));
  ::close(fd);
}

/// Reads the first kDontneedReadRange bytes of `path` through `engine` with Open::dontneed and
/// expects exactly those pages to have left the page cache.
inline void expect_dontneed_drops_the_read_range(Engine& engine, const std::string& path) {
  auto f = engine.open(path, {Open::read | Open::dontneed});
  ASSERT_TRUE(f) << f.error().message;
  TestBuffer buf(kDontneedReadRange);
  ASSERT_EQ(run_one_request(engine, Op::read, f->get(), buf.at(), 0, kDontneedReadRange).result,
            static_cast<std::int64_t>(kDontneedReadRange));
  EXPECT_EQ(resident_pages(path, 0, kDontneedReadRange), 0u) << "the read range is still cached";
  EXPECT_GT(resident_pages(path, kDontneedReadRange, kDontneedFileSize - kDontneedReadRange), 0u)
      << "pages outside the range were dropped too";
}

}  // namespace tai::test
