// The process counters: getrusage, /proc/self/io and the peak RSS over a run, and the page-cache
// warning.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "page_cache_warning.hpp"
#include "process_counters.hpp"

using namespace augment;

namespace {
std::string scratch_dir() {
  const char* dir = std::getenv("TMPDIR");
  return dir ? dir : "/tmp";
}
}  // namespace

TEST(AugmentProcessCounters, CpuTimeAndFaultsGrow) {
  const ProcessCounters before = read_process_counters();
  volatile double x = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(60)) x = x + 1.0;
  // Touch fresh anonymous pages: each is a minor fault.
  const std::size_t n = 8u << 20;
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 1, n);
  ::munmap(p, n);
  const ProcessCounters d = read_process_counters() - before;
  EXPECT_GT(d.user_s + d.sys_s, 0.02);
  EXPECT_GE(d.minor_faults, long(n / 4096 / 2));  // at least half: transparent huge pages fault less
  EXPECT_GE(d.voluntary_switches, 0);
  EXPECT_GE(d.major_faults, 0);
}

TEST(AugmentProcessCounters, WrittenAndSyncedBytesShowInProcSelfIo) {
  const ProcessCounters probe = read_process_counters();
  if (!probe.io_available) {
    EXPECT_FALSE(probe.io_unavailable_reason.empty());
    GTEST_SKIP() << probe.io_unavailable_reason;
  }
  const std::string path = scratch_dir() + "/tai_augment_io." + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path;
  struct statfs sf {};
  ASSERT_EQ(::fstatfs(fd, &sf), 0);
  const std::size_t n = 4u << 20;
  std::vector<char> data(n, 'x');
  const ProcessCounters before = read_process_counters();
  ASSERT_EQ(::write(fd, data.data(), n), ssize_t(n));
  ASSERT_EQ(::fsync(fd), 0);
  const ProcessCounters d = read_process_counters() - before;
  ::close(fd);
  ::unlink(path.c_str());
  ASSERT_TRUE(d.io_available);
  EXPECT_GE(d.wchar, n);  // every write() counts, whatever the filesystem
  // tmpfs and ramfs have no block layer: nothing reaches a device there.
  if (sf.f_type == 0x01021994 || sf.f_type == 0x858458f6) GTEST_SKIP() << path << " is on tmpfs/ramfs";
  EXPECT_GE(d.write_bytes, n);
}

TEST(AugmentProcessCounters, DifferenceIsFieldByField) {
  ProcessCounters a, b;
  a.user_s = 3.5, b.user_s = 1.25;
  a.voluntary_switches = 10, b.voluntary_switches = 4;
  a.major_faults = 2, b.major_faults = 1;
  a.io_available = b.io_available = true;
  a.write_bytes = 1000, b.write_bytes = 400;
  a.rchar = 7, b.rchar = 7;
  a.cancelled_write_bytes = 5, b.cancelled_write_bytes = 1;
  const ProcessCounters d = a - b;
  EXPECT_DOUBLE_EQ(d.user_s, 2.25);
  EXPECT_EQ(d.voluntary_switches, 6);
  EXPECT_EQ(d.major_faults, 1);
  EXPECT_TRUE(d.io_available);
  EXPECT_EQ(d.write_bytes, 600u);
  EXPECT_EQ(d.rchar, 0u);
  EXPECT_EQ(d.cancelled_write_bytes, 4u);
  b.io_available = false;
  b.io_unavailable_reason = "no accounting";
  const ProcessCounters u = a - b;
  EXPECT_FALSE(u.io_available);
  EXPECT_EQ(u.io_unavailable_reason, "no accounting");
}

TEST(AugmentProcessCounters, PeakRssCoversTheRunAndResets) {
  PeakRssMeter meter;
  const bool reset = meter.start();
  const std::size_t n = 64u << 20;
  // mmap rather than new: the allocator could keep the pages after the free, and the second half
  // of the test needs them gone.
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 1, n);
  std::uint64_t rss_with = 0;
  ASSERT_TRUE(read_status_bytes("VmRSS", rss_with, nullptr));
  const PeakRss with = meter.peak();
  ::munmap(p, n);
  ASSERT_GT(with.bytes, 0u) << with.note;
  EXPECT_GE(with.bytes, rss_with);
  EXPECT_GE(with.bytes, n);
  if (!reset) {
    EXPECT_FALSE(with.over_run_only);
    EXPECT_NE(with.note.find("since process start"), std::string::npos) << with.note;
    GTEST_SKIP() << with.note;
  }
  EXPECT_TRUE(with.over_run_only);
  EXPECT_TRUE(with.note.empty()) << with.note;
  // After the pages are gone, a new run's peak no longer holds them.
  ASSERT_TRUE(meter.start());
  const PeakRss without = meter.peak();
  EXPECT_LE(without.bytes + n / 2, with.bytes);
}

TEST(AugmentPageCacheWarning, WarnsOnlyWhenTheOutputFitsAndNothingSyncsBeforeTheEnd) {
  const std::uint64_t gib = 1ull << 30;
  const std::string w = page_cache_warning(gib, false, false, 4 * gib);
  EXPECT_NE(w.find("the figure then measures memory, not storage"), std::string::npos) << w;
  EXPECT_NE(w.find("1024 MiB"), std::string::npos) << w;
  EXPECT_EQ(w.find('\n'), std::string::npos);
  EXPECT_EQ(page_cache_warning(gib, true, false, 4 * gib), "");   // intermediate fsyncs
  EXPECT_EQ(page_cache_warning(gib, false, true, 4 * gib), "");   // direct I/O
  EXPECT_EQ(page_cache_warning(8 * gib, false, false, 4 * gib), "");  // does not fit
  std::uint64_t available = 0;
  std::string err;
  ASSERT_TRUE(read_mem_available(available, &err)) << err;
  EXPECT_GT(available, 0u);
  EXPECT_NE(page_cache_warning(1, false), "");  // one byte always fits
  EXPECT_EQ(page_cache_warning(available * 4, false), "");
}
