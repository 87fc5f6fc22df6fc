// BTreeTrivial: no cache. Every request goes to the engine; requests that do not overlap run at
// once at its single node, overlapping ones keep their order (a read never sees a later write,
// overlapping writes end as the later one).
#include <gtest/gtest.h>

#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"

namespace tai::test::btree {
namespace {

TEST(BTreeTrivial, DisjointRequestsAreInFlightTogether) {
  MemoryFile mem;
  Quota quota;
  BTreeOptions o;
  o.file_size = 0;
  BTreeTrivial tree(nullptr, quota, o);
  ManualDriver driver(mem);
  std::vector<std::vector<std::uint8_t>> data;
  std::vector<std::unique_ptr<Operation>> ops;
  for (int i = 0; i < 8; ++i) {
    data.emplace_back(4096, static_cast<std::uint8_t>(i + 1));
    ops.push_back(std::make_unique<Operation>(TreeOp::write, i * 4096, 4096, data.back().data()));
    driver.start(tree, *ops.back());
  }
  driver.run_steps();
  EXPECT_EQ(driver.pending_io(), 8u);
  while (driver.pending_io() > 0) driver.complete(driver.pending_io() - 1);  // newest first
  driver.run_steps();
  for (auto& op : ops) EXPECT_EQ(op->result(), 4096);
  EXPECT_EQ(tree.stats().uncached, 8u);
  EXPECT_EQ(tree.stats().cached_bytes, 0u);
  EXPECT_EQ(tree.check_invariants(), "");
}

TEST(BTreeTrivial, OverlappingRequestsKeepTheirOrder) {
  MemoryFile mem;
  Quota quota;
  BTreeOptions o;
  o.file_size = 0;
  BTreeTrivial tree(nullptr, quota, o);
  ManualDriver driver(mem);
  std::vector<std::uint8_t> a(100, 1), b(100, 2), got(100, 0), got2(10, 0), c(10, 3);
  Operation w1(TreeOp::write, 0, 100, a.data());
  Operation r1(TreeOp::read, 50, 100, got.data());   // overlaps w1: must see it
  Operation w2(TreeOp::write, 50, 100, b.data());    // overlaps both: after them
  Operation w3(TreeOp::write, 1000, 10, c.data());   // disjoint: joins w2 (FIFO: not before)
  Operation r2(TreeOp::read, 1000, 10, got2.data()); // after w3
  for (Operation* op : {&w1, &r1, &w2, &w3, &r2}) driver.start(tree, *op);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);  // w1 only: everything else overlaps a request ahead of it
  driver.complete(0);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);  // r1
  driver.complete(0);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 2u);  // w2 and w3 together
  driver.complete(1);
  driver.complete(0);
  driver.run_all();
  EXPECT_EQ(r1.result(), 50);  // the file was 100 bytes long when r1 came
  std::vector<std::uint8_t> want(100, 0);
  std::fill(want.begin(), want.begin() + 50, 1);  // w1's bytes; beyond 100 the file was empty
  EXPECT_EQ(got, want);
  EXPECT_EQ(got2, c);
  std::vector<std::uint8_t> final_bytes(150);
  Operation r3(TreeOp::read, 0, 150, final_bytes.data());
  driver.start(tree, r3);
  driver.run_all();
  EXPECT_EQ(r3.result(), 150);
  for (int i = 0; i < 150; ++i) EXPECT_EQ(final_bytes[i], i < 50 ? 1 : 2) << i;
}

}  // namespace
}  // namespace tai::test::btree
