// What happens when a task ends: the result of a tree operation, statistics, flush aggregates,
// the write copy's bytes, and the batched release of file references.
#include "src/controller/core.hpp"

namespace tai::detail {

RequestKind kind_of(const Task& t) noexcept {
  switch (t.kind) {
    case TaskKind::tree_op:
      switch (t.op.kind) {
        case TreeOp::read: return RequestKind::read;
        case TreeOp::write: return RequestKind::write;
        case TreeOp::fsync: return RequestKind::fsync;
        default: return RequestKind::fdatasync;
      }
    case TaskKind::function: return RequestKind::task;
    case TaskKind::hook: return RequestKind::hook;
    case TaskKind::barrier: return RequestKind::barrier;
    case TaskKind::close: return RequestKind::close;
    default: return RequestKind::flush;
  }
}

void op_complete_trampoline(Operation&, void* ctx) {
  Task* t = static_cast<Task*>(ctx);
  // Through the file: Task line 1, which the worker reads anyway (see Task's layout).
  t->file->ctl->on_op_complete(*t);
}

void ControllerCore::finish(Task& t, TaskState s, int error, const char* reason) {
  // The file's traffic word first, before the receipt publishes the result: a thread that saw
  // this task finish and then writes to the file finds it uncounted (a write after a waited
  // fsync can be a caller write). Release: pairs with a caller write's acquire, which then sees
  // everything this task did to the tree.
  if (t.traffic) {
    t.traffic = false;
    t.file->traffic.fetch_sub(FileTraffic::kOtherOne, std::memory_order_release);
  }
  // Every task a worker ends passes here (completed, failed, rejected after submission), so a
  // counted write is uncounted exactly once. Before finish_task publishes the result: a thread
  // that saw the receipt finish then sees the count without this write's bytes.
  if (const std::uint64_t bytes = t.copy_charge) {
    t.copy_charge = 0;
    const bool own = on_own_worker();
    // The write is over (its bytes are in the cache or at the engine), so its copy goes now, not
    // when the last receipt does: a program that holds its receipts until a batch ends would
    // otherwise hold every copy of the batch, past the budget. A small copy stays for the task's
    // reuse (Task::recycle keeps up to kKeepDataBytes) unless a receipt holds the task (below); a
    // large one goes back to the pool's arena for the next large write.
    // Nothing reads `data` of a finished write.
    if (t.data.size() > Task::kKeepDataBytes) {
      copy_pool.give(std::move(t.data));
      t.data = std::move(t.displaced_copy);  // the task's own small copy, if it had one (File::write)
    }
    if (!t.data.empty() && t.data.size() <= Task::kKeepDataBytes && t.refs.load(std::memory_order_relaxed) > 1) {
      // A receipt still holds the task (the controller's reference is the other one), so the
      // task is not recycled until the program lets it go: a program that waits once per batch
      // would keep every small copy of the batch, outside the budget (the serial workload's
      // async mode: 24,400 copies of 11 KB, 270 MB). Past a few MiB so kept the copy is freed,
      // back to the allocator's cache, where the next writes find it without new page faults.
      // Relaxed: a hint; a receipt dropped right after this load only means the copy was counted.
      if (keep_finished_copy(t.data.size()))
        t.keeps_copy = true;
      else
        t.data.reset();
    }
    // A worker of this controller gives the bytes back in batches (Worker::give_back_copies),
    // not per write: the counter's cache line would otherwise move from the submitting thread to
    // the worker and back for every write. Once per round part was not enough: with small
    // writes a part holds a few, and that line's transfer was still a fifth of the CPU time of
    // a Null-engine run (the submitter's addition). The count stays high by at most a batch per
    // worker, and not at all once a submitter waits for room.
    if (own)
      t_worker->add_copy_release(bytes);
    else
      copies.release(bytes);
  }
  finish_task(t, s, error, reason);
}

void ControllerCore::finish_part(Task& parent, int err) {
  if (err != 0) {
    int expected = 0;  // the first error wins; relaxed: read after the acq_rel countdown below
    parent.part_error.compare_exchange_strong(expected, err, std::memory_order_relaxed);
  }
  // acq_rel: the last part sees every part's error.
  if (parent.parts.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  const int pe = parent.part_error.load(std::memory_order_relaxed);
  if (on_own_worker()) t_worker->record_latency(RequestKind::flush, parent);
  finish(parent, pe ? TaskState::failed : TaskState::done, pe, pe ? kFlushPartFailed : nullptr);
  release_task(&parent);  // the controller's reference, taken by flush()
}

void ControllerCore::on_op_complete(Task& t) {
  Worker* w = t_worker;
  FileCore* f = t.file;
  const std::int64_t res = t.op.result();
  TaskState state = TaskState::done;
  int err = 0;
  const char* reason = nullptr;
  if (res < 0) {
    state = TaskState::failed;
    err = static_cast<int>(-res);
  }
  if (t.op.kind == TreeOp::fsync || t.op.kind == TreeOp::fdatasync) {
    // The tree failed this fsync with its unrecovered sync error, or cleared the error.
    const std::error_code se = f->tree->sync_error();
    f->sticky.store(se.value(), std::memory_order_relaxed);
    if (se && res == -se.value()) reason = kUnrecoveredSync;
  }
  t.result = res < 0 ? 0 : res;
  switch (t.kind) {
    case TaskKind::tree_op:
    case TaskKind::barrier: {
      if (w) {
        if (res > 0 && t.op.kind == TreeOp::read) w->bytes_read.add(static_cast<std::uint64_t>(res));
        if (res > 0 && t.op.kind == TreeOp::write) w->bytes_written.add(static_cast<std::uint64_t>(res));
        if (state == TaskState::failed) w->failed.add();
        w->record_latency(kind_of(t), t);
      }
      // A barrier's reference belongs to its gate, whose worker may release it as soon as it
      // sees the task finished, while finish() still touches the task after publishing it (the
      // deferred wake's reference, the continuation). So this worker holds a reference of its
      // own across finish(): taken while the gate's is still held (the gate waits for the
      // finish), so the count cannot be at zero, and the gate's worker sees it (it
      // happens-before the finish's release).
      if (t.kind == TaskKind::barrier) {
        retain_task(&t);
        finish(t, state, err, reason);
        release_task(&t);
        return;
      }
      finish(t, state, err, reason);
      break;
    }
    case TaskKind::write_back: {
      if (state == TaskState::done) {
        if (const std::error_code rec = f->tree->recorded_error()) {
          state = TaskState::failed;
          err = rec.value();
          reason = "an earlier write-back of this file failed";
        }
      }
      if (Task* p = t.parent) finish_part(*p, err);
      finish(t, state, err, reason);
      break;
    }
    case TaskKind::evict:
      if (w) w->evictions.add();
      evictions_in_flight.fetch_sub(1, std::memory_order_relaxed);
      finish(t, state, err, reason);
      break;
    default:
      finish(t, state, err, reason);
      break;
  }
  release_task(&t);
  if (w)
    w->release_later(f);
  else
    file_release(f);
}

void Worker::reject(Task& t, int error, const char* reason) {
  c.finish(t, TaskState::rejected, error, reason);
  FileCore* f = t.file;
  // A flush part of a file that closed meanwhile: nothing to do there, no error of its own.
  if (Task* p = t.parent) c.finish_part(*p, 0);
  release_task(&t);
  if (f) file_release(f);
}

void Worker::count_request(const Task& t) { requests[static_cast<std::size_t>(kind_of(t))].add(); }

void Worker::release_later(FileCore* f) {
  // Usually one file or a few: a short scan of the latest entries.
  for (std::size_t i = nreleases_, k = 0; i-- > 0 && k < 4; ++k) {
    DeferredRelease& r = releases_[i];
    if (r.file.load(std::memory_order_relaxed) == f) {
      r.count.store(r.count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return;
    }
  }
  if (nreleases_ == kReleaseFiles) flush_releases(true);
  DeferredRelease& r = releases_[nreleases_++];
  r.count.store(1, std::memory_order_relaxed);  // before the file: a reader that sees f sees 1
  r.file.store(f, std::memory_order_relaxed);
}

void Worker::give_back_copies(bool batched) noexcept {
  const std::uint64_t n = copy_release.load(std::memory_order_relaxed);
  if (n == 0) return;
  if (batched && n < c.copies.release_batch() && !c.copies.wanted()) return;
  c.copies.release(n);
  copy_release.store(0, std::memory_order_relaxed);
}

void Worker::flush_releases(bool all) {
  // The end of a part gives its copies back itself (batched, before its wake-ups, Worker::part);
  // a full flush (sleep, stop, a full release list) gives back everything.
  if (all) give_back_copies();
  std::size_t keep = 0;
  for (std::size_t i = 0; i < nreleases_; ++i) {
    FileCore* f = releases_[i].file.load(std::memory_order_relaxed);
    const std::uint32_t count = releases_[i].count.load(std::memory_order_relaxed);
    if (!all && count < kReleaseBatch) {
      if (keep != i) {
        releases_[keep].count.store(count, std::memory_order_relaxed);
        releases_[keep].file.store(f, std::memory_order_relaxed);
      }
      ++keep;
      continue;
    }
    releases_[i].file.store(nullptr, std::memory_order_relaxed);
    releases_[i].count.store(0, std::memory_order_relaxed);
    file_release(f, count);
  }
  for (std::size_t i = keep; i < nreleases_; ++i) {
    releases_[i].file.store(nullptr, std::memory_order_relaxed);
    releases_[i].count.store(0, std::memory_order_relaxed);
  }
  nreleases_ = keep;
}

}  // namespace tai::detail
