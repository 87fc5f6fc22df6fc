// An operation from start() to its completion: validation and the root step, the root's
// bookkeeping (enter), the count of its steps, and the completion order (retire, done_up_to) that
// stands in for per-level activity counters (see include/tai/btree.hpp).
#include "src/btree/tree_core.hpp"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

namespace tai::detail {

void TreeCore::retire(std::uint64_t seq) noexcept {
  std::uint64_t p = prefix_.load(std::memory_order_acquire);
  // Slot seq % kRing last held seq - kRing: reusable once the prefix has passed it. Otherwise
  // recording this completion would erase an older one: leave it out (the prefix stalls below
  // it until start() resets it at the next idle moment; every answer stays conservative).
  if (seq - p <= kRing) ring_[seq % kRing].store(seq, std::memory_order_release);
  while (ring_[(p + 1) % kRing].load(std::memory_order_acquire) == p + 1) {
    if (prefix_.compare_exchange_weak(p, p + 1, std::memory_order_acq_rel, std::memory_order_acquire)) ++p;
  }
}

bool TreeCore::children_idle(Node& n) {
  bool idle = true;
  const std::uint64_t last = (std::uint64_t{1} << bits_[n.depth]) - 1;
  for_each_child(n, 0, last, [&](std::uint64_t, Node* c) { idle = idle && done_up_to(c->last_seq); });
  return idle;
}

void TreeCore::op_add(Operation& op, std::uint64_t steps) noexcept {
  // Relaxed: the caller holds a count, so the total cannot reach 0 meanwhile; the decrements'
  // acq_rel chain orders everything that matters.
  op.pending_.fetch_add(steps, std::memory_order_relaxed);
}

void TreeCore::op_fail(Operation& op, std::int64_t error) noexcept {
  std::int32_t none = 0;  // -errno fits
  op.first_error_.compare_exchange_strong(none, static_cast<std::int32_t>(error), std::memory_order_relaxed);
}

void TreeCore::start(Operation& op, StepSink& sink) {
  if (try_inline(op, sink)) return;
  if (in_flight_.load(std::memory_order_acquire) == 0 && prefix_.load(std::memory_order_relaxed) != next_seq_) {
    // Idle: every completion is recorded and done with the ring; a prefix that stalled (more
    // than kRing operations in flight at once) can safely jump to the last operation.
    prefix_.store(next_seq_, std::memory_order_release);
  }
  op.seq_ = ++next_seq_;
  in_flight_.fetch_add(1, std::memory_order_acq_rel);
  op.pending_.store(1, std::memory_order_relaxed);
  op.first_error_.store(0, std::memory_order_relaxed);
  op.done_.store(false, std::memory_order_relaxed);
  op.bytes_ = 0;
  op.result_ = 0;
  op.phase_ = 0;
  const std::uint64_t kMaxU = ~std::uint64_t{0};
  std::uint64_t first = op.offset, last = kMaxU;
  auto fail_now = [&](std::int64_t err) {
    op_fail(op, err);
    op.pending_.store(0, std::memory_order_relaxed);
    complete(op);
  };
  switch (op.kind) {
    case TreeOp::read:
    case TreeOp::write:
      if (op.length == 0) {
        op.pending_.store(0, std::memory_order_relaxed);
        return complete(op);
      }
      if (op.buffer == nullptr) return fail_now(-EFAULT);
      if (op.length - 1 > kMaxU - op.offset) return fail_now(-EOVERFLOW);
      last = op.offset + (op.length - 1);
      break;
    case TreeOp::write_back:
    case TreeOp::drop:
    case TreeOp::collect:
      if (op.length != 0) {
        if (op.length - 1 > kMaxU - op.offset) return fail_now(-EOVERFLOW);
        last = op.offset + (op.length - 1);
      }
      break;
    case TreeOp::evict:
      if (op.evict_depth >= levels_) return fail_now(-EINVAL);
      first = op.offset & ~node_mask(op.evict_depth);
      last = first + node_mask(op.evict_depth);
      break;
    case TreeOp::fsync:
    case TreeOp::fdatasync: {
      first = 0;
      // May this one clear an unrecovered sync error? Only if it starts after the redirty of
      // the latest failure completed: then each of its visits reaches a node after that
      // redirty's (a node runs its steps in arrival order), so it writes back what the redirty
      // made dirty. bytes_ (an fsync moves no bytes) holds that failure's number until the
      // engine sync completes.
      std::lock_guard<std::mutex> lock(sync_mu_);
      if (sync_error_.load(std::memory_order_relaxed) != 0 && !unrecoverable_ && redirty_gen_ == fail_gen_)
        op.bytes_ = fail_gen_;
      break;
    }
  }
  Step s;
  s.tree = this;
  s.node = root_;
  s.op = &op;
  s.first = first;
  s.last = last;
  s.aux = kEntry;
  s.kind = StepKind::visit;
  sink.emit(s);
}

bool TreeCore::enter(Step& s, StepSink& sink) {
  s.aux &= ~kEntry;
  Operation& op = *s.op;
  if (op.kind == TreeOp::write) {
    op.bytes_ = op.length;
    grow_size(s.last);
  } else if (op.kind == TreeOp::read) {
    if (size_known_ && !size_top_.load(std::memory_order_relaxed)) {
      std::uint64_t end = size_end_.load(std::memory_order_relaxed);
      // Reaching past the size this tree knows: another writer may have grown the file since
      // (the size is the kernel's at open plus this tree's writes), so ask the engine again.
      if (s.last >= end) end = refresh_size(end);
      if (s.first >= end) {  // at or past the end of file: nothing to read, like pread
        op.bytes_ = 0;
        step_done(op, sink);
        return false;
      }
      s.last = std::min(s.last, end - 1);
    }
    op.bytes_ = s.last - s.first + 1;
  }
  return true;
}

void TreeCore::op_step_done(Operation& op, StepSink& sink) {
  // A count of 1 is this step's own: nobody else can change it, so the read-modify-write (and
  // its store-buffer drain) can be skipped. The acquire load synchronises with the release of
  // every earlier decrement, as the read-modify-write would have.
  if (op.pending_.load(std::memory_order_acquire) == 1) {
    op.pending_.store(0, std::memory_order_relaxed);
  } else if (op.pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) {
    return;
  }
  if ((op.kind == TreeOp::fsync || op.kind == TreeOp::fdatasync) && op.phase_ == 0) {
    // Every dirty byte written before this fsync has reached the engine (or failed): now the
    // engine's own sync, one at a time per tree (see sync_queue_): it waits while another runs.
    op.phase_ = 1;
    op.pending_.store(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(sync_mu_);
      if (sync_running_) {
        sync_queue_.push_back(&op);
        return;
      }
      sync_running_ = true;
      take_sync_epoch(op);
    }
    issue_sync(op, sink);
    return;
  }
  if (op.phase_ == 2) {
    // The redirty of a failed sync has visited every cached block: an fsync started from now
    // on may clear the error (unless another sync failed meanwhile; its own redirty follows).
    std::lock_guard<std::mutex> lock(sync_mu_);
    if (op.bytes_ == fail_gen_) redirty_gen_ = fail_gen_;
    op.bytes_ = 0;
  }
  complete(op);
}

void TreeCore::complete(Operation& op) noexcept {
  if (op.kind == TreeOp::collect) collect_done();
  const std::int64_t err = op.first_error_.load(std::memory_order_relaxed);
  op.result_ = err != 0 ? err : static_cast<std::int64_t>(op.bytes_);
  const Operation::Callback cb = op.on_complete;
  void* const ctx = op.context;
  retire(op.seq_);
  // Release: pairs with the acquire in Operation::done(); publishes the result and a read's data.
  op.done_.store(true, std::memory_order_release);
  if (cb != nullptr) cb(op, ctx);
  // The last touch of the tree for this operation, after the callback has returned: idle()
  // means every operation has been completed *and reported*. A runner that sees idle() and then
  // runs something "after every earlier operation" (a hook) finds their receipts finished;
  // with the count dropped before the callback, a hook admitted on the file's home worker
  // while another worker was between the two ran before that receipt finished (seen by the
  // order test under TSan). The callback must not destroy the tree (runners destroy trees
  // after their rounds), so the tree is still here.
  in_flight_.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace tai::detail
