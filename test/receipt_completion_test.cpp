// Receipt::wait_any, tai::CompletionQueue, and the write-copy promise (DESIGN section 2,
// "Buffers": the caller may reuse its memory as soon as write() returns).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

ControllerOptions two_workers() {
  ControllerOptions o;
  o.workers = 2;
  return o;
}

TEST(ReceiptWaitAny, EmptyListAndTimeout) {
  EXPECT_EQ(Receipt::wait_any(nullptr, 0), -1);
  Controller ctl(two_workers());
  // A task that holds its round for 300 ms: nothing finishes within 10 ms.
  Receipt slow = ctl.submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Receipt::wait_any(&slow, 1, 10'000'000), -1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250));
  EXPECT_EQ(Receipt::wait_any(&slow, 1), 0);
  EXPECT_TRUE(slow.finished());
}

TEST(ReceiptWaitAny, ReturnsAFinishedReceiptUntilAllAreTaken) {
  Controller ctl(two_workers());
  ScratchDir dir;
  File f = ctl.open<BTreeTrivial>(dir.file("any"), Open::read | Open::write | Open::create, "null").value();
  std::vector<char> data(512, 'x');
  std::vector<Receipt> rs;
  for (int i = 0; i < 64; ++i) rs.push_back(f.write(static_cast<std::uint64_t>(i) * 512, data.data(), data.size()));
  std::set<std::ptrdiff_t> seen;
  while (!rs.empty()) {
    const std::ptrdiff_t i = Receipt::wait_any(rs.data(), rs.size());
    ASSERT_GE(i, 0);
    ASSERT_LT(static_cast<std::size_t>(i), rs.size());
    ASSERT_TRUE(rs[static_cast<std::size_t>(i)].finished());
    EXPECT_TRUE(rs[static_cast<std::size_t>(i)].ok()) << rs[static_cast<std::size_t>(i)].message();
    rs.erase(rs.begin() + i);
  }
}

TEST(CompletionQueue, EveryTagArrivesOnceAfterItsReceiptFinished) {
  Controller ctl(two_workers());
  ScratchDir dir;
  File f = ctl.open<BTreeDefault>(dir.file("cq"), Open::read | Open::write | Open::create, "posix").value();
  CompletionQueue cq(16);  // smaller than the requests in flight: a burst beyond it must not be lost
  constexpr std::size_t kN = 200;
  std::vector<char> data(4096, 'q');
  std::vector<Receipt> rs(kN);
  for (std::size_t i = 0; i < kN; ++i) {
    rs[i] = f.write(i * 4096, data.data(), data.size());
    ASSERT_TRUE(rs[i].then(cq.post(i)));
  }
  std::vector<std::uint64_t> tags(kN);
  std::vector<int> count(kN, 0);
  std::size_t got = 0;
  while (got < kN) {
    const std::size_t k = cq.pop(tags.data(), kN, 1, 10'000'000'000);
    ASSERT_GT(k, 0u) << "tags stopped arriving after " << got;
    for (std::size_t j = 0; j < k; ++j) {
      ASSERT_LT(tags[j], kN);
      ++count[tags[j]];
      EXPECT_TRUE(rs[tags[j]].finished()) << "tag " << tags[j] << " arrived before its receipt finished";
      EXPECT_TRUE(rs[tags[j]].ok());
    }
    got += k;
  }
  EXPECT_EQ(std::count(count.begin(), count.end(), 1), static_cast<std::ptrdiff_t>(kN));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(cq.pop(tags.data(), kN, 1, 5'000'000), 0u) << "nothing more was posted";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(4));
}

template <class Tree>
void write_copies_the_caller_memory() {
  Controller ctl(two_workers());
  ScratchDir dir;
  File f = ctl.open<Tree>(dir.file("copy"), Open::read | Open::write | Open::create, "posix").value();
  constexpr std::size_t kN = 64, kLen = 1000;  // not block-aligned on purpose
  std::vector<char> buf(kLen);
  std::vector<Receipt> rs;
  for (std::size_t i = 0; i < kN; ++i) {
    std::memset(buf.data(), static_cast<int>('A' + i % 26), kLen);
    rs.push_back(f.write(i * kLen, buf.data(), kLen));
    std::memset(buf.data(), '!', kLen);  // reused at once, before the write has run
  }
  for (Receipt& r : rs) ASSERT_TRUE(r.ok()) << r.message();
  std::vector<char> back(kN * kLen);
  Receipt rd = f.read(0, back.data(), back.size());
  ASSERT_TRUE(rd.ok()) << rd.message();
  ASSERT_EQ(rd.bytes(), static_cast<std::int64_t>(back.size()));
  for (std::size_t i = 0; i < kN; ++i)
    for (std::size_t j = 0; j < kLen; ++j)
      ASSERT_EQ(back[i * kLen + j], static_cast<char>('A' + i % 26)) << "write " << i << " byte " << j;
}

TEST(WriteCopies, CallerMayReuseItsMemoryAtOnceDefaultTree) { write_copies_the_caller_memory<BTreeDefault>(); }
TEST(WriteCopies, CallerMayReuseItsMemoryAtOnceTrivialTree) { write_copies_the_caller_memory<BTreeTrivial>(); }

}  // namespace
}  // namespace tai::test
