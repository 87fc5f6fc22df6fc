// Write-behind of the engines whose files have a kernel descriptor (posix, uring, libaio, cstdio,
// fstream; EngineOptions::start_writeback_bytes): after every interval of bytes written to a
// file, the kernel is asked to start writing the file's dirty pages below the highest written end
// less one interval; the last interval stays dirty in memory. One body over the five engines. The
// page states come from the kernel itself (cachestat(2): dirty and under-write-back pages of a
// range of one file), so the test skips where that call, a page cache with write-back, or the
// engine is not there.

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/engine_test_support.hpp"
#include "support/page_states.hpp"
#include "support/test_env.hpp"
#include "tai/engine_selector.hpp"

namespace {

using tai::Open;
using tai::Op;
using tai::test::run_request;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr long kTmpfsMagic = 0x01021994;

// Writes `total` bytes in 256 KiB pieces from offset 0 through an engine whose write-behind
// interval is `every`, and returns the page states of [0, total - kMiB) and of the last MiB.
// With `overwrite`, once the device has written what was started, 2 MiB more go in 4 KiB pieces
// at scattered offsets below total - 2 MiB (random overwrites of data already started), and
// `overwritten` is the page states of [0, total - 2 MiB) after them. `skip` is set when this
// machine cannot tell (and says why).
struct Pages {
  tai::test::PageStates before_last{}, last{}, overwritten{};
  std::string skip;
};

Pages write_and_look(const std::string& engine_name, const tai::test::ScratchDir& dir, std::uint64_t every,
                     std::uint64_t total, bool overwrite = false) {
  Pages p;
  struct statfs fs {};
  if (::statfs(dir.path().c_str(), &fs) == 0 && fs.f_type == kTmpfsMagic) {
    p.skip = "the test directory is on tmpfs, whose pages are never written back (set TAI_TEST_DIR to a disk)";
    return p;
  }
  tai::EngineOptions options;
  options.start_writeback_bytes = every;
  auto made = tai::make_engine(engine_name, options);
  if (!made) {
    p.skip = "engine " + engine_name + " not available here: " + made.error().message;
    return p;
  }
  std::unique_ptr<tai::Engine> engine = std::move(made.value());
  auto f = engine->open(dir.file("behind"), {Open::write | Open::create | Open::truncate, 0644});
  if (!f) {
    p.skip = "open: " + f.error().message;
    return p;
  }
  // The kernel's page states through a descriptor of our own (the fstream engine has none to
  // show; cachestat(2) reports the file's pages whichever descriptor asks).
  const int look = ::open(dir.file("behind").c_str(), O_RDONLY | O_CLOEXEC);
  tai::test::PageStates probe{};
  if (look < 0 || !tai::test::page_states(look, 0, 0, probe)) {
    p.skip = std::string("cachestat(2) is not available here: ") + std::strerror(errno);
    if (look >= 0) ::close(look);
    return p;
  }
  std::vector<unsigned char> piece(256 * 1024, 0x5a);
  for (std::uint64_t off = 0; off < total; off += piece.size())
    EXPECT_EQ(run_request(*engine, Op::write, f->get(), piece.data(), off, piece.size()).result,
              static_cast<std::int64_t>(piece.size()));
  EXPECT_TRUE(tai::test::page_states(look, 0, total - kMiB, p.before_last));
  EXPECT_TRUE(tai::test::page_states(look, total - kMiB, kMiB, p.last));
  if (overwrite) {
    EXPECT_EQ(tai::test::wait_until_written(look, total - kMiB, std::chrono::seconds(20)), 0)
        << "the device did not write the started pages within 20 s";
    const std::uint64_t pages = (total - 2 * kMiB) / 4096;
    for (std::uint64_t i = 0; i < 512; ++i) {
      const std::uint64_t off = (i * 7919 % pages) * 4096;  // 512 distinct pages: 7919 is prime
      EXPECT_EQ(run_request(*engine, Op::write, f->get(), piece.data(), off, 4096).result, 4096);
    }
    EXPECT_TRUE(tai::test::page_states(look, 0, total - 2 * kMiB, p.overwritten));
  }
  ::close(look);
  EXPECT_FALSE(engine->close(**f));
  return p;
}

class EngineWriteBehind : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineWriteBehind, StartsTheDeviceWriteOfAllButTheLastInterval) {
  tai::test::ScratchDir dir;
  const Pages p = write_and_look(GetParam(), dir, kMiB, 8 * kMiB);
  if (!p.skip.empty()) GTEST_SKIP() << p.skip;
  // Started: each page is either under write-back or already written (clean), none still dirty.
  EXPECT_EQ(p.before_last.nr_dirty, 0u) << "pages below the highest end less one interval left dirty ("
                                        << p.before_last.nr_writeback << " under write-back, "
                                        << p.before_last.nr_cache << " cached)";
  // The last interval is kept for a prompt overwrite to meet in memory.
  EXPECT_GT(p.last.nr_dirty, 0u) << "the last interval was sent to the device too";
}

TEST_P(EngineWriteBehind, OffLeavesTheDirtyPagesToTheKernel) {
  // What the test above tells apart: without write-behind the kernel starts nothing of a few
  // MiB on its own within milliseconds (its dirty timeout is 30 s by default), so the pages are
  // still dirty. Skipped where the kernel is told to write back after less than this file.
  std::uint64_t background = 0;
  if (FILE* in = std::fopen("/proc/sys/vm/dirty_background_bytes", "r")) {
    if (std::fscanf(in, "%lu", &background) != 1) background = 0;
    std::fclose(in);
  }
  if (background != 0 && background < 64 * kMiB)
    GTEST_SKIP() << "vm.dirty_background_bytes is " << background << ": the kernel may start the write itself";
  tai::test::ScratchDir dir;
  const Pages p = write_and_look(GetParam(), dir, 0, 8 * kMiB);
  if (!p.skip.empty()) GTEST_SKIP() << p.skip;
  EXPECT_GT(p.before_last.nr_dirty, 0u);
}

TEST_P(EngineWriteBehind, RandomOverwritesOfStartedDataAreNotStartedAgain) {
  // Each range is started once. A page overwritten below it waits for the kernel's own timer or
  // the fsync, as without write-behind: starting from 0 at every interval would send the pages
  // that random overwrites keep dirtying to the device again and again (a plain pwrite loop
  // writes each of them once per dirty timeout).
  tai::test::ScratchDir dir;
  const Pages p = write_and_look(GetParam(), dir, kMiB, 8 * kMiB, /*overwrite=*/true);
  if (!p.skip.empty()) GTEST_SKIP() << p.skip;
  EXPECT_EQ(p.before_last.nr_dirty, 0u);  // the sequential part was started, as above
  EXPECT_GE(p.overwritten.nr_dirty, 500u) << "the overwritten pages were sent to the device again ("
                                          << p.overwritten.nr_writeback << " under write-back)";
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineWriteBehind, ::testing::Values("posix", "uring", "libaio", "cstdio", "fstream"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
