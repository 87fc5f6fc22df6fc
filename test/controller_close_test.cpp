// Closing files (DESIGN section 3, "File"; include/tai/file.hpp): close is asynchronous and a
// reopen of the same path sees every write at once, even while the close is still writing back;
// the close receipt finishes after every earlier operation; detach() and the File destructor give
// the handle up without losing data; status() reports the file's state.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/controller_support.hpp"
#include "support/engine_configs.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr auto kHang = std::chrono::seconds(60);

ControllerOptions options(std::int64_t flush_idle_ns = -1) {
  ControllerOptions o;
  o.workers = 2;
  o.flush_idle_ns = flush_idle_ns;
  o.engine = "posix";
  o.tree_options.write_around_bytes = 0;  // every write cached: the tests count what the cache holds
  return o;
}


/// "" when equal, else where the first difference is.
std::string first_difference(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want) {
  if (got == want) return "";
  const std::size_t n = std::min(got.size(), want.size());
  std::size_t i = 0;
  while (i < n && got[i] == want[i]) ++i;
  return "size " + std::to_string(got.size()) + " (want " + std::to_string(want.size()) + "), first difference at byte " +
         std::to_string(i) + (i < n ? " (" + std::to_string(got[i]) + " instead of " + std::to_string(want[i]) + ")" : "");
}


// 4 MiB in 64 KiB pieces: enough dirty data that the close's write-back takes a while.
constexpr std::size_t kPiece = 64 << 10;
constexpr std::size_t kPieces = 64;

template <class First, class Second>
void reopen_sees_data(bool move_buffers) {
  ScratchDir dir;
  const std::string path = dir.file("reopen");
  Controller ctl(options());
  File f = open_or_fail<First>(ctl, path);
  const std::vector<unsigned char> data = pattern(kPiece * kPieces, 11);
  for (std::size_t i = 0; i < kPieces; ++i) {
    if (move_buffers) {
      f.write(i * kPiece, Buffer::copy_of(data.data() + i * kPiece, kPiece));
    } else {
      f.write(i * kPiece, data.data() + i * kPiece, kPiece);
    }
  }
  Receipt closed = f.close();  // not waited for
  File again = open_or_fail<Second>(ctl, path, Open::read | Open::write);
  std::vector<unsigned char> back(data.size(), 0);
  std::vector<Receipt> reads;
  for (std::size_t i = 0; i < kPieces; ++i) reads.push_back(again.read(i * kPiece, back.data() + i * kPiece, kPiece));
  for (std::size_t i = 0; i < kPieces; ++i) {
    ASSERT_TRUE(wait_ok(reads[i]));
    EXPECT_EQ(reads[i].bytes(), static_cast<std::int64_t>(kPiece)) << "piece " << i;
  }
  EXPECT_EQ(first_difference(back, data), "") << "the reopened file must see every write of the closed handle";
  EXPECT_TRUE(wait_ok(closed));
  EXPECT_TRUE(wait_ok(again.close()));
  EXPECT_EQ(first_difference(read_with_pread(path), data), "");
}

TEST(ControllerClose, ReopenAfterAsynchronousCloseSeesTheCachedData) {
  reopen_sees_data<BTreeDefault, BTreeDefault>(false);
}

TEST(ControllerClose, ReopenWithoutACacheWaitsForTheCloseToWriteBack) {
  // The new handle's reads go straight to the engine: they must wait for the old write-back.
  reopen_sees_data<BTreeDefault, BTreeTrivial>(true);
}

TEST(ControllerClose, ReopenAfterCloseOfAnUncachedFile) {
  reopen_sees_data<BTreeTrivial, BTreeDefault>(false);
}

