// The cache tree's own memory stays bounded by what its blocks need while a file is written for
// long without an fsync: nodes whose block was evicted, and leaves made for a write the strict
// quota then rerouted, are freed by collect operations the controller starts when the tree's node
// bytes have doubled (TreeCore::take_collect_request). Without them a file kept a node (about
// 300 bytes, plus child tables) per block it ever cached, until it was closed.
// Sequential, random and overwrite-heavy workloads of 64x the strict quota, on the null engine
// (no disk time) and on posix; FileStatus::node_bytes is sampled throughout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t kStrict = 2u << 20;
constexpr std::uint64_t kWeak = 1u << 20;
constexpr std::size_t kWrite = 64u << 10;
constexpr std::size_t kInFlight = 32;
// A 2 MiB cache holds at most 512 blocks of 4 KiB: their leaves, their parents' child tables (one
// 4 KiB table per 2 MiB node in use) and the collection's doubling rule stay far below this.
constexpr std::uint64_t kNodeBound = 8u << 20;

enum class Pattern { sequential, random };

struct Outcome {
  std::uint64_t peak_node_bytes = 0;
  std::uint64_t last_node_bytes = 0;
  std::uint64_t written = 0;
  bool ok = true;
};

Outcome run(const std::string& engine, Pattern pattern, const std::string& path, std::uint64_t total) {
  ControllerOptions o;
  o.workers = 2;
  o.weak_quota = kWeak;
  o.strict_quota = kStrict;
  Controller ctl(o);
  Outcome out;
  File f = open_or_fail<BTreeDefault>(ctl, path, Open::read | Open::write | Open::create, engine);
  if (!f) {
    out.ok = false;
    return out;
  }
  std::vector<unsigned char> data(kWrite, 0x5A);
  std::mt19937_64 rng(test_seed());
  const std::uint64_t range = std::uint64_t{4} << 30;  // random writes land in 4 GiB
  std::deque<Receipt> window;
  for (std::uint64_t done = 0, i = 0; done < total; done += kWrite, ++i) {
    const std::uint64_t offset = pattern == Pattern::sequential ? done : (rng() % (range / kWrite)) * kWrite;
    window.push_back(f.write(offset, data.data(), data.size()));
    if (window.size() >= kInFlight) {
      out.ok = wait_ok(window.front()) && out.ok;
      window.pop_front();
    }
    if (i % 64 == 0) out.peak_node_bytes = std::max(out.peak_node_bytes, f.status().node_bytes);
  }
  for (const Receipt& r : window) out.ok = wait_ok(r) && out.ok;
  out.last_node_bytes = f.status().node_bytes;
  out.peak_node_bytes = std::max(out.peak_node_bytes, out.last_node_bytes);
  out.written = total;
  out.ok = wait_ok(f.close()) && out.ok;
  // Collections run among the writes: none may lose one. Sequential writes cover [0, total)
  // with 0x5A, so any byte that is not 0x5A (a hole: 0) is a lost write.
  if (engine == "posix" && pattern == Pattern::sequential) {
    const std::vector<unsigned char> back = read_with_pread(path);
    EXPECT_EQ(back.size(), total);
    EXPECT_EQ(std::count(back.begin(), back.end(), 0x5A), static_cast<std::ptrdiff_t>(total)) << "a write was lost";
  }
  return out;
}

class TreeNodes : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    TAI_SKIP_UNLESS_ENGINE_AVAILABLE(GetParam());
  }
  /// 64x the strict quota (128 MiB) in an optimised build; a quarter of it under sanitizers.
  static std::uint64_t total() {
    const double scale = std::max(0.25, controller_test_scale("TAI_TREE_NODES_SCALE"));
    return static_cast<std::uint64_t>(64 * kStrict * scale) / kWrite * kWrite;
  }
  ScratchDir dir;
};

TEST_P(TreeNodes, SequentialWritesWithoutFsyncKeepTheTreeSmall) {
  const Outcome o = run(GetParam(), Pattern::sequential, dir.file("seq"), total());
  ASSERT_TRUE(o.ok);
  EXPECT_LE(o.peak_node_bytes, kNodeBound) << "after " << o.written << " bytes written";
  RecordProperty("peak_node_bytes", std::to_string(o.peak_node_bytes));
}

TEST_P(TreeNodes, RandomWritesIntoALargeSparseFileKeepTheTreeSmall) {
  const Outcome o = run(GetParam(), Pattern::random, dir.file("rand"), total());
  ASSERT_TRUE(o.ok);
  EXPECT_LE(o.peak_node_bytes, kNodeBound) << "after " << o.written << " bytes written";
  RecordProperty("peak_node_bytes", std::to_string(o.peak_node_bytes));
}

INSTANTIATE_TEST_SUITE_P(Controller, TreeNodes, testing::Values("null", "posix"),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace tai::test
