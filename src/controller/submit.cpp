// Opening files and submitting tasks: the per-thread inboxes, push with back-pressure, the
// master's doorbell, submission stamps.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <system_error>
#include <thread>

#include "src/controller/core.hpp"
#include "engines/common/own_descriptors.hpp"

namespace tai::detail {

Result<File> ControllerCore::open(const OpenRequest& req) {
  if (!accepting.load(std::memory_order_acquire))
    return Error{std::make_error_code(std::errc::operation_canceled),
                 "tai::Controller::open(" + *req.path + "): " + kShutdownReason};
  auto slot = engines.find_or_make(req.engine, opt.engine_options, has(req.mode.flags, Open::direct));
  if (!slot) return slot.error();
  EngineSlot* s = slot.value();
  // The engine's open truncates at once, here; an earlier handle of the path that is still
  // closing writes its blocks back later, on a worker, and they would land after the truncation
  // and bring the old bytes back. So a truncating open first waits for that close.
  const std::string key = registry_key(*req.path);
  if (has(req.mode.flags, Open::truncate)) {
    if (auto e = wait_for_closing_handle(*req.path, key)) return *e;
  }
  auto ef = s->engine->open(*req.path, req.mode);
  if (!ef) return ef.error();

  auto f = std::make_unique<FileCore>();
  f->path = *req.path;
  f->key = key;
  f->tree_name = req.tree;
  f->ctl = this;
  f->slot = s;
  f->engine_name = s->name;
  f->mode = req.mode;
  f->efile = std::move(ef.value());
  f->factory = req.factory;
  f->tree_options = req.tree_options ? *req.tree_options : opt.tree_options;
  try {
    f->tree = req.factory(f->efile.get(), quota, f->tree_options);
  } catch (const std::exception& ex) {
    s->engine->close(*f->efile);
    return Error{std::make_error_code(std::errc::not_enough_memory),
                 "tai::Controller::open(" + f->path + "): cannot make the cache tree: " + ex.what()};
  }
  f->tree_id = f->tree->id();
  if (opt.caller_writes && s->sync != nullptr && f->tree->caller_write_min_bytes() != ~std::uint64_t{0}) {
    f->caller_engine = s->sync;  // null for asynchronous engines: no caller writes
    f->caller_min_bytes = f->tree->caller_write_min_bytes();
  }
  f->refs.store(2, std::memory_order_relaxed);  // the handle and the registry
  FileCore* raw = f.release();
  registry.add(raw, n);
  return File(raw);
}

std::string ControllerCore::registry_key(const std::string& path) {
  if (char* real = ::realpath(path.c_str(), nullptr)) {
    std::string key = real;
    std::free(real);
    return key;
  }
  return path;
}

std::optional<Error> ControllerCore::wait_for_closing_handle(const std::string& path, const std::string& key) {
  FileCore* earlier = registry.retain_closing(key);
  if (earlier == nullptr) return std::nullopt;
  if (on_own_worker()) {
    // The close needs the workers this task is holding: waiting here could wait forever.
    file_release(earlier);
    return Error{std::make_error_code(std::errc::resource_deadlock_would_occur),
                 "tai::Controller::open(" + path +
                     ", truncate) from a task of the same controller while the earlier handle of the path is still "
                     "closing: the truncation must wait for that close, which needs this worker"};
  }
  // A reopen with truncate right after a close is rare and the close may take as long as its
  // write-back: a sleeping poll, from 20 us up to 1 ms, rather than a wake-up on every close.
  // Acquire: pairs with the home worker's release store of fully_closed once the engine file
  // is closed, so the truncation below comes after every byte the earlier handle wrote back.
  auto pause = std::chrono::microseconds(20);
  while (!earlier->fully_closed.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  file_release(earlier);
  return std::nullopt;
}

int ControllerCore::producer_index() {
  struct Entry {
    std::uint64_t serial = 0;
    int index = -1;
  };
  static thread_local Entry cache[4];
  static thread_local unsigned victim = 0;
  for (const Entry& e : cache)
    if (e.serial == serial) return e.index;
  int idx = -1;
  {
    std::lock_guard<std::mutex> lock(producers_mu);
    if (producers < kMaxProducers) {
      idx = static_cast<int>(producers++);
      submitting_threads.store(producers, std::memory_order_relaxed);
      for (auto& w : workers) {
        w->inbox[static_cast<unsigned>(idx)].store(new Worker::Inbox(opt.pending_capacity), std::memory_order_release);
        w->inboxes.store(producers, std::memory_order_release);
      }
    }
  }
  cache[victim++ % 4] = Entry{serial, idx};
  return idx;
}

void ControllerCore::push(unsigned w, Task* t) {
  Worker& wk = *workers[w];
  if (t->file != nullptr) count_file_task(*t->file, *t);  // before the push publishes t
  const bool inside = on_own_worker();
  // Decided before the push: once pushed, t may be run, finished and recycled by a worker.
  const bool lazy = !inside && lazy_wake(*t);
  if (!inside) {
    if (const int p = producer_index(); p >= 0) {
      Worker::Inbox* q = wk.inbox[static_cast<unsigned>(p)].load(std::memory_order_relaxed);  // stored by this thread
      // Back-pressure: wait for room first. This thread is the queue's only producer, so the
      // room stays, and the push after the admission stamp cannot fail (a number taken and
      // never pushed would hold admission back for good).
      while (q->write_available() == 0) {
        doorbell.ring();
        std::this_thread::yield();
      }
      wk.stamp_admission(*t);
      q->push(t);
      doorbell.ring(lazy);
      return;
    }
  }
  wk.stamp_admission(*t);
  if (!wk.pending.bounded_push(t)) {
    // An ordering task must not wait here with its number taken (see above): like a worker's
    // own pushes, it goes to the overflow list instead.
    if (inside || Worker::orders_across_threads(*t)) {
      // A worker must never wait for a queue that only the workers drain.
      std::lock_guard<std::mutex> lock(wk.overflow_mu);
      wk.overflow.push_back(t);
      wk.has_overflow.store(true, std::memory_order_release);
    } else {
      // Back-pressure: the application thread waits for room.
      do {
        doorbell.ring();
        std::this_thread::yield();
      } while (!wk.pending.bounded_push(t));
    }
  }
  doorbell.ring(lazy);
}

void ControllerCore::stamp_submit(Task& t) const noexcept {
  if (!opt.latency_histograms) return;
  static thread_local unsigned countdown = 0;  // per submitting thread: no shared counter
  if (countdown != 0 && opt.latency_sample_every > 1) {
    --countdown;
    return;
  }
  countdown = opt.latency_sample_every > 1 ? opt.latency_sample_every - 1 : 0;
  t.stamp(static_cast<std::uint64_t>(monotonic_ns()));
}

Receipt ControllerCore::submit_task(Task* t) {
  const bool inside = on_own_worker();
  if (!inside && !accepting.load(std::memory_order_acquire)) {
    finish(*t, TaskState::rejected, ECANCELED, kShutdownReason);
    rejected_outside.fetch_add(1, std::memory_order_relaxed);
    return Receipt(t);
  }
  t->owner = this;
  stamp_submit(*t);
  retain_unpublished_task(t);  // the controller's reference (t is not yet published)
  // Function tasks go to the submitting worker (a continuation's follow-up stays local), else
  // round-robin by a per-thread counter.
  static thread_local unsigned rr = 0;
  const unsigned w = inside ? t_worker->index : (rr++ % n);
  push(w, t);
  return Receipt(t);
}

Receipt ControllerCore::submit_file_task(FileCore* f, Task* t) {
  t->file = f;
  t->owner = this;
  t_file_refs.take(f);
  stamp_submit(*t);
  retain_unpublished_task(t);  // the controller's reference (t is not yet published)
  push(f->home, t);
  return Receipt(t);
}

Doorbell::Doorbell(std::int64_t lazy_ns) : fd_(tai::detail::make_own_eventfd()) {
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "tai::Controller: eventfd");
  if (lazy_ns > 0) {
    // Without a timer every ring wakes at once: the delay is an optimisation, never a need.
    timer_fd_ = tai::detail::adopt_own_descriptor(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    lazy_ns_ = lazy_ns;
  }
}

Doorbell::~Doorbell() {
  if (fd_ >= 0) tai::detail::close_own_descriptor(fd_);
  if (timer_fd_ >= 0) tai::detail::close_own_descriptor(timer_fd_);
}

void Doorbell::arm() noexcept {
  itimerspec when{};
  when.it_value.tv_sec = static_cast<time_t>(lazy_ns_ / 1'000'000'000);
  when.it_value.tv_nsec = static_cast<long>(lazy_ns_ % 1'000'000'000);
  if (::timerfd_settime(timer_fd_, 0, &when, nullptr) != 0) {
    // The timer cannot be armed: wake the master now instead.
    if (sleeping_.exchange(false, std::memory_order_seq_cst)) signal();
  }
}

void Doorbell::drain_timer() noexcept {
  std::uint64_t expirations;
  [[maybe_unused]] ssize_t r = ::read(timer_fd_, &expirations, sizeof expirations);
}

void Doorbell::signal() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(fd_, &one, sizeof one);
}

void Doorbell::drain() noexcept {
  // One read resets an eventfd's count to zero.
  std::uint64_t count;
  [[maybe_unused]] ssize_t r = ::read(fd_, &count, sizeof count);
}

}  // namespace tai::detail
