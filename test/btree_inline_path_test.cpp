// The inline path of tai::BTree::start(): a read or write inside one cached block of an idle
// tree is done by start() itself, with exactly the effects (data, counters, dirty accounting,
// logical size) the steps would have had; everything else still runs as steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"

namespace tai::test::btree {
namespace {

// A BTreeDefault over an empty in-memory file, with the inline path on or off.
struct Fixture : TreeOnMemory<> {
  explicit Fixture(bool inline_path = true, std::uint64_t strict = Quota::kUnlimited)
      : TreeOnMemory<>(options(inline_path), strict) {}
  static BTreeOptions options(bool inline_path) {
    BTreeOptions o = empty_file();
    o.inline_path = inline_path;
    return o;
  }
};

TEST(BTreeInlinePath, AnIdleCacheHitRunsNoStep) {
  Fixture f;
  std::vector<std::uint8_t> a(4096, 0xA1), back(4096);
  ASSERT_EQ(f.op(TreeOp::write, 8192, 4096, a.data()), 4096);  // allocates: steps
  EXPECT_EQ(f.tree->stats().inline_ops, 0u);
  const std::uint64_t steps = f.driver->steps_run();
  std::vector<std::uint8_t> b(100, 0xB2);
  ASSERT_EQ(f.op(TreeOp::write, 8192 + 50, 100, b.data()), 100);
  ASSERT_EQ(f.op(TreeOp::read, 8192, 4096, back.data()), 4096);
  EXPECT_EQ(f.driver->steps_run(), steps);
  const BTreeStats st = f.tree->stats();
  EXPECT_EQ(st.inline_ops, 2u);
  EXPECT_EQ(st.cache_hits, 1u);
  EXPECT_EQ(st.merged_bytes, 100u);
  EXPECT_EQ(st.dirty_bytes, 4096u);
  std::memcpy(a.data() + 50, b.data(), 100);
  EXPECT_EQ(back, a);
  EXPECT_EQ(*f.tree->logical_size(), 8192u + 4096u);
  EXPECT_EQ(f.tree->check_invariants(), "");
  ASSERT_EQ(f.op(TreeOp::write_back, 0, 0), 0);
  std::vector<std::uint8_t> file(4096);
  f.mem.image().bytes.read(8192, file.size(), file.data());
  EXPECT_EQ(file, a);
}

TEST(BTreeInlinePath, AWriteInsideTheLastBlockGrowsTheFileAsTheRootStepWould) {
  Fixture f;
  std::vector<std::uint8_t> a(100, 1);
  ASSERT_EQ(f.op(TreeOp::write, 0, 100, a.data()), 100);  // allocates the block
  ASSERT_EQ(f.op(TreeOp::write, 1000, 100, a.data()), 100);  // inline, past the end
  EXPECT_EQ(f.tree->stats().inline_ops, 1u);
  EXPECT_EQ(*f.tree->logical_size(), 1100u);
  std::vector<std::uint8_t> back(2000, 0xEE);
  // Reaches the end of file: the read goes through the root step, which shortens it.
  EXPECT_EQ(f.op(TreeOp::read, 0, 2000, back.data()), 1100);
  EXPECT_EQ(f.tree->stats().inline_ops, 1u);
}

TEST(BTreeInlinePath, WhatNeedsEngineIoOrAnotherNodeStillRunsAsSteps) {
  Fixture f;
  std::vector<std::uint8_t> a(8192, 3), back(8192);
  // A read miss (fill), a write into a fresh block (allocation), a request across two blocks.
  ASSERT_EQ(f.op(TreeOp::write, 0, 8192, a.data()), 8192);
  ASSERT_EQ(f.op(TreeOp::read, 100, 8000, back.data()), 8000);  // spans two blocks
  EXPECT_EQ(f.tree->stats().inline_ops, 0u);
  // More dirty ranges than a block keeps: the tiny-write rule decides, in a step.
  for (int i = 0; i < 5; ++i) ASSERT_EQ(f.op(TreeOp::write, 16384 + i * 800, 10, a.data()), 10);
  EXPECT_EQ(f.tree->stats().inline_ops, 3u);  // the 1st allocates; ranges 2-4 fit; a 5th range does not
  EXPECT_EQ(f.tree->stats().write_throughs + f.tree->stats().merges, 1u);
  EXPECT_EQ(f.tree->check_invariants(), "");
}

TEST(BTreeInlinePath, NotWhileAnOperationIsInFlight) {
  Fixture f;
  std::vector<std::uint8_t> a(4096, 7), b(4096, 8);
  ASSERT_EQ(f.op(TreeOp::write, 0, 4096, a.data()), 4096);
  Operation first(TreeOp::write, 4096 * 10, 4096, a.data());  // allocates: queued as steps
  f.driver->start(*f.tree, first);
  ASSERT_FALSE(first.done());
  Operation second(TreeOp::write, 0, 4096, b.data());  // a hit, but the tree is busy
  f.driver->start(*f.tree, second);
  EXPECT_FALSE(second.done());
  f.driver->run();
  ASSERT_TRUE(first.done() && second.done());
  EXPECT_EQ(second.result(), 4096);
  EXPECT_EQ(f.tree->stats().inline_ops, 0u);
}

// Random requests within a few blocks, mostly hits, against the same sequence with the inline
// path off: identical results, data and counters.
TEST(BTreeInlinePath, SameEffectsAsTheSteps) {
  for (std::uint64_t strict : {Quota::kUnlimited, std::uint64_t{3 * 4096}}) {
    Fixture on(true, strict), off(false, strict);
    std::mt19937_64 rng(strict + 11);
    std::vector<std::uint8_t> buf(9000), back_on(9000), back_off(9000);
    for (int i = 0; i < 20000; ++i) {
      const std::uint64_t off_ = rng() % (6 * 4096);
      const std::uint64_t len = 1 + rng() % ((rng() % 4 == 0) ? 8192 : 600);
      const int kind = static_cast<int>(rng() % 10);
      SCOPED_TRACE("strict " + std::to_string(strict) + " op " + std::to_string(i));
      if (kind < 5) {
        for (auto& x : buf) x = static_cast<std::uint8_t>(rng());
        ASSERT_EQ(on.op(TreeOp::write, off_, len, buf.data()), off.op(TreeOp::write, off_, len, buf.data()));
      } else if (kind < 9) {
        ASSERT_EQ(on.op(TreeOp::read, off_, len, back_on.data()), off.op(TreeOp::read, off_, len, back_off.data()));
        ASSERT_EQ(0, std::memcmp(back_on.data(), back_off.data(), len));
      } else {
        ASSERT_EQ(on.op(TreeOp::write_back, 0, 0), off.op(TreeOp::write_back, 0, 0));
      }
    }
    BTreeStats a = on.tree->stats(), b = off.tree->stats();
    EXPECT_GT(a.inline_ops, 5000u);
    EXPECT_EQ(b.inline_ops, 0u);
    EXPECT_EQ(a.cached_bytes, b.cached_bytes);
    EXPECT_EQ(a.dirty_bytes, b.dirty_bytes);
    EXPECT_EQ(a.dirty_blocks, b.dirty_blocks);
    EXPECT_EQ(a.blocks, b.blocks);
    EXPECT_EQ(a.merges, b.merges);
    EXPECT_EQ(a.merged_bytes, b.merged_bytes);
    EXPECT_EQ(a.cache_hits, b.cache_hits);
    EXPECT_EQ(a.write_throughs, b.write_throughs);
    EXPECT_EQ(a.bytes_to_engine, b.bytes_to_engine);
    EXPECT_EQ(on.tree->check_invariants(), "");
    EXPECT_EQ(*on.tree->logical_size(), *off.tree->logical_size());
  }
}

}  // namespace
}  // namespace tai::test::btree

