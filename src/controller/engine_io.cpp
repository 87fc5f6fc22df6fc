// The engine driver: synchronous engines run inline on the worker, asynchronous ones are
// submitted in batches at the end of a part and reaped inside the rounds.
#include <cerrno>

#include "src/controller/core.hpp"

namespace tai::detail {

bool Worker::io_now(const Request& r, Operation& op, std::int64_t& result) {
  if (r.file == nullptr || op.context == nullptr) return false;
  EngineSlot* s = static_cast<Task*>(op.context)->file->slot;
  if (s == nullptr || s->sync == nullptr) return false;
  result = s->sync->execute(r).result;
  return true;
}

void Worker::io(const Request& r, const Step& cont) {
  if (r.op == Op::fsync || r.op == Op::fdatasync) engine_syncs.add();
  // The engine that opened the file: the FileCore knows it (a wrapper engine's files name
  // the inner engine as their engine(), so the file cannot tell).
  EngineSlot* s = nullptr;
  if (r.file != nullptr) {
    if (cont.op != nullptr && cont.op->context != nullptr)
      s = static_cast<Task*>(cont.op->context)->file->slot;
    else
      s = c.engines.owning(*r.file);
  }
  auto deliver = [&](std::int64_t result) {
    Step k = cont;
    k.io_result = result;
    if (in_round_ && own_lane(lane_of(k.node)))
      urgent_.push_back(k);
    else
      emit(k);
  };
  if (s == nullptr) {
    deliver(-EBADF);
    return;
  }
  if (s->sync) {
    deliver(s->sync->execute(r).result);
    return;
  }
  if (s->async) {
    backlog.push_back(AsyncIo{s, r, cont});
    return;
  }
  // Neither a SyncEngine nor asynchronous (a wrapper such as `fault` around a synchronous
  // engine): drive it inline, one request at a time, under its lock.
  std::lock_guard<std::mutex> lock(s->mu);
  Request q = r;
  q.user_data = 0;
  Completion done{};
  if (s->engine->submit(&q, 1) != 1) {
    deliver(-EAGAIN);
    return;
  }
  while (s->engine->reap(&done, 1, 1) == 0) {
  }
  deliver(done.result);
}

void Worker::reap_slot(EngineSlot& s) {
  Completion got[64];
  for (;;) {
    const std::size_t k = s.engine->reap(got, 64, 0);
    for (std::size_t i = 0; i < k; ++i) {
      const auto idx = static_cast<std::uint32_t>(got[i].user_data);
      Step step = s.conts[idx];
      s.free_conts.push_back(idx);
      step.io_result = got[i].result;
      emit(step);
    }
    s.in_flight.store(s.in_flight.load(std::memory_order_relaxed) - k, std::memory_order_relaxed);
    if (k < 64) return;
  }
}

void Worker::drive_async() {
  // Submit what this worker's steps asked for, engine by engine in order of first appearance
  // (requests of one engine keep their order), then reap every engine with requests in flight,
  // so that completions are taken inside the rounds. What an engine refuses (depth reached)
  // stays in the backlog for the next round.
  if (!backlog.empty()) {
    EngineSlot* handled[EngineTable::kMax];
    unsigned nhandled = 0;
    for (std::size_t i = 0; i < backlog.size(); ++i) {
      EngineSlot* s = backlog[i].slot;
      if (s == nullptr || std::find(handled, handled + nhandled, s) != handled + nhandled) continue;
      handled[nhandled++] = s;
      std::lock_guard<std::mutex> lock(s->mu);
      Request batch[64];
      std::size_t pos[64];
      // Splitting a batch is safe: the controller never sets Request::link (a kernel link
      // chain would end at a call's boundary); requests of one engine keep their order.
      const std::size_t batch_max = std::clamp<std::size_t>(c.opt.engine_submit_batch, 1, 64);
      std::size_t m = 0;
      bool full = false;
      auto submit_batch = [&] {
        const std::size_t taken = s->engine->submit(batch, m);
        engine_submit_calls.add();
        for (std::size_t j = 0; j < taken; ++j) backlog[pos[j]].slot = nullptr;
        for (std::size_t j = taken; j < m; ++j) s->free_conts.push_back(static_cast<std::uint32_t>(batch[j].user_data));
        s->in_flight.store(s->in_flight.load(std::memory_order_relaxed) + taken, std::memory_order_relaxed);
        if (taken < m) full = true;
        m = 0;
      };
      for (std::size_t j = i; j < backlog.size() && !full; ++j) {
        if (backlog[j].slot != s) continue;
        if (s->free_conts.empty()) {
          full = true;
          break;
        }
        const std::uint32_t ci = s->free_conts.back();
        s->free_conts.pop_back();
        s->conts[ci] = backlog[j].cont;
        batch[m] = backlog[j].request;
        batch[m].user_data = ci;
        pos[m++] = j;
        if (m == batch_max) submit_batch();
      }
      if (m) submit_batch();
      reap_slot(*s);
    }
    backlog.erase(std::remove_if(backlog.begin(), backlog.end(), [](const AsyncIo& a) { return a.slot == nullptr; }),
                  backlog.end());
  }
  const unsigned count = c.engines.count();
  for (unsigned i = 0; i < count; ++i) {
    EngineSlot& s = c.engines[i];
    if (!s.async || s.in_flight.load(std::memory_order_relaxed) == 0) continue;
    std::unique_lock<std::mutex> lock(s.mu, std::try_to_lock);
    if (!lock.owns_lock()) continue;  // another worker is reaping it now
    reap_slot(s);
  }
}

}  // namespace tai::detail
