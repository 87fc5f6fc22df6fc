// The weak quota: every block is recorded oldest first; above the weak limit the oldest blocks
// are evicted first (written back when dirty). Stale records do no harm.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"
#include "tai/quota.hpp"

namespace tai::test::btree {
namespace {

struct Fixture {
  explicit Fixture(std::uint64_t weak) : quota(weak, Quota::kUnlimited) {
    BTreeOptions o;
    o.file_size = 0;
    tree = std::make_unique<BTreeDefault>(nullptr, quota, o);
    SequentialDriver::Options d;
    d.executor = &rec;
    driver = std::make_unique<SequentialDriver>(d);
  }
  // What a controller's recycle round does: evict the oldest blocks until under the weak limit.
  int recycle() {
    int evicted = 0;
    BlockRecord r;
    while (quota.over_weak() && quota.pop_oldest(r)) {
      EXPECT_EQ(r.tree_id, tree->id());
      Operation op(TreeOp::evict, r.base, 0);
      op.evict_seq = r.seq;
      op.evict_depth = r.depth;
      driver->run_one(*tree, op);
      EXPECT_EQ(op.result(), 0);
      ++evicted;
    }
    return evicted;
  }
  MemoryFile mem;
  RecordingExecutor rec{mem};
  Quota quota;
  std::unique_ptr<BTreeDefault> tree;
  std::unique_ptr<SequentialDriver> driver;
};

TEST(QuotaWeak, RecordsComeOutOldestFirst) {
  Fixture f(Quota::kUnlimited);
  std::vector<std::uint8_t> b(10, 1);
  const std::uint64_t order[] = {5, 2, 9};
  for (std::uint64_t blk : order) ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::write, blk * 4096, 10, b.data()), 10);
  BlockRecord r;
  std::uint64_t last_seq = 0;
  for (std::uint64_t blk : order) {
    ASSERT_TRUE(f.quota.pop_oldest(r));
    EXPECT_EQ(r.base, blk * 4096);
    EXPECT_EQ(r.depth, 3u);
    EXPECT_GT(r.seq, last_seq);
    last_seq = r.seq;
  }
  EXPECT_FALSE(f.quota.pop_oldest(r));
}

TEST(QuotaWeak, AboveTheWeakLimitTheOldestBlocksGoFirst) {
  Fixture f(2 * 4096);
  std::vector<std::uint8_t> b(100, 1);
  for (std::uint64_t blk = 0; blk < 5; ++blk)
    ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::write, blk * 4096, 100, b.data()), 100);
  EXPECT_TRUE(f.quota.over_weak());  // the weak limit may be exceeded for a while
  EXPECT_EQ(f.quota.over_weak_bytes(), 3u * 4096);
  EXPECT_EQ(f.recycle(), 3);
  EXPECT_FALSE(f.quota.over_weak());
  auto log = f.rec.log();
  ASSERT_EQ(log.size(), 3u);  // the three oldest, written back in age order
  for (std::uint64_t i = 0; i < 3; ++i) EXPECT_EQ(log[i].offset, i * 4096);
  EXPECT_EQ(f.tree->stats().blocks, 2u);
  EXPECT_EQ(f.tree->stats().dirty_bytes, 200u);  // the two youngest are still cached, dirty
  EXPECT_EQ(f.tree->check_invariants(), "");
}

TEST(QuotaWeak, StaleRecordsDoNothing) {
  Fixture f(Quota::kUnlimited);
  std::vector<std::uint8_t> b(10, 1);
  ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::write, 0, 10, b.data()), 10);
  ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::drop, 0, 0), 0);
  ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::write, 0, 10, b.data()), 10);  // a new block, same place
  BlockRecord old_record, new_record;
  ASSERT_TRUE(f.quota.pop_oldest(old_record));
  ASSERT_TRUE(f.quota.pop_oldest(new_record));
  Operation op(TreeOp::evict, old_record.base, 0);
  op.evict_seq = old_record.seq;
  op.evict_depth = old_record.depth;
  f.driver->run_one(*f.tree, op);
  EXPECT_EQ(op.result(), 0);
  EXPECT_EQ(f.tree->stats().blocks, 1u);  // the new block is not the record's
  op.evict_seq = new_record.seq;
  f.driver->run_one(*f.tree, op);
  EXPECT_EQ(f.tree->stats().blocks, 0u);
}

TEST(QuotaWeak, AFullRecordQueueDropsRecordsAndCountsThem) {
  Quota q(0, Quota::kUnlimited, 2);
  EXPECT_TRUE(q.record({1, 0, 1, 0}));
  EXPECT_TRUE(q.record({1, 4096, 2, 0}));
  EXPECT_FALSE(q.record({1, 8192, 3, 0}));
  EXPECT_EQ(q.records_dropped(), 1u);
  BlockRecord r;
  ASSERT_TRUE(q.pop_oldest(r));
  EXPECT_EQ(r.seq, 1u);
  EXPECT_TRUE(q.record({1, 8192, 3, 0}));
}

TEST(QuotaWeak, RecordsSurviveManyProducersAndConsumers) {
  // Workers record blocks while a recycle round pops them: every record comes out exactly once.
  Quota q(0, Quota::kUnlimited, 256);
  constexpr std::uint64_t kPerProducer = 20000;
  std::atomic<std::uint64_t> popped{0}, sum{0};
  std::atomic<bool> producing{true};
  std::vector<std::thread> threads;
  for (std::uint64_t p = 0; p < 3; ++p) {
    threads.emplace_back([&, p] {
      for (std::uint64_t i = 1; i <= kPerProducer; ++i) {
        const BlockRecord r{p, i * 4096, p * kPerProducer + i, 3};
        while (!q.record(r)) std::this_thread::yield();  // full: wait for the consumers
      }
    });
  }
  for (int c = 0; c < 2; ++c) {
    threads.emplace_back([&] {
      BlockRecord r;
      for (;;) {
        if (q.pop_oldest(r)) {
          popped.fetch_add(1);
          sum.fetch_add(r.seq);
        } else if (!producing.load()) {
          if (!q.pop_oldest(r)) return;
          popped.fetch_add(1);
          sum.fetch_add(r.seq);
        }
      }
    });
  }
  for (int p = 0; p < 3; ++p) threads[p].join();
  producing = false;
  for (std::size_t t = 3; t < threads.size(); ++t) threads[t].join();
  const std::uint64_t n = 3 * kPerProducer;
  EXPECT_EQ(popped.load(), n);
  EXPECT_EQ(sum.load(), n * (n + 1) / 2);
  EXPECT_GT(q.records_dropped(), 0u);  // the producers did run into a full ring
}

}  // namespace
}  // namespace tai::test::btree
