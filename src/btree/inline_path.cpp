// The inline path: a read or write that an idle tree can do inside start() (one cached block, no
// engine I/O; or a request no block can hold, on a synchronous runner), with the same effects and
// counters as its steps, and the pieces the steps share with it (absorb_write, the outcome of an
// uncached request).
#include "src/btree/tree_core.hpp"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

namespace tai::detail {

// The inline path. While the tree is idle (no operation in flight: the acquire load of
// in_flight_ pairs with the acq_rel decrement of the last completion, so every step's effects
// are visible and no step of this tree runs or can start meanwhile; start() calls are
// serialised by the caller), the walk that visit steps would make node by node is done at once
// by the caller of start(). It is taken only when the request lies inside one block that is
// already cached and needs no engine I/O (a read the block can serve, a write that neither
// overflows the dirty ranges nor restructures a node); the effects are those of the steps:
// same counters, same dirty accounting, same logical size. The operation gets no sequence
// number: it completes before start() returns, so no node needs to remember it (last_seq and
// last_write_seq matter only for operations that can still be active; dirty_blocks, which the
// write-back skip rule also checks, is updated as by the step).
bool TreeCore::try_inline(Operation& op, StepSink& sink) noexcept {
  if (!options_.inline_path || (op.kind != TreeOp::read && op.kind != TreeOp::write)) return false;
  if (op.length == 0 || op.buffer == nullptr) return false;
  const std::uint64_t first = op.offset;
  if (op.length - 1 > ~std::uint64_t{0} - first) return false;
  const std::uint64_t last = first + (op.length - 1);
  if (in_flight_.load(std::memory_order_acquire) != 0) return false;
  const bool write = op.kind == TreeOp::write;
  const bool size_tracked = size_known_ && !size_top_.load(std::memory_order_relaxed);
  // A read that reaches the logical end of file is shortened by the root step: leave it to it.
  if (!write && size_tracked && last >= size_end_.load(std::memory_order_relaxed)) return false;
  Node* n = root_;
  while (n->block == nullptr) {
    // No block here: the range must lie inside one existing child (a whole-node request may
    // restructure or allocate, a leaf without a block must allocate or reroute), unless no
    // block can ever be here or below (the root of BTreeTrivial): then it goes to the engine.
    if (n->child_count == 0 && bottom(*n) && !cacheable(n->depth)) return inline_uncached(op, *n, first, last, sink);
    if (n->child_count == 0 || n->depth + 1u >= levels_) return false;
    const unsigned cs = shift_[n->depth + 1];
    const std::uint64_t i = (first - n->base) >> cs;
    if (((last - n->base) >> cs) != i) return false;
    n = child(*n, i);
    if (n == nullptr) return false;
  }
  if (n->busy || n->has_parked() || n->direct_count != 0) return false;  // not while idle; defensive
  const std::uint64_t lo = first - n->base, hi = last - n->base + 1, len = hi - lo;
  if (write) {
    if (!(lo == 0 && hi == block_size(*n)) && n->dirty.count_after(lo, hi) > DirtyRanges::kMax)
      return false;  // the tiny-write rule's case
    absorb_write(*n, lo, hi, op.buffer, true);
    grow_size(last);  // as enter() does at the root
  } else {
    if (!mirrors(*n, hi) && !n->dirty.covers(lo, hi)) return false;  // needs a fill
    bump(counters_.cache_hits);
    std::memcpy(op.buffer, n->block + lo, len);
  }
  bump(counters_.inline_ops);
  complete_inline(op, len, 0);
  return true;
}

bool TreeCore::inline_uncached(Operation& op, Node& n, std::uint64_t first, std::uint64_t last,
                               StepSink& sink) noexcept {
  if (n.busy || n.has_parked() || n.direct_count != 0) return false;  // not while idle; defensive
  const bool write = op.kind == TreeOp::write;
  const std::uint64_t len = last - first + 1;
  std::int64_t res = 0;
  const std::uint32_t issued = write_issued_now();
  if (!sink.io_now(make_request(write ? Op::write : Op::read, op.buffer, first, len), op, res)) return false;
  // The effects of the root step (enter), go_direct and its io_done.
  bump(counters_.uncached);
  bump(counters_.inline_ops);
  count_direct(op.kind, len, true);
  if (write) {
    grow_size(last);
    if (res > 0) note_uncached_write(issued);
  }
  complete_inline(op, len, direct_outcome(op.kind, res, op.buffer, len, true));
  return true;
}

// A caller write (see the declaration for who may call it and when). The same effects as the
// root step of a write sent around the cache (enter, go_direct and its io_done), with count()
// rather than bump(): several caller writes, and the steps of an fsync, may run at once.
bool TreeCore::caller_write(const std::byte* src, std::uint64_t offset, std::uint64_t length, SyncEngine& engine,
                            std::int64_t& result) noexcept {
  if (length == 0 || length < caller_write_min_ || length - 1 > ~std::uint64_t{0} - offset) return false;
  // Nothing cached: no node but the root. Not root_->child_count: an fsync's steps may be
  // deleting the empty children evictions left, beside this call. The root itself never holds
  // a block here (caller_write_min_), and its direct requests belong to operations the
  // controller keeps out while caller writes run.
  if (counters_.nodes.load(std::memory_order_relaxed) != 1 || root_->direct_count != 0) return false;
  const std::uint64_t last = offset + (length - 1);
  // The logical size first, as the root step grows it before its request: a read that another
  // thread submits once this write returned must not stop short of it. A maximum, not a store:
  // caller writes of other threads may grow it at the same time.
  if (size_known_) {
    if (last == ~std::uint64_t{0}) {
      size_top_.store(true, std::memory_order_relaxed);
    } else {
      std::uint64_t end = size_end_.load(std::memory_order_relaxed);
      while (last + 1 > end && !size_end_.compare_exchange_weak(end, last + 1, std::memory_order_relaxed)) {
      }
    }
  }
  const std::uint32_t issued = write_issued_now();
  // The engine only reads the buffer (a write request's memory is never written).
  const Completion c = engine.execute(make_request(Op::write, const_cast<std::byte*>(src), offset, length));
  count(root_bottom_uncacheable_ ? counters_.uncached : counters_.write_arounds);
  count(counters_.engine_writes);
  if (c.result > 0) {
    count(counters_.bytes_to_engine, static_cast<std::uint64_t>(c.result));
    note_uncached_write(issued);
  }
  result = c.result < 0 ? c.result : (static_cast<std::uint64_t>(c.result) != length ? -EIO : 0);
  return true;
}

void TreeCore::absorb_write(Node& n, std::uint64_t lo, std::uint64_t hi, const std::byte* src, bool exclusive) noexcept {
  const std::uint64_t size = block_size(n);
  const std::uint64_t before = n.dirty.bytes();
  const bool was_dirty = !n.dirty.empty();
  if (lo == 0 && hi == size) {
    add(counters_.merged_bytes, before, exclusive);
    if (was_dirty) add(counters_.merges, 1, exclusive);
    n.dirty.assign_all(size);
    n.valid = true;
    n.fill_end = static_cast<std::uint32_t>(size);
  } else {
    add(counters_.merged_bytes, n.dirty.overlap(lo, hi), exclusive);
    const DirtyRanges::AddResult r = n.dirty.add(lo, hi);
    add(counters_.merges, static_cast<std::uint64_t>(r.joined) + (r.bridged != 0 ? 1 : 0), exclusive);
  }
  std::memcpy(n.block + lo, src, hi - lo);
  dirty_changed(n, before, was_dirty);
}

void TreeCore::count_direct(TreeOp kind, std::uint64_t len, bool exclusive) noexcept {
  if (kind == TreeOp::read) {
    add(counters_.engine_reads, 1, exclusive);
    add(counters_.bytes_from_engine, len, exclusive);
  } else {
    add(counters_.engine_writes, 1, exclusive);
  }
}

std::int64_t TreeCore::direct_outcome(TreeOp kind, std::int64_t result, std::byte* data, std::uint64_t len,
                                      bool exclusive) noexcept {
  if (kind == TreeOp::read) {
    if (result < 0) return result;
    // Past the engine's end of file but inside the logical size: a hole.
    if (static_cast<std::uint64_t>(result) < len) std::memset(data + result, 0, len - static_cast<std::uint64_t>(result));
    return 0;
  }
  if (result > 0) add(counters_.bytes_to_engine, static_cast<std::uint64_t>(result), exclusive);
  if (result < 0 || static_cast<std::uint64_t>(result) != len) return result < 0 ? result : -EIO;
  return 0;
}

void TreeCore::complete_inline(Operation& op, std::uint64_t bytes, std::int64_t error) noexcept {
  op.seq_ = 0;
  op.pending_.store(0, std::memory_order_relaxed);
  op.first_error_.store(static_cast<std::int32_t>(error), std::memory_order_relaxed);
  op.bytes_ = bytes;
  op.result_ = error != 0 ? error : static_cast<std::int64_t>(bytes);
  op.phase_ = 0;
  const Operation::Callback cb = op.on_complete;
  void* const ctx = op.context;
  // Release: pairs with the acquire in Operation::done(); publishes the result and a read's data.
  op.done_.store(true, std::memory_order_release);
  if (cb != nullptr) cb(op, ctx);
}

}  // namespace tai::detail
