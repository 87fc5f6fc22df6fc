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

TEST(CopyBudget, TheReleaseBatchIsAQuarterOfTheBudgetSharedByTheWorkersAndAtMostOneMiB) {
  CopyBudget small(256 * kKiB, 0);
  small.set_release_batch(4);
  EXPECT_EQ(small.release_batch(), 16 * kKiB);
  CopyBudget large(std::uint64_t{1} << 30, 0);
  large.set_release_batch(2);
  EXPECT_EQ(large.release_batch(), kMiB);
  CopyBudget tiny(4 * kKiB, 0);
  tiny.set_release_batch(64);  // many workers, a tiny budget: 16 bytes each, every write given back
  EXPECT_EQ(tiny.release_batch(), 16u);
}

TEST(CopyBudget, ASubmitterOverTheBudgetWaitsAndSaysSoUntilTheBytesComeBack) {
  CopyBudget budget(kMiB, /*spin_ns=*/0);
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
  CopyBudget budget(64 * kKiB, 0);
  budget.set_release_batch(1);
  budget.charge(64 * kKiB, /*may_wait=*/true);
  budget.charge(64 * kKiB, /*may_wait=*/false);  // a worker's own charge: counted, not held up
  EXPECT_EQ(budget.held(), 128 * kKiB);
  EXPECT_EQ(budget.waits(), 0u);
  EXPECT_FALSE(budget.wanted());
  budget.release(128 * kKiB);
}

}  // namespace
}  // namespace tai::test
