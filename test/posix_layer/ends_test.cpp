// What keeps a write when the program ends without the exit handler: the write-behind deadline
// (TAI_WRITE_BEHIND_MS: a write reaches the kernel within it even while the program keeps
// going, which bounds what SIGKILL can take) and write_back_for_end (the preload library's
// _exit, abort and fatal-signal paths). And O_APPEND, which goes through to the kernel so that
// another process appending meanwhile is never written over.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

using Clock = std::chrono::steady_clock;

// No idle flush and no early write-back: only what the test is about hands data to the kernel.
posix::detail::Settings quiet_settings(std::uint64_t write_behind_ms) {
  posix::detail::Settings s = layer_settings();
  s.options.flush_idle_ns = -1;
  s.start_writeback_bytes = 0;
  s.write_behind_ms = write_behind_ms;
  return s;
}

// Polls what the kernel has until it equals `want` or `limit` passes; returns how long it took
// (or limit when it never did).
Clock::duration wait_for_kernel(const std::string& path, const std::string& want, Clock::duration limit) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < limit) {
    if (kernel_contents(path) == want) return Clock::now() - t0;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return limit;
}

class Ends : public LayerTest {};

TEST_F(Ends, WriteBehindHandsWritesToTheKernelWithinTheDeadline) {
  restart(quiet_settings(100));
  const std::string path = file("wb.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const std::string data = pattern(300000, 1);
  ASSERT_EQ(write_all(fd, data), static_cast<ssize_t>(data.size()));
  const auto took = wait_for_kernel(path, data, std::chrono::seconds(5));
  EXPECT_LT(took, std::chrono::seconds(2)) << "the write did not reach the kernel near its 100 ms deadline";
  // A second burst, after the keeper went back to sleep, is handed over again.
  const std::string more = pattern(50000, 2);
  ASSERT_EQ(write_all(fd, more), static_cast<ssize_t>(more.size()));
  EXPECT_LT(wait_for_kernel(path, data + more, std::chrono::seconds(5)), std::chrono::seconds(2));
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_F(Ends, WithoutWriteBehindTheCacheKeepsTheWrites) {
  // The control for the test above: with the deadline off (and no idle flush), the data stays
  // in the cache, so it was the keeper that handed it over there.
  restart(quiet_settings(0));
  const std::string path = file("nowb.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const std::string data = pattern(300000, 3);
  ASSERT_EQ(write_all(fd, data), static_cast<ssize_t>(data.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(kernel_contents(path).size(), 0u);
  // write_back_for_end: what the preload library's _exit and signal handler call.
  EXPECT_EQ(posix::detail::write_back_for_end(5000), 0);
  EXPECT_EQ(kernel_contents(path), data);
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_F(Ends, WriteBackInodeBeforeMetadata) {
  restart(quiet_settings(0));
  const std::string path = file("meta.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const std::string data = pattern(70000, 4);
  ASSERT_EQ(write_all(fd, data), static_cast<ssize_t>(data.size()));
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(posix::detail::write_back_inode(st.st_dev, st.st_ino), 0);
  EXPECT_EQ(kernel_contents(path), data);
  const std::string more = pattern(1000, 5);
  ASSERT_EQ(write_all(fd, more), static_cast<ssize_t>(more.size()));
  EXPECT_EQ(posix::detail::write_back_fd(fd), 0);
  EXPECT_EQ(kernel_contents(path), data + more);
  ASSERT_EQ(posix::close(fd), 0);
}

// A write too small to be worth caching goes to the engine as a request of its own, which the
// controller's flush() does not wait for: the write-back before a metadata call must (cpio -m
// writes a 6-byte file and sets its time at once; a later write of those bytes undid the time).
TEST_F(Ends, WriteBackBeforeMetadataCoversATinyWrite) {
  restart(quiet_settings(0));
  for (int round = 0; round < 20; ++round) {
    const std::string path = file("tiny-" + std::to_string(round));
    const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    const std::string data = "hello\n";
    ASSERT_EQ(write_all(fd, data), static_cast<ssize_t>(data.size()));
    if (round % 2 == 0) {
      EXPECT_EQ(posix::detail::write_back_fd(fd), 0);
    } else {
      struct stat st {};
      ASSERT_EQ(::fstat(fd, &st), 0);
      EXPECT_EQ(posix::detail::write_back_inode(st.st_dev, st.st_ino), 0);
    }
    EXPECT_EQ(kernel_contents(path), data) << "round " << round;
    ASSERT_EQ(posix::close(fd), 0);
  }
}

TEST_F(Ends, AppendIsAtomicAgainstAnotherProcessDescriptor) {
  // A plain kernel descriptor with O_APPEND stands for another process appending to the file.
  restart(quiet_settings(0));
  const std::string path = file("app.log");
  const int routed = posix::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(routed, 0);
  const int other = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ASSERT_GE(other, 0);
  std::string want;
  for (int i = 0; i < 200; ++i) {
    const std::string a = "routed " + std::to_string(i) + "\n";
    const std::string b = "other " + std::to_string(i) + "\n";
    ASSERT_EQ(write_all(routed, a), static_cast<ssize_t>(a.size()));
    ASSERT_EQ(::write(other, b.data(), b.size()), static_cast<ssize_t>(b.size()));
    want += a + b;
  }
  EXPECT_EQ(kernel_contents(path), want);
  // The routed descriptor's offset is the end of its last write, as the kernel's would be.
  EXPECT_EQ(posix::lseek(routed, 0, SEEK_CUR), static_cast<off_t>(want.size() - std::string("other 199\n").size()));
  ASSERT_EQ(::close(other), 0);
  ASSERT_EQ(posix::close(routed), 0);
}

TEST_F(Ends, AppendAfterCachedWritesKeepsTheOrderAndReadsSeeIt) {
  restart(quiet_settings(0));
  const std::string path = file("mixed.dat");
  const int w = posix::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(w, 0);
  const int a = posix::open(path.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(a, 0);
  const std::string first = pattern(10000, 6);
  ASSERT_EQ(write_all(w, first), static_cast<ssize_t>(first.size()));  // cached
  std::string buf(100, '\0');
  ASSERT_EQ(posix::pread(w, buf.data(), buf.size(), 0), 100);         // the cache holds a read too
  const std::string appended = "appended\n";
  ASSERT_EQ(write_all(a, appended), static_cast<ssize_t>(appended.size()));  // after `first`
  const std::string over = "OVER";
  ASSERT_EQ(posix::pwrite(w, over.data(), over.size(), 5), 4);  // cached again, inside `first`
  std::string want = first + appended;
  want.replace(5, 4, over);
  std::string got(want.size() + 10, '\0');
  ASSERT_EQ(posix::pread(w, got.data(), got.size(), 0), static_cast<ssize_t>(want.size()));
  got.resize(want.size());
  EXPECT_EQ(got, want);
  ASSERT_EQ(posix::close(a), 0);
  ASSERT_EQ(posix::close(w), 0);
  EXPECT_EQ(kernel_contents(path), want);
}

TEST_F(Ends, AppendOnlyDescriptorReadsBackWhatItAppended) {
  // The appends never touch the cache; reads through the layer (which go through the cache)
  // must still see them, past the size the file had when it was routed.
  restart(quiet_settings(0));
  const std::string path = file("appread.dat");
  ASSERT_EQ(::close(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)), 0);
  const int fd = posix::open(path.c_str(), O_RDWR | O_APPEND);
  ASSERT_GE(fd, 0);
  std::string want;
  for (int i = 0; i < 50; ++i) {
    const std::string r = pattern(777, static_cast<unsigned>(i));
    ASSERT_EQ(write_all(fd, r), static_cast<ssize_t>(r.size()));
    want += r;
    std::string got(want.size() + 1, '\0');
    ASSERT_EQ(posix::pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(want.size())) << "after append " << i;
    got.resize(want.size());
    ASSERT_EQ(got, want) << "after append " << i;
  }
  struct stat st {};
  ASSERT_EQ(posix::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(want.size()));
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_F(Ends, WritesOfAnotherThreadDuringTheExitHandlerAllLand) {
  // exit() in one thread runs the exit handler (here: shutdown_for_testing, the same work)
  // while another thread keeps writing: every write succeeds, and every byte is in the kernel
  // at its place, the ones after the shutdown going to the kernel directly.
  restart(quiet_settings(0));
  const std::string path = file("exiting.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  constexpr int kRecords = 4000;
  std::string want;
  for (int i = 0; i < kRecords; ++i) want += pattern(1000, static_cast<unsigned>(i));
  std::atomic<int> failed{0};
  std::atomic<bool> started{false};
  std::thread writer([&] {
    for (int i = 0; i < kRecords; ++i) {
      if (posix::write(fd, want.data() + static_cast<std::size_t>(i) * 1000, 1000) != 1000) failed.fetch_add(1, std::memory_order_relaxed);
      started.store(true, std::memory_order_release);
    }
  });
  while (!started.load(std::memory_order_acquire)) std::this_thread::yield();
  const std::vector<std::string> failures = posix::detail::shutdown_for_testing();
  writer.join();
  EXPECT_TRUE(failures.empty());
  EXPECT_EQ(failed.load(std::memory_order_relaxed), 0);  // after join
  EXPECT_EQ(posix::close(fd), 0);
  const std::string got = kernel_contents(path);
  ASSERT_EQ(got.size(), want.size());
  const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
  EXPECT_TRUE(diff.first == got.end()) << "first wrong byte at " << (diff.first - got.begin());
}

}  // namespace
}  // namespace tai::test
