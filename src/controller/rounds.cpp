// The rounds: a worker's part (gates, lanes of steps, new work, engines), lane claiming and
// stealing, the master's decisions (normal, recycle, flush, close, stop; sleep when idle) and
// the follower and master loops around the round barrier.
#include <poll.h>
#include <unistd.h>

#include "src/controller/core.hpp"
#include "engines/common/timespec.hpp"

#include <algorithm>
#include <cstdint>

namespace tai::detail {

/// Claims `lane` for this round if nobody has (exchange of the round number, acq_rel: exactly one
/// worker holds a lane per round, and it sees what the lane's previous holders wrote). Holding
/// it, this worker runs every step of the lane's nodes in this round: first the lane's input
/// (steps emitted for it in the previous round, by every worker), then the steps this worker
/// emitted for it earlier in this round before it held it, then new ones as they are emitted.
/// Per node that is emission order: a node's visits come from its parent's steps, which in one
/// round all run on the one worker holding the parent's lane (root visits: from start() on the
/// file's home worker), so no other worker can hold visits of that node for this round.
bool Worker::own_lane(unsigned lane) {
  if (claimed_[lane] == round_) return true;
  if (c.rounds.lane_claim[lane].exchange(round_, std::memory_order_acq_rel) == round_) return false;
  claimed_[lane] = round_;
  if (lane % c.n != index) steals.add();
  for (unsigned p = 0; p < c.n; ++p) {
    std::vector<Step>& v = c.workers[p]->out[parity_in_][lane];
    now_.insert(now_.end(), v.begin(), v.end());
    v.clear();
  }
  std::vector<Step>& mine = out[parity_out][lane];
  now_.insert(now_.end(), mine.begin(), mine.end());
  mine.clear();
  return true;
}

void Worker::drain() {
  for (;;) {
    while (!urgent_.empty()) {
      const Step u = urgent_.back();
      urgent_.pop_back();
      u.run(*this);
      ++ran_;
    }
    if (now_head_ == now_.size()) break;
    const Step s = now_[now_head_++];  // by value: running it may grow now_
    s.run(*this);
    ++ran_;
  }
  now_.clear();
  now_head_ = 0;
}

// Admission in submission order. Each submitting thread pushes into a queue of its own, so a
// write that thread B submitted before thread A's fsync can sit in B's queue while the fsync is
// popped from A's: admitted first, the fsync would complete without the write (DESIGN:
// "every write submitted before it to that file is on stable storage"). Keys (stamp_admission)
// order them; two rules make the keys complete:
//  * a task with key 2v waits until ordering numbers 1..v have all been popped: an ordering task
//    that happened before it took one of those numbers, and every number taken is pushed;
//  * an ordering task waits for one full pass over every queue after the pass that popped it.
//    A task V submitted before ordering task F (V's push happens before F's submission) is
//    visible to any pop after F's: F's push (release) pairs with its pop (acquire), and V's push
//    happens before both. One more full pass therefore holds V.
// Popped tasks are sorted by key (stable: one thread's keys never decrease, so each queue's
// order is kept) and admitted up to the first one that must still wait; the rest stay for the
// next pass or round. Without ordering tasks every key is equal and nothing waits.
bool Worker::note_popped(Task* t) {
  staged_.push_back({t, pass_});
  if ((t->admit_key & 1) == 0) return false;
  const std::uint64_t n = (t->admit_key + 1) / 2;
  if (n != seen_ + 1) {
    ahead_.insert(std::upper_bound(ahead_.begin(), ahead_.end(), n), n);
    return true;
  }
  seen_ = n;
  while (!ahead_.empty() && ahead_.front() == seen_ + 1) {
    ++seen_;
    ahead_.erase(ahead_.begin());
  }
  return true;
}

bool Worker::pop_pass(std::size_t limit, std::size_t& taken) {
  bool ordering = false;
  const unsigned ninbox = inboxes.load(std::memory_order_acquire);
  for (unsigned p = 0; p < ninbox && taken < limit; ++p) {
    Inbox* q = inbox[p].load(std::memory_order_acquire);
    // In batches: one load of the producer's index and one store of ours per batch rather than
    // per task, so the two cache lines move between the cores once per batch.
    Task* batch[64];
    for (;;) {
      const std::size_t got = q->pop(batch, std::min<std::size_t>(64, limit - taken));
      for (std::size_t i = 0; i < got; ++i) ordering |= note_popped(batch[i]);
      taken += got;
      if (got < 64 || taken >= limit) break;
    }
  }
  Task* t = nullptr;
  while (taken < limit && pending.pop(t)) {
    ordering |= note_popped(t);
    ++taken;
  }
  if (has_overflow.load(std::memory_order_acquire)) {
    std::deque<Task*> mine;
    {
      std::lock_guard<std::mutex> lock(overflow_mu);
      mine.swap(overflow);
      has_overflow.store(false, std::memory_order_relaxed);
    }
    for (Task* x : mine) ordering |= note_popped(x);
    taken += mine.size();
  }
  if (taken < limit) full_pass_ = pass_;  // it stopped at no limit: it saw every queue to its end
  ++pass_;
  return ordering;
}

std::size_t Worker::take_new(std::size_t cap) {
  std::size_t taken = 0;
  // The first pass is bounded (a flood cannot starve the rest of the round); a pass that popped
  // an ordering task is followed by a full one, which confirms it (a few at most: each needs an
  // ordering task popped in the pass before).
  bool ordering = pop_pass(cap, taken);
  if (!staged_.empty() && full_pass_ + 1 != pass_) ordering = true;  // the bounded pass stopped early
  for (int extra = 0; ordering && extra < 4; ++extra) ordering = pop_pass(SIZE_MAX, taken);
  if (staged_.empty()) return taken;
  auto by_key = [](const Staged& a, const Staged& b) { return a.task->admit_key < b.task->admit_key; };
  if (!std::is_sorted(staged_.begin(), staged_.end(), by_key)) std::stable_sort(staged_.begin(), staged_.end(), by_key);
  std::size_t k = 0;
  for (; k < staged_.size(); ++k) {
    const Staged& s = staged_[k];
    const std::uint64_t key = s.task->admit_key;
    if ((key & 1) == 0) {
      if (key / 2 > seen_) break;  // an ordering task that came before it has not been popped
    } else {
      if ((key + 1) / 2 - 1 > seen_) break;  // an earlier ordering task has not been popped
      if (s.pass >= full_pass_) break;       // no full pass after its pop yet
    }
    admit(s.task);
  }
  staged_.erase(staged_.begin(), staged_.begin() + static_cast<std::ptrdiff_t>(k));
  return taken;
}

void Worker::part(std::uint64_t round) {
  round_ = round;
  parity_in_ = static_cast<unsigned>(round & 1);
  parity_out = parity_in_ ^ 1u;
  in_round_ = true;
  ran_ = 0;
  t_deferred_wakes = &wakes_;
  std::fill(deferred_[parity_out].begin(), deferred_[parity_out].end(), 0);

  // 1. Gates, first: every step of the previous round has returned, so a file whose tree is
  //    idle can be closed (its tree destroyed) or run its hook.
  progress_gates();
  drain();

  // 2. Ready steps: the lanes that have input, own lanes first, then others' (stealing).
  auto has_input = [&](unsigned lane) {
    for (unsigned p = 0; p < c.n; ++p)
      if (c.workers[p]->deferred_[parity_in_][lane]) return true;
    return false;
  };
  for (unsigned k = 0; k < c.n; ++k) {
    const unsigned owner = (index + k) % c.n;
    for (unsigned lane = owner; lane < c.lanes; lane += c.n)
      if (has_input(lane) && own_lane(lane)) drain();
  }
  // The waiters of what finished so far are woken now, before new work is admitted: a program
  // that resubmits on completion then gets its requests into this part's admission and its
  // engine submission (when it shares this CPU, it runs inside this wake-up call and pushes
  // them first) rather than one round later.
  if (!wakes_.empty()) wakes_.wake();

  // 3. New work from Pending (bounded per round so that a flood cannot starve the rest). Taken
  //    at the end of the part, so that what arrived while the round ran starts now.
  const std::size_t taken = take_new(c.opt.pending_capacity);
  max_pending.raise_to(taken);
  drain();

  // 4. Asynchronous engines: submit what the steps asked for, reap what completed (and run the
  //    continuations whose lanes this worker can hold), submit what those asked for.
  for (int pass = 0; pass < 2; ++pass) {
    drive_async();
    drain();
    if (backlog.empty()) break;
  }
  in_round_ = false;
  t_deferred_wakes = nullptr;
  give_back_copies(/*batched=*/true);  // before the wake-ups: a woken submitter finds the room at once
  wakes_.wake();
  flush_releases(false);
  steps.add(ran_);
  max_ready.raise_to(ran_);
}

// ---------------------------------------------------------------------------------------------
// Rounds: the master decides, the followers follow

void ControllerCore::follower_loop(Worker& w) {
  std::uint32_t seen = 0;
  for (;;) {
    // Wait to be told to run a round: spin, then sleep on `go`.
    std::uint32_t g = w.go.load(std::memory_order_acquire);
    if (g == seen) {
      spin_until(opt.spin_ns, [&] { return (g = w.go.load(std::memory_order_acquire)) != seen; });
      while (g == seen) {
        w.asleep.store(true, std::memory_order_seq_cst);
        if (w.go.load(std::memory_order_seq_cst) == seen) {
          w.sleeps.add();
          w.flush_releases();
          futex_wait(w.go, seen);
        }
        w.asleep.store(false, std::memory_order_relaxed);
        g = w.go.load(std::memory_order_acquire);
      }
    }
    seen = g;
    const RoundKind k = rounds.kind;
    const std::uint64_t r = rounds.number;
    if (k == RoundKind::stop) {
      w.flush_releases();
      return;
    }
    w.part(r);
    rounds.arrive();
  }
}

void RoundState::wait_arrivals(std::uint32_t expected, std::int64_t spin_ns, Counter& sleeps) noexcept {
  std::uint32_t a = arrived.load(std::memory_order_acquire);
  if (a != expected) {
    spin_until(spin_ns, [&] { return (a = arrived.load(std::memory_order_acquire)) == expected; });
    while (a != expected) {
      // seq_cst store, then re-read: pairs with arrive()'s seq_cst add and load.
      master_sleeping.store(true, std::memory_order_seq_cst);
      a = arrived.load(std::memory_order_seq_cst);
      if (a != expected) {
        sleeps.add();
        futex_wait(arrived, a);
      }
      master_sleeping.store(false, std::memory_order_relaxed);
      a = arrived.load(std::memory_order_acquire);
    }
  }
  arrived.store(0, std::memory_order_relaxed);
}

/// Work only worker w can do: take from its own queues, move its own gates, submit its own
/// backlog. Called by the master with every follower parked.
bool ControllerCore::has_local_work(const Worker& w) const {
  if (!w.pending.empty() || w.has_overflow.load(std::memory_order_acquire) || !w.backlog.empty() || w.has_staged())
    return true;
  const unsigned ninbox = w.inboxes.load(std::memory_order_acquire);
  for (unsigned p = 0; p < ninbox; ++p)
    if (w.inbox[p].load(std::memory_order_acquire)->read_available() != 0) return true;
  for (const FileCore* f : w.gated)
    if (gate_can_progress(*f)) return true;
  return false;
}

/// Anything for a normal round to do? Called by the master with every follower parked.
bool ControllerCore::something_runnable() {
  const unsigned parity_next = static_cast<unsigned>((rounds.number + 1) & 1);
  for (auto& wp : workers) {
    if (has_local_work(*wp)) return true;
    for (const auto& v : wp->out[parity_next])
      if (!v.empty()) return true;
  }
  return false;
}

void ControllerCore::issue_evictions() {
  constexpr std::uint32_t kMaxEvictions = 64;
  std::uint64_t want = quota.over_weak_bytes();
  BlockRecord rec;
  while (want > 0 && evictions_in_flight.load(std::memory_order_relaxed) < kMaxEvictions && quota.pop_oldest(rec)) {
    std::uint64_t bytes = 0;
    FileCore* f = registry.retain_by_tree(rec.tree_id, rec.depth, bytes);
    if (f == nullptr) continue;  // a stale record
    Task* t = acquire_task();    // refs = 1: the controller's (no receipt)
    t->kind = TaskKind::evict;
    t->file = f;
    t->op.kind = TreeOp::evict;
    t->op.offset = rec.base;
    t->op.evict_seq = rec.seq;
    t->op.evict_depth = rec.depth;
    evictions_in_flight.fetch_add(1, std::memory_order_relaxed);
    push(f->home, t);
    want = want > bytes ? want - bytes : 0;
  }
}

bool ControllerCore::issue_flush() {
  // Write back whole files, most dirty first, until at least half of the dirty bytes are covered.
  std::uint64_t total = 0;
  std::vector<std::pair<std::uint64_t, FileCore*>> dirty = registry.retain_dirty(total);
  if (dirty.empty()) return false;
  std::sort(dirty.begin(), dirty.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::uint64_t covered = 0;
  for (auto& [d, f] : dirty) {
    if (covered * 2 >= total) {
      file_release(f);
      continue;
    }
    covered += d;
    Task* t = acquire_task();
    t->kind = TaskKind::write_back;
    t->file = f;  // takes the reference retained above
    t->op.kind = TreeOp::write_back;
    push(f->home, t);
  }
  return true;
}

void ControllerCore::master_sleep(bool with_engines, std::int64_t timeout_ns) {
  workers[0]->flush_releases();
  pollfd fds[EngineTable::kMax + 2];
  nfds_t nfds = 0;
  fds[nfds++] = pollfd{doorbell.fd(), POLLIN, 0};
  const nfds_t timer = doorbell.timer_fd() >= 0 ? nfds : 0;
  if (timer != 0) fds[nfds++] = pollfd{doorbell.timer_fd(), POLLIN, 0};
  const nfds_t first_engine = nfds;
  bool engine_without_fd = false;
  if (with_engines) {
    const unsigned count = engines.count();
    for (unsigned i = 0; i < count; ++i) {
      EngineSlot& s = engines[i];
      if (!s.async || s.in_flight.load(std::memory_order_relaxed) == 0) continue;
      const int fd = s.engine->eventfd();
      if (fd >= 0)
        fds[nfds++] = pollfd{fd, POLLIN, 0};
      else
        engine_without_fd = true;
    }
  }
  if (engine_without_fd && (timeout_ns < 0 || timeout_ns > 100'000)) timeout_ns = 100'000;  // poll the engine
  timespec ts = ns_to_timespec(timeout_ns);
  timespec* tsp = timeout_ns >= 0 ? &ts : nullptr;
  workers[0]->sleeps.add();
  if (::ppoll(fds, nfds, tsp, nullptr) <= 0) return;  // timed out (or a signal): nothing to read
  if (fds[0].revents & POLLIN) doorbell.drain();
  if (timer != 0 && (fds[timer].revents & POLLIN)) doorbell.drain_timer();
  // Consume the engines' counters (nonblocking eventfds; the completions themselves are reaped
  // by the next round).
  for (nfds_t i = first_engine; i < nfds; ++i)
    if (fds[i].revents & POLLIN) {
      std::uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(fds[i].fd, &v, sizeof v);
    }
}

RoundKind ControllerCore::decide() {
  for (;;) {
    if (something_runnable()) {
      idle_since = -1;
      if (quota.over_weak()) {
        issue_evictions();
        rounds_recycle.add();
        return RoundKind::recycle;
      }
      if (closing.load(std::memory_order_relaxed)) {
        rounds_close.add();
        return RoundKind::close;
      }
      rounds_normal.add();
      return RoundKind::normal;
    }
    // Nothing to run now. Requests at asynchronous engines?
    if (engines.async_in_flight() != 0) {
      // Reap what is there (into the master's outbox for the next round), else sleep until an
      // engine's eventfd or the doorbell rings, after spinning for the spin budget.
      const unsigned count = engines.count();
      const std::int64_t until = monotonic_ns() + opt.io_spin_ns;
      bool got = false;
      do {
        for (unsigned i = 0; i < count && !got; ++i) {
          EngineSlot& s = engines[i];
          if (!s.async || s.in_flight.load(std::memory_order_relaxed) == 0) continue;
          std::lock_guard<std::mutex> lock(s.mu);
          const std::uint64_t before = s.in_flight.load(std::memory_order_relaxed);
          workers[0]->parity_out = static_cast<unsigned>((rounds.number + 1) & 1);
          workers[0]->reap_slot(s);
          got = s.in_flight.load(std::memory_order_relaxed) != before;
        }
        if (got || something_runnable()) break;
        cpu_relax();
      } while (monotonic_ns() < until);
      if (got) continue;
      doorbell.sleep([&] {
        if (!something_runnable()) master_sleep(true, -1);
      });
      continue;
    }
    if (quota.over_weak() && evictions_in_flight.load(std::memory_order_relaxed) == 0) {
      issue_evictions();
      if (something_runnable()) continue;
    }
    // Quiet. Shutting down and every file closed: stop.
    if (closing.load(std::memory_order_relaxed) && registry.empty()) return RoundKind::stop;
    const std::int64_t now = monotonic_ns();
    if (idle_since < 0) idle_since = now;
    std::int64_t timeout = -1;
    if (opt.flush_idle_ns >= 0 && registry.any_dirty()) {
      if (now - idle_since >= opt.flush_idle_ns) {
        if (issue_flush()) {
          idle_since = -1;
          rounds_flush.add();
          return RoundKind::flush;
        }
      } else {
        timeout = opt.flush_idle_ns - (now - idle_since);
      }
    }
    // Idle. Spin for the budget first (new work usually follows soon), then the master sleeps
    // on the doorbell (the followers sleep on the barrier).
    // (The run queues are checked every 16 pauses, not at each: every check reads the workers'
    // queue heads, cache lines the submitting threads write.)
    {
      const std::int64_t until = now + opt.spin_ns;
      bool woke = false;
      for (unsigned i = 0;; ++i) {
        cpu_relax();
        if ((i & 15) == 15) {
          if (something_runnable()) {
            woke = true;
            break;
          }
          if (monotonic_ns() >= until) break;
        }
      }
      if (woke) continue;
    }
    doorbell.sleep([&] {
      const bool stopping = closing.load(std::memory_order_relaxed) && timeout < 0;
      if (something_runnable() || (stopping && registry.empty())) return;
      rounds_idle.add();
      // While closing, wake up now and then: close progress needs no doorbell, but be safe.
      master_sleep(false, stopping ? 1'000'000 : timeout);
    });
  }
}

/// Does follower w have to take part in the next round? Only a worker can take from its own
/// queues, move its own gates and submit its own backlog; lanes of steps anyone can run, so the
/// followers join for those only when there are enough steps to share (kShareSteps). Otherwise
/// they sleep on and the master runs the round alone: a single busy file costs no barrier
/// wake-ups. Called by the master with every follower parked.
bool ControllerCore::needs(const Worker& w, std::uint64_t input_steps) const {
  constexpr std::uint64_t kShareSteps = 128;
  return input_steps >= kShareSteps || has_local_work(w);
}

void ControllerCore::master_loop() {
  Worker& m = *workers[0];
  std::uint32_t expected = 0;  // followers taking part in the current round
  for (;;) {
    // Wait for the followers of the last round.
    if (expected != 0) rounds.wait_arrivals(expected, opt.spin_ns, m.sleeps);
    const RoundKind k = decide();
    // Steps queued for the coming round (everyone is parked: the vectors are quiet).
    std::uint64_t input = 0;
    const unsigned pn = static_cast<unsigned>((rounds.number + 1) & 1);
    for (auto& wp : workers)
      for (const auto& v : wp->out[pn]) input += v.size();
    const std::uint64_t round = ++rounds.number;
    rounds.kind = k;
    expected = 0;
    for (unsigned i = 1; i < n; ++i) {
      Worker& w = *workers[i];
      if (k != RoundKind::stop && !needs(w, input)) continue;
      ++expected;
      w.go.store(static_cast<std::uint32_t>(round), std::memory_order_seq_cst);
      if (w.asleep.load(std::memory_order_seq_cst)) futex_wake(w.go);
    }
    if (k == RoundKind::stop) {
      m.flush_releases();
      return;
    }
    m.part(round);
  }
}

}  // namespace tai::detail
