// A device that fails under write-behind (EngineOptions::start_writeback_bytes): the engines
// that start the kernel's write-back before the program's fsync (posix, uring, libaio, cstdio,
// fstream) must not swallow the device's error on the way. The start is
// sync_file_range(SYNC_FILE_RANGE_WRITE), which leaves a write-back error for the next fsync of
// the file; with a WAIT flag it would
// report the error to its own caller (the engine, which drops it) and the fsync after it would
// say the data is durable. What is checked, one body per engine:
//  * 16 MiB are written through the engine while the device fails every new block
//    (test/support/small_loop_fs.hpp, Backing::capped_memory: an ext4 whose device is memory
//    that has run out; the file system accepts the writes, the device's write-back fails);
//  * once the write-back the engine started has ended (the kernel's page states, cachestat(2))
//    the device heals, and the engine's fsync returns the error (ENOSPC or EIO, as the block
//    layer passes it), never 0;
//  * a descriptor opened before the writes sees the error too: the device did fail, so a
//    successful fsync through the engine would be the engine's loss, not the setup's.
// Skipped with the reason without root, tmpfs or loop mounts, mkfs.ext4 or the engine.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/engine_test_support.hpp"
#include "support/page_states.hpp"
#include "support/small_loop_fs.hpp"
#include "tai/engine_selector.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
class WriteBehindDeviceError : public testing::TestWithParam<std::string> {};

TEST_P(WriteBehindDeviceError, TheNextFsyncReportsTheFailedWriteBack) {
  SmallLoopFs fs(FsType::ext4, 96, Backing::capped_memory);
  if (!fs.mounted()) GTEST_SKIP() << fs.skip_reason();
  EngineOptions options;
  options.start_writeback_bytes = kMiB;
  auto made = make_engine(GetParam(), options);
  if (!made) GTEST_SKIP() << "engine " << GetParam() << " not available here: " << made.error().message;
  std::unique_ptr<Engine> engine = std::move(made.value());

  const std::string path = fs.file("behind");
  auto f = engine->open(path, {Open::write | Open::create | Open::truncate, 0644});
  ASSERT_TRUE(f) << f.error().message;
  const int witness = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(witness, 0) << std::strerror(errno);

  ASSERT_EQ(fs.fail_device_writes(), "");
  constexpr std::uint64_t kTotal = 16 * kMiB;
  std::vector<unsigned char> piece(256 * 1024, 0xa5);
  for (std::uint64_t off = 0; off < kTotal; off += piece.size())
    ASSERT_EQ(run_request(*engine, Op::write, f->get(), piece.data(), off, piece.size()).result,
              static_cast<std::int64_t>(piece.size()))
        << "the file system refused a write at " << off << ": the device's failure should come later, at write-back";

  // The write-back the engine started below the last interval: wait until the device has
  // answered for all of it (failed pages end their write-back too).
  const long left = wait_until_written(witness, kTotal - kMiB, std::chrono::seconds(20));
  if (left < 0) std::this_thread::sleep_for(std::chrono::seconds(2));  // no cachestat(2): give the device time
  ASSERT_LE(left, 0) << left << " pages below the last interval were neither written nor failed after 20 s";

  fs.heal_device();
  const Completion synced = run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0);
  const int witness_rc = ::fsync(witness) == 0 ? 0 : errno;
  ::close(witness);
  EXPECT_FALSE(engine->close(**f));

  if (synced.result == 0 && witness_rc == 0)
    GTEST_SKIP() << "the device did not fail the write-back here (the kernel did not start it before the fsync, "
                    "or the loop device wrote elsewhere): nothing to report";
  EXPECT_NE(witness_rc, 0) << "the engine's fsync failed but the kernel reported nothing to another descriptor";
  EXPECT_TRUE(synced.result == -ENOSPC || synced.result == -EIO)
      << "the engine's fsync after a failed write-back returned " << synced.result
      << (synced.result == 0 ? " (success: the error was lost on the way, e.g. taken by a waiting sync_file_range)" : "")
      << "; another descriptor's fsync returned " << std::strerror(witness_rc);
}

INSTANTIATE_TEST_SUITE_P(Engines, WriteBehindDeviceError, testing::Values("posix", "uring", "libaio", "cstdio", "fstream"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace tai::test
