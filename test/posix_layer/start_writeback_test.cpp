// The drop-in layer's device write-back started every TAI_START_WRITEBACK bytes
// (Settings::start_writeback_bytes): a file written in sequence has its pages sent to the device
// before any fsync, and each range is started once, so that random overwrites of started data
// stay dirty for the fsync (as a plain program's pages wait for the kernel's timer) instead of
// going to the device after every interval; a truncation lets the rewritten file be started
// again. The page states come from the kernel (cachestat(2)); skipped where that call or a page
// cache with write-back is not there.
#include <sys/vfs.h>

#include <chrono>
#include <thread>

#include "posix_layer/support.hpp"
#include "support/page_states.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr long kTmpfsMagic = 0x01021994;

// Polls [0, len) of fd until every page of it is in the page cache (the layer hands its cache
// to the kernel on a worker) and none is dirty or under write-back, or 20 s pass.
PageStates wait_until_handed_over_and_written(int fd, std::uint64_t len) {
  PageStates st{};
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (page_states(fd, 0, len, st) && (st.nr_cache < len / 4096 || st.nr_dirty + st.nr_writeback != 0) &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return st;
}

// A layer that starts the device write every MiB, and a file opened through it for writing
// (fd_) with a plain descriptor of our own to read its page states (look_).
class StartWriteback : public LayerTest {
 protected:
  // "" or why this machine cannot tell (for GTEST_SKIP()).
  std::string open_file(const std::string& name, std::uint64_t write_behind_ms) {
    const std::string path = file(name);
    struct statfs fs {};
    if (::statfs(path.substr(0, path.rfind('/')).c_str(), &fs) == 0 && fs.f_type == kTmpfsMagic)
      return "the test directory is on tmpfs, whose pages are never written back (set TAI_TEST_DIR to a disk)";
    posix::detail::Settings s = layer_settings();
    s.start_writeback_bytes = kMiB;
    s.write_behind_ms = write_behind_ms;
    restart(s);
    fd_ = posix::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    look_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0 || look_ < 0) return std::string("open ") + path + ": " + std::strerror(errno);
    PageStates probe{};
    if (!page_states(look_, 0, 0, probe)) return std::string("cachestat(2) is not available here: ") + std::strerror(errno);
    return "";
  }
  void TearDown() override {
    if (look_ >= 0) ::close(look_);
    if (fd_ >= 0) {
      EXPECT_EQ(posix::close(fd_), 0) << std::strerror(errno);
    }
    LayerTest::TearDown();
  }
  int fd_ = -1;
  int look_ = -1;
};

TEST_F(StartWriteback, SequentialDataIsStartedOnceAndRandomOverwritesWaitForTheFsync) {
  // The write-behind deadline hands the overwrites below to the kernel (not started) in 50 ms.
  if (const std::string why = open_file("started.dat", 50); !why.empty()) GTEST_SKIP() << why;
  const int fd = fd_;
  const int look = look_;

  constexpr std::uint64_t kTotal = 8 * kMiB;
  const std::string piece(256 * 1024, 's');
  for (std::uint64_t off = 0; off < kTotal; off += piece.size())
    ASSERT_EQ(write_all(fd, piece), static_cast<ssize_t>(piece.size()));
  // Sequential: every interval was handed to the kernel and started, without an fsync.
  const PageStates first = wait_until_handed_over_and_written(look, kTotal);
  EXPECT_EQ(first.nr_cache, kTotal / 4096) << "the data did not reach the kernel within 20 s";
  EXPECT_EQ(first.nr_dirty + first.nr_writeback, 0u) << "the sequential data was not started within 20 s";

  // 2 MiB of 4 KiB overwrites at 512 scattered pages below 6 MiB: two intervals' worth, over
  // data already started.
  const std::string page(4096, 'o');
  const std::uint64_t pages = (kTotal - 2 * kMiB) / 4096;
  for (std::uint64_t i = 0; i < 512; ++i)
    ASSERT_EQ(posix::pwrite(fd, page.data(), page.size(), static_cast<off_t>((i * 7919 % pages) * 4096)),
              static_cast<ssize_t>(page.size()));
  // The write-behind deadline hands them to the kernel; nothing starts their device write.
  PageStates after{};
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (page_states(look, 0, kTotal - 2 * kMiB, after) && after.nr_dirty + after.nr_writeback < 512 &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // time for a start to follow, were there one
  ASSERT_TRUE(page_states(look, 0, kTotal - 2 * kMiB, after));
  EXPECT_GE(after.nr_dirty, 500u) << "the overwritten pages were sent to the device again (" << after.nr_writeback
                                  << " under write-back)";

  EXPECT_EQ(posix::fsync(fd), 0) << std::strerror(errno);
  ASSERT_TRUE(page_states(look, 0, kTotal, after));
  EXPECT_EQ(after.nr_dirty, 0u);  // the fsync wrote them
}

TEST_F(StartWriteback, ATruncationStartsTheRewrittenFileAgain) {
  // The started end goes back with the size: a file cut to 0 and written again in sequence has
  // its new pages started as the first time, not only those past the old end.
  // Only the interval hands the cache over and starts the device (no deadline).
  if (const std::string why = open_file("truncated.dat", 0); !why.empty()) GTEST_SKIP() << why;
  const int fd = fd_;
  const int look = look_;
  constexpr std::uint64_t kTotal = 8 * kMiB;
  const std::string piece(256 * 1024, 't');
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint64_t off = 0; off < kTotal; off += piece.size())
      ASSERT_EQ(posix::pwrite(fd, piece.data(), piece.size(), static_cast<off_t>(off)),
                static_cast<ssize_t>(piece.size()));
    const PageStates st = wait_until_handed_over_and_written(look, kTotal);
    EXPECT_EQ(st.nr_dirty + st.nr_writeback, 0u) << "pass " << pass << ": the data was not started within 20 s ("
                                                  << st.nr_cache << " pages cached, " << st.nr_dirty << " dirty)";
    if (pass == 0) {
      ASSERT_EQ(posix::ftruncate(fd, 0), 0) << std::strerror(errno);
    }
  }
}

}  // namespace
}  // namespace tai::test
