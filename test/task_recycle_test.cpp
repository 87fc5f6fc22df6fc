// A recycled task (detail::acquire_task after release_task on the same thread) starts clean:
// DESIGN section 2, errors: a receipt reports its own request's error and reason, never those
// of the request its task served before. Task::recycle() resets them; finish_task writes the
// errno only when there is one (so that a worker does not touch that cache line on success).
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "src/detail/task_pool.hpp"
#include "tai/receipt.hpp"

namespace tai::test {
namespace {

TEST(TaskRecycle, AReusedTaskReportsItsOwnErrorNotTheLastOne) {
  detail::Task* first = detail::acquire_task();  // one reference: the caller's
  detail::finish_task(*first, TaskState::failed, ENOSPC, "the first request's reason");
  {
    const Receipt r(first);
    EXPECT_EQ(r.error().value(), ENOSPC);
  }  // the last reference: recycled into this thread's cache
  detail::Task* second = detail::acquire_task();
  if (second != first) {
    detail::release_task(second);
    GTEST_SKIP() << "the pool handed out another task; nothing to check";
  }
  detail::finish_task(*second, TaskState::failed, 0, nullptr);
  const Receipt r(second);
  EXPECT_EQ(r.error().value(), EIO) << "no errno of its own: EIO, not the earlier ENOSPC";
  EXPECT_EQ(r.message().find("the first request's reason"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace tai::test
