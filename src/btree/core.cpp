// The shape-independent part of tai::BTree (see include/tai/btree.hpp) beside the step handlers
// (steps.cpp) and the explicit instantiations of the predefined trees (instantiations.cpp). The
// sequential driver is in src/btree_driver.cpp.
#include "src/btree/tree_core.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace tai {

const char* to_string(TreeOp op) noexcept {
  switch (op) {
    case TreeOp::read: return "read";
    case TreeOp::write: return "write";
    case TreeOp::write_back: return "write_back";
    case TreeOp::drop: return "drop";
    case TreeOp::evict: return "evict";
    case TreeOp::fsync: return "fsync";
    case TreeOp::fdatasync: return "fdatasync";
    case TreeOp::collect: return "collect";
  }
  return "?";
}

namespace detail {
namespace {

std::uint64_t next_tree_id() noexcept {
  // Relaxed: only uniqueness matters.
  static std::atomic<std::uint64_t> ids{0};
  return ids.fetch_add(1, std::memory_order_relaxed) + 1;
}

constexpr std::uint64_t kMaxBlock = std::uint64_t{1} << 30;

}  // namespace

TreeCore::TreeCore(unsigned levels, const unsigned* shift, const unsigned* bits, EngineFile* file, Quota& quota,
                   const BTreeOptions& options)
    : levels_(levels), shift_(shift), bits_(bits), file_(file), quota_(quota), options_(options), id_(next_tree_id()) {
  if (file_ != nullptr) {
    const FileCapabilities& caps = file_->capabilities();
    direct_ = caps.direct;
    if (direct_) {
      io_align_ = std::max<std::uint64_t>({caps.alignment.offset, caps.alignment.length, 1});
      mem_align_ = std::max<std::size_t>(caps.alignment.memory, 16);
    }
  }
  min_block_ = std::max<std::uint64_t>(options_.min_block_bytes, direct_ ? io_align_ : 1);
  max_block_ = std::min(options_.max_block_bytes, kMaxBlock);
  smallest_block_ = ~std::uint64_t{0};
  for (unsigned d = 0; d < levels_; ++d) {
    if (d + 1 >= levels_ || node_mask(d) < min_block_) {
      if (cacheable(d)) smallest_block_ = node_mask(d) + 1;
      break;
    }
  }
  if (options_.file_size) {
    size_known_ = true;
    size_end_.store(*options_.file_size, std::memory_order_relaxed);
  } else if (file_ != nullptr) {
    if (const std::optional<std::uint64_t> size = file_->size()) {
      size_known_ = true;
      size_end_.store(*size, std::memory_order_relaxed);
    }
  }
  ring_.reset(new std::atomic<std::uint64_t>[kRing]());  // value-initialised: all 0
  root_ = new Node(nullptr, 0, 0);
  root_->sparse = levels_ > 1 && bits_[0] > kArrayBits;
  count(counters_.nodes);
  count(node_bytes_, sizeof(Node));
}

TreeCore::~TreeCore() {
  assert(idle() && "a tai::BTree destroyed with operations in flight");
  delete_subtree(root_);  // dirty data still cached is discarded: write back before destroying
}

// --- completion order ----------------------------------------------------------------------

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

// --- operations ----------------------------------------------------------------------------

void TreeCore::op_add(Operation& op, std::uint64_t steps) noexcept {
  // Relaxed: the caller holds a count, so the total cannot reach 0 meanwhile; the decrements'
  // acq_rel chain orders everything that matters.
  op.pending_.fetch_add(steps, std::memory_order_relaxed);
}

void TreeCore::op_fail(Operation& op, std::int64_t error) noexcept {
  std::int32_t none = 0;  // -errno fits
  op.first_error_.compare_exchange_strong(none, static_cast<std::int32_t>(error), std::memory_order_relaxed);
}

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

bool TreeCore::take_collect_request() noexcept {
  // Relaxed loads: a late answer only delays or hastens one collection. The exchange (acq_rel)
  // makes one caller the owner of the next collect operation; collect_done() releases it.
  if (node_bytes_.load(std::memory_order_relaxed) < collect_threshold_.load(std::memory_order_relaxed)) return false;
  return !collecting_.exchange(true, std::memory_order_acq_rel);
}

void TreeCore::collect_done() noexcept {
  // What survived a collection is what the cache's blocks need (and what operations in flight
  // were in): the next one waits until the nodes have doubled from there, so that each
  // collection frees at least as much as it walks (the walk visits only subtrees with blocks).
  const std::uint64_t live = node_bytes_.load(std::memory_order_relaxed);
  collect_threshold_.store(std::max(kCollectFloorBytes, 2 * live), std::memory_order_relaxed);
  collects_.fetch_add(1, std::memory_order_relaxed);
  collecting_.store(false, std::memory_order_release);  // pairs with the exchange above
}

std::uint64_t TreeCore::refresh_size(std::uint64_t known_end) noexcept {
  if (options_.file_size || file_ == nullptr) return known_end;  // a size given at open is taken as is
  const std::optional<std::uint64_t> now = file_->size();
  if (!now || *now <= known_end) return known_end;
  count(counters_.size_refreshes);
  size_end_.store(*now, std::memory_order_relaxed);  // a root step: the only writer (see grow_size)
  return *now;
}

void TreeCore::grow_size(std::uint64_t last) noexcept {
  if (!size_known_ || size_top_.load(std::memory_order_relaxed)) return;
  if (last == ~std::uint64_t{0}) {
    size_top_.store(true, std::memory_order_relaxed);
  } else if (last + 1 > size_end_.load(std::memory_order_relaxed)) {
    size_end_.store(last + 1, std::memory_order_relaxed);  // only root steps (or the inline path) write it
  }
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

// --- children ------------------------------------------------------------------------------

Node* TreeCore::child(const Node& n, std::uint64_t index) const noexcept {
  if (n.sparse) {
    if (n.map == nullptr) return nullptr;
    auto it = n.map->find(index);
    return it == n.map->end() ? nullptr : it->second;
  }
  return n.array != nullptr ? n.array[index] : nullptr;
}

Node& TreeCore::child_or_create(Node& n, std::uint64_t index) {
  const unsigned d = n.depth + 1u;
  auto make = [&] {
    Node* c = new Node(&n, n.base + (index << shift_[d]), d);
    c->sparse = d + 1u < levels_ && bits_[d] > kArrayBits;
    ++n.child_count;
    count(counters_.nodes);
    count(node_bytes_, sizeof(Node));
    return c;
  };
  if (n.sparse) {
    if (n.map == nullptr) n.map = new std::map<std::uint64_t, Node*>();
    auto [it, inserted] = n.map->try_emplace(index, nullptr);
    if (inserted) {
      count(node_bytes_, kMapEntryBytes);
      it->second = make();
    }
    return *it->second;
  }
  if (n.array == nullptr) {
    n.array = new Node*[std::size_t{1} << bits_[n.depth]]();
    count(node_bytes_, array_bytes(n));
  }
  Node*& slot = n.array[index];
  if (slot == nullptr) slot = make();
  return *slot;
}

void TreeCore::erase_child(Node& n, std::uint64_t index) noexcept {
  if (n.sparse) {
    n.map->erase(index);
    uncount(node_bytes_, kMapEntryBytes);
  } else {
    n.array[index] = nullptr;
  }
  if (--n.child_count == 0) {  // a leaf again: give the table back
    delete n.map;
    n.map = nullptr;
    if (n.array != nullptr) uncount(node_bytes_, array_bytes(n));
    delete[] n.array;
    n.array = nullptr;
  }
}

std::uint64_t TreeCore::delete_subtree(Node* node) noexcept {
  std::uint64_t dropped = 0;
  if (node->child_count != 0) {
    const std::uint64_t last = (std::uint64_t{1} << bits_[node->depth]) - 1;
    for_each_child(*node, 0, last, [&](std::uint64_t, Node* c) { dropped += delete_subtree(c); });
  }
  if (node->block != nullptr) {
    dropped += node->dirty.bytes();
    free_block(*node);
  }
  delete_node(node);
  return dropped;
}

void TreeCore::delete_node(Node* n) noexcept {
  std::uint64_t bytes = sizeof(Node);
  if (n->map != nullptr) bytes += n->map->size() * kMapEntryBytes;
  if (n->array != nullptr) bytes += array_bytes(*n);
  uncount(node_bytes_, bytes);
  delete n->map;
  delete[] n->array;
  delete n->parked;
  delete n->direct;
  delete n;
  uncount(counters_.nodes);
}

// --- blocks and counters -------------------------------------------------------------------

bool TreeCore::allocate_block(Node& n) noexcept {
  const std::uint64_t size = block_size(n);
  const std::size_t align = size >= 4096 ? std::max<std::size_t>(mem_align_, 4096) : mem_align_;
  std::byte* p = quota_.allocate(size, align);
  if (p == nullptr) return false;
  n.block = p;
  n.valid = false;
  n.fill_end = 0;
  n.dirty.clear();
  n.unsynced.clear();
  n.unsynced_epoch = 0;
  n.unsynced_since = 0;
  n.block_seq = quota_.next_seq();
  quota_.record(BlockRecord{id_, n.base, n.block_seq, n.depth});
  propagate_cached(n, static_cast<std::int64_t>(size));
  count(counters_.cached_bytes, size);
  count(counters_.blocks);
  return true;
}

void TreeCore::free_block(Node& n) noexcept {
  const std::uint64_t size = block_size(n);
  if (!n.dirty.empty()) {
    uncount(counters_.dirty_bytes, n.dirty.bytes());
    quota_.note_dirty(-static_cast<std::int64_t>(n.dirty.bytes()));
    propagate_dirty(n, -1);
    n.dirty.clear();
  }
  propagate_cached(n, -static_cast<std::int64_t>(size));
  uncount(counters_.cached_bytes, size);
  uncount(counters_.blocks);
  quota_.release(n.block, size);
  n.unsynced.clear();
  n.unsynced_epoch = 0;
  n.unsynced_since = 0;
  n.block = nullptr;
  n.valid = false;
  n.fill_end = 0;
  n.block_seq = 0;
}

void TreeCore::propagate_cached(Node& n, std::int64_t delta) noexcept {
  for (Node* x = &n; x != nullptr; x = x->parent)
    x->cached_bytes.fetch_add(static_cast<std::uint64_t>(delta), std::memory_order_relaxed);
}

void TreeCore::propagate_dirty(Node& n, std::int64_t delta) noexcept {
  for (Node* x = &n; x != nullptr; x = x->parent)
    x->dirty_blocks.fetch_add(static_cast<std::uint64_t>(delta), std::memory_order_relaxed);
  counters_.dirty_blocks.fetch_add(static_cast<std::uint64_t>(delta), std::memory_order_relaxed);
}

void TreeCore::dirty_changed(Node& n, std::uint64_t before_bytes, bool was_dirty) noexcept {
  const std::uint64_t after = n.dirty.bytes();
  if (after > before_bytes) count(counters_.dirty_bytes, after - before_bytes);
  if (after < before_bytes) uncount(counters_.dirty_bytes, before_bytes - after);
  if (after != before_bytes) quota_.note_dirty(static_cast<std::int64_t>(after) - static_cast<std::int64_t>(before_bytes));
  const bool is_dirty = !n.dirty.empty();
  if (is_dirty != was_dirty) propagate_dirty(n, is_dirty ? 1 : -1);
}

std::uint64_t TreeCore::logical_last_or_max() const noexcept {
  if (!size_known_ || size_top_.load(std::memory_order_relaxed)) return ~std::uint64_t{0};
  const std::uint64_t end = size_end_.load(std::memory_order_relaxed);
  return end == 0 ? 0 : end - 1;
}

std::uint64_t TreeCore::fill_limit(const Node& n) const noexcept {
  const std::uint64_t size = block_size(n);
  if (!size_known_ || size_top_.load(std::memory_order_relaxed)) return size;
  const std::uint64_t end = size_end_.load(std::memory_order_relaxed);
  if (end <= n.base) return 0;
  std::uint64_t limit = std::min(size, end - n.base);
  if (direct_ && io_align_ > 1) limit = std::min(size, (limit + io_align_ - 1) / io_align_ * io_align_);
  return limit;
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

std::optional<std::uint64_t> TreeCore::logical_size() const noexcept {
  if (!size_known_) return std::nullopt;
  if (size_top_.load(std::memory_order_relaxed)) return ~std::uint64_t{0};
  const std::uint64_t known = size_end_.load(std::memory_order_relaxed);
  // The file may have grown since this tree took its size: an earlier handle of the path whose
  // close wrote its cached data back after this handle was opened, or another process. Reads
  // learn it when they pass the known end (refresh_size); the size reported must include it
  // too, without storing it (only root steps write size_end_).
  if (options_.file_size || file_ == nullptr) return known;
  const std::optional<std::uint64_t> now = file_->size();
  return now && *now > known ? *now : known;
}

// --- writes and write-backs over many children ----------------------------------------------

bool TreeCore::write_at_idle_child(Node& c, const Step& piece) noexcept {
  // Idle: every operation that went into c has completed, so no step of c is queued, parked or
  // waiting for I/O (done_up_to; its acquire load makes their effects visible here), and c's
  // later steps come from later steps of this parent: this step may act as c's own.
  if (!done_up_to(c.last_seq) || c.busy || c.has_parked() || c.direct_count != 0) return false;
  if (c.block == nullptr) {
    // A leaf for every request that has no block yet: at_leaf() would allocate one. Checked
    // against available() first so that a refusal (the step then reroutes) is counted once.
    if (c.child_count != 0 || !bottom(c) || !cacheable(c.depth)) return false;
    // The write-around rule: c's own step sends the piece to the engine.
    if (goes_around(piece)) return false;
    if (quota_.available() < block_size(c) || !allocate_block(c)) return false;
  }
  const std::uint64_t lo = piece.first - c.base, hi = piece.last - c.base + 1;
  // The tiny-write rule's case (write_into_block): the step decides, with its engine request.
  if (!(lo == 0 && hi == block_size(c)) && c.dirty.count_after(lo, hi) > DirtyRanges::kMax) return false;
  absorb_write(c, lo, hi, op_data(piece), false);
  return true;
}

// --- gathered write-back --------------------------------------------------------------------

namespace {
/// One gathered write in flight: its staging copy (charged to the quota) and, per block, the
/// write_back io_done step that block's own request would have continued with. Owned by the
/// request: made by issue_gather, freed by gather_done.
struct GatherIo {
  std::byte* buffer = nullptr;  // the staging copy, or nullptr when the write is vectored
  std::uint64_t bytes = 0;
  std::vector<::iovec> segments;  // vectored: one per member, into its block
  std::vector<Step> members;
};
}  // namespace

void TreeCore::write_back_range(const Node& n, int& groups, std::uint64_t& b, std::uint64_t& e) const noexcept {
  // Ranges whose gaps are at most one request's cost go together (valid blocks only: the gaps
  // of a block that was never read are unknown bytes).
  const DirtyRanges& d = n.dirty;
  int j = 1;
  if (n.valid)
    while (j < d.count() && d[j].begin - d[j - 1].end <= options_.request_cost_bytes) ++j;
  b = d[0].begin;
  e = d[j - 1].end;
  if (direct_ && n.valid && io_align_ > 1) {
    // The aligned superset, straight from the block's aligned memory: no bounce, no
    // read-modify-write. The end is widened only within the file, never making it longer.
    b = b / io_align_ * io_align_;
    const std::uint64_t wide = (e + io_align_ - 1) / io_align_ * io_align_;
    if (wide <= block_size(n) && n.base + wide - 1 <= logical_last_or_max()) e = wide;
  }
  groups = j;
}

std::size_t TreeCore::gather_run(Node* const* targets, std::size_t count) const noexcept {
  const Node& first = *targets[0];
  if (!gatherable(first)) return 0;
  const std::uint64_t size = block_size(first);
  int groups = 0;
  std::uint64_t b = 0, e = 0;
  write_back_range(first, groups, b, e);
  if (e != size || e - b > options_.gather_bytes) return 0;  // nothing can follow it
  std::uint64_t total = e - b;
  std::size_t k = 1;
  while (k < count) {
    const Node& c = *targets[k];
    // Siblings of one parent: the same depth, so the same block size. Adjacent in the file:
    // the next index (targets skip clean children, so check the base).
    if (c.base != targets[k - 1]->base + size || !gatherable(c)) break;
    write_back_range(c, groups, b, e);
    if (b != 0 || total + e > options_.gather_bytes) break;
    total += e;
    ++k;
    if (e != size) break;  // its group ends inside the block: the run ends with it
  }
  return k;
}

bool TreeCore::issue_gather(Operation& op, Node* const* members, std::size_t k, StepSink& sink) {
  std::uint64_t total = 0;
  // Vectored unless a direct file's alignment rejects a segment (the kernel checks each one;
  // the engine would bounce the whole write through a copy of its own).
  bool vectored = options_.vectored_write_back && k <= Request::kMaxSegments;
  for (std::size_t i = 0; i < k; ++i) {
    int j = 0;
    std::uint64_t b = 0, e = 0;
    write_back_range(*members[i], j, b, e);
    total += e - b;
    if (vectored && direct_)
      vectored = reinterpret_cast<std::uintptr_t>(members[i]->block + b) % mem_align_ == 0 && (e - b) % io_align_ == 0;
  }
  std::byte* buffer = nullptr;
  if (!vectored) {
    // The staging copy counts against the quota like a block: the strict limit then bounds
    // every byte of data the tree holds. Checked first so that a full quota (which the
    // per-block path handles without memory) does not count a denial.
    if (quota_.available() < Quota::charge_for(total)) return false;
    const std::size_t align = std::max<std::size_t>(mem_align_, 4096);
    buffer = quota_.allocate(total, align);
    if (buffer == nullptr) return false;
  }
  auto* g = new GatherIo();
  g->buffer = buffer;
  g->bytes = total;
  g->members.reserve(k);
  if (vectored) g->segments.reserve(k);
  // One stamp for every member, loaded before the request (see note_block_written).
  const std::uint32_t issued = write_issued_now();
  std::uint64_t pos = 0, offset = 0;
  for (std::size_t i = 0; i < k; ++i) {
    Node& n = *members[i];
    int j = 0;
    std::uint64_t b = 0, e = 0;
    write_back_range(n, j, b, e);
    if (i == 0) offset = n.base + b;
    if (vectored)
      g->segments.push_back({n.block + b, e - b});
    else
      std::memcpy(buffer + pos, n.block + b, e - b);
    pos += e - b;
    // As the member's own write_back_next would: busy until its io_done step (later visits
    // park behind it), and this operation is now in it (last_seq, as maintain() sets it).
    n.busy = true;
    n.write_issued = issued;
    n.last_seq = std::max(n.last_seq, op.seq());
    Step m;
    m.tree = this;
    m.node = &n;
    m.op = &op;
    m.first = n.base + b;
    m.last = n.base + e - 1;
    m.aux = static_cast<std::uint32_t>(j);
    m.kind = StepKind::io_done;
    m.purpose = IoPurpose::write_back;
    g->members.push_back(m);
  }
  count(counters_.engine_writes);
  count(counters_.gathered_blocks, k);
  Step c;
  c.tree = this;
  c.op = &op;
  c.first = reinterpret_cast<std::uintptr_t>(g);
  c.kind = StepKind::io_done;
  c.purpose = IoPurpose::gather;
  Request r = make_request(Op::write, buffer, offset, total);
  if (vectored) {
    r.iov = g->segments.data();
    r.iov_count = static_cast<std::uint32_t>(g->segments.size());
  }
  sink.io(r, c);
  return true;
}

void TreeCore::gather_done(const Step& s, StepSink& sink) {
  auto* g = reinterpret_cast<GatherIo*>(static_cast<std::uintptr_t>(s.first));
  const bool ok = s.io_result >= 0 && static_cast<std::uint64_t>(s.io_result) == g->bytes;
  // Members count the bytes of a full success; a short write's bytes are counted here.
  if (!ok && s.io_result > 0) count(counters_.bytes_to_engine, static_cast<std::uint64_t>(s.io_result));
  const std::int64_t err = s.io_result < 0 ? s.io_result : -EIO;
  if (g->buffer != nullptr) quota_.release(g->buffer, g->bytes);  // the engine is done with the copy
  for (Step m : g->members) {
    // A short write fails every member: which of them reached the file is not known, and each
    // stays dirty and is written again (the write-back failure rule, per block).
    m.io_result = ok ? static_cast<std::int64_t>(m.last - m.first + 1) : err;
    sink.emit(m);
  }
  delete g;
}

// --- parking and uncached requests ---------------------------------------------------------

void TreeCore::park_back(Node& n, const Step& s) {
  if (n.parked == nullptr) n.parked = new ParkedSteps();
  n.parked->push_back(s);
}

void TreeCore::park_front(Node& n, const Step& s) {
  if (n.parked == nullptr) n.parked = new ParkedSteps();
  n.parked->push_front(s);
}

bool TreeCore::conflicts_direct(const Node& n, const Step& s) noexcept {
  if (n.direct == nullptr) return false;
  const bool write = s.op->kind == TreeOp::write;
  for (const DirectIo& d : *n.direct)
    if ((write || d.write) && d.first <= s.last && s.first <= d.last) return true;
  return false;
}

void TreeCore::add_direct(Node& n, const Step& s) {
  if (n.direct == nullptr) n.direct = new std::vector<DirectIo>();
  n.direct->push_back(DirectIo{s.first, s.last, s.op->kind == TreeOp::write});
  ++n.direct_count;
}

void TreeCore::remove_direct(Node& n, const Step& s) noexcept {
  const bool write = s.op->kind == TreeOp::write;
  auto& v = *n.direct;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i].first == s.first && v[i].last == s.last && v[i].write == write) {
      v[i] = v.back();
      v.pop_back();
      --n.direct_count;
      return;
    }
  }
  assert(false && "completion of an uncached request the node does not know");
}