TEST(ControllerClose, WritesOfTheNewHandleLandAfterTheOldHandlesData) {
  ScratchDir dir;
  const std::string path = dir.file("overwrite");
  Controller ctl(options());
  File f = open_or_fail<BTreeDefault>(ctl, path);
  const std::vector<unsigned char> old_data = pattern(kPiece * kPieces, 12);
  for (std::size_t i = 0; i < kPieces; ++i) f.write(i * kPiece, old_data.data() + i * kPiece, kPiece);
  Receipt closed = f.close();
  File again = open_or_fail<BTreeTrivial>(ctl, path, Open::read | Open::write);
  const std::vector<unsigned char> new_data = pattern(kPiece - 200, 13);  // stays inside the file
  std::vector<unsigned char> expected = old_data;
  for (std::size_t i = 0; i < kPieces; i += 7) {
    again.write(i * kPiece + 100, new_data.data(), new_data.size());
    std::memcpy(expected.data() + i * kPiece + 100, new_data.data(), new_data.size());
  }
  EXPECT_TRUE(wait_ok(again.close()));
  EXPECT_TRUE(wait_ok(closed));
  EXPECT_EQ(first_difference(read_with_pread(path), expected), "")
      << "the old handle's write-back must not overwrite the new handle's writes";
}

TEST(ControllerClose, TheCloseReceiptFinishesAfterEveryEarlierOperation) {
  ScratchDir dir;
  const std::string path = dir.file("close-receipt");
  Controller ctl(options());
  File f = open_or_fail<BTreeDefault>(ctl, path);
  const std::vector<unsigned char> data = pattern(kPiece * 16, 14);
  std::vector<Receipt> writes;
  for (std::size_t i = 0; i < 16; ++i) writes.push_back(f.write(i * kPiece, data.data() + i * kPiece, kPiece));
  Receipt synced = f.fsync();
  Receipt closed = f.close();
  EXPECT_FALSE(f.is_open()) << "close() gives the handle up at once";
  ASSERT_TRUE(wait_ok(closed));
  EXPECT_EQ(closed.state(), TaskState::done);
  for (const Receipt& w : writes) {
    EXPECT_TRUE(w.finished()) << "a write finished after the close that follows it";
    EXPECT_EQ(w.bytes(), static_cast<std::int64_t>(kPiece));
  }
  EXPECT_TRUE(synced.finished());
  EXPECT_TRUE(synced.ok()) << synced.message();
  EXPECT_EQ(first_difference(read_with_pread(path), data), "") << "a finished close has written every byte back";
  Receipt again = f.close();
  ASSERT_TRUE(again.wait_for(kHang));
  EXPECT_EQ(again.state(), TaskState::rejected) << "closing twice";
  EXPECT_EQ(again.error(), std::error_code(EBADF, std::generic_category())) << again.message();
}

TEST(ControllerClose, DetachGivesUpTheHandleAndKeepsTheData) {
  ScratchDir dir;
  const std::string path = dir.file("detach");
  const std::vector<unsigned char> data = pattern(kPiece * 8, 15);
  std::vector<Receipt> writes;
  {
    Controller ctl(options());
    File f = open_or_fail<BTreeDefault>(ctl, path);
    for (std::size_t i = 0; i < 8; ++i) writes.push_back(f.write(i * kPiece, data.data() + i * kPiece, kPiece));
    f.detach();
    EXPECT_FALSE(f.is_open());
    EXPECT_FALSE(f.status().open);
    Receipt late = f.write(0, data.data(), 10);
    ASSERT_TRUE(late.wait_for(kHang));
    EXPECT_EQ(late.state(), TaskState::rejected);
    EXPECT_EQ(late.error(), std::error_code(EBADF, std::generic_category())) << late.message();
    // A reopen sees the detached handle's writes.
    File again = open_or_fail<BTreeDefault>(ctl, path, Open::read | Open::write);
    Receipt r = again.read(0, data.size());
    ASSERT_TRUE(wait_ok(r));
    Buffer got = r.take_buffer();
    ASSERT_EQ(got.size(), data.size());
    EXPECT_EQ(std::memcmp(got.data(), data.data(), data.size()), 0);
    EXPECT_TRUE(wait_ok(again.close()));
    const ShutdownReport report = ctl.shutdown();
    EXPECT_TRUE(report.ok()) << report.to_string();
  }
  for (const Receipt& w : writes) {
    EXPECT_TRUE(w.finished());
    EXPECT_TRUE(w.ok()) << w.message();
  }
  EXPECT_EQ(first_difference(read_with_pread(path), data), "");
}

