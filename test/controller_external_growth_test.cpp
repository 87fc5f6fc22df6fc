// A file that another writer grows while TAI has it open: a read that reaches past the size the
// controller knows asks the engine again, so it returns what plain pread would, on every tree
// (a cached block filled when the end of file lay inside it reads its part past that end again).
// The reads used to stop at the size known at open (or at this handle's last write).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

class ExternalGrowth : public testing::TestWithParam<EngineAndTree> {
 protected:
  void SetUp() override {
    engine = std::get<0>(GetParam());
    TAI_SKIP_UNLESS_ENGINE_AVAILABLE(engine);
    ctl = std::make_unique<Controller>(two_quiet_workers());
    path = dir.file("growing");
    head = pattern(1000, 1);
    ASSERT_TRUE(make_zero_file(path, 0));
    ASSERT_TRUE(write_with_pwrite(path, 0, head));
    auto f = open_engine_and_tree(*ctl, GetParam(), path, Open::read | Open::write);
    ASSERT_TRUE(f.ok()) << f.error().message;
    file = std::move(f.value());
  }
  /// Reads [offset, offset + n) through the controller; the bytes it returned.
  std::vector<unsigned char> read(std::uint64_t offset, std::size_t n) {
    std::vector<unsigned char> out(n);
    Receipt r = file.read(offset, out.data(), n);
    if (!wait_ok(r)) return {};
    out.resize(static_cast<std::size_t>(r.bytes()));
    return out;
  }
  static std::vector<unsigned char> slice(const std::vector<unsigned char>& v, std::size_t from, std::size_t n) {
    from = std::min(from, v.size());
    n = std::min(n, v.size() - from);
    return {v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(from + n)};
  }
  std::string engine;
  ScratchDir dir;
  std::string path;
  std::vector<unsigned char> head;
  std::unique_ptr<Controller> ctl;
  File file;
};

TEST_P(ExternalGrowth, AReadPastTheKnownSizeSeesWhatAnotherWriterAppended) {
  // Cache the head (BTreeDefault: a 4 KiB block filled up to the end of file at 1000).
  EXPECT_EQ(read(0, 4096), head);
  EXPECT_EQ(read(0, 1000), head);
  // Another writer appends 20000 bytes: the first block's tail and blocks past it.
  const std::vector<unsigned char> tail = pattern(20000, 2);
  ASSERT_TRUE(write_with_pwrite(path, head.size(), tail));
  std::vector<unsigned char> whole = head;
  whole.insert(whole.end(), tail.begin(), tail.end());
  ASSERT_EQ(read_with_pread(path), whole);
  // Inside the cached block, past the old end: the block's stale tail is read again.
  EXPECT_EQ(read(1200, 100), slice(whole, 1200, 100));
  // Across the old end, and far past it, and the whole file (short at the new end).
  EXPECT_EQ(read(900, 5000), slice(whole, 900, 5000));
  EXPECT_EQ(read(15000, 100), slice(whole, 15000, 100));
  EXPECT_EQ(read(0, 64 << 10), whole);
  EXPECT_TRUE(read(whole.size(), 10).empty()) << "at the new end of file: 0 bytes";
  // The file grows again while this handle's own writes are cached: both are seen.
  const std::vector<unsigned char> mine = pattern(300, 3);
  ASSERT_TRUE(wait_ok(file.write(100, mine.data(), mine.size())));
  std::memcpy(whole.data() + 100, mine.data(), mine.size());
  const std::vector<unsigned char> more = pattern(5000, 4);
  ASSERT_TRUE(write_with_pwrite(path, whole.size(), more));
  const std::size_t before_more = whole.size();
  whole.insert(whole.end(), more.begin(), more.end());
  EXPECT_EQ(read(before_more - 10, 1000), slice(whole, before_more - 10, 1000));
  EXPECT_EQ(read(0, 64 << 10), whole);
  EXPECT_TRUE(wait_ok(file.close()));
  EXPECT_EQ(read_with_pread(path), whole);
}

INSTANTIATE_TEST_SUITE_P(Controller, ExternalGrowth,
                         testing::Combine(testing::Values("posix", "cstdio", "libaio", "uring"), testing::Bool()),
                         engine_and_tree_name);

}  // namespace
}  // namespace tai::test
