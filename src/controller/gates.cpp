// Admission and the per-file gates: a file's tasks start in submission order on its home
// worker; a hook, a barrier or a close holds the tasks behind it until it has passed.
#include <cerrno>

#include "src/controller/core.hpp"

namespace tai::detail {

void Worker::run_function(Task& t) {
  t.phase.store(static_cast<std::uint8_t>(TaskState::running), std::memory_order_relaxed);
  TaskState s = TaskState::done;
  int err = 0;
  const char* reason = nullptr;
  // Unlike a continuation, a task may block, for instance until a thread it posted to (a
  // CompletionQueue) answers: what it posts wakes at once, not at the part's next wake point,
  // which comes only after it returns.
  DeferredWakes* const deferred = t_deferred_wakes;
  t_deferred_wakes = nullptr;
  try {
    t.fn();
  } catch (...) {
    s = TaskState::failed;
    err = ECANCELED;
    reason = "the function threw an exception";
  }
  t_deferred_wakes = deferred;
  t.fn.reset();  // destroy what it captured now, not when the task is recycled
  if (s == TaskState::failed) failed.add();
  record_latency(kind_of(t), t);
  c.finish(t, s, err, reason);
}

void Worker::admit(Task* t) {
  count_request(*t);
  if (t->kind == TaskKind::function) {
    run_function(*t);
    release_task(t);
    return;
  }
  FileCore& f = *t->file;
  if (t->traffic) ControllerCore::wait_for_caller_writes(f);
  if (f.predecessor || f.gate || f.held_head) {
    t->phase.store(static_cast<std::uint8_t>(TaskState::waiting), std::memory_order_relaxed);
    t->next = nullptr;
    if (f.held_tail)
      f.held_tail->next = t;
    else
      f.held_head = t;
    f.held_tail = t;
    if (!f.listed) {
      f.listed = true;
      gated.push_back(&f);
    }
    return;
  }
  begin(t);
}

void Worker::start_op(FileCore& f, Task* task) {
  task->phase.store(static_cast<std::uint8_t>(TaskState::ready), std::memory_order_relaxed);
  // Usually already so (a recycled task keeps them): a store would take line 1 of the task
  // from the submitting thread, which writes the next request's parameters there.
  if (task->op.on_complete != &op_complete_trampoline) task->op.on_complete = &op_complete_trampoline;
  if (task->op.context != task) task->op.context = task;
  f.tree->start(task->op, *this);
  // The tree's nodes have grown past what its blocks need: a collect operation right behind
  // this one, in the file's order like any other (one at a time per tree; see
  // TreeCore::take_collect_request). Internal: no receipt, nothing to report.
  if (f.tree->take_collect_request()) {
    Task* g = acquire_task();  // refs = 1: the controller's
    g->kind = TaskKind::collect;
    g->file = &f;
    g->owner = &c;
    g->op.kind = TreeOp::collect;
    g->phase.store(static_cast<std::uint8_t>(TaskState::ready), std::memory_order_relaxed);
    g->op.on_complete = &op_complete_trampoline;
    g->op.context = g;
    file_retain(&f);  // the task's, dropped by its completion like every file task's
    // Counted like a pushed task (the file's operation in flight may be an fsync, beside which
    // caller writes run): none begins from here on, and any in progress ends first.
    ControllerCore::count_file_task(f, *g);
    ControllerCore::wait_for_caller_writes(f);
    f.tree->start(g->op, *this);
  }
}

void Worker::gate_on(FileCore& f, Task* task) {
  f.gate = task;
  if (!f.listed) {
    f.listed = true;
    gated.push_back(&f);
  }
}

void Worker::begin(Task* t) {
  FileCore& f = *t->file;
  if (f.tree_gone) {
    // After the close: user operations are rejected; internal ones have nothing left to do.
    if (t->kind == TaskKind::write_back || t->kind == TaskKind::evict || t->kind == TaskKind::collect) {
      if (t->kind == TaskKind::evict) c.evictions_in_flight.fetch_sub(1, std::memory_order_relaxed);
      reject(*t, 0, nullptr);
    } else {
      reject(*t, EBADF, kClosedReason);
    }
    return;
  }
  switch (t->kind) {
    case TaskKind::tree_op:
    case TaskKind::write_back:
    case TaskKind::evict:
    case TaskKind::collect:
      start_op(f, t);
      return;
    case TaskKind::hook:
      if (f.tree->idle()) {
        run_function(*t);
        release_task(t);
        file_release(&f);
      } else {
        t->phase.store(static_cast<std::uint8_t>(TaskState::waiting), std::memory_order_relaxed);
        gate_on(f, t);
      }
      return;
    case TaskKind::barrier:
      t->op.kind = TreeOp::fdatasync;
      gate_on(f, t);
      start_op(f, t);
      return;
    case TaskKind::close:
      t->phase.store(static_cast<std::uint8_t>(TaskState::waiting), std::memory_order_relaxed);
      f.close_phase = 0;
      gate_on(f, t);
      progress(f);
      return;
    default:
      reject(*t, EINVAL, "internal: a task of this kind has no file");
      return;
  }
}

/// Moves the file's gate forward as far as it can; true when the file has nothing gated left.
bool Worker::progress(FileCore& f) {
  for (;;) {
    if (f.predecessor) {
      if (!f.predecessor->fully_closed.load(std::memory_order_acquire)) return false;
      file_release(f.predecessor);
      f.predecessor = nullptr;
      // The tree was made at open(), when the file's size did not yet include what the
      // predecessor wrote back: make it again now (it has done nothing yet).
      try {
        c.registry.replace_tree(f, f.factory(f.efile.get(), c.quota, f.tree_options));
      } catch (const std::exception&) {
        // No memory for a new tree: keep the first one. Its size may be short (reads of data
        // the predecessor appended stop early), which is reported nowhere: record it.
        c.add_failure("reopen of " + f.path + ": could not refresh the file size after the earlier handle closed");
      }
      // Caller writes may use the tree from now on. Release: pairs with their acquire
      // compare-and-swap, which then sees the new tree.
      f.traffic.fetch_and(~FileTraffic::kReopening, std::memory_order_release);
    }
    if (Task* g = f.gate) {
      switch (g->kind) {
        case TaskKind::hook:
          if (!f.tree->idle()) return false;
          f.gate = nullptr;
          run_function(*g);
          release_task(g);
          file_release(&f);
          break;
        case TaskKind::barrier:
          if (!(g->word.load(std::memory_order_acquire) & Task::kFinished)) return false;
          f.gate = nullptr;
          release_task(g);  // the reference on_op_complete left for the gate
          file_release(&f);
          break;
        case TaskKind::close:
          if (f.close_phase == 0) {
            if (!f.tree->idle()) return false;
            g->phase.store(static_cast<std::uint8_t>(TaskState::ready), std::memory_order_relaxed);
            g->op.kind = TreeOp::write_back;
            g->op.offset = 0;
            g->op.length = 0;
            g->op.on_complete = nullptr;  // the close finishes here, after the round (see below)
            g->op.context = g;            // Worker::io finds the file's engine through it
            f.close_phase = 1;
            f.tree->start(g->op, *this);
          }
          // The write-back's last step may still be returning in this round: the tree goes
          // only in a later round (this runs at the start of a round, after the barrier).
          if (!g->op.done() || !f.tree->idle()) return false;
          finish_close(f, g);
          break;
        default:
          return false;
      }
    }
    // No gate: release held tasks in order until one gates the file again.
    while (!f.gate && !f.predecessor && f.held_head) {
      Task* t = f.held_head;
      f.held_head = t->next;
      if (!f.held_head) f.held_tail = nullptr;
      t->next = nullptr;
      begin(t);
    }
    if (!f.gate && !f.predecessor && !f.held_head) return true;
  }
}

void Worker::finish_close(FileCore& f, Task* g) {
  int err = g->op.result() < 0 ? static_cast<int>(-g->op.result()) : 0;
  const char* reason = err ? "writing back the file's cached data failed" : nullptr;
  if (!err) {
    if (const std::error_code rec = f.tree->recorded_error()) {
      err = rec.value();
      reason = "an earlier write-back of this file failed";
    }
  }
  if (!err) {
    if (const std::error_code se = f.tree->sync_error()) {
      err = se.value();
      reason = kUnrecoveredSync;
    }
  }
  c.registry.retire_tree(f);
  const std::error_code ec = f.slot->engine->close(*f.efile);
  if (!err && ec) {
    err = ec.value();
    reason = "closing the engine file failed";
  }
  f.efile.reset();
  f.tree_gone = true;
  f.gate = nullptr;
  c.registry.remove(f);
  if (err && f.detached) {
    c.add_failure("close of " + f.path + ": " + (reason ? std::string(reason) + ": " : std::string()) +
                  std::generic_category().message(err));
  }
  record_latency(RequestKind::close, *g);
  if (err) failed.add();
  c.finish(*g, err ? TaskState::failed : TaskState::done, err, reason);
  release_task(g);
  // Release: a successor handle of the same path (same home worker) and status() see the file
  // fully written back and closed.
  f.fully_closed.store(true, std::memory_order_release);
  file_release(&f);  // the close task's reference
  file_release(&f);  // the registry's reference (f may be gone now only if no handle, no held
                     // task and no thread's reserve refers to it)
}

void Worker::progress_gates() {
  if (gated.empty()) return;
  // progress() may append to `gated` (begin() of a released task that gates again): index loop.
  std::size_t keep = 0;
  for (std::size_t i = 0; i < gated.size(); ++i) {
    FileCore* f = gated[i];
    // Keep a reference across progress(): a close inside drops the registry's.
    file_retain(f);
    if (progress(*f)) {
      f->listed = false;
    } else {
      gated[keep++] = f;
    }
    file_release(f);
  }
  gated.resize(keep);
}

bool ControllerCore::gate_can_progress(const FileCore& f) const noexcept {
  if (f.predecessor) return f.predecessor->fully_closed.load(std::memory_order_acquire);
  const Task* g = f.gate;
  if (!g) return f.held_head != nullptr;
  switch (g->kind) {
    case TaskKind::hook: return f.tree->idle();
    case TaskKind::barrier: return (g->word.load(std::memory_order_acquire) & Task::kFinished) != 0;
    case TaskKind::close: return f.close_phase == 0 ? f.tree->idle() : (g->op.done() && f.tree->idle());
    default: return false;
  }
}

}  // namespace tai::detail
