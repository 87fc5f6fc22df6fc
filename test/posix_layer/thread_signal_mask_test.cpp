// The drop-in layer's own threads (the controller's workers, the write-behind thread, the fsync
// order thread) block every signal that can be blocked, whatever the mask of the program thread
// that made them start: the program's handlers must run on the program's threads (under the
// preload library a handler that found itself on a TAI thread would write past the layer). The
// threads say who they are in their names ("tai-...").
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "posix_layer/support.hpp"
#include "support/thread_masks.hpp"

namespace tai::test {
namespace {

using LayerThreadSignalMask = LayerTest;

TEST_F(LayerThreadSignalMask, EveryThreadOfTheLayerBlocksEverySignal) {
  posix::detail::Settings s = layer_settings();
  s.fsync_mode = posix::FsyncMode::order;  // the order thread starts at the first fsync
  ASSERT_GT(s.write_behind_ms, 0u) << "the write-behind thread is what this test looks at too";
  restart(s);
  const std::string all = everything_blockable_mask();
  ASSERT_FALSE(all.empty()) << "no SigBlk line in /proc/thread-self/status";
  on_a_thread_blocking_nothing([&] {
    const int fd = posix::open(file("masks.dat").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(posix::routed(fd));
    ASSERT_EQ(posix::write(fd, "0123456789", 10), 10);
    ASSERT_EQ(posix::fsync(fd), 0);
    ASSERT_EQ(posix::close(fd), 0);
  });
  for (const char* name : {"tai-master", "tai-worker", "tai-writebehind", "tai-fsync-order"}) {
    const std::vector<ThreadMask> threads = threads_named_at_least(name, 1);
    EXPECT_FALSE(threads.empty()) << "no thread named " << name;
    for (const ThreadMask& t : threads) EXPECT_EQ(t.blocked, all) << t.name << " " << t.tid;
  }
}

}  // namespace
}  // namespace tai::test
