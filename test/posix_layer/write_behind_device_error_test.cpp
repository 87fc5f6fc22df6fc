// The drop-in layer's write-behind (TAI_START_WRITEBACK: every interval written to a file, the
// cache is handed to the kernel and the kernel is asked to start the device write) over a device
// that fails (test/support/small_loop_fs.hpp, Backing::capped_memory: an ext4 that accepts the
// writes while its device fails every new block). The failure happens in a write-back nobody
// waits for; the program's next fsync must still return it (ENOSPC or EIO as the block layer
// passes it), never 0. A descriptor opened before the writes sees the error too, which tells a
// layer that lost the error from a setup whose device did not fail. Skipped with the reason
// without root, tmpfs or loop mounts, or mkfs.ext4.
#include <chrono>
#include <thread>

#include "posix_layer/support.hpp"
#include "support/page_states.hpp"
#include "support/small_loop_fs.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
using LayerWriteBehindDeviceError = LayerTest;

TEST_F(LayerWriteBehindDeviceError, TheNextFsyncReportsTheFailedWriteBack) {
  SmallLoopFs fs(FsType::ext4, 96, Backing::capped_memory);
  if (!fs.mounted()) GTEST_SKIP() << fs.skip_reason();
  posix::detail::Settings s = layer_settings();
  s.start_writeback_bytes = kMiB;
  s.write_behind_ms = 0;  // only the interval starts the device, not the deadline
  restart(s);

  const std::string path = fs.file("behind");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_TRUE(posix::routed(fd));
  const int witness = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(witness, 0) << std::strerror(errno);

  ASSERT_EQ(fs.fail_device_writes(), "");
  constexpr std::uint64_t kTotal = 16 * kMiB;
  const std::string piece(256 * 1024, 'w');
  for (std::uint64_t off = 0; off < kTotal; off += piece.size())
    ASSERT_EQ(write_all(fd, piece), static_cast<ssize_t>(piece.size())) << std::strerror(errno);

  // Every interval handed to the kernel has been started (the last one is handed over when the
  // last write crosses it); wait until the device has answered for everything but the last MiB.
  const long left = wait_until_written(witness, kTotal - kMiB, std::chrono::seconds(20));
  if (left < 0) std::this_thread::sleep_for(std::chrono::seconds(2));  // no cachestat(2): give the device time

  fs.heal_device();
  errno = 0;
  const int synced = posix::fsync(fd);
  const int synced_errno = errno;
  const int witness_rc = ::fsync(witness) == 0 ? 0 : errno;
  ::close(witness);
  (void)posix::close(fd);

  if (synced == 0 && witness_rc == 0)
    GTEST_SKIP() << "the device did not fail the write-back here (nothing was started before the fsync): "
                    "nothing to report";
  EXPECT_NE(witness_rc, 0) << "the layer's fsync failed but the kernel reported nothing to another descriptor";
  EXPECT_EQ(synced, -1) << "the layer's fsync after a failed write-back succeeded (the error was lost); another "
                           "descriptor's fsync returned "
                        << std::strerror(witness_rc);
  if (synced == -1) {
    EXPECT_TRUE(synced_errno == ENOSPC || synced_errno == EIO) << std::strerror(synced_errno);
  }
}

}  // namespace
}  // namespace tai::test
