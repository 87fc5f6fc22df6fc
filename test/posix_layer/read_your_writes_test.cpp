// read/pread see every earlier write of the process: of the same thread, of another thread that
// handed over after writing, and through another routed descriptor of the same file (which
// shares the cache). A read-only open of a file the layer routes joins its cache.
#include <atomic>
#include <thread>

#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

using ReadYourWrites = LayerTest;

TEST_F(ReadYourWrites, EveryWriteIsSeenByTheNextReadOfTheSameThread) {
  const int fd = posix::open(file("ryw.dat").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  std::string model(200000, '\0');
  std::uint64_t size = 0;
  for (unsigned i = 0; i < 400; ++i) {
    const std::size_t off = (i * 7919) % 190000;
    const std::string p = pattern(1 + (i * 131) % 9000, i);
    const std::size_t n = std::min(p.size(), model.size() - off);
    ASSERT_EQ(posix::pwrite(fd, p.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
    model.replace(off, n, p.substr(0, n));
    size = std::max<std::uint64_t>(size, off + n);
    std::string got(n, '\0');
    ASSERT_EQ(posix::pread(fd, got.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
    ASSERT_TRUE(got == p.substr(0, n)) << "write " << i;
  }
  std::string all(size, '\0');
  ASSERT_EQ(posix::pread(fd, all.data(), size, 0), static_cast<ssize_t>(size));
  EXPECT_TRUE(all == model.substr(0, size));
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_F(ReadYourWrites, AReadAfterAnotherThreadsWriteSeesIt) {
  const int fd = posix::open(file("handover.dat").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  // Ping-pong: the writer writes record i and publishes i; the reader reads record i at once
  // (it must be there: the write happened before the read) and publishes it back.
  constexpr int kRecords = 300;
  std::atomic<int> written{-1}, checked{-1};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    for (int i = 0; i < kRecords; ++i) {
      while (written.load(std::memory_order_acquire) < i) std::this_thread::yield();
      char buf[64] = {};
      const std::string want = "record " + std::to_string(i) + " ";
      if (posix::pread(fd, buf, want.size(), 0) != static_cast<ssize_t>(want.size()) || want != buf) bad++;
      checked.store(i, std::memory_order_release);
    }
  });
  for (int i = 0; i < kRecords; ++i) {
    const std::string rec = "record " + std::to_string(i) + " ";
    ASSERT_EQ(posix::pwrite(fd, rec.data(), rec.size(), 0), static_cast<ssize_t>(rec.size()));
    written.store(i, std::memory_order_release);
    while (checked.load(std::memory_order_acquire) < i) std::this_thread::yield();
  }
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_F(ReadYourWrites, TwoDescriptorsOfOneFileShareTheCache) {
  const std::string path = file("two.dat");
  const int a = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  const int b = posix::open(path.c_str(), O_RDWR);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_EQ(posix::pwrite(a, "through a", 9, 0), 9);
  char buf[16] = {};
  ASSERT_EQ(posix::pread(b, buf, 9, 0), 9);
  EXPECT_EQ(std::string(buf, 9), "through a");
  // A read-only open of a routed file joins it, so it sees the cache too.
  const int r = posix::open(path.c_str(), O_RDONLY);
  ASSERT_GE(r, 0);
  EXPECT_TRUE(posix::routed(r));
  ASSERT_EQ(posix::pwrite(b, "B", 1, 8), 1);
  ASSERT_EQ(posix::read(r, buf, 16), 9);
  EXPECT_EQ(std::string(buf, 9), "through B");
  EXPECT_EQ(posix::write(r, "x", 1), -1);  // opened read-only
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(posix::close(r), 0);
  EXPECT_EQ(posix::close(a), 0);
  // b still open: the file is still routed and b's writes still land.
  ASSERT_EQ(posix::pwrite(b, "!", 1, 9), 1);
  EXPECT_EQ(posix::close(b), 0);
  EXPECT_EQ(kernel_contents(path), "through B!");
}

}  // namespace
}  // namespace tai::test
