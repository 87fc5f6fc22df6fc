// TAI_FSYNC=order while the device does not answer (the order thread held): a read of a file with
// writes held back behind the epochs in flight gets them laid over what the cache has, oldest
// first, without waiting for those epochs; a truncation to the file's own size changes nothing
// and returns at once, while a real one still waits for the epochs before it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

using namespace std::chrono_literals;

class OrderHeld : public LayerTest {
 protected:
  void SetUp() override {
    posix::detail::Settings s = layer_settings();
    s.fsync_mode = posix::FsyncMode::order;
    s.fsync_max_delay_ms = 600'000;  // no back-pressure toward the held thread
    s.start_writeback_bytes = 0;
    restart(s);
  }
  void TearDown() override {
    posix::detail::hold_order_thread_for_testing(false);
    LayerTest::TearDown();
  }
  static std::string fill(std::size_t n, char c) { return std::string(n, c); }
  // Runs f on another thread; its result if it finishes within `limit`, else the device is
  // released (so the call can end) and the test fails.
  template <class F>
  auto within(std::chrono::milliseconds limit, F f) {
    auto done = std::async(std::launch::async, f);
    if (done.wait_for(limit) != std::future_status::ready) {
      posix::detail::hold_order_thread_for_testing(false);
      ADD_FAILURE() << "the call waited for the held device";
    }
    return done.get();
  }
};

TEST_F(OrderHeld, AReadLaysTheHeldWritesOverTheCacheWithoutWaiting) {
  const std::string path = file("r.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, fill(8192, '1')), 8192);
  posix::detail::hold_order_thread_for_testing(true);
  const auto before = posix::fsync_order_stats();
  ASSERT_EQ(posix::fsync(fd), 0);  // in flight, and the device does not answer: what follows is held
  ASSERT_EQ(posix::pwrite(fd, fill(500, '2').data(), 500, 100), 500);
  ASSERT_EQ(posix::pwrite(fd, fill(300, '3').data(), 300, 12000), 300);  // past the end: a hole before it
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(posix::pwrite(fd, fill(100, '4').data(), 100, 150), 100);  // a later epoch, over the first
  ASSERT_EQ(posix::fsync_order_stats().deferred_writes, before.deferred_writes + 3) << "every write was held back";
  std::string want = fill(8192, '1');
  want.replace(100, 500, fill(500, '2'));
  want.replace(150, 100, fill(100, '4'));
  want += fill(12000 - 8192, '\0') + fill(300, '3');
  std::string got(16384, 'x');
  const ssize_t n = within(10s, [&] { return posix::pread(fd, got.data(), got.size(), 0); });
  ASSERT_EQ(n, 12300);
  got.resize(12300);
  EXPECT_TRUE(got == want) << "the held writes over the cache's bytes, the later one last, zeros in the hole";
  std::string part(50, 'x');
  EXPECT_EQ(within(10s, [&] { return posix::pread(fd, part.data(), part.size(), 12010); }), 50);
  EXPECT_EQ(part, fill(50, '3')) << "a read of held bytes alone";
  EXPECT_EQ(within(10s, [&] { return posix::pread(fd, part.data(), part.size(), 12300); }), 0) << "end of file";
  posix::detail::hold_order_thread_for_testing(false);
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == want);
}

TEST_F(OrderHeld, ATruncationToTheOwnSizeReturnsAtOnceAndARealOneWaits) {
  const std::string path = file("t.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, fill(4096, '1')), 4096);
  posix::detail::hold_order_thread_for_testing(true);
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(posix::pwrite(fd, fill(4096, '2').data(), 4096, 4096), 4096);  // held: the file is 8192 long
  EXPECT_EQ(within(10s, [&] { return posix::ftruncate(fd, 8192); }), 0) << "changes nothing: no wait";
  auto cut = std::async(std::launch::async, [&] { return posix::ftruncate(fd, 100); });
  EXPECT_EQ(cut.wait_for(200ms), std::future_status::timeout) << "a real truncation waits for the epochs before it";
  posix::detail::hold_order_thread_for_testing(false);
  EXPECT_EQ(cut.get(), 0);
  struct stat st {};
  ASSERT_EQ(posix::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 100);
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == fill(100, '1'));
}

// A failed epoch stops the order thread until the program hears of it. A read of the writes held
// behind it meanwhile gets them (they are still in the layer), and leaves the error to the
// program's next fsync, close or sync_now (DESIGN section 3), which a read used to take.
TEST_F(OrderHeld, AReadAfterAFailedEpochGetsTheHeldWritesAndLeavesTheErrorToTheSync) {
  posix::detail::Settings s = fault_settings("fsync:nth=1:errno=EIO:once");
  s.fsync_mode = posix::FsyncMode::order;
  s.fsync_max_delay_ms = 600'000;
  s.start_writeback_bytes = 0;
  restart(s);
  const std::string path = file("f.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, fill(1000, 'a')), 1000);
  ASSERT_EQ(posix::fsync(fd), 0) << "order: the epoch's sync has not run yet";
  ASSERT_EQ(posix::pwrite(fd, fill(500, 'b').data(), 500, 800), 500);  // held behind it
  // Time for the order thread to run the epoch's sync (which fails) and stop.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::string got(2000, 'x');
  ASSERT_EQ(within(10s, [&] { return posix::pread(fd, got.data(), got.size(), 0); }), 1300) << std::strerror(errno);
  got.resize(1300);
  EXPECT_TRUE(got == fill(800, 'a') + fill(500, 'b'));
  errno = 0;
  EXPECT_EQ(posix::sync_now(), -1) << "the failed epoch's error is still there to return";
  EXPECT_EQ(errno, EIO);
  EXPECT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == fill(800, 'a') + fill(500, 'b'));
}

}  // namespace
}  // namespace tai::test
