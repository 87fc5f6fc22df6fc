// The completion order that replaces per-level activity counters: a node is deleted (garbage
// collected) or overwritten only once every operation that went into it has completed; more
// operations in flight than the completion ring holds only make the tree conservative until
// it is idle again.
#include <gtest/gtest.h>

#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"

namespace tai::test::btree {
namespace {

TEST(BTreeCompletionOrder, AnEmptyNodeIsNotCollectedWhileAnEarlierOperationIsInsideIt) {
  MemoryFile mem;
  Quota quota(0, 0);  // nothing cached: every node stays empty
  BTreeOptions o;
  o.file_size = 1 << 20;
  BTreeDefault tree(nullptr, quota, o);
  ManualDriver driver(mem);
  // Build a path first (with a quota that allows it), then empty it.
  std::vector<std::uint8_t> buf(100);
  Operation read(TreeOp::read, 5000, 100, buf.data());
  Operation drop(TreeOp::drop, 0, 0);
  driver.start(tree, read);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);  // rerouted at the root (no quota): the root holds it
  driver.start(tree, drop);
  driver.run_steps();
  EXPECT_FALSE(drop.done());  // waits behind the uncached read at the root
  driver.run_all();
  EXPECT_EQ(read.result(), 100);
  EXPECT_EQ(drop.result(), 0);
  EXPECT_EQ(tree.check_invariants(), "");
}

TEST(BTreeCompletionOrder, ChildrenWithWorkInFlightAreKeptAndCollectedLater) {
  MemoryFile mem;
  Quota quota(Quota::kUnlimited, 4096);  // one block
  BTreeOptions o;
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  ManualDriver driver(mem);
  std::vector<std::uint8_t> a(10, 1), b(10, 2);
  Operation w1(TreeOp::write, 0, 10, a.data());       // takes the only block
  Operation w2(TreeOp::write, 8192, 10, b.data());    // rerouted: an empty leaf with I/O in flight
  driver.start(tree, w1);
  driver.start(tree, w2);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);
  Operation d1(TreeOp::drop, 0, 0);
  driver.start(tree, d1);
  driver.run_steps();  // must not collect w2's node, whose request is still in flight
  EXPECT_EQ(tree.stats().nodes, 5u);  // root, 1 GiB, 2 MiB, two leaves
  driver.run_all();
  ASSERT_EQ(w2.result(), 10);
  ASSERT_TRUE(d1.done());
  EXPECT_EQ(tree.stats().blocks, 0u);
  Operation d2(TreeOp::drop, 0, 0);
  driver.start(tree, d2);
  driver.run_all();
  EXPECT_EQ(tree.stats().nodes, 1u);  // everything idle and empty: collected
  EXPECT_EQ(tree.check_invariants(), "");
}

TEST(BTreeCompletionOrder, MoreOperationsInFlightThanTheRingStayCorrect) {
  MemoryFile mem;
  Quota quota(0, 0);
  BTreeOptions o;
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  ManualDriver driver(mem);
  constexpr int kOps = 3000;  // the ring holds 1024
  std::vector<std::uint8_t> data(16, 7);
  std::vector<std::unique_ptr<Operation>> ops;
  for (int i = 0; i < kOps; ++i) {
    ops.push_back(std::make_unique<Operation>(TreeOp::write, std::uint64_t(i) << 21, 16, data.data()));
    driver.start(tree, *ops.back());
  }
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), static_cast<std::size_t>(kOps));
  while (driver.pending_io() > 0) driver.complete(driver.pending_io() - 1);  // newest first
  driver.run_all();
  for (auto& op : ops) ASSERT_EQ(op->result(), 16);
  EXPECT_TRUE(tree.idle());
  EXPECT_EQ(tree.check_invariants(), "");
  // Idle again: the completion order recovers, empty nodes can be collected.
  Operation d(TreeOp::drop, 0, 0);
  driver.start(tree, d);
  driver.run_all();
  EXPECT_EQ(d.result(), 0);
  EXPECT_EQ(tree.stats().nodes, 1u);
}

// idle() turns true only after the completion callback has returned: a runner that sees the
// tree idle and runs something "after every earlier operation" (a hook) finds every earlier
// operation reported. With the count dropped before the callback, a hook admitted on another
// thread while a callback was still running ran before that operation's receipt finished.
TEST(BTreeCompletionOrder, TheTreeIsNotIdleWhileACompletionCallbackRuns) {
  MemoryFile mem;
  Quota quota(0, 0);  // nothing cached: the read goes to the engine and completes from its I/O
  BTreeOptions o;
  o.file_size = 1 << 20;
  BTreeDefault tree(nullptr, quota, o);
  ManualDriver driver(mem);
  struct Probe {
    const BTreeDefault* tree;
    int calls = 0;
    bool idle_inside = true;
    bool done_inside = false;
  } probe{&tree};
  std::vector<std::uint8_t> buf(100);
  Operation read(TreeOp::read, 5000, 100, buf.data());
  read.on_complete = [](Operation& op, void* ctx) {
    auto* p = static_cast<Probe*>(ctx);
    ++p->calls;
    p->idle_inside = p->tree->idle();
    p->done_inside = op.done();
  };
  read.context = &probe;
  driver.start(tree, read);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);
  EXPECT_FALSE(tree.idle());
  driver.run_all();
  ASSERT_EQ(probe.calls, 1);
  EXPECT_TRUE(probe.done_inside) << "the result is published before the callback";
  EXPECT_FALSE(probe.idle_inside) << "the tree reported idle while the completion callback ran";
  EXPECT_TRUE(tree.idle());
  EXPECT_EQ(read.result(), 100);
}

}  // namespace
}  // namespace tai::test::btree
