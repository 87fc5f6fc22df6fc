// Write-back, fsync, drop, evict and collect steps at a node (maintain), a block's write-back one
// group of dirty ranges at a time, and the gathered write-back of adjacent idle blocks under one
// parent (one engine write for several blocks, staged or vectored).
#include "src/btree/tree_core.hpp"

#include <sys/uio.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <vector>

namespace tai::detail {

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

// write_back / fsync / fdatasync / drop / evict at n.
bool TreeCore::maintain(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  Operation& op = *s.op;
  const bool collect = op.kind == TreeOp::collect;
  if (n.block != nullptr) {
    if (collect) return finished(s, sink);  // a block: nothing to free here
    if (redirtying(op)) {  // a failed sync's redirty (tai/btree.hpp, "Failed engine syncs")
      redirty_block(n);
      return finished(s, sink);
    }
    if (releasing(op)) {  // the clean budget after a good sync (tai/btree.hpp, "Clean budget")
      release_synced_block(n);
      return finished(s, sink);
    }
    if (op.kind == TreeOp::evict && (n.depth != op.evict_depth || n.block_seq != op.evict_seq))
      return finished(s, sink);  // a newer block than the record: it has its own record
    if (!n.dirty.empty()) return write_back_next(s, sink);
    if (op.kind == TreeOp::drop || op.kind == TreeOp::evict) {
      note_block_leaving(n);
      free_block(n);
    }
    return finished(s, sink);
  }
  if (op.kind == TreeOp::evict && n.depth >= op.evict_depth) return finished(s, sink);
  if (n.child_count == 0) return finished(s, sink);
  // The release phase stops descending once the budget holds again.
  if (releasing(op) && !quota_.over_clean_budget()) return finished(s, sink);
  // A redirty looks for blocks with unsynced bytes, dirty or clean, and a release for clean
  // blocks: neither can skip clean subtrees.
  const bool wants_dirty =
      op.kind != TreeOp::drop && op.kind != TreeOp::evict && !collect && !redirtying(op) && !releasing(op);
  const unsigned cs = shift_[n.depth + 1];
  const std::uint64_t i0 = (s.first - n.base) >> cs, i1 = (s.last - n.base) >> cs;
  std::vector<Node*> targets;
  for_each_child(n, i0, i1, [&](std::uint64_t i, Node* c) {
    // A child an earlier operation may still be working in is visited whatever its counters
    // say: that work may be about to cache or dirty it, and this step must come after it.
    const bool quiet = done_up_to(c->last_seq);
    if (quiet && c->cached_bytes.load(std::memory_order_relaxed) == 0) {
      delete_subtree(c);  // idle and empty: garbage
      erase_child(n, i);
      return;
    }
    if (wants_dirty && done_up_to(c->last_write_seq) && c->dirty_blocks.load(std::memory_order_relaxed) == 0)
      return;  // clean, and every write that went in has landed
    // A collection descends only where blocks are (the garbage it looks for hangs beside them):
    // an empty child that an operation is still in is left for the next one.
    if (collect && c->cached_bytes.load(std::memory_order_relaxed) == 0) return;
    targets.push_back(c);
  });
  if (targets.empty()) return finished(s, sink);
  if (targets.size() > 1) op_add(op, targets.size() - 1);
  // Each target holds one count of the operation, whether a step of its own carries it or a
  // gathered write's io_done step for it does.
  const bool gather = options_.gather_bytes != 0 && targets.size() > 1 && !redirtying(op) && !releasing(op) &&
                      (op.kind == TreeOp::write_back || op.kind == TreeOp::fsync ||
                       op.kind == TreeOp::fdatasync || op.kind == TreeOp::drop);
  for (std::size_t i = 0; i < targets.size();) {
    if (gather) {
      // gather_run checks each member's last_seq before issue_gather raises it (below).
      const std::size_t k = gather_run(targets.data() + i, targets.size() - i);
      if (k > 1 && issue_gather(op, targets.data() + i, k, sink)) {
        i += k;
        continue;
      }
    }
    Node* c = targets[i++];
    // max: a redirty or release belongs to an older operation than those that may have passed
    // since (every other visit arrives in start order, so for it this is op.seq()).
    c->last_seq = std::max(c->last_seq, op.seq());
    Step cs_step = s;
    cs_step.node = c;
    cs_step.first = std::max(s.first, c->base);
    cs_step.last = std::min(s.last, node_last(*c));
    cs_step.aux = 0;
    sink.emit(cs_step);
  }
  return false;  // handed over
}

// Writes back the first group of n's dirty ranges (write_back_range). The continuation's
// first/last hold the request's range.
bool TreeCore::write_back_next(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  int j = 1;
  std::uint64_t b = 0, e = 0;
  write_back_range(n, j, b, e);
  n.busy = true;
  Step c = s;
  c.kind = StepKind::io_done;
  c.purpose = IoPurpose::write_back;
  c.aux = static_cast<std::uint32_t>(j);
  c.first = n.base + b;
  c.last = n.base + e - 1;
  count(counters_.engine_writes);
  n.write_issued = write_issued_now();  // before the request: see note_block_written
  sink.io(make_request(Op::write, n.block + b, n.base + b, e - b), c);
  return false;
}

}  // namespace tai::detail
