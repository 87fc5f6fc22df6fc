// The controller's life: construction (options, engines, workers), flush, close, shutdown and
// statistics.
#include <algorithm>
#include <cstdio>

#include <pthread.h>
#include <sched.h>

#include "src/controller/core.hpp"
#include "tai/engine_selector.hpp"
#include "engines/common/own_descriptors.hpp"

namespace tai::detail {

const char* const kClosedReason = "the file is closed";
const char* const kShutdownReason = "the controller is shutting down";
const char* const kUnrecoveredSync =
    "an engine sync of this file failed and the data it covered has not been written again and synced since";
const char* const kFlushPartFailed = "a file's write-back failed";
const char* const kWaitOnOwnWorkerReason =
    "a wait for an unfinished receipt on a worker thread of the same controller (inside a continuation, "
    "a submitted function or a hook) would never end: the worker holds up the rounds that would finish "
    "it; chain the work with then() instead";

namespace {
// The CPUs this process may run on (its affinity mask), else the machine's; at least 1.
unsigned usable_cpus() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<unsigned>(n);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

/// The options with contradictions corrected, each said on stderr: a weak quota above the
/// strict one would otherwise be lowered silently by Quota, and a user who set only
/// strict_quota would not learn that the default weak_quota (256 MiB) did not fit it.
ControllerOptions corrected_options(const ControllerOptions& o) {
  ControllerOptions c = o;
  if (c.weak_quota > c.strict_quota) {
    // strict / 2: the ratio of the defaults (256 MiB / 512 MiB), so recycling starts halfway.
    c.weak_quota = c.strict_quota / 2;
    std::fprintf(stderr,
                 "tai::Controller: weak_quota (%llu bytes) is above strict_quota (%llu bytes); using weak_quota = "
                 "%llu bytes (strict_quota / 2)\n",
                 static_cast<unsigned long long>(o.weak_quota), static_cast<unsigned long long>(o.strict_quota),
                 static_cast<unsigned long long>(c.weak_quota));
  }
  if (c.pending_capacity < 64) c.pending_capacity = 64;
  if (c.pending_capacity > 65534) c.pending_capacity = 65534;  // Boost's fixed-size limit
  return c;
}
}  // namespace

ControllerCore::ControllerCore(const ControllerOptions& o)
    : opt(corrected_options(o)),
      quota(opt.weak_quota, opt.strict_quota, 1u << 14, Quota::kDefaultPoolLimit, opt.clean_budget, opt.huge_pages),
      doorbell(opt.write_wake_delay_ns),
      copies(opt.write_copy_budget, opt.spin_ns, kMaxProducers),
      copy_pool(opt.write_copy_budget, opt.huge_pages) {
  n = opt.workers ? opt.workers : std::max(1u, std::thread::hardware_concurrency());
  // 1 (or one CPU): from the first write, which is then the first thread's.
  caller_write_threads = opt.caller_write_threads != 0 ? opt.caller_write_threads : usable_cpus();
  if (caller_write_threads == 1) caller_write_threads = 0;
  lanes = n * std::max(1u, opt.lanes_per_worker);
  copies.set_release_batch(n);
  rounds.lane_claim = std::make_unique<std::atomic<std::uint64_t>[]>(lanes);
  for (unsigned i = 0; i < lanes; ++i) rounds.lane_claim[i].store(0, std::memory_order_relaxed);

  engines.default_name = opt.engine.empty() ? "auto" : opt.engine;
  engines.default_direct_name = engines.default_name;
  if (engines.default_name == "auto") {
    // O_DIRECT files get the best asynchronous engine: the device takes several requests at
    // once and nothing else overlaps them. Buffered files get posix on the workers: a buffered
    // write is a copy into the page cache on whichever thread makes the call, so an
    // asynchronous engine adds its submission, reaping and the master's sleeps on its eventfd
    // (on io_uring 4x the wake-ups per GiB of the posix engine in the image workload) and
    // overlaps nothing the workers do not already overlap (docs/results/cache-cost.md).
    std::string note;
    auto e = make_engine("auto", opt.engine_options, &note);
    if (!e) throw std::system_error(e.error().code, "tai::Controller: " + e.error().message);
    engines.default_direct_name = std::string(e.value()->name());
    engines.add(engines.default_direct_name, std::move(e.value()));
    engines.default_name = "posix";
    if (engines.default_direct_name != engines.default_name) {
      auto p = make_engine(engines.default_name, opt.engine_options);
      if (!p) throw std::system_error(p.error().code, "tai::Controller: " + p.error().message);
      engines.add(engines.default_name, std::move(p.value()));
    }
    engine_note = "auto: posix for buffered files, for O_DIRECT files " + note;
  } else {
    engine_note = engines.default_name;
  }

  workers.reserve(n);
  for (unsigned i = 0; i < n; ++i) workers.push_back(std::make_unique<Worker>(*this, i));
  threads.reserve(n);
  const tai::detail::SignalsBlockedScope start_blocked;  // the workers start with every signal blocked
  for (unsigned i = 0; i < n; ++i) {
    threads.emplace_back([this, i] {
      tai::detail::mark_this_thread_as_tai(i == 0 ? "tai-master" : "tai-worker");
      if (opt.batch_scheduling) {  // ControllerOptions::batch_scheduling says why
        struct sched_param batch {};
        (void)::pthread_setschedparam(::pthread_self(), SCHED_BATCH, &batch);
      }
      Worker& w = *workers[i];
      t_worker = &w;
      set_worker_task_cache();
      if (i == 0)
        master_loop();
      else
        follower_loop(w);
      t_worker = nullptr;
    });
  }
}

ControllerCore::~ControllerCore() { shutdown(); }

Worker::Worker(ControllerCore& core, unsigned index)
    : c(core), index(index), pending(std::min(core.opt.pending_capacity, kSharedPendingMax)) {
  for (auto& side : out) side.resize(core.lanes);
  for (auto& side : out)
    for (auto& v : side) v.reserve(64);
  claimed_.assign(core.lanes, ~std::uint64_t{0});
  for (auto& d : deferred_) d.assign(core.lanes, 0);
  now_.reserve(1024);
}

Worker::~Worker() {
  for (auto& q : inbox) delete q.load(std::memory_order_relaxed);
}

void ControllerCore::add_failure(std::string what) {
  std::lock_guard<std::mutex> lock(report_mu);
  failures.push_back(std::move(what));
}

Receipt ControllerCore::flush() {
  Task* agg = acquire_task();  // the receipt's reference
  agg->kind = TaskKind::flush;
  if (!accepting.load(std::memory_order_acquire)) {
    finish(*agg, TaskState::rejected, ECANCELED, kShutdownReason);
    return Receipt(agg);
  }
  flushes.fetch_add(1, std::memory_order_relaxed);
  agg->owner = this;
  if (opt.latency_histograms) agg->stamp(static_cast<std::uint64_t>(monotonic_ns()));
  retain_task(agg);  // the controller's, dropped by the last part (finish_part)
  const std::vector<FileCore*> open_files = registry.retain_all(/*with_tree=*/true);
  // One part per file, plus a guard part that this thread ends below, so that the aggregate
  // cannot finish while parts are still being pushed.
  agg->parts.store(static_cast<std::uint32_t>(open_files.size()) + 1, std::memory_order_relaxed);
  for (FileCore* f : open_files) {
    Task* t = acquire_task();
    t->kind = TaskKind::write_back;
    t->file = f;  // takes the reference retain_all() took
    t->parent = agg;
    t->op.kind = TreeOp::write_back;
    push(f->home, t);
  }
  finish_part(*agg, 0);  // the guard part: finishes the aggregate now if every part has
  return Receipt(agg);
}

void ControllerCore::close_file(FileCore* f, Task* t) {
  if (t == nullptr) {
    t = acquire_task();  // refs 1 becomes the controller's below (no receipt)
    t->refs.store(0, std::memory_order_relaxed);
    f->detached = true;
  }
  t->kind = TaskKind::close;
  t->file = f;
  // No caller write begins from here on (the close task's count below also keeps them out
  // until it ends; this keeps them out after it too). Relaxed: an RMW on the word.
  f->traffic.fetch_or(FileTraffic::kClosing, std::memory_order_relaxed);
  file_retain(f);
  if (opt.latency_histograms) t->stamp(static_cast<std::uint64_t>(monotonic_ns()));
  retain_unpublished_task(t);  // the controller's reference (t is not yet published)
  push(f->home, t);
}

ShutdownReport ControllerCore::shutdown() {
  if (on_own_worker()) {
    // Joining the workers from one of them would join this very thread (std::thread::join
    // throws, or the other workers wait for this one's rounds forever): refused, and said.
    ShutdownReport refused;
    refused.failures.push_back(
        "shutdown() was called from a task of the same controller and was refused: the workers cannot be "
        "joined from one of them; call it from another thread (the controller keeps running)");
    return refused;
  }
  if (shut_down) return {};
  shut_down = true;
  accepting.store(false, std::memory_order_release);
  closing.store(true, std::memory_order_relaxed);
  for (FileCore* f : registry.retain_all(/*with_tree=*/false)) {
    if (!f->closed.exchange(true, std::memory_order_acq_rel)) close_file(f, nullptr);
    file_release(f);
  }
  doorbell.ring();
  doorbell.signal();
  for (auto& th : threads) th.join();
  threads.clear();
  ShutdownReport rep;
  std::lock_guard<std::mutex> lock(report_mu);
  rep.failures = failures;
  return rep;
}

ControllerStats ControllerCore::stats() const {
  ControllerStats s;
  s.workers = n;
  for (const auto& wp : workers) {
    const Worker& w = *wp;
    for (std::size_t k = 0; k < kRequestKinds; ++k) {
      s.requests[k] += w.requests[k].get();
      for (std::size_t b = 0; b < LatencyHistogram::kBuckets; ++b) s.latency[k].counts[b] += w.latency[k][b].get();
    }
    s.failed += w.failed.get();
    s.bytes_read += w.bytes_read.get();
    s.bytes_written += w.bytes_written.get();
    s.steps += w.steps.get();
    s.steals += w.steals.get();
    s.sleeps += w.sleeps.get();
    s.max_pending = std::max(s.max_pending, w.max_pending.get());
    s.max_ready = std::max(s.max_ready, w.max_ready.get());
    s.engine_syncs += w.engine_syncs.get();
    s.engine_submit_calls += w.engine_submit_calls.get();
    s.evictions += w.evictions.get();
  }
  s.rejected = rejected_outside.load(std::memory_order_relaxed);
  // Caller writes are writes like the others in every count, and counted apart too.
  s.caller_writes = caller_writes.load(std::memory_order_relaxed);
  s.requests[static_cast<std::size_t>(RequestKind::write)] += s.caller_writes;
  s.bytes_written += caller_write_bytes.load(std::memory_order_relaxed);
  s.failed += caller_write_failures.load(std::memory_order_relaxed);
  s.requests[static_cast<std::size_t>(RequestKind::flush)] += flushes.load(std::memory_order_relaxed);
  // Counters: closed trees and open ones. "Now" values: open trees only (a closed tree's are
  // what it held when it closed).
  BTreeStats now{};
  BTreeStats sum{};
  s.open_files = registry.sum_stats(now, sum);
  s.cached_bytes = now.cached_bytes;
  s.dirty_bytes = now.dirty_bytes;
  s.blocks = now.blocks;
  s.dirty_blocks = now.dirty_blocks;
  s.nodes = now.nodes;
  s.node_bytes = now.node_bytes;
  s.engine_reads = sum.engine_reads;
  s.engine_writes = sum.engine_writes;
  s.bytes_from_engine = sum.bytes_from_engine;
  s.bytes_to_engine = sum.bytes_to_engine;
  s.cache_hits = sum.cache_hits;
  s.fills = sum.fills;
  s.merges = sum.merges;
  s.merged_bytes = sum.merged_bytes;
  s.write_throughs = sum.write_throughs;
  s.reroutes = sum.reroutes;
  s.uncached = sum.uncached;
  s.restructures = sum.restructures;
  s.quiesces = sum.quiesces;
  s.write_back_errors = sum.write_back_errors;
  s.inline_ops = sum.inline_ops;
  s.size_refreshes = sum.size_refreshes;
  s.collects = sum.collects;
  s.gathered_blocks = sum.gathered_blocks;
  s.write_arounds = sum.write_arounds;
  s.quota_denials = quota.denials();
  s.quota_used = quota.used();
  s.quota_peak = quota.peak();
  s.quota_weak = quota.weak();
  s.quota_strict = quota.strict();
  // Without what the workers finished and have not given back yet (Worker::copy_release): read
  // first, so that a give-back between the two reads makes the figure lower, never higher.
  std::uint64_t unreturned = 0;
  for (const auto& w : workers) unreturned += w->copy_release.load(std::memory_order_relaxed);
  // And the submitting threads' credit: counted ahead, held by no write.
  for (const auto& c : credits) unreturned += c.bytes.load(std::memory_order_relaxed);
  const std::uint64_t held = copies.held();
  s.write_copy_bytes = held > unreturned ? held - unreturned : 0;
  s.write_copy_budget = copies.budget();
  s.write_copy_waits = copies.waits();
  s.write_copy_pooled = copy_pool.pooled_bytes();
  s.write_copy_mapped = copy_pool.mapped_bytes();
  s.write_copy_reuses = copy_pool.reuses();
  s.write_copy_allocations = copy_pool.allocations();
  s.rounds_normal = rounds_normal.get();
  s.rounds_recycle = rounds_recycle.get();
  s.rounds_flush = rounds_flush.get();
  s.rounds_idle = rounds_idle.get();
  s.rounds_close = rounds_close.get();
  s.async_in_flight = engines.async_in_flight();
  return s;
}

}  // namespace tai::detail
