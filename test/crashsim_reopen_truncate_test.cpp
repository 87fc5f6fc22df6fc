// Reopening a path with Open::truncate while the earlier handle's close still writes back.
//
// Controller::open runs the engine's open, O_TRUNC included, on the calling thread; the earlier
// handle's close writes its dirty blocks back later, on a worker. Before the fix those blocks
// landed after the truncation and the file kept the old bytes although the program truncated it
// and wrote nothing since. The crash-state suite found it as
//   ace2 #156: write(0, 4096); close+reopen(truncate); fsync
//   -> "after the final close (no crash) the file differs from what was written: size 4096,
//      expected 0".
// A truncating open now waits for the earlier close to finish (Controller::open).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/controller.hpp"

namespace tai::test {
namespace {

TEST(ReopenTruncate, WaitsForTheEarlierCloseSoItsWriteBackCannotLandAfterTheTruncation) {
  ScratchDir dir;
  const std::string path = dir.file("f");
  Controller ctl(two_quiet_workers("posix"));
  File f = open_or_fail<BTreeDefault>(ctl, path, Open::read | Open::write | Open::create);
  ASSERT_TRUE(f);
  const std::vector<unsigned char> data = pattern(4096, 1);
  Receipt w = f.write(0, data.data(), data.size());  // cached: BTreeDefault, default quota
  std::atomic<bool> go{false};
  Receipt held = f.hook([&go] {
    while (!go.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::microseconds(50));
  });
  Receipt closed = f.close();  // behind the hook: its write-back cannot start yet
  // Let the close go only after the reopen below has had time to truncate, were it not waiting.
  std::thread release([&go] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    go.store(true, std::memory_order_release);
  });
  auto g = ctl.open<BTreeDefault>(path, Open::read | Open::write | Open::truncate, "posix");
  const bool close_finished_first = closed.finished();
  release.join();
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_TRUE(close_finished_first) << "the truncating open returned before the earlier close had finished";
  EXPECT_TRUE(wait_ok(w));
  EXPECT_TRUE(wait_ok(held));
  EXPECT_TRUE(wait_ok(closed));
  EXPECT_TRUE(wait_ok(g.value().fsync()));
  EXPECT_TRUE(wait_ok(g.value().close()));
  // The program truncated the file and wrote nothing after: it must be empty.
  EXPECT_EQ(read_with_pread(path).size(), 0u) << "the earlier handle's write-back landed after the truncation";
}

// From a task of the same controller the wait could never end (the close needs the worker the
// task holds): the open is refused with the reason instead. The task is a hook of the closing
// file itself, which runs on its home worker before the close can.
TEST(ReopenTruncate, FromATaskOfTheSameControllerIsRefusedRatherThanDeadlocked) {
  ScratchDir dir;
  const std::string path = dir.file("f");
  Controller ctl(two_quiet_workers("posix"));
  File f = open_or_fail<BTreeDefault>(ctl, path, Open::read | Open::write | Open::create);
  ASSERT_TRUE(f);
  const std::vector<unsigned char> data = pattern(4096, 2);
  Receipt w = f.write(0, data.data(), data.size());
  std::atomic<bool> go{false};
  bool refused = false;
  std::string reason;
  Receipt held = f.hook([&] {
    while (!go.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::microseconds(50));
    auto g = ctl.open<BTreeDefault>(path, Open::read | Open::write | Open::truncate, "posix");
    refused = !g.ok() && g.error().code == std::errc::resource_deadlock_would_occur;
    if (!g.ok()) reason = g.error().message;
  });
  Receipt closed = f.close();  // the file is closing from here on; its close waits behind the hook
  go.store(true, std::memory_order_release);
  EXPECT_TRUE(wait_ok(w));
  EXPECT_TRUE(wait_ok(held));
  EXPECT_TRUE(wait_ok(closed));
  EXPECT_TRUE(refused) << reason;
  EXPECT_NE(reason.find("still closing"), std::string::npos) << reason;
  EXPECT_EQ(read_with_pread(path), data) << "the refused open must not have truncated";
}

}  // namespace
}  // namespace tai::test