TEST(ControllerClose, TheFileDestructorWithoutCloseLosesNothing) {
  ScratchDir dir;
  const std::string path = dir.file("destructor");
  const std::vector<unsigned char> data = pattern(kPiece * 8, 16);
  {
    Controller ctl(options());
    {
      File f = open_or_fail<BTreeDefault>(ctl, path);
      for (std::size_t i = 0; i < 8; ++i) f.write(i * kPiece, data.data() + i * kPiece, kPiece);
    }  // ~File: detach
    File again = open_or_fail<BTreeTrivial>(ctl, path, Open::read);
    std::vector<unsigned char> back(data.size());
    Receipt r = again.read(0, back.data(), back.size());
    ASSERT_TRUE(wait_ok(r));
    EXPECT_EQ(r.bytes(), static_cast<std::int64_t>(data.size()));
    EXPECT_EQ(first_difference(back, data), "");
    {
      File third = open_or_fail<BTreeDefault>(ctl, path, Open::read | Open::write);
      third.write(0, data.data() + kPiece, 100);  // no close, no wait: the controller's destructor writes it
    }
  }  // ~Controller: writes back everything
  std::vector<unsigned char> expected = data;
  std::memcpy(expected.data(), data.data() + kPiece, 100);
  EXPECT_EQ(first_difference(read_with_pread(path), expected), "");
}

// in_flight counts operations, exactly: the operations held up behind a blocked hook, and none
// once every one finished, although a submitting thread keeps up to 63 file references in its
// reserve (FileRefReserve, src/controller/core.hpp) for its next operations.
TEST(ControllerClose, StatusCountsOperationsNotReservedReferences) {
  ScratchDir dir;
  Controller ctl(options());
  File f = open_or_fail<BTreeTrivial>(ctl, dir.file("reserve"));
  const std::vector<unsigned char> data = pattern(512, 3);
  std::atomic<bool> let_go{false};
  std::atomic<int> stage{0};
  std::vector<Receipt> held;
  Receipt hook;
  std::thread submitter([&] {
    // Ten finished writes: the thread's reserve now holds 53 unused references.
    for (std::uint64_t i = 0; i < 10; ++i) EXPECT_TRUE(wait_ok(f.write(i * 512, data.data(), data.size())));
    stage = 1;
    if (!eventually([&] { return stage.load() >= 2; })) return;
    // A hook that blocks its worker until let go, and five writes behind it.
    hook = f.hook([&] { eventually([&] { return let_go.load(); }); });
    for (std::uint64_t i = 0; i < 5; ++i) held.push_back(f.write(i * 512, data.data(), data.size()));
    stage = 3;
    if (!eventually([&] { return stage.load() >= 4; })) return;
  });
  ASSERT_TRUE(eventually([&] { return stage.load() >= 1; }));
  EXPECT_TRUE(eventually([&] { return f.status().in_flight == 0; }))
      << "every write finished; the other thread's reserve is not an operation: " << f.status().in_flight;
  stage = 2;
  ASSERT_TRUE(eventually([&] { return stage.load() >= 3; }));
  EXPECT_EQ(f.status().in_flight, 6u) << "the blocked hook and the five writes behind it";
  let_go = true;
  EXPECT_TRUE(wait_ok(hook));
  for (Receipt& r : held) EXPECT_TRUE(wait_ok(r));
  EXPECT_TRUE(eventually([&] { return f.status().in_flight == 0; })) << f.status().in_flight;
  stage = 4;
  submitter.join();
  EXPECT_TRUE(eventually([&] { return f.status().in_flight == 0; })) << f.status().in_flight;
  EXPECT_TRUE(wait_ok(f.close()));
}

