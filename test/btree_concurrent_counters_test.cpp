// Counters stay exact when steps of different nodes run at once: two threads run rounds of one
// tree, each taking the steps of its own 1 GiB subtree (the root's steps go to the first), the
// way the controller's workers will. Built to be run under ThreadSanitizer too.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"
#include "src/btree/node.hpp"  // lane() reads a step's node

namespace tai::test::btree {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// Rounds with two threads. A step goes to the thread of its node's 1 GiB subtree, in the order
// it was emitted, so steps of one node never run at once and keep their order; a round's
// emitted steps are concatenated (thread 0's, then thread 1's) into the next round.
class TwoThreadRounds {
 public:
  explicit TwoThreadRounds(IoExecutor& io) : sinks_{Sink(io), Sink(io)} {}
  StepSink& starter() { return sinks_[0]; }
  void run() {
    std::vector<Step> round = std::move(sinks_[0].out);
    sinks_[0].out.clear();
    while (!round.empty()) {
      std::vector<Step> part[2];
      for (const Step& s : round) part[lane(s)].push_back(s);
      std::thread second([&] {
        for (const Step& s : part[1]) s.run(sinks_[1]);
      });
      for (const Step& s : part[0]) s.run(sinks_[0]);
      second.join();
      round.clear();
      for (Sink& k : sinks_) {
        round.insert(round.end(), k.out.begin(), k.out.end());
        k.out.clear();
      }
      ++rounds_;
    }
  }
  std::uint64_t rounds() const { return rounds_; }

 private:
  struct Sink final : StepSink {
    explicit Sink(IoExecutor& e) : executor(&e) {}
    void emit(const Step& s) override { out.push_back(s); }
    void io(const Request& r, const Step& c) override {
      Step k = c;
      k.io_result = executor->execute(r).result;
      out.push_back(k);
    }
    IoExecutor* executor;
    std::vector<Step> out;
  };
  static int lane(const Step& s) {
    if (s.node == nullptr) return 0;
    const auto* n = s.node;
    return (n->depth >= 1 && n->base >= kGiB) ? 1 : 0;
  }
  Sink sinks_[2];
  std::uint64_t rounds_ = 0;
};

TEST(BTreeConcurrentCounters, DisjointSubtreesOnTwoThreadsKeepEveryCounterExact) {
  MemoryFile mem;
  const std::uint64_t kBlocks = 300;  // per subtree
  Quota quota(Quota::kUnlimited, 200 * 4096);  // forces reroutes on both threads at once
  BTreeOptions o;
  o.write_around_bytes = 0;  // every write cached: the test is about what the cache does
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  TwoThreadRounds rounds(mem);
  std::vector<std::unique_ptr<Operation>> ops;
  std::vector<std::vector<std::uint8_t>> data;
  for (std::uint64_t i = 0; i < kBlocks; ++i) {
    for (std::uint64_t side = 0; side < 2; ++side) {
      data.emplace_back(4096, static_cast<std::uint8_t>(i * 2 + side));
      ops.push_back(std::make_unique<Operation>(TreeOp::write, side * kGiB + i * 4096, 4096, data.back().data()));
      tree.start(*ops.back(), rounds.starter());
    }
  }
  rounds.run();
  for (auto& op : ops) ASSERT_EQ(op->result(), 4096);
  const BTreeStats st = tree.stats();
  EXPECT_EQ(st.blocks, 200u);
  EXPECT_EQ(st.reroutes, 2 * kBlocks - 200);
  EXPECT_EQ(st.cached_bytes, quota.used());
  EXPECT_EQ(st.cached_bytes, st.blocks * 4096);
  EXPECT_EQ(st.dirty_bytes, st.blocks * 4096);
  EXPECT_EQ(st.dirty_blocks, st.blocks);
  EXPECT_EQ(mem.bytes_written(), st.reroutes * 4096);
  EXPECT_EQ(st.bytes_to_engine, mem.bytes_written());
  EXPECT_EQ(tree.check_invariants(), "");

  // Reads of everything, then drops of both halves and an fsync, all at once.
  ops.clear();
  std::vector<std::vector<std::uint8_t>> back(2 * kBlocks, std::vector<std::uint8_t>(4096));
  for (std::uint64_t k = 0; k < 2 * kBlocks; ++k) {
    const std::uint64_t side = k % 2, i = k / 2;
    ops.push_back(std::make_unique<Operation>(TreeOp::read, side * kGiB + i * 4096, 4096, back[k].data()));
    tree.start(*ops.back(), rounds.starter());
  }
  Operation drop_low(TreeOp::drop, 0, kGiB), drop_high(TreeOp::drop, kGiB, kGiB), sync(TreeOp::fsync, 0, 0);
  tree.start(drop_low, rounds.starter());
  tree.start(drop_high, rounds.starter());
  tree.start(sync, rounds.starter());
  rounds.run();
  for (std::uint64_t k = 0; k < 2 * kBlocks; ++k) {
    ASSERT_EQ(ops[k]->result(), 4096);
    EXPECT_EQ(back[k], data[k]) << "block " << k;
  }
  EXPECT_EQ(drop_low.result(), 0);
  EXPECT_EQ(drop_high.result(), 0);
  EXPECT_EQ(sync.result(), 0);
  EXPECT_EQ(tree.stats().cached_bytes, 0u);
  EXPECT_EQ(tree.stats().dirty_bytes, 0u);
  EXPECT_EQ(quota.used(), 0u);
  EXPECT_EQ(mem.bytes_written(), 2 * kBlocks * 4096);
  EXPECT_EQ(tree.check_invariants(), "");
}

}  // namespace
}  // namespace tai::test::btree
