// The descriptor table under concurrent use: a descriptor closed (and its number reused by a new
// open) while other threads read and write through it is never a crash or a hang; each call
// either works on whichever file holds the number or fails with EBADF, as with the kernel.
// Runs under ASan and TSan like everything else (they catch a use after free or a race).
#include <atomic>
#include <thread>
#include <vector>

#include "posix_layer/support.hpp"

// TSan checks descriptors too: a close racing with a read or write of the same number is
// reported as a race on the descriptor. That race is the test's point (the program's race,
// which the kernel resolves either way), so it is suppressed for this binary: races whose top
// frame is close (the interceptor; the template matches names containing "close", anchors are not
// honoured here). Races on memory (the table, the descriptions) are still
// reported.
extern "C" const char* __tsan_default_suppressions() { return "race_top:close\n"; }

namespace tai::test {
namespace {

using FdTable = LayerTest;

TEST_F(FdTable, CloseAndReopenWhileOtherThreadsUseTheNumber) {
  const std::string path = file("churn.dat");
  std::atomic<int> fd{posix::open(path.c_str(), O_RDWR | O_CREAT, 0644)};
  ASSERT_GE(fd.load(), 0);
  std::atomic<bool> stop{false};
  std::atomic<long> ok{0}, ebadf{0}, other{0}, wrote{0};
  std::atomic<int> other_errno{0}, other_op{-1};  // the first unexpected failure, for the message
  std::vector<std::thread> users;
  for (int t = 0; t < 3; ++t) {
    users.emplace_back([&, t] {
      char buf[64];
      while (!stop.load(std::memory_order_relaxed)) {
        const int f = fd.load(std::memory_order_relaxed);
        const ssize_t r = t == 0   ? posix::pwrite(f, "0123456789", 10, 0)
                          : t == 1 ? posix::pread(f, buf, sizeof buf, 0)
                                   : posix::lseek(f, 0, SEEK_END);
        if (r >= 0) {
          ok++;
          if (t == 0) wrote++;
        }
        // EBADF: the number was closed. ESPIPE: between the close and the open another part of
        // the process took the number for a pipe (AddressSanitizer's runtime makes and closes
        // pipes to probe memory): the kernel's answer for that object, never the layer's.
        else if (errno == EBADF || errno == ESPIPE)
          ebadf++;
        else {
          int none = 0;
          if (other_errno.compare_exchange_strong(none, errno)) other_op.store(t);
          other++;
        }
      }
    });
  }
  // The churn starts once the writer has written (under a sanitizer the 200 rounds below can be
  // over before a thread ran at all, and then nothing was ever written to check).
  while (wrote.load() == 0 || ok.load() < 3) std::this_thread::yield();
  for (int i = 0; i < 200; ++i) {
    const int f = fd.load();
    EXPECT_EQ(posix::close(f), 0) << std::strerror(errno);
    const int g = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(g, 0);
    fd.store(g);
  }
  stop = true;
  for (auto& u : users) u.join();
  EXPECT_EQ(other.load(), 0) << "the first: " << (other_op.load() == 0 ? "pwrite" : other_op.load() == 1 ? "pread" : "lseek")
                             << " failed with " << std::strerror(other_errno.load());
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(posix::close(fd.load()), 0);
  EXPECT_EQ(kernel_contents(path), "0123456789");
}

TEST_F(FdTable, ManyFilesAtOnce) {
  std::vector<int> fds;
  for (int i = 0; i < 300; ++i) {
    const int f = posix::open(file("many" + std::to_string(i)).c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(f, 0);
    ASSERT_TRUE(posix::routed(f));
    ASSERT_EQ(write_all(f, std::to_string(i)), static_cast<ssize_t>(std::to_string(i).size()));
    fds.push_back(f);
  }
  for (int f : fds) ASSERT_EQ(posix::close(f), 0);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(kernel_contents(file("many" + std::to_string(i))), std::to_string(i));
}

}  // namespace
}  // namespace tai::test
