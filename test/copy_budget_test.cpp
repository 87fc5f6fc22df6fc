// The write-copy budget (src/controller/core.hpp CopyBudget): the back-pressure a submitter
// meets when the copies of unfinished writes fill ControllerOptions::write_copy_budget. The
// controller's workers give finished bytes back in batches (CopyBudget::release_batch), and give
// them back at once while a submitter waits (CopyBudget::wanted): these tests hold the budget to
// that, without a controller, so that a waiter cannot be left behind a batch.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "src/controller/core.hpp"
#include "support/controller_support.hpp"

namespace tai::test {
namespace {

using detail::CopyBudget;
constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kMiB = kKiB * kKiB;
constexpr unsigned kProducers = detail::ControllerCore::kMaxProducers;

TEST(CopyBudget, TheReleaseBatchIsAQuarterOfTheBudgetSharedByTheWorkersAndAtMostOneMiB) {
  CopyBudget small(256 * kKiB, 0, kProducers);
  small.set_release_batch(4);
  EXPECT_EQ(small.release_batch(), 16 * kKiB);
  CopyBudget large(std::uint64_t{1} << 30, 0, kProducers);
  large.set_release_batch(2);
  EXPECT_EQ(large.release_batch(), kMiB);
  CopyBudget tiny(4 * kKiB, 0, kProducers);
  tiny.set_release_batch(64);  // many workers, a tiny budget: 16 bytes each, every write given back
  EXPECT_EQ(tiny.release_batch(), 16u);
}

TEST(CopyBudget, ASubmitterOverTheBudgetWaitsAndSaysSoUntilTheBytesComeBack) {
  CopyBudget budget(kMiB, /*spin_ns=*/0, kProducers);
  budget.set_release_batch(2);
  budget.charge(kMiB, /*may_wait=*/true);
  EXPECT_EQ(budget.held(), kMiB);
  EXPECT_FALSE(budget.wanted()) << "nobody waits yet";

  std::atomic<bool> admitted{false};  // relaxed would do; seq_cst keeps the test simple
  std::thread submitter([&] {
    budget.charge(64 * kKiB, /*may_wait=*/true);
    admitted = true;
  });
  EXPECT_TRUE(eventually([&] { return budget.wanted(); })) << "a waiting submitter is invisible to the workers";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(admitted) << "admitted over a full budget";
  // A worker's batch below release_batch() is still given back while somebody waits (the worker
  // checks wanted()); here the whole charge comes back at once.
  budget.release(kMiB);
  submitter.join();
  EXPECT_TRUE(admitted);
  EXPECT_FALSE(budget.wanted()) << "the submitter was admitted but still counts as waiting";
  EXPECT_EQ(budget.held(), 64 * kKiB);
  EXPECT_EQ(budget.waits(), 1u);
  budget.release(64 * kKiB);
  EXPECT_EQ(budget.held(), 0u);
}

TEST(CopyBudget, AWorkerNeverWaitsEvenOverTheBudget) {
  CopyBudget budget(64 * kKiB, 0, kProducers);
  budget.set_release_batch(1);
  budget.charge(64 * kKiB, /*may_wait=*/true);
  budget.charge(64 * kKiB, /*may_wait=*/false);  // a worker's own charge: counted, not held up
  EXPECT_EQ(budget.held(), 128 * kKiB);
  EXPECT_EQ(budget.waits(), 0u);
  EXPECT_FALSE(budget.wanted());
  budget.release(128 * kKiB);
}

TEST(CopyBudget, SubmittingThreadsGetCreditOnlyUnderALargeBudgetAndAtMostASixteenthInAll) {
  EXPECT_EQ(CopyBudget(0, 0, kProducers).credit_chunk(), 0u) << "0 admits one write at a time";
  EXPECT_EQ(CopyBudget(4 * kMiB - 1, 0, kProducers).credit_chunk(), 0u);
  EXPECT_EQ(CopyBudget(4 * kMiB, 0, kProducers).credit_chunk(), 4 * kKiB);
  EXPECT_EQ(CopyBudget(32 * kMiB, 0, kProducers).credit_chunk(), 32 * kKiB);
  EXPECT_EQ(CopyBudget(std::uint64_t{1} << 30, 0, kProducers).credit_chunk(), 32 * kKiB);
  EXPECT_EQ(CopyBudget(32 * kMiB, 0, 1).credit_chunk(), 32 * kKiB);
}

TEST(CopyBudget, CreditIsReservedOnlyWhileItFits) {
  CopyBudget budget(4 * kMiB, 0, kProducers);
  const std::uint64_t chunk = budget.credit_chunk();
  ASSERT_GT(chunk, 0u);
  EXPECT_EQ(budget.try_reserve(chunk), chunk);
  EXPECT_EQ(budget.held(), chunk);
  budget.charge(4 * kMiB - chunk, /*may_wait=*/true);  // fills the budget exactly
  EXPECT_EQ(budget.try_reserve(chunk), 0u) << "credit past the budget";
  EXPECT_EQ(budget.held(), 4 * kMiB) << "a refused reserve must leave the count as it was";
  EXPECT_EQ(budget.try_reserve(0), 0u);
  budget.release(4 * kMiB);
  EXPECT_EQ(budget.held(), 0u);
}

// Every producer's credit held by threads that stopped writing: a write larger than the budget
// is still admitted (nothing but credit is held), instead of waiting for bytes that never come
// back.
TEST(CopyBudget, AWriteIsAdmittedWhenNothingButCreditIsHeld) {
  CopyBudget budget(4 * kMiB, /*spin_ns=*/0, kProducers);
  budget.set_release_batch(1);
  for (unsigned p = 0; p < kProducers; ++p) ASSERT_EQ(budget.try_reserve(budget.credit_chunk()), budget.credit_chunk());
  const std::uint64_t credit = budget.held();
  EXPECT_EQ(credit, std::uint64_t{kProducers} * budget.credit_chunk());
  std::atomic<bool> admitted{false};
  std::thread submitter([&] {
    budget.charge(8 * kMiB, /*may_wait=*/true);
    admitted = true;
  });
  const bool in_time = eventually([&] { return admitted.load(); });
  if (!in_time) budget.release(credit);  // lets the submitter go, so that the test can end
  submitter.join();
  EXPECT_TRUE(in_time) << "a write waited for the credit of threads that stopped writing";
  EXPECT_EQ(budget.waits(), in_time ? 0u : 1u);
}

TEST(CopyBudget, ControllerStatsLeaveTheSubmittersCreditOut) {
  ControllerOptions o;
  o.workers = 1;
  Controller ctl(o);
  auto f = ctl.open<BTreeTrivial>("credit-stats", OpenMode(Open::read | Open::write), "null");
  ASSERT_TRUE(f) << f.error().message;
  const std::string bytes(512, 'x');
  for (int i = 0; i < 100; ++i) {
    const Receipt r = f->write(static_cast<std::uint64_t>(i) * 512, bytes.data(), bytes.size());
    r.wait();
    ASSERT_TRUE(r.ok()) << r.message();
  }
  EXPECT_TRUE(eventually([&] { return ctl.stats().write_copy_bytes == 0; }))
      << ctl.stats().write_copy_bytes << " bytes held after every write finished";
}

}  // namespace
}  // namespace tai::test
