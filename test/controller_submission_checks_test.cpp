// What File refuses at submission, before any cache sees the request (DESIGN section 2, "Bad
// input gets a clear error"), the same on every tree and every engine:
//  * a write on a file opened without Open::write, a read on one opened without Open::read:
//    rejected with EBADF at once. A cached tree used to accept such a write, serve it back to
//    reads and fail only at fsync/close;
//  * a transfer whose end passes 2^63 - 1, the largest offset the kernel's signed off_t holds:
//    rejected with EOVERFLOW at once. A cached tree used to accept it and fail at write-back.
// Each case runs over every engine of this build x {BTreeDefault, BTreeTrivial}.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t kLargestOffset = std::uint64_t{1} << 63;  // 2^63: no file byte is here or above

class SubmissionChecks : public testing::TestWithParam<EngineAndTree> {
 protected:
  void SetUp() override {
    engine = std::get<0>(GetParam());
    TAI_SKIP_UNLESS_ENGINE_AVAILABLE(engine);
    ctl = std::make_unique<Controller>(two_quiet_workers());
    path = dir.file("checked");
    original = pattern(8192, 7);
    ASSERT_TRUE(make_zero_file(path, 0));
    ASSERT_TRUE(write_with_pwrite(path, 0, original));
  }
  Result<File> open(Open flags) { return open_engine_and_tree(*ctl, GetParam(), path, flags); }
  /// The receipt finished (bounded wait) as rejected with `err` and a reason.
  static void expect_rejected(const Receipt& r, int err) {
    ASSERT_TRUE(r.wait_for(std::chrono::seconds(30))) << "did not finish";
    EXPECT_EQ(r.state(), TaskState::rejected) << to_string(r.state());
    EXPECT_EQ(r.error(), std::error_code(err, std::generic_category())) << r.message();
    EXPECT_FALSE(r.message().empty());
  }
  std::string engine;
  ScratchDir dir;
  std::string path;
  std::vector<unsigned char> original;
  std::unique_ptr<Controller> ctl;
};

TEST_P(SubmissionChecks, AWriteOnAFileOpenedReadOnlyIsRejectedAtOnce) {
  auto f = open(Open::read);
  ASSERT_TRUE(f.ok()) << f.error().message;
  File file = std::move(f.value());
  const std::vector<unsigned char> junk(4096, 0xEE);
  expect_rejected(file.write(0, junk.data(), junk.size()), EBADF);
  expect_rejected(file.write(100, Buffer::copy_of(junk.data(), 10)), EBADF);
  // Nothing of the refused writes is visible, not even through the cache.
  std::vector<unsigned char> back(original.size());
  Receipt r = file.read(0, back.data(), back.size());
  ASSERT_TRUE(wait_ok(r));
  EXPECT_EQ(r.bytes(), static_cast<std::int64_t>(original.size()));
  EXPECT_EQ(back, original);
  // The file is unharmed: nothing is left to fail the fsync or the close.
  EXPECT_TRUE(wait_ok(file.fsync()));
  EXPECT_TRUE(wait_ok(file.close()));
  EXPECT_EQ(read_with_pread(path), original);
}

TEST_P(SubmissionChecks, AReadOnAFileOpenedWriteOnlyIsRejectedAtOnce) {
  auto f = open(Open::write);
  ASSERT_TRUE(f.ok()) << f.error().message;
  File file = std::move(f.value());
  std::vector<unsigned char> back(100);
  expect_rejected(file.read(0, back.data(), back.size()), EBADF);
  expect_rejected(file.read(0, 100), EBADF);
  const std::vector<unsigned char> data(100, 0x11);
  EXPECT_TRUE(wait_ok(file.write(0, data.data(), data.size())));
  EXPECT_TRUE(wait_ok(file.close()));
  std::vector<unsigned char> expect = original;
  std::memcpy(expect.data(), data.data(), data.size());
  EXPECT_EQ(read_with_pread(path), expect);
}

TEST_P(SubmissionChecks, ATransferEndingPastTheLargestFileOffsetIsRejectedAtOnce) {
  auto f = open(Open::read | Open::write);
  ASSERT_TRUE(f.ok()) << f.error().message;
  File file = std::move(f.value());
  char buf[100] = {};
  expect_rejected(file.write(kLargestOffset, buf, 1), EOVERFLOW);
  expect_rejected(file.write(kLargestOffset - 10, buf, sizeof buf), EOVERFLOW);
  expect_rejected(file.write(kLargestOffset - 1, buf, 1), EOVERFLOW);  // the end would be 2^63
  expect_rejected(file.write(~std::uint64_t{0} - 4096, Buffer::copy_of(buf, 10)), EOVERFLOW);
  expect_rejected(file.read(kLargestOffset, buf, 1), EOVERFLOW);
  expect_rejected(file.read(kLargestOffset + 4096, 10), EOVERFLOW);
  // Nothing was cached up there: the fsync and the close have nothing to fail on.
  EXPECT_TRUE(wait_ok(file.fsync()));
  EXPECT_TRUE(wait_ok(file.close()));
  EXPECT_EQ(read_with_pread(path), original);
}

INSTANTIATE_TEST_SUITE_P(Controller, SubmissionChecks,
                         testing::Combine(testing::Values("posix", "cstdio", "fstream", "libaio", "uring"),
                                          testing::Bool()),
                         engine_and_tree_name);

}  // namespace
}  // namespace tai::test