// --- introspection -------------------------------------------------------------------------

BTreeStats TreeCore::stats() const noexcept {
  auto ld = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  BTreeStats s;
  s.cached_bytes = ld(counters_.cached_bytes);
  s.dirty_bytes = ld(counters_.dirty_bytes);
  s.blocks = ld(counters_.blocks);
  s.dirty_blocks = ld(counters_.dirty_blocks);
  s.nodes = ld(counters_.nodes);
  s.reroutes = ld(counters_.reroutes);
  s.uncached = ld(counters_.uncached);
  s.merges = ld(counters_.merges);
  s.merged_bytes = ld(counters_.merged_bytes);
  s.write_throughs = ld(counters_.write_throughs);
  s.cache_hits = ld(counters_.cache_hits);
  s.fills = ld(counters_.fills);
  s.restructures = ld(counters_.restructures);
  s.quiesces = ld(counters_.quiesces);
  s.engine_reads = ld(counters_.engine_reads);
  s.engine_writes = ld(counters_.engine_writes);
  s.bytes_from_engine = ld(counters_.bytes_from_engine);
  s.bytes_to_engine = ld(counters_.bytes_to_engine);
  s.write_back_errors = ld(counters_.write_back_errors);
  s.inline_ops = ld(counters_.inline_ops);
  s.size_refreshes = ld(counters_.size_refreshes);
  s.node_bytes = ld(node_bytes_);
  s.collects = ld(collects_);
  s.gathered_blocks = ld(counters_.gathered_blocks);
  s.write_arounds = ld(counters_.write_arounds);
  return s;
}