namespace tai::test::btree {
namespace {

// BTreeTrivial caches nothing: with a runner that can execute a request at once (io_now), an
// idle tree sends each read and write straight to the engine from start(); the results, the
// file and the counters are those of the steps.
TEST(BTreeInlinePath, UncachedRequestsOfAnIdleTreeGoStraightToTheEngine) {
  auto driver_options = [](bool inline_io) {
    SequentialDriver::Options d;
    d.inline_io = inline_io;
    return d;
  };
  TreeOnMemory<BTreeTrivial> with(TreeOnMemory<BTreeTrivial>::empty_file(), Quota::kUnlimited, driver_options(true));
  TreeOnMemory<BTreeTrivial> without(TreeOnMemory<BTreeTrivial>::empty_file(), Quota::kUnlimited, driver_options(false));
  MemoryFile &mem_on = with.mem, &mem_off = without.mem;
  auto &on = with.tree, &off = without.tree;
  auto &drv_on = with.driver, &drv_off = without.driver;
  std::mt19937_64 rng(5);
  std::vector<std::uint8_t> buf(5000), a(5000), b(5000);
  std::uint64_t size = 0, stepped = 0;  // reads that reach the end of file go through the root step
  for (int i = 0; i < 5000; ++i) {
    const std::uint64_t o = rng() % 20000, len = 1 + rng() % 4000;
    if (rng() % 2) {
      size = std::max(size, o + len);
      for (auto& x : buf) x = static_cast<std::uint8_t>(rng());
      ASSERT_EQ(run_op(*drv_on, *on, TreeOp::write, o, len, buf.data()), run_op(*drv_off, *off, TreeOp::write, o, len, buf.data()));
    } else {
      if (o + len > size) ++stepped;
      ASSERT_EQ(run_op(*drv_on, *on, TreeOp::read, o, len, a.data()), run_op(*drv_off, *off, TreeOp::read, o, len, b.data()));
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), len));
    }
  }
  EXPECT_GT(drv_off->steps_run(), 0u);
  const BTreeStats x = on->stats(), y = off->stats();
  EXPECT_GT(stepped, 0u);
  EXPECT_EQ(x.inline_ops, 5000u - stepped);
  EXPECT_EQ(x.uncached, y.uncached);
  EXPECT_EQ(x.engine_writes, y.engine_writes);
  EXPECT_EQ(x.engine_reads, y.engine_reads);
  EXPECT_EQ(x.bytes_to_engine, y.bytes_to_engine);
  EXPECT_EQ(x.bytes_from_engine, y.bytes_from_engine);
  EXPECT_EQ(*on->logical_size(), *off->logical_size());
  EXPECT_EQ(mem_on.bytes_written(), mem_off.bytes_written());
  // A failed engine write is the operation's error, as through the steps.
  mem_on.fail_writes(-EIO);
  EXPECT_EQ(run_op(*drv_on, *on, TreeOp::write, 0, 10, buf.data()), -EIO);
  // A deferring runner cannot execute at once: the steps run.
  SequentialDriver::Options d;
  d.executor = &mem_off;
  d.inline_io = true;
  d.defer_io = true;
  SequentialDriver deferring(d);
  EXPECT_EQ(run_op(deferring, *off, TreeOp::write, 0, 10, buf.data()), 10);
  EXPECT_GT(deferring.steps_run(), 0u);
}

}  // namespace
}  // namespace tai::test::btree
