// The strict quota: never exceeded, whatever the workload; a request that would need more cache
// goes to the engine ("reroute") and still succeeds; one quota serves several trees.
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

TEST(QuotaStrict, AllocateRefusesWhatWouldPassTheLimit) {
  Quota q(Quota::kUnlimited, 10000);
  EXPECT_EQ(q.weak(), 10000u);  // lowered to the strict limit
  std::byte* a = q.allocate(4096, 4096);
  std::byte* b = q.allocate(4096, 64);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 4096, 0u);
  EXPECT_EQ(q.allocate(4096, 64), nullptr);
  EXPECT_EQ(q.denials(), 1u);
  EXPECT_EQ(q.used(), 8192u);
  EXPECT_EQ(q.available(), 10000u - 8192);
  q.release(a, 4096);
  std::byte* c = q.allocate(1808, 16);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(q.used(), 4096u + 1808);
  q.release(b, 4096);
  q.release(c, 1808);
  EXPECT_EQ(q.used(), 0u);
  EXPECT_EQ(q.peak(), 8192u);
}

TEST(QuotaStrict, ConcurrentAllocationsNeverPassTheLimit) {
  Quota q(Quota::kUnlimited, 64 * 4096);
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::vector<std::byte*> held;
      for (int i = 0; i < 20000; ++i) {
        if (std::byte* p = q.allocate(4096, 4096)) held.push_back(p);
        if (q.used() > q.strict()) over = true;
        if (held.size() > 20 || (i % 3 == 0 && !held.empty())) {
          q.release(held.back(), 4096);
          held.pop_back();
        }
      }
      for (std::byte* p : held) q.release(p, 4096);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(over);
  EXPECT_LE(q.peak(), q.strict());
  EXPECT_EQ(q.used(), 0u);
}

TEST(QuotaStrict, ATreeReroutesWhatTheQuotaRefusesAndEveryRequestSucceeds) {
  MemoryFile mem;
  Quota quota(Quota::kUnlimited, 3 * 4096);
  BTreeOptions o;
  o.write_around_bytes = 0;  // every write cached: the test is about what the cache does
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  SequentialDriver::Options d;
  d.executor = &mem;
  d.defer_io = true;
  SequentialDriver driver(d);
  std::vector<std::uint8_t> data(4096);
  for (std::uint64_t i = 0; i < 10; ++i) {
    std::fill(data.begin(), data.end(), static_cast<std::uint8_t>(i + 1));
    ASSERT_EQ(run_op(driver, tree, TreeOp::write, i * 4096, 4096, data.data()), 4096);
  }
  EXPECT_EQ(tree.stats().blocks, 3u);
  EXPECT_EQ(tree.stats().reroutes, 7u);
  EXPECT_EQ(mem.bytes_written(), 7u * 4096);
  EXPECT_LE(quota.peak(), 3u * 4096);
  for (std::uint64_t i = 0; i < 10; ++i) {
    std::vector<std::uint8_t> back(4096);
    ASSERT_EQ(run_op(driver, tree, TreeOp::read, i * 4096, 4096, back.data()), 4096);
    EXPECT_EQ(back, std::vector<std::uint8_t>(4096, static_cast<std::uint8_t>(i + 1))) << "block " << i;
  }
  EXPECT_LE(quota.peak(), 3u * 4096);
  EXPECT_EQ(tree.check_invariants(), "");
}

TEST(QuotaStrict, AZeroQuotaCachesNothing) {
  MemoryFile mem;
  Quota quota(0, 0);
  BTreeOptions o;
  o.write_around_bytes = 0;  // every write cached: the test is about what the cache does
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  SequentialDriver::Options d;
  d.executor = &mem;
  SequentialDriver driver(d);
  std::vector<std::uint8_t> data(100000, 3), back(100000);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 12345, data.size(), data.data()), 100000);
  ASSERT_EQ(run_op(driver, tree, TreeOp::read, 12345, back.size(), back.data()), 100000);
  EXPECT_EQ(back, data);
  EXPECT_EQ(quota.peak(), 0u);
  EXPECT_EQ(tree.stats().nodes, 1u);  // rerouted at the root: no child was worth creating
  EXPECT_EQ(mem.requests(), 2u);
}

TEST(QuotaStrict, TreesShareTheirControllersQuota) {
  MemoryFile mem_a, mem_b;
  Quota quota(Quota::kUnlimited, 4 * 4096);
  BTreeOptions o;
  o.write_around_bytes = 0;  // every write cached: the test is about what the cache does
  o.file_size = 0;
  BTreeDefault a(nullptr, quota, o), b(nullptr, quota, o);
  SequentialDriver::Options da, db;
  da.executor = &mem_a;
  db.executor = &mem_b;
  SequentialDriver driver_a(da), driver_b(db);
  std::vector<std::uint8_t> data(4096, 1);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(run_op(driver_a, a, TreeOp::write, i * 4096, 4096, data.data()), 4096);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(run_op(driver_b, b, TreeOp::write, i * 4096, 4096, data.data()), 4096);
  EXPECT_EQ(a.stats().blocks, 3u);
  EXPECT_EQ(b.stats().blocks, 1u);
  EXPECT_EQ(b.stats().reroutes, 2u);
  EXPECT_EQ(quota.used(), 4u * 4096);
  ASSERT_EQ(run_op(driver_a, a, TreeOp::drop, 0, 0), 0);
  EXPECT_EQ(quota.used(), 4096u);
}

}  // namespace
}  // namespace tai::test::btree