std::string TreeCore::check_invariants() const {
  struct Sum {
    std::uint64_t cached = 0, dirty_blocks = 0, dirty_bytes = 0, blocks = 0, nodes = 0;
  };
  std::string err;
  auto fail = [&](const Node& n, const std::string& what) {
    if (err.empty())
      err = "node depth " + std::to_string(n.depth) + " base " + std::to_string(n.base) + ": " + what;
  };
  auto walk = [&](auto& self, const Node& n) -> Sum {
    Sum sum;
    sum.nodes = 1;
    if (n.busy || n.has_parked() || n.direct_count != 0) fail(n, "busy, parked or uncached I/O in an idle tree");
    if (n.quiesced || n.quiesce_pending.load(std::memory_order_relaxed) != 0) fail(n, "quiesce state left over");
    if (n.last_seq > next_seq_ || n.last_write_seq > n.last_seq) fail(n, "operation numbers out of order");
    if (n.block != nullptr && n.child_count != 0) fail(n, "holds a block and has children");
    if (n.block != nullptr) {
      const std::uint64_t size = node_mask(n.depth) + 1;
      if (!n.dirty.well_formed(size)) fail(n, "malformed dirty ranges");
      if (!n.unsynced.well_formed(size)) fail(n, "malformed unsynced ranges");
      if (n.block_seq == 0) fail(n, "block without a sequence number");
      sum.cached += size;
      sum.blocks = 1;
      sum.dirty_bytes = n.dirty.bytes();
      sum.dirty_blocks = n.dirty.empty() ? 0 : 1;
    } else if (!n.dirty.empty()) {
      fail(n, "dirty ranges without a block");
    }
    if (n.direct != nullptr && !n.direct->empty()) fail(n, "uncached requests listed in an idle tree");
    std::uint32_t children = 0;
    if (n.depth + 1u < levels_) {
      const std::uint64_t last = (std::uint64_t{1} << bits_[n.depth]) - 1;
      auto visit_child = [&](std::uint64_t i, const Node* c) {
        ++children;
        if (c->parent != &n || c->depth != n.depth + 1u || c->base != n.base + (i << shift_[n.depth + 1]))
          fail(n, "child " + std::to_string(i) + " has a wrong parent, depth or base");
        const Sum cs = self(self, *c);
        sum.cached += cs.cached;
        sum.dirty_blocks += cs.dirty_blocks;
        sum.dirty_bytes += cs.dirty_bytes;
        sum.blocks += cs.blocks;
        sum.nodes += cs.nodes;
      };
      if (n.sparse) {
        if (n.map != nullptr)
          for (auto& [i, c] : *n.map) visit_child(i, c);
      } else if (n.array != nullptr) {
        for (std::uint64_t i = 0; i <= last; ++i)
          if (n.array[i] != nullptr) visit_child(i, n.array[i]);
      }
    }
    if (children != n.child_count) fail(n, "child_count differs from the children present");
    if (sum.cached != n.cached_bytes.load(std::memory_order_relaxed))
      fail(n, "subtree cached bytes " + std::to_string(n.cached_bytes.load()) + " != " + std::to_string(sum.cached));
    if (sum.dirty_blocks != n.dirty_blocks.load(std::memory_order_relaxed))
      fail(n, "subtree dirty blocks " + std::to_string(n.dirty_blocks.load()) + " != " +
                  std::to_string(sum.dirty_blocks));
    return sum;
  };
  const Sum total = walk(walk, *root_);
  const BTreeStats st = stats();
  auto compare = [&](const char* what, std::uint64_t counter, std::uint64_t actual) {
    if (err.empty() && counter != actual)
      err = std::string("counter ") + what + " = " + std::to_string(counter) + " but the tree holds " +
            std::to_string(actual);
  };
  compare("cached_bytes", st.cached_bytes, total.cached);
  compare("blocks", st.blocks, total.blocks);
  compare("dirty_bytes", st.dirty_bytes, total.dirty_bytes);
  compare("dirty_blocks", st.dirty_blocks, total.dirty_blocks);
  compare("nodes", st.nodes, total.nodes);
  return err;
}

}  // namespace detail

}  // namespace tai
