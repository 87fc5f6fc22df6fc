// TAI_FSYNC=order when memory runs out while the order thread hands the held writes of an epoch
// to the cache: the epoch fails with ENOMEM (returned once, by the next sync_now, fsync or
// close), every held write still reaches the cache, none is left counted as held, and the
// program goes on. Memory is made to run out with fail_order_bookkeeping_for_testing: the
// thread's note of a file it wrote into (the list of files the epoch must sync) fails.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "posix_layer/support.hpp"
#include "src/posix/order_log.hpp"

namespace tai::test {
namespace {

using posix::FsyncMode;

class OrderOutOfMemory : public LayerTest {
 protected:
  void TearDown() override {
    posix::detail::fail_order_bookkeeping_for_testing(0);
    posix::detail::hold_order_thread_for_testing(false);
    LayerTest::TearDown();
  }
};

posix::detail::Settings order_settings() {
  posix::detail::Settings s = layer_settings();
  s.fsync_mode = FsyncMode::order;
  s.start_writeback_bytes = 0;
  s.fsync_max_delay_ms = 600'000;  // the thread is held on purpose: no back-pressure meanwhile
  return s;
}

// Two files written in one epoch held behind another; the note of the first file they wrote
// fails. The second file's writes, which come after it in the epoch, must reach the cache too.
void two_files_in_a_held_epoch(const std::string& pa, const std::string& pb, std::string& ea, std::string& eb) {
  const int a = posix::open(pa.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int b = posix::open(pb.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_TRUE(posix::routed(a));
  posix::detail::hold_order_thread_for_testing(true);
  ea = "epoch one\n";
  ASSERT_EQ(write_all(a, ea), static_cast<ssize_t>(ea.size()));
  ASSERT_EQ(posix::fsync(a), 0);  // epoch 1, held: what follows is held back behind it
  const std::uint64_t held_before = posix::fsync_order_stats().deferred_writes;
  for (int i = 0; i < 8; ++i) {
    const std::string ra = pattern(700, static_cast<unsigned>(i)), rb = pattern(900, static_cast<unsigned>(i) + 50);
    ASSERT_EQ(write_all(a, ra), static_cast<ssize_t>(ra.size()));
    ASSERT_EQ(write_all(b, rb), static_cast<ssize_t>(rb.size()));
    ea += ra;
    eb += rb;
  }
  ASSERT_GT(posix::fsync_order_stats().deferred_writes, held_before) << "the writes were not held back: nothing to test";
  ASSERT_EQ(posix::fsync(b), 0);  // epoch 2
  posix::detail::fail_order_bookkeeping_for_testing(1);
  posix::detail::hold_order_thread_for_testing(false);

  errno = 0;
  EXPECT_EQ(posix::sync_now(), -1) << "an epoch whose file list could not be made was reported durable";
  EXPECT_EQ(errno, ENOMEM);
  // Every held write reached the cache (the program reads them), and the layer goes on: the
  // error was returned once, the next writes and syncs succeed.
  std::string got(ea.size(), '\0');
  EXPECT_EQ(posix::pread(a, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  EXPECT_TRUE(got == ea) << "a held write of the first file did not reach the cache";
  got.assign(eb.size(), '\0');
  EXPECT_EQ(posix::pread(b, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  EXPECT_TRUE(got == eb) << "a held write of the second file did not reach the cache";
  const std::string tail = "after the failure\n";
  ASSERT_EQ(write_all(b, tail), static_cast<ssize_t>(tail.size()));
  eb += tail;
  EXPECT_EQ(posix::fsync(b), 0) << std::strerror(errno);
  EXPECT_EQ(posix::sync_now(), 0) << std::strerror(errno);
  EXPECT_EQ(posix::close(a), 0) << std::strerror(errno);
  EXPECT_EQ(posix::close(b), 0) << std::strerror(errno);
}

TEST_F(OrderOutOfMemory, AnEpochThatCannotListItsFilesFailsAndNoHeldWriteIsLost) {
  restart(order_settings());
  const std::string pa = file("a"), pb = file("b");
  std::string ea, eb;
  two_files_in_a_held_epoch(pa, pb, ea, eb);
  EXPECT_TRUE(kernel_contents(pa) == ea) << "the first file after close";
  EXPECT_TRUE(kernel_contents(pb) == eb) << "the second file after close";
}

TEST_F(OrderOutOfMemory, ALoggedBatchThatCannotListItsFilesFailsAndNoHeldWriteIsLost) {
  posix::detail::Settings s = order_settings();
  s.fsync_log_dir = file("");
  restart(s);
  const std::string pa = file("a"), pb = file("b");
  std::string ea, eb;
  two_files_in_a_held_epoch(pa, pb, ea, eb);
  EXPECT_TRUE(kernel_contents(pa) == ea) << "the first file after close";
  EXPECT_TRUE(kernel_contents(pb) == eb) << "the second file after close";
  restart(layer_settings());
  EXPECT_EQ(posix::detail::recover_order_logs(file("")).logs, 0u) << "the log was removed at shutdown";
}

}  // namespace
}  // namespace tai::test
