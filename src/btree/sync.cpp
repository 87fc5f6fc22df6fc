// fsync and fdatasync: the engine sync of an operation whose write-back is done (one per tree at a
// time), the sync epochs every engine write is stamped with, the recorded write-back error, and
// what a failed sync leaves behind (lost bytes, the redirty) and a good one allows (the clean
// budget's release). The rules are in include/tai/btree.hpp, "Failed engine syncs".
#include "src/btree/tree_core.hpp"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

namespace tai::detail {

void TreeCore::take_sync_epoch(Operation& op) noexcept {
  // The sync covers every write stamped with the epoch it takes (result_ keeps it until
  // completion; seq_cst: see note_lost).
  op.result_ = static_cast<std::int64_t>(epochs_.epoch.fetch_add(1, std::memory_order_seq_cst));
}

void TreeCore::issue_sync(Operation& op, StepSink& sink) {
  // It belongs to no node.
  Step c;
  c.tree = this;
  c.op = &op;
  c.kind = StepKind::op_io_done;
  c.purpose = IoPurpose::sync;
  sink.io(make_request(op.kind == TreeOp::fsync ? Op::fsync : Op::fdatasync, nullptr, 0, 0), c);
}

void TreeCore::op_io_done(const Step& s, StepSink& sink) {
  Operation& op = *s.op;
  if (s.io_result < 0) op_fail(op, s.io_result);
  // A write-back that failed earlier (this fsync's or any since the last fsync) is reported
  // here, once: the block is still dirty and the next write-back tries it again.
  const std::int64_t recorded = recorded_error_.exchange(0, std::memory_order_acq_rel);
  if (recorded != 0) op_fail(op, recorded);
  const auto epoch = static_cast<std::uint64_t>(op.result_);
  const std::uint64_t may_clear = op.bytes_;
  op.bytes_ = 0;
  op.result_ = 0;
  bool redirty = false;
  Operation* next = nullptr;
  {
    std::lock_guard<std::mutex> lock(sync_mu_);
    if (s.io_result < 0) {
      // The kernel may have dropped what it could not write: everything written since the
      // last good sync must be written again before an fsync may succeed.
      std::int32_t none = 0;
      sync_error_.compare_exchange_strong(none, static_cast<std::int32_t>(s.io_result), std::memory_order_relaxed);
      ++fail_gen_;
      if (epoch > epochs_.failed.load(std::memory_order_relaxed)) epochs_.failed.store(epoch, std::memory_order_seq_cst);
      if (epochs_.lost.load(std::memory_order_seq_cst) > epochs_.synced.load(std::memory_order_relaxed))
        unrecoverable_ = true;
      redirty = !unrecoverable_;
      op.bytes_ = fail_gen_;
    } else if (const std::int32_t sticky = sync_error_.load(std::memory_order_relaxed); sticky != 0) {
      if (epochs_.lost_affected.load(std::memory_order_seq_cst)) unrecoverable_ = true;
      if (may_clear != 0 && may_clear == fail_gen_ && !unrecoverable_ && recorded == 0 &&
          op.first_error_.load(std::memory_order_relaxed) == 0) {
        sync_error_.store(0, std::memory_order_relaxed);
        epochs_.synced.store(epoch, std::memory_order_release);
        epochs_.failed.store(0, std::memory_order_seq_cst);
      } else {
        op_fail(op, sticky);
      }
    } else if (recorded == 0 && op.first_error_.load(std::memory_order_relaxed) == 0 &&
               epoch > epochs_.synced.load(std::memory_order_relaxed)) {
      epochs_.synced.store(epoch, std::memory_order_release);
    }
    // The next waiting sync goes now that this one's outcome is recorded (a failure before the
    // next one is issued: it cannot be mistaken for a success that covered dropped pages).
    if (sync_head_ < sync_queue_.size()) {
      next = sync_queue_[sync_head_++];
      if (sync_head_ == sync_queue_.size()) {
        sync_queue_.clear();  // keeps its memory
        sync_head_ = 0;
      }
      take_sync_epoch(*next);
    } else {
      sync_running_ = false;
    }
  }
  if (next != nullptr) issue_sync(*next, sink);
  // Phase 2 after a failure: a visit of every cached block (maintain() makes unsynced ranges
  // dirty again). Phase 3 after a success while the quota is over its clean budget: a visit
  // that frees the clean blocks this sync covered (release_synced_block). Either way the
  // operation completes when the last of the visit's steps finishes (op_step_done).
  const bool release = !redirty && s.io_result >= 0 && quota_.over_clean_budget();
  if (redirty || release) {
    op.phase_ = redirty ? 2 : 3;
    op.pending_.store(1, std::memory_order_relaxed);
    Step r;
    r.tree = this;
    r.node = root_;
    r.op = &op;
    r.first = 0;
    r.last = ~std::uint64_t{0};
    r.kind = StepKind::visit;
    sink.emit(r);
    return;
  }
  op.pending_.store(0, std::memory_order_relaxed);
  complete(op);
}

void TreeCore::record_error(std::int64_t error) noexcept {
  recorded_error_.store(error, std::memory_order_release);
}

std::error_code TreeCore::recorded_error() const noexcept {
  const std::int64_t e = recorded_error_.load(std::memory_order_acquire);
  return e < 0 ? std::error_code(static_cast<int>(-e), std::generic_category()) : std::error_code();
}

std::error_code TreeCore::sync_error() const noexcept {
  const std::int32_t e = sync_error_.load(std::memory_order_relaxed);
  return e < 0 ? std::error_code(-e, std::generic_category()) : std::error_code();
}

void TreeCore::note_block_written(Node& n, std::uint64_t lo, std::uint64_t hi) noexcept {
  // Loaded after the engine request returned: a sync issued before that (its fetch_add done)
  // is seen, so the stamp is never older than the syncs that may have missed these bytes.
  const std::uint64_t e = epochs_.epoch.load(std::memory_order_seq_cst);
  // The epoch when the write was issued: a sync failure at or after it may have dropped it.
  const std::uint64_t since = issued_epoch(e, n.write_issued);
  if (!unsynced_live(n)) {  // every older range is durable
    n.unsynced.clear();
    n.unsynced_since = 0;
  }
  if (!n.valid && n.unsynced.count_after(lo, hi) > DirtyRanges::kMax) {
    // An invalid block cannot bridge (the gap's bytes are unknown): these bytes are not held.
    note_lost(e, since);
    return;
  }
  n.unsynced.add(lo, hi);
  n.unsynced_epoch = std::max(n.unsynced_epoch, e);
  n.unsynced_since = n.unsynced_since == 0 ? since : std::min(n.unsynced_since, since);
}

void TreeCore::note_block_leaving(const Node& n) noexcept {
  if (unsynced_live(n)) note_lost(n.unsynced_epoch, n.unsynced_since);
}

void TreeCore::note_lost(std::uint64_t epoch, std::uint64_t affected_from) noexcept {
  const std::uint64_t stamp = epoch;
  if (affected_from == 0) affected_from = epoch;
  // Bytes stamped `epoch` are covered by the sync whose fetch_add takes `epoch` (and by every
  // later one). When the re-load below still reads `epoch`, it precedes that fetch_add in the
  // single order of seq_cst operations, so the maximum stored before it does too, and the
  // failure handler of that sync (or of a later one), which loads `lost` after its fetch_add,
  // sees it. When a sync took the epoch meanwhile, the bytes are stamped with the newer one
  // (later, so conservative) and the maximum is stored again.
  for (;;) {
    std::uint64_t cur = epochs_.lost.load(std::memory_order_seq_cst);
    while (cur < epoch && !epochs_.lost.compare_exchange_weak(cur, epoch, std::memory_order_seq_cst)) {
    }
    const std::uint64_t now = epochs_.epoch.load(std::memory_order_seq_cst);
    if (now == epoch) break;
    epoch = now;
  }
  // Bytes a recorded failure affected, leaving after the failure's check of `lost` (op_io_done
  // stores `failed`, then loads `lost`; this stored `lost`, then loads `failed`: one of the two
  // sees the other). A later fsync then cannot clear the error.
  const std::uint64_t failed = epochs_.failed.load(std::memory_order_seq_cst);
  if (failed != 0 && affected_from <= failed && stamp > epochs_.synced.load(std::memory_order_seq_cst))
    epochs_.lost_affected.store(true, std::memory_order_seq_cst);
}

void TreeCore::release_synced_block(Node& n) noexcept {
  if (!n.dirty.empty() || unsynced_live(n) || !quota_.over_clean_budget()) return;
  free_block(n);
}

void TreeCore::redirty_block(Node& n) noexcept {
  if (!unsynced_live(n)) return;
  const std::uint64_t before = n.dirty.bytes();
  const bool was_dirty = !n.dirty.empty();
  for (int i = 0; i < n.unsynced.count(); ++i) {
    const DirtyRanges::Range r = n.unsynced[i];
    if (!n.valid && n.dirty.count_after(r.begin, r.end) > DirtyRanges::kMax) {
      // Cannot be held as dirty ranges without bridging unknown bytes: give up recovery.
      std::lock_guard<std::mutex> lock(sync_mu_);
      unrecoverable_ = true;
      continue;
    }
    n.dirty.add(r.begin, r.end);
  }
  n.unsynced.clear();
  n.unsynced_epoch = 0;
  n.unsynced_since = 0;
  dirty_changed(n, before, was_dirty);
}

}  // namespace tai::detail
