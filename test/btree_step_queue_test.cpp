// Steps are plain values: a runner can carry them in Boost.Lockfree queues (preallocated,
// bounded_push: no allocation per step). Here a tree runs entirely through such queues.
#include <gtest/gtest.h>

#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "src/detail/lockfree_queue.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"

namespace tai::test::btree {
namespace {

class LockfreeSink final : public StepSink {
 public:
  explicit LockfreeSink(IoExecutor& io) : io_(io), steps_(1024) {}
  void emit(const Step& s) override { ASSERT_TRUE(steps_.bounded_push(s)); }
  void io(const Request& r, const Step& c) override {
    Step k = c;
    k.io_result = io_.execute(r).result;
    ASSERT_TRUE(done_.push(k));
  }
  void run() {
    Step s;
    for (;;) {
      if (steps_.pop(s) || done_.pop(s)) {
        s.run(*this);
        continue;
      }
      return;
    }
  }

 private:
  IoExecutor& io_;
  boost::lockfree::queue<Step> steps_;                                        // MPMC, like Pending/Ready
  boost::lockfree::spsc_queue<Step, boost::lockfree::capacity<256>> done_;  // fixed ring
};

TEST(BTreeStepQueue, ATreeRunsThroughLockFreeQueues) {
  static_assert(sizeof(Step) <= 64, "a step fits a cache line");
  MemoryFile mem;
  Quota quota(Quota::kUnlimited, 8 * 4096);
  BTreeOptions o;
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  LockfreeSink sink(mem);
  std::vector<std::uint8_t> data(20000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 13);
  Operation w(TreeOp::write, 3000, data.size(), data.data());
  tree.start(w, sink);
  sink.run();
  ASSERT_EQ(w.result(), 20000);
  std::vector<std::uint8_t> back(data.size());
  Operation r(TreeOp::read, 3000, back.size(), back.data());
  Operation f(TreeOp::fsync, 0, 0);
  tree.start(r, sink);
  tree.start(f, sink);
  sink.run();
  ASSERT_EQ(r.result(), 20000);
  EXPECT_EQ(back, data);
  EXPECT_EQ(f.result(), 0);
  EXPECT_EQ(tree.check_invariants(), "");
}

}  // namespace
}  // namespace tai::test::btree