TEST(ControllerClose, StatusReportsTheFile) {
  ScratchDir dir;
  Controller ctl(options());
  const std::string path = dir.file("status");
  File f = open_or_fail<BTreeDefault>(ctl, path);
  FileStatus s = f.status();
  EXPECT_EQ(s.path, path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(s.engine, "posix");
  EXPECT_EQ(s.tree, "BTree<34,9,9,12>");
  EXPECT_TRUE(s.open);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.dirty_bytes, 0u);
  EXPECT_EQ(s.size.value_or(~0ull), 0u) << "a new file's size is known: 0";
  EXPECT_FALSE(s.sticky_error);

  const std::vector<unsigned char> data = pattern(4096, 17);
  ASSERT_TRUE(wait_ok(f.write(8192, data.data(), data.size())));
  s = f.status();
  EXPECT_GE(s.cached_bytes, 4096u);
  EXPECT_EQ(s.dirty_bytes, 4096u);
  EXPECT_EQ(s.size.value_or(0), 8192u + 4096u);
  ASSERT_TRUE(wait_ok(f.fsync()));
  s = f.status();
  EXPECT_EQ(s.dirty_bytes, 0u) << "fsync wrote everything back";
  EXPECT_GE(s.cached_bytes, 4096u) << "the clean block stays cached";
  EXPECT_FALSE(s.sticky_error);

  // in_flight: a hook that holds the file's order, and two operations behind it.
  std::atomic<bool> release{false};
  std::atomic<bool> hook_started{false};
  Receipt hook = f.hook([&] {
    hook_started = true;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!release.load() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  Receipt w = f.write(0, data.data(), 100);
  Receipt r = f.read(0, 100);
  ASSERT_TRUE(eventually([&] { return hook_started.load(); }));
  s = f.status();
  EXPECT_GE(s.in_flight, 3u) << "the hook and the two operations behind it";
  EXPECT_FALSE(w.finished()) << "a write overtook the hook ahead of it";
  release = true;
  EXPECT_TRUE(wait_ok(hook));
  EXPECT_TRUE(wait_ok(w));
  EXPECT_TRUE(wait_ok(r));
  EXPECT_TRUE(eventually([&] { return f.status().in_flight == 0; })) << "in_flight = " << f.status().in_flight;

  EXPECT_TRUE(wait_ok(f.close()));
  s = f.status();
  EXPECT_FALSE(s.open);

  File trivial = open_or_fail<BTreeTrivial>(ctl, path, Open::read | Open::write);
  s = trivial.status();
  EXPECT_EQ(s.tree, "BTree<64>");
  EXPECT_EQ(s.size.value_or(0), 8192u + 4096u) << "the size of the file on disk";
  ASSERT_TRUE(wait_ok(trivial.write(0, data.data(), data.size())));
  EXPECT_EQ(trivial.status().cached_bytes, 0u) << "BTreeTrivial caches nothing";
  EXPECT_EQ(trivial.status().dirty_bytes, 0u);
  EXPECT_TRUE(wait_ok(trivial.close()));
}

// A handle opened while an earlier handle of the path still holds cached data takes the file's
// size from the disk (0 here); the earlier close then writes the data back. The new handle's
// status() must report the size the file has by then, as its reads already did (they refresh the
// size when they pass the known end). It reported the stale 0 (found by the controller fuzz
// target).
TEST(ControllerClose, StatusSizeOfAReopenIncludesTheEarlierCloseWriteBack) {
  ScratchDir dir;
  ControllerOptions o = options();
  o.workers = 1;  // one worker, so a blocking task holds the close back
  Controller ctl(o);
  const std::string path = dir.file("reopen-size");
  File f = open_or_fail<BTreeDefault>(ctl, path);
  const std::vector<unsigned char> data = pattern(4096, 5);
  ASSERT_TRUE(wait_ok(f.write(8192, data.data(), data.size())));
  ASSERT_EQ(file_size(path), 0) << "precondition: the write is still only cached";

  std::atomic<bool> release{false};
  Receipt blocker = ctl.submit([&] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!release.load() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  Receipt closed = f.close();
  File again = open_or_fail<BTreeDefault>(ctl, path, Open::read | Open::write);
  release = true;
  ASSERT_TRUE(wait_ok(blocker));
  ASSERT_TRUE(wait_ok(closed));
  EXPECT_EQ(file_size(path), 8192 + 4096) << "the close wrote the data back";
  EXPECT_EQ(again.status().size.value_or(0), 8192u + 4096u);
  std::vector<unsigned char> back(4096);
  Receipt r = again.read(8192, back.data(), back.size());
  ASSERT_TRUE(wait_ok(r));
  EXPECT_EQ(r.bytes(), 4096);
  EXPECT_EQ(back, data);
  EXPECT_TRUE(wait_ok(again.close()));
}

}  // namespace
}  // namespace tai::test
