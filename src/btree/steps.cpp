// The step handlers of tai::BTree (see include/tai/btree.hpp): what one step does at one node.
// They work on the run-time core (TreeCore), whatever the tree's shape: a node's depth indexes
// the shape's arrays (bits_, shift_).
//
// Conventions of this file. A handler runs one step at one node. It ends the step by calling
// finished() (one step of the operation is done), or it keeps the step alive: parked at the node,
// waiting for an engine request (an io_done step continues it), or handed over to the child steps
// it emitted (descend, maintain: the operation's count passes to them).
#include "src/btree/tree_core.hpp"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <vector>

namespace tai::detail {

void TreeCore::run(const Step& s, StepSink& sink) {
  if (s.kind == StepKind::op_io_done) return op_io_done(s, sink);  // touches no node
  if (s.kind == StepKind::io_done && s.purpose == IoPurpose::gather) return gather_done(s, sink);  // nor this
  RunContext ctx(sink);
  switch (s.kind) {
    case StepKind::visit:
    case StepKind::quiesce: visit(s, ctx); break;
    case StepKind::io_done: io_done(s, ctx); break;
    case StepKind::resume: resume(s, ctx); break;
    case StepKind::op_io_done: break;
  }
  ctx.for_each_finished([&](Operation& op) { op_step_done(op, sink); });
}

// A step reaches its node. It waits (parks, FIFO) behind exclusive work and earlier waiting
// steps; while uncached requests of the node are in flight, only a request that does not
// overlap them (write vs anything) may join them, everything else waits.
void TreeCore::visit(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  if (n.busy || n.has_parked() ||
      (n.direct_count != 0 && (!is_transfer(s) || conflicts_direct(n, s)))) {
    park_back(n, s);
    return;
  }
  process(s, sink);
}

// Runs the steps parked at n for as long as n allows.
void TreeCore::drain(Node& n, StepSink& sink) {
  while (!n.busy && n.has_parked()) {
    const Step& head = n.parked->items[n.parked->head];
    if (n.direct_count != 0 && (!is_transfer(head) || conflicts_direct(n, head))) break;
    process(n.parked->pop_front(), sink);
  }
}

bool TreeCore::process(Step s, StepSink& sink) {
  if (s.kind == StepKind::quiesce) {
    quiesce(s, sink);
    return true;
  }
  if ((s.aux & kEntry) != 0 && !enter(s, sink)) return true;
  if (!is_transfer(s)) return maintain(s, sink);
  if (s.node->direct_count != 0) {
    // Join the node's uncached requests in flight (visit/drain checked there is no overlap):
    // caching now could serve or hold bytes those requests are changing.
    const Node& n = *s.node;
    count(bottom(n) && !cacheable(n.depth) ? counters_.uncached : counters_.reroutes);
    return go_direct(s, sink);
  }
  return transfer(s, sink);
}

bool TreeCore::transfer(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  if (n.block != nullptr) return at_block(s, sink);
  if (writes_around(s)) {
    count(counters_.write_arounds);
    return go_direct(s, sink);
  }
  if (bottom(n)) return at_leaf(s, sink);
  const bool whole = s.first == n.base && s.last == node_last(n);
  if (whole && cacheable(n.depth)) {
    if (s.op->kind == TreeOp::write) return n.child_count != 0 ? overwrite(s, sink) : at_leaf(s, sink);
    if (n.child_count == 0) return at_leaf(s, sink);
  }
  if (n.child_count == 0 && quota_.available() < smallest_block_) {
    // No block could be had below: one uncached request here instead of one per child.
    count(counters_.reroutes);
    return go_direct(s, sink);
  }
  return descend(s, sink);
}

// n is the leaf for this request and has no block: get one, or go to the engine.
bool TreeCore::at_leaf(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  if (!cacheable(n.depth)) {
    count(counters_.uncached);
    return go_direct(s, sink);
  }
  if (!allocate_block(n)) {
    count(counters_.reroutes);
    return go_direct(s, sink);
  }
  if (s.op->kind == TreeOp::write) return write_into_block(s, sink);
  return fill_from(s, 0, sink);
}

bool TreeCore::at_block(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  if (s.op->kind == TreeOp::write) return write_into_block(s, sink);
  const std::uint64_t hi = s.last - n.base + 1;
  if (mirrors(n, hi) || n.dirty.covers(s.first - n.base, hi)) {
    count(counters_.cache_hits);
    return serve_read(s, sink);
  }
  // A valid block filled when the file ended inside it, read past that end after the file grew:
  // only the part past the old end is read again.
  return fill_from(s, n.valid ? n.fill_end : 0, sink);
}

bool TreeCore::serve_read(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  std::memcpy(op_data(s), n.block + (s.first - n.base), step_length(s));
  return finished(s, sink);
}

// Reads the clean parts of n's block from the engine, one gap between dirty ranges at a time,
// starting at block offset `from`; then serves the read. Each gap is zeroed before its read so
// that a short read (end of file) leaves zeros, as a hole would.
bool TreeCore::fill_from(const Step& s, std::uint64_t from, StepSink& sink) {
  Node& n = *s.node;
  const std::uint64_t size = block_size(n);
  const std::uint64_t limit = fill_limit(n);
  if (from == 0 && limit < size) std::memset(n.block + limit, 0, size - limit);  // past the end of file
  std::uint64_t b = 0, e = 0;
  if (n.dirty.next_clean(from, limit, b, e)) {
    std::memset(n.block + b, 0, e - b);
    n.busy = true;
    Step c = s;
    c.kind = StepKind::io_done;
    c.purpose = IoPurpose::fill;
    c.aux = static_cast<std::uint32_t>(e);  // blocks are at most 1 GiB
    count(counters_.engine_reads);
    count(counters_.bytes_from_engine, e - b);
    sink.io(make_request(Op::read, n.block + b, n.base + b, e - b), c);
    return false;
  }
  n.valid = true;
  n.fill_end = static_cast<std::uint32_t>(limit);
  count(counters_.fills);
  return serve_read(s, sink);
}

bool TreeCore::write_into_block(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  const std::uint64_t lo = s.first - n.base, hi = s.last - n.base + 1, len = hi - lo;
  if (!(lo == 0 && hi == block_size(n)) && n.dirty.count_after(lo, hi) > DirtyRanges::kMax) {
    // The tiny-write rule (tai/btree.hpp): one request now, or the smallest gap written back later.
    const bool through = !n.valid || (options_.tiny_write_rule &&
                                      options_.request_cost_bytes + len < n.dirty.smallest_gap_after(lo, hi));
    if (through) {
      n.busy = true;
      Step c = s;
      c.kind = StepKind::io_done;
      c.purpose = IoPurpose::write_through;
      count(counters_.engine_writes);
      n.write_issued = write_issued_now();  // before the request: see note_block_written
      sink.io(make_request(Op::write, op_data(s), s.first, len), c);
      return false;
    }
  }
  absorb_write(n, lo, hi, op_data(s), false);
  return finished(s, sink);
}

// An uncached request of this piece, straight to the engine. Several may be in flight at one node.
bool TreeCore::go_direct(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  add_direct(n, s);
  Step c = s;
  c.kind = StepKind::io_done;
  c.purpose = IoPurpose::direct;
  const std::uint64_t len = step_length(s);
  const bool read = s.op->kind == TreeOp::read;
  count_direct(s.op->kind, len, false);
  if (!read) c.aux = write_issued_now();  // before the request: see note_uncached_write
  sink.io(make_request(read ? Op::read : Op::write, op_data(s), s.first, len), c);
  return false;
}

// A write covering the whole of n, which has children: once nothing earlier is active below n,
// drop every child (their bytes are all overwritten) and make n the leaf.
bool TreeCore::overwrite(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  if (!n.quiesced && !children_idle(n)) {
    // Earlier steps may still be active below: wait at the head of n's queue (later steps park
    // behind: busy) and send a quiesce step down every child. Each queues behind the earlier
    // steps of its node (FIFO), then passes to that node's children; the last one to finish
    // emits a resume step for n.
    count(counters_.quiesces);
    n.busy = true;
    park_front(n, s);
    n.quiesce_pending.store(n.child_count, std::memory_order_relaxed);
    const std::uint64_t last_index = (std::uint64_t{1} << bits_[n.depth]) - 1;
    for_each_child(n, 0, last_index, [&](std::uint64_t, Node* c) {
      Step q;
      q.tree = this;
      q.node = c;
      q.first = reinterpret_cast<std::uintptr_t>(&n);  // the node waiting
      q.kind = StepKind::quiesce;
      sink.emit(q);
    });
    return false;
  }
  n.quiesced = false;
  std::uint64_t dropped = 0;
  const std::uint64_t last_index = (std::uint64_t{1} << bits_[n.depth]) - 1;
  for_each_child(n, 0, last_index, [&](std::uint64_t i, Node* c) {
    dropped += delete_subtree(c);
    erase_child(n, i);
  });
  count(counters_.merged_bytes, dropped);
  count(counters_.restructures);
  return at_leaf(s, sink);
}

// A quiesce step at one node of a subtree whose ancestor waits to be overwritten: every earlier
// step of this node has run (FIFO, and busy/uncached work made it park), so pass on to the
// children, then count this one done.
void TreeCore::quiesce(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  auto* waiting = reinterpret_cast<Node*>(static_cast<std::uintptr_t>(s.first));
  if (n.child_count != 0) {
    // Add before emitting (and before this step's own decrement): the count cannot reach 0 early.
    waiting->quiesce_pending.fetch_add(n.child_count, std::memory_order_relaxed);
    const std::uint64_t last_index = (std::uint64_t{1} << bits_[n.depth]) - 1;
    for_each_child(n, 0, last_index, [&](std::uint64_t, Node* c) {
      Step q = s;
      q.node = c;
      sink.emit(q);
    });
  }
  if (waiting->quiesce_pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    Step r;
    r.tree = this;
    r.node = waiting;
    r.kind = StepKind::resume;
    sink.emit(r);
  }
}

bool TreeCore::descend(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  const unsigned cs = shift_[n.depth + 1];
  const std::uint64_t i0 = (s.first - n.base) >> cs, i1 = (s.last - n.base) >> cs;
  const bool write = s.op->kind == TreeOp::write;
  if (!write) {
    // This step's count on the operation passes to the first child: no atomic for one child.
    if (i1 > i0) op_add(*s.op, i1 - i0);
    for (std::uint64_t i = i0;; ++i) {
      Node& c = child_or_create(n, i);
      c.last_seq = s.op->seq();
      Step cs_step = s;
      cs_step.node = &c;
      cs_step.first = std::max(s.first, c.base);
      cs_step.last = std::min(s.last, node_last(c));
      cs_step.aux = 0;
      sink.emit(cs_step);
      if (i == i1) break;
    }
    return false;  // handed over
  }
  // A write: the pieces for idle children that can simply take them (write_at_idle_child) are
  // written here, without a step each (a 150 KB write into 4 KiB blocks: 1 step, not 37). The
  // others get their step as before; each emitted step needs a count of the operation, added
  // in batches before the batch is emitted (this step's own count still holds the operation
  // open meanwhile), the last batch taking over this step's count.
  constexpr std::size_t kBatch = 16;
  Step batch[kBatch];
  std::size_t m = 0;
  for (std::uint64_t i = i0;; ++i) {
    Node& c = child_or_create(n, i);
    Step cs_step = s;
    cs_step.node = &c;
    cs_step.first = std::max(s.first, c.base);
    cs_step.last = std::min(s.last, node_last(c));
    cs_step.aux = 0;
    // A piece written here leaves nothing of this operation in c: c.last_seq and
    // last_write_seq stay as they are, so c is idle again at once (a write-back may gather
    // it while the rest of this write still waits at a busy sibling). A piece sent as a step
    // raises them, as for any operation the parent sends into a child.
    if (!write_at_idle_child(c, cs_step)) {
      c.last_seq = s.op->seq();
      c.last_write_seq = s.op->seq();
      if (m == kBatch) {
        op_add(*s.op, kBatch);
        for (const Step& b : batch) sink.emit(b);
        m = 0;
      }
      batch[m++] = cs_step;
    }
    if (i == i1) break;
  }
  if (m == 0) return finished(s, sink);  // every piece written here
  if (m > 1) op_add(*s.op, m - 1);
  for (std::size_t k = 0; k < m; ++k) sink.emit(batch[k]);
  return false;  // handed over
}

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

void TreeCore::io_done(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  Operation& op = *s.op;
  switch (s.purpose) {
    case IoPurpose::fill:
      n.busy = false;
      if (s.io_result < 0) {
        op_fail(op, s.io_result);  // the block stays not valid; its dirty ranges are intact
        finished(s, sink);
      } else {
        fill_from(s, s.aux, sink);
      }
      break;
    case IoPurpose::direct: {
      remove_direct(n, s);
      if (op.kind == TreeOp::write && s.io_result > 0) note_uncached_write(s.aux);
      if (const std::int64_t err = direct_outcome(op.kind, s.io_result, op_data(s), step_length(s), false))
        op_fail(op, err);
      finished(s, sink);
      break;
    }
    case IoPurpose::write_through: {
      n.busy = false;
      const std::uint64_t len = step_length(s);
      if (s.io_result > 0) count(counters_.bytes_to_engine, static_cast<std::uint64_t>(s.io_result));
      if (s.io_result >= 0 && static_cast<std::uint64_t>(s.io_result) == len) {
        // The file has these bytes now; the cached copy gets them too and they stay clean (the
        // write touches no dirty range: that is why it overflowed them).
        std::memcpy(n.block + (s.first - n.base), op_data(s), len);
        note_block_written(n, s.first - n.base, s.last - n.base + 1);
        count(counters_.write_throughs);
      } else {
        op_fail(op, s.io_result < 0 ? s.io_result : -EIO);
        n.valid = false;  // the file may hold part of the write now: the clean copy is stale
      }
      finished(s, sink);
      break;
    }
    case IoPurpose::write_back: {
      n.busy = false;
      const std::uint64_t len = s.last - s.first + 1;
      if (s.io_result > 0) count(counters_.bytes_to_engine, static_cast<std::uint64_t>(s.io_result));
      if (s.io_result < 0 || static_cast<std::uint64_t>(s.io_result) != len) {
        const std::int64_t err = s.io_result < 0 ? s.io_result : -EIO;
        record_error(err);  // the block stays dirty: a later write-back tries again
        count(counters_.write_back_errors);
        op_fail(op, err);
        finished(s, sink);
        break;
      }
      const std::uint64_t before = n.dirty.bytes();
      n.dirty.erase_front(static_cast<int>(s.aux));
      dirty_changed(n, before, true);
      note_block_written(n, s.first - n.base, s.last - n.base + 1);
      if (!n.dirty.empty()) {
        write_back_next(s, sink);
        break;
      }
      // Clean budget (tai/btree.hpp): a block the write-back left clean while the quota holds
      // more clean bytes than the budget goes back to the quota's pool now if every byte of it
      // is synced; one with unsynced bytes stays for a failed sync's redirty, and the release
      // phase of the sync that covers it frees it.
      if (op.kind == TreeOp::drop || op.kind == TreeOp::evict ||
          (quota_.over_clean_budget() && !unsynced_live(n))) {
        note_block_leaving(n);
        free_block(n);
      }
      finished(s, sink);
      break;
    }
    case IoPurpose::none:
    case IoPurpose::sync:
    case IoPurpose::gather:
      assert(false && "io_done step without a node purpose");
      return;
  }
  drain(n, sink);  // no-op while another request of this node keeps it busy
}

void TreeCore::resume(const Step& s, StepSink& sink) {
  Node& n = *s.node;
  n.busy = false;
  n.quiesced = true;  // every quiesce step has passed: nothing earlier is active below
  process(n.parked->pop_front(), sink);  // the overwrite that waited
  drain(n, sink);
}

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

}  // namespace tai::detail
