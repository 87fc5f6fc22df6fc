// The tree's sequential driver and engine executor (see include/tai/btree_driver.hpp).
#include "tai/btree_driver.hpp"

#include "src/btree/tree_core.hpp"  // Step::run

#include <cerrno>

namespace tai {

Completion EngineExecutor::execute(const Request& r) {
  if (r.file == nullptr) return Completion{r.user_data, -EBADF};
  Engine& engine = r.file->engine();
  if (auto* sync = dynamic_cast<SyncEngine*>(&engine)) return sync->execute(r);
  if (engine.submit(&r, 1) != 1) return Completion{r.user_data, -EAGAIN};
  Completion c;
  while (engine.reap(&c, 1, 1) == 0) {
  }
  return c;
}

SequentialDriver::SequentialDriver() : SequentialDriver(Options{}) {}

SequentialDriver::SequentialDriver(const Options& options) : options_(options), rng_(options.seed) {}

bool SequentialDriver::io_now(const Request& request, Operation&, std::int64_t& result) {
  if (!options_.inline_io || options_.defer_io) return false;
  ++requests_;
  IoExecutor& ex = options_.executor != nullptr ? *options_.executor : engine_executor_;
  result = ex.execute(request).result;
  return true;
}

void SequentialDriver::io(const Request& request, const Step& continuation) {
  if (options_.defer_io) {
    deferred_.emplace_back(request, continuation);
  } else {
    complete_io(request, continuation);
  }
}

void SequentialDriver::complete_io(const Request& request, Step continuation) {
  ++requests_;
  IoExecutor& ex = options_.executor != nullptr ? *options_.executor : engine_executor_;
  continuation.io_result = ex.execute(request).result;
  queue_.push(continuation);
}

void SequentialDriver::run() {
  for (;;) {
    if (!queue_.empty() && (deferred_.empty() || (rng_() & 3) != 0)) {
      const Step s = queue_.pop();
      ++steps_;
      s.run(*this);
      continue;
    }
    if (!deferred_.empty()) {
      const std::size_t i = static_cast<std::size_t>(rng_() % deferred_.size());
      const auto item = deferred_[i];
      deferred_[i] = deferred_.back();
      deferred_.pop_back();
      complete_io(item.first, item.second);
      continue;
    }
    return;
  }
}

}  // namespace tai
