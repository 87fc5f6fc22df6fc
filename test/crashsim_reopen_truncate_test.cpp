// A bug the crash-state suite found: reopening a path with Open::truncate
// while the earlier handle's close is still writing back.
//
// Controller::open runs the engine's open, O_TRUNC included, on the calling thread at once
// (src/controller/submit.cpp). The earlier handle's close writes its dirty blocks back later, on
// a worker, and they land after the truncation: the file holds the old bytes although the
// program truncated it and wrote nothing since. The new handle's operations do wait for the
// earlier close (DESIGN: "Reopening a path whose data is still in the controller must see that
// data"), but the truncation is not one of its operations. Found as
//   ace2 #156: write(0, 4096); close+reopen(truncate); fsync
//   -> "after the final close (no crash) the file differs from what was written: size 4096,
//      expected 0", and the crash log shows the write-back after the truncate.
//
// Disabled until it is fixed (it fails today, deterministically: the earlier handle's close is
// held behind a hook until the reopen has returned). Run it with
//   tai_tests --gtest_also_run_disabled_tests --gtest_filter='CrashSimBug.*'
// The suite works around it (test/support/crash_workloads.hpp waits for the close before a
// truncating reopen); remove that wait together with DISABLED_ below.
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

TEST(CrashSimBug, DISABLED_ReopenWithTruncateWhileTheEarlierCloseWritesBack) {
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
  auto g = ctl.open<BTreeDefault>(path, Open::read | Open::write | Open::truncate, "posix");
  ASSERT_TRUE(g.ok()) << g.error().message;
  go.store(true, std::memory_order_release);
  EXPECT_TRUE(wait_ok(w));
  EXPECT_TRUE(wait_ok(held));
  EXPECT_TRUE(wait_ok(closed));
  EXPECT_TRUE(wait_ok(g.value().fsync()));
  EXPECT_TRUE(wait_ok(g.value().close()));
  // The program truncated the file and wrote nothing after: it must be empty.
  EXPECT_EQ(read_with_pread(path).size(), 0u) << "the earlier handle's write-back landed after the truncation";
}

}  // namespace
}  // namespace tai::test
