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
#include <memory>
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

// An engine whose write-behind interval is `every`, a file of it under `dir`, and a descriptor
// of the test's own on that file to read the kernel's page states with (the fstream engine has
// none to show; cachestat(2) reports the file's pages whichever descriptor asks). `skip` says
// why this machine cannot tell, when it cannot.
struct Rig {
  std::unique_ptr<tai::Engine> engine;
  std::unique_ptr<tai::EngineFile> file;
  int look = -1;
  std::string skip;

  Rig(const std::string& engine_name, const tai::test::ScratchDir& dir, std::uint64_t every) {
    struct statfs fs {};
    if (::statfs(dir.path().c_str(), &fs) == 0 && fs.f_type == kTmpfsMagic) {
      skip = "the test directory is on tmpfs, whose pages are never written back (set TAI_TEST_DIR to a disk)";
      return;
    }
    tai::EngineOptions options;
    options.start_writeback_bytes = every;
    auto made = tai::make_engine(engine_name, options);
    if (!made) {
      skip = "engine " + engine_name + " not available here: " + made.error().message;
      return;
    }
    engine = std::move(made.value());
    auto f = engine->open(dir.file("behind"), {Open::write | Open::create | Open::truncate, 0644});
    if (!f) {
      skip = "open: " + f.error().message;
      return;
    }
    file = std::move(f.value());
    look = ::open(dir.file("behind").c_str(), O_RDONLY | O_CLOEXEC);
    tai::test::PageStates probe{};
    if (look < 0 || !tai::test::page_states(look, 0, 0, probe))
      skip = std::string("cachestat(2) is not available here: ") + std::strerror(errno);
  }
  ~Rig() {
    if (look >= 0) ::close(look);
    if (file) EXPECT_FALSE(engine->close(*file));
  }
  void write(const std::vector<unsigned char>& bytes, std::uint64_t off, std::size_t n) {
    EXPECT_EQ(run_request(*engine, Op::write, file.get(), bytes.data(), off, n).result, static_cast<std::int64_t>(n));
  }
};

// Writes `total` bytes in 256 KiB pieces from offset `base` through an engine whose write-behind
// interval is `every`, and returns the page states of [base, base + total - kMiB) and of the last
// MiB. With `overwrite`, once the device has written what was started, 2 MiB more go in 4 KiB
// pieces at scattered offsets below total - 2 MiB (random overwrites of data already started),
// and `overwritten` is the page states of [0, total - 2 MiB) after them.
struct Pages {
  tai::test::PageStates before_last{}, last{}, overwritten{};
  std::string skip;
};

Pages write_and_look(const std::string& engine_name, const tai::test::ScratchDir& dir, std::uint64_t every,
                     std::uint64_t total, bool overwrite = false, std::uint64_t base = 0) {
  Pages p;
  Rig rig(engine_name, dir, every);
  if (!rig.skip.empty()) {
    p.skip = rig.skip;
    return p;
  }
  std::vector<unsigned char> piece(256 * 1024, 0x5a);
  for (std::uint64_t off = 0; off < total; off += piece.size()) rig.write(piece, base + off, piece.size());
  EXPECT_TRUE(tai::test::page_states(rig.look, base, total - kMiB, p.before_last));
  EXPECT_TRUE(tai::test::page_states(rig.look, base + total - kMiB, kMiB, p.last));
  if (overwrite) {
    EXPECT_EQ(tai::test::wait_until_written(rig.look, total - kMiB, std::chrono::seconds(20)), 0)
        << "the device did not write the started pages within 20 s";
    const std::uint64_t pages = (total - 2 * kMiB) / 4096;
    for (std::uint64_t i = 0; i < 512; ++i) {
      const std::uint64_t off = (i * 7919 % pages) * 4096;  // 512 distinct pages: 7919 is prime
      rig.write(piece, off, 4096);
    }
    EXPECT_TRUE(tai::test::page_states(rig.look, 0, total - 2 * kMiB, p.overwritten));
  }
  return p;
}

// The kernel's own background write-back threshold, when it is set in bytes (0 otherwise).
std::uint64_t dirty_background_bytes() {
  std::uint64_t background = 0;
  if (FILE* in = std::fopen("/proc/sys/vm/dirty_background_bytes", "r")) {
    if (std::fscanf(in, "%lu", &background) != 1) background = 0;
    std::fclose(in);
  }
  return background;
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
  const std::uint64_t background = dirty_background_bytes();
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

TEST_P(EngineWriteBehind, WritesScatteredOverASpanFarLargerThanThemselvesAreNotStarted) {
  // 768 writes of 4 KiB at distinct pages spread over 64 MiB, the highest page first (random
  // writes reach it soon). At the first crossing the range below the highest end less one
  // interval is 63 MiB against 1 MiB written: passed over, and the later crossings find nothing
  // past it. The pages stay dirty for the kernel or the fsync, as without write-behind. Started,
  // the first 256 of them would be under write-back or written (at most about 510 left dirty),
  // while the thread that executes the writes waited for the kernel to queue them.
  const std::uint64_t background = dirty_background_bytes();
  if (background != 0 && background < 64 * kMiB)
    GTEST_SKIP() << "vm.dirty_background_bytes is " << background << ": the kernel may start the write itself";
  tai::test::ScratchDir dir;
  Rig rig(GetParam(), dir, kMiB);
  if (!rig.skip.empty()) GTEST_SKIP() << rig.skip;
  const std::uint64_t span = 64 * kMiB, pages = span / 4096;
  const std::vector<unsigned char> piece(4096, 0x5a);
  rig.write(piece, span - 4096, 4096);
  for (std::uint64_t i = 1; i < 768; ++i) rig.write(piece, (i * 7919 % pages) * 4096, 4096);  // 7919 is prime
  tai::test::PageStates below{};
  ASSERT_TRUE(tai::test::page_states(rig.look, 0, span - kMiB, below));
  EXPECT_GE(below.nr_dirty, 700u) << "the scattered pages were started (" << below.nr_writeback
                                  << " under write-back)";
}

TEST_P(EngineWriteBehind, AWriterThatBeginsFarIntoTheFileIsStartedFromThere) {
  // Sequential writes from 512 MiB: the first crossing's range, [0, 512 MiB), holds nothing
  // written and is passed over; every interval from 512 MiB on is started as from offset 0.
  tai::test::ScratchDir dir;
  const Pages p = write_and_look(GetParam(), dir, kMiB, 8 * kMiB, /*overwrite=*/false, /*base=*/512 * kMiB);
  if (!p.skip.empty()) GTEST_SKIP() << p.skip;
  EXPECT_EQ(p.before_last.nr_dirty, 0u) << "pages below the highest end less one interval left dirty ("
                                        << p.before_last.nr_writeback << " under write-back)";
  EXPECT_GT(p.last.nr_dirty, 0u) << "the last interval was sent to the device too";
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineWriteBehind, ::testing::Values("posix", "uring", "libaio", "cstdio", "fstream"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
