// src/btree/node.hpp - one node of a tai::BTree (shape-independent).
//
// A node covers an aligned power-of-two range of the file's address space. It is either
//  * a leaf: no children; it may hold one cache block covering its whole range, or
//  * an inner node: children created on demand, and never a block at the same time.
// Only steps of this node touch its plain fields (the runner runs them one at a time, see
// tai::Step), except last_seq/last_write_seq, which belong to the parent's steps; the atomics
// are the counters other nodes' steps may touch.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "tai/btree_ops.hpp"
#include "src/btree/dirty.hpp"

namespace tai::detail {

/// Steps waiting at a node, FIFO (a vector with a moving head; the memory is kept for reuse).
struct ParkedSteps {
  std::vector<Step> items;
  std::size_t head = 0;
  bool empty() const noexcept { return head == items.size(); }
  void push_back(const Step& s) { items.push_back(s); }
  void push_front(const Step& s) {
    if (head > 0) {
      items[--head] = s;
    } else {
      items.insert(items.begin(), s);
    }
  }
  Step pop_front() noexcept {
    Step s = items[head++];
    if (head == items.size()) {
      items.clear();
      head = 0;
    }
    return s;
  }
};

/// An uncached engine request of a node in flight (several may be, when they do not conflict).
struct DirectIo {
  std::uint64_t first;
  std::uint64_t last;
  bool write;
};

struct Node {
  Node(Node* parent_node, std::uint64_t first_byte, unsigned node_depth) noexcept
      : parent(parent_node), base(first_byte), depth(static_cast<std::uint8_t>(node_depth)) {}
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  Node* const parent;
  const std::uint64_t base;  // first byte covered
  const std::uint8_t depth;  // 0 = root

  bool busy = false;   // exclusive work in flight: a fill, write-back, write-through, or a wait
                       // for quiet children; visit steps park behind it
  bool valid = false;  // the block mirrors the file outside its dirty ranges (else only the
                       // dirty ranges hold meaningful bytes)
  bool sparse = false; // children kept in `map` (wide level) rather than `array`
  std::uint32_t child_count = 0;
  std::uint32_t direct_count = 0;  // uncached requests in flight (entries of `direct`)
  // While valid: the block mirrors the file up to here; past it, the fill found the end of file
  // and assumed a hole (zeros). A read past it, once the file is known to be larger (another
  // writer grew it), reads that part again. Blocks are at most 1 GiB (fits; no size cost: padding).
  std::uint32_t fill_end = 0;
  // The low 32 bits of the sync epoch when the node's current write-back or write-through was
  // issued (busy: one at a time). Its completion step may run after a later engine sync was
  // issued, and that sync's failure may have dropped these bytes: see TreeCore::note_lost.
  std::uint32_t write_issued = 0;

  std::byte* block = nullptr;  // cache block of the node's size, from the quota
  std::uint64_t block_seq = 0; // Quota::next_seq() of its allocation
  DirtyRanges dirty;
  // Bytes of the block that reached the engine (write-back, write-through) and that no engine
  // sync has been seen to cover yet: what a failed fsync makes the tree write again (see
  // "Failed engine syncs" in tai/btree.hpp). Stale, and treated as empty, once unsynced_epoch
  // is at or below the tree's synced epoch. Same range rules as `dirty` (bridging gaps only in a
  // valid block).
  DirtyRanges unsynced;
  std::uint64_t unsynced_epoch = 0;  // the sync epoch of the newest range in `unsynced` (0: none)
  std::uint64_t unsynced_since = 0;  // the epoch at issue of the oldest range in `unsynced`

  Node** array = nullptr;                      // narrow level: fanout slots
  std::map<std::uint64_t, Node*>* map = nullptr;  // wide level: index -> child
  ParkedSteps* parked = nullptr;               // lazily allocated
  std::vector<DirectIo>* direct = nullptr;     // lazily allocated

  // Written and read only by steps of the parent node (never by this node's own steps): the
  // sequence number (Operation seq) of the last operation the parent sent a step of into this
  // node, and of the last write. Once the tree's completion prefix has passed them, nothing is
  // active in this subtree (no step queued, parked or waiting for I/O): see TreeCore::done_up_to.
  std::uint64_t last_seq = 0;
  std::uint64_t last_write_seq = 0;
  bool quiesced = false;  // a resume step found the children quiet: the waiting overwrite may go
  // While a whole-node overwrite waits at this node: quiesce steps still out in the subtree. The
  // last one to finish (acq_rel decrement reaching 0) emits the resume step; its release, with
  // every quiesce step's, publishes the subtree's final state to the resumed step.
  std::atomic<std::uint64_t> quiesce_pending{0};
  // Bytes of cache blocks in this subtree, and blocks with dirty bytes in it. Updated by the
  // leaf step that allocates/frees/dirties/cleans a block, on every ancestor. Relaxed: an
  // ancestor's step trusts a zero only after it acquired (through the completion prefix) the
  // completion of every operation that went into the subtree, whose steps made these updates
  // before completing; a non-zero value only makes it descend. Stats readers get a snapshot.
  std::atomic<std::uint64_t> cached_bytes{0};
  std::atomic<std::uint64_t> dirty_blocks{0};

  bool has_parked() const noexcept { return parked != nullptr && !parked->empty(); }
};

}  // namespace tai::detail
