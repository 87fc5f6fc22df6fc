// tai/btree.hpp - the per-file cache: a static radix tree over a file's 64-bit address space.
//
// tai::BTree<Bits...> (the TAI paper section 2.5.1, DESIGN section 3 "BTree"). Each template argument
// is the number of address bits one level consumes, top level first; the last one is the byte
// offset inside a block of the deepest level. They must sum to 64, and each must be >= 1. A node
// at depth d covers 2^(Bits[d] + ... + Bits[last]) bytes; the root covers the whole 2^64.
//
//   BTreeDefault = BTree<34,9,9,12>  nodes of 16 EiB / 1 GiB / 2 MiB / 4 KiB (the paper's sizes)
//   BTreeTrivial = BTree<64>         one node that can never hold a block: every request goes to
//                                    the engine (no cache)
//   BTreeBinary  = BTree<2,1,...,1>  a 2 then 62 ones: a binary tree, 63 levels, for measuring
//                                    the step pipeline itself
//
// The template is a handle on a run-time core (detail::TreeCore): the shape is checked at
// compile time and gives the constexpr arrays kBits/kShift; the core, created by a non-template
// factory (detail::make_tree_core) that takes the shape at run time, keeps its own copy and
// indexes it with a node's depth; each node picks its child table (array or std::map) at run
// time. A compile-time version (per-level constants, child table types and handlers, an
// unrolled descent) measured slower: a step of BTreeDefault +6%, of BTreeBinary +50%, the
// null-engine controller overhead equal. Figures and commands: docs/tree_shape.md. The core's
// definition (nodes, counters, epochs) is private to the library (src/btree/tree_core.hpp):
// this header and tai/controller.hpp only declare it, so a program does not compile the tree's
// state and a change to it does not change the installed headers.
//
// The paper (and the project's brief) print the default as BTree<43,9,9,12>. Those sum to 73,
// which breaks the paper's own sum-to-64 rule and its stated node sizes: the 43 is a transposed
// 34. Spelling BTree<43,9,9,12> fails to compile with a message that says so and names
// BTree<34,9,9,12> (test/btree_compile_fail proves it).
//
// How a request runs. Operation (caller-owned) -> TreeCore::start() emits a step for the root ->
// each step touches one node and emits steps for the children it needs -> leaf steps copy
// to/from a cache block, or hand an engine request to the runner (StepSink::io) and continue in
// an io_done step when it completes. A runner (SequentialDriver in tai/btree_driver.hpp, for tests and tools; the
// controller's rounds on worker threads) keeps the rules listed on tai::Step. The inline path:
// while no operation of the tree is in flight, a read or write that lies inside one block
// already cached, and needs no engine I/O, is done by start() itself (same effects and
// counters, BTreeStats::inline_ops counts them): a cache hit costs a walk and a copy, not a
// chain of queued steps (see TreeCore::try_inline). Likewise a request no block can ever hold
// (every request of BTreeTrivial) when the runner can execute it synchronously
// (StepSink::io_now: a synchronous engine). The only mutex in the tree guards the sync state
// (fsync and fdatasync operations take it at start and at their engine sync's completion, never
// a read or write): a node's plain fields are touched only by its own steps (and two of them only by
// its parent's); the shared counters are atomics, each with its memory order explained where it
// is declared. A step passing through a node touches no atomic: what other designs track with
// per-level activity counters ("is anything still active below this node?") is answered by the
// operations' completion order (TreeCore::done_up_to): each operation has a sequence number, a
// node remembers the last operation its parent sent into it, and the tree keeps the prefix of
// completed operations. Per operation that costs two or three atomic read-modify-writes in all
// (start, completion), whatever the depth.
//
// Caching rules (what a step does at a node):
//  * A node covers an aligned range; a leaf (at any depth) may hold one block of the node's size,
//    allocated from the controller's Quota (aligned for the file's engine: the direct-I/O memory
//    alignment, and a page for blocks of a page or more). Nodes of at most
//    BTreeOptions::min_block_bytes are always leaves; nodes above max_block_bytes never hold one.
//  * Write: copied into the leaf's block; the written bytes join the block's dirty ranges (up to
//    4, adjacent or overlapping ranges coalesce: a "merge"). A fresh block is not read first: its
//    other bytes stay unknown ("not valid") until a read needs them.
//  * Whole-node overwrite: a write covering a whole node (<= max_block_bytes) that has children
//    waits until no earlier step is active below it (if one may be, it sends a quiesce step down
//    every child: they queue behind the earlier steps, and the last one resumes the write), drops
//    every child (dirty or not: their bytes are overwritten), returns their blocks to the quota,
//    and makes the node the leaf.
//  * Read: served from the block when it is valid or the range lies in one dirty range; else the
//    clean parts of the block are read from the engine first ("fill"), then served. A node
//    without a block gets one if the quota allows (and is filled); otherwise the request is
//    rerouted.
//  * Strict quota: when the quota refuses a block, the piece goes to the engine directly (a
//    "reroute", counted) and still succeeds. While uncached requests of a node are in flight,
//    later requests that do not overlap them go uncached too (so uncached I/O of one node, e.g.
//    the single node of BTreeTrivial, runs concurrently); overlapping ones wait, in order.
//  * The tiny-write rule. A write that would leave a block with more than 4 dirty ranges either
//    bridges the smallest gap between them (that gap's clean bytes are written back too) or goes
//    straight to the engine and then updates the cached copy (which stays clean). It goes to the
//    engine when
//        request_cost_bytes + length < smallest gap      (or the block is not valid)
//    i.e. when one extra engine request now is cheaper than writing back the gap later.
//    request_cost_bytes (default 16 KiB) is the fixed cost of one request expressed in bytes:
//    measured on the development VM, a 4 KiB page-cache pwrite costs ~390 ns, as much as copying
//    ~24 KiB (a 4 KiB memcpy is ~65 ns); 16 KiB leans towards keeping data in the cache.
//    tai-micro's tiny_writes/rule:1 and rule:0 measure both choices (bytes and requests reaching
//    the engine, time per write). A block that is not valid cannot bridge (the gap's bytes are
//    unknown), so it always goes to the engine then.
//  * Write-back of a block: one engine write per group of dirty ranges whose gaps are at most
//    request_cost_bytes (valid blocks only). On a direct-I/O file a valid block writes the
//    aligned superset of the group straight from its aligned memory (no bounce, no
//    read-modify-write); an invalid block passes the exact range and the engine base does the
//    read-modify-write of the partial edge blocks. A failed write-back keeps the block dirty and
//    records the error for the file: the next fsync operation (TreeOp::fsync/fdatasync) fails
//    with it (once), and writes the block back again.
//  * Writes across many blocks: a write's step at a parent writes its pieces into the children
//    that are idle (no earlier operation still in them) and need nothing but a copy (a block
//    is there, or a bottom leaf gets one; the dirty ranges can take the piece), instead of
//    emitting a visit step per child; the other children get their step as before. Same
//    effects and counters as the child steps. A 150 KB write into 4 KiB blocks is then one
//    step at the 2 MiB node rather than 37 leaf steps.
//  * Gathered write-back: a write-back, fsync or drop step at a parent whose children are idle
//    dirty blocks (no operation still in them) writes back consecutive blocks whose first
//    groups meet at the block boundaries (the first group ends at its block's end, the next
//    starts at 0, ...) with ONE engine write of at most BTreeOptions::gather_bytes, instead of
//    one request per block: a 150 KB record in 4 KiB blocks costs one request, not 37 (measured
//    in docs/gathered_write_back.md). The write is vectored (Request::iov, one segment per
//    block, straight from the blocks: no copy, no extra memory) when BTreeOptions::
//    vectored_write_back is on (off by default, see there) and, on a direct file, every segment meets the
//    direct-I/O memory and length alignment (4 KiB blocks do). Otherwise the bytes are copied
//    into a staging buffer charged to the quota (none available: per-block write-back, as
//    before), so the strict limit still bounds every byte of data the tree holds. Each block is marked busy as its own write-back would be
//    (later steps park), stamped with the same issue epoch, and completes in its own write_back
//    io_done step with its share of the result: a failed or short gathered write fails every
//    block it covered (all stay dirty, the error is recorded), so the failure rules below hold
//    per block exactly as for a write of its own.
//  * Write-around (BTreeOptions::write_around_bytes, one page by default, 0 turns it off; the
//    drop-in layer's TAI_WRITE_AROUND): a write of at least that many bytes whose step reaches a node that
//    holds nothing (no block, no children: a range of the file this tree has not cached) goes
//    to the engine as one uncached request for the node's piece (on a direct-I/O file only a
//    write aligned for direct I/O: an unaligned one is cached whole, its read-modify-write done
//    once by the blocks for every overwrite instead of by the engine for each), the path BTreeTrivial takes
//    for every request, instead of allocating blocks, copying into them and copying them again
//    into a staging buffer at write-back. For such a write the cache buys nothing a bigger
//    write does not already have (the engine request is as large as the caller's), and it
//    costs two copies and, for a stream of appends, blocks that fill the quota with clean data
//    (first-touch page faults for every block, until recycling evicts). Later requests of the
//    node queue behind the uncached one where they overlap it (the uncached-request rules
//    above), so order holds; the write is stamped with the sync epoch like every uncached
//    write, so durability and the failed-sync rules hold. Smaller writes are still cached (the
//    merging and gathering are where caching pays).
//  * Clean budget (ControllerOptions::clean_budget, tai/quota.hpp): while the quota holds more
//    clean bytes (used() - dirty()) than the budget, clean blocks whose bytes are all synced go
//    back to the quota's pool, so the next blocks reuse their memory instead of first-touching
//    fresh pages, and clean copies of data already written and synced do not fill the cache up
//    to the weak limit. Within the budget they stay (reads hit them). Only synced blocks: a
//    block with unsynced ranges is what a failed sync's redirty writes again (below), so
//    releasing it would make such a failure permanent. So a write-back that leaves a block clean
//    releases it only if it has no live unsynced ranges (rare: the write-back itself adds
//    some), and an fsync/fdatasync whose engine sync succeeded, while the quota is still over
//    the budget, visits the cached blocks once more (its release phase, before it completes)
//    and frees the clean ones that sync covered, until the quota is back within the budget.
//    With regular fsyncs, clean bytes are therefore back within the budget after each one;
//    without fsyncs, written-back blocks stay cached until the weak quota's recycling evicts
//    them, and the strict quota bounds them as it bounds every block (an evicted block with
//    unsynced bytes is the "no longer held" case below).
//  * Failed engine syncs ("fsyncgate": after a failed fsync the kernel may have dropped the
//    pages it could not write, and a later fsync of the same data reports success). Every engine
//    write is stamped with the tree's sync epoch, which each engine sync of an fsync operation
//    advances; a successful sync makes every write stamped at or before its epoch durable. The
//    engine syncs of one tree run one at a time, in the order their operations finished writing
//    back: the kernel reports a write-back error to one of several overlapping fsyncs of a file
//    only, so the success of one that overlapped a failing one would prove nothing.
//    Bytes a block wrote back (or wrote through) stay listed as the block's `unsynced` ranges
//    until a sync covers them. When an engine sync fails:
//      - the fsync fails with the error, and the tree keeps it as its sync error: every later
//        fsync and close fails with it until the tree has recovered (below);
//      - if every byte written since the last good sync is still held by a block, the same
//        operation visits every cached block and makes its unsynced ranges dirty again (a
//        "redirty"), then completes. An fsync *started after* that completes writes them back
//        with everything else, and its successful sync clears the error: the data has been
//        written again and synced.
//      - if some of those bytes are no longer held (an uncached write, the only kind under
//        BTreeTrivial; an evicted or dropped block; an invalid block with more than 4 ranges),
//        the error stays for the life of the tree (the file handle): the caller must rewrite
//        the data itself and reopen.
//    Known limit: a fill of a not-valid block reads its clean gaps from the engine, unsynced
//    ranges included; one that runs between the failed sync and the redirty of its block caches
//    what the kernel has then, which after a dropped page is the older data.
//  * Address space vs engines: the tree addresses all 2^64 bytes, but the engine layer rejects
//    requests whose end passes 2^63 - 1 (off_t) with -EOVERFLOW. Data cached above that works
//    until it must reach the engine: then the read, rerouted write or write-back fails with
//    EOVERFLOW like any engine error (and a failed write-back stays dirty). Tests exercise the
//    top 64 KiB of the address space through a custom IoExecutor (an in-memory file). The
//    controller refuses such requests at submission, so only a tree driven directly sees them.
//  * File size: the tree keeps the logical size (the file's size when the tree was made, grown
//    by every write, updated in request order at the root); reads stop there, like pread. A read
//    that reaches past it asks the engine for the size again (EngineFile::size()): another
//    writer may have grown the file. A block filled while the end of file lay inside it keeps
//    where that end was (Node::fill_end), and reads past it after a growth fill that part again.
//    Bytes another writer changes below the known size are not seen while they are cached.
//
// Thread-safety: start(), stats(), id(), recorded_error() are safe from any thread while steps
// run (start() for one tree must be called in the file's request order, one call at a time).
// Step::run follows the runner contract on tai::Step. check_invariants() and the destructor only
// when idle() (no operation in flight) and after every step has returned (the step that
// completes an operation may still be returning when idle() turns true: a runner destroys a tree
// after its round, never from inside a completion callback).
//
// Completion order and its limit: the tree remembers the completion of the last 1024 operations
// (TreeCore::kRing). With more in flight at once, answers become conservative until the tree is
// next idle: no node is garbage-collected, write-backs visit every child that ever had a write,
// and overwrites quiesce their subtree first. Correctness never depends on the ring.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "tai/btree_ops.hpp"
#include "tai/engine.hpp"
#include "tai/quota.hpp"

namespace tai {

struct BTreeOptions {
  /// The file's logical size when the tree is created. Unset: fstat() of the file's descriptor;
  /// a tree whose file has no descriptor (null engine, no file) then has an unknown size and
  /// never shortens reads (like the null engine, which has no end of file).
  std::optional<std::uint64_t> file_size;
  /// Nodes of at most this many bytes are leaves for every request (no smaller blocks). Raised
  /// to the direct-I/O alignment of a direct file. 1 lets requests descend to the last level.
  std::uint64_t min_block_bytes = 512;
  /// Largest block: a bigger node never holds one (requests descend or, at the last level, go
  /// to the engine uncached). At most 1 GiB.
  std::uint64_t max_block_bytes = std::uint64_t{2} << 20;
  /// The tiny-write rule's cost of one engine request, in bytes (see the header comment).
  std::uint64_t request_cost_bytes = std::uint64_t{16} << 10;
  /// false: a write that overflows the dirty ranges of a valid block always bridges.
  bool tiny_write_rule = true;
  /// false: every operation runs as steps, even a cache hit on an idle tree (the inline path of
  /// the header comment is off). For tests and for measuring what the inline path saves.
  bool inline_path = true;
  /// Gathered write-back (see the header comment): the most bytes one engine write may carry
  /// for adjacent dirty blocks under one parent. 0: every block is written back on its own.
  std::uint64_t gather_bytes = std::uint64_t{1} << 20;
  /// A gathered write-back goes to the engine as one vectored write of the blocks themselves
  /// (see the header comment) instead of through a staging copy. Off by default: on the shared
  /// 2-vCPU VM of docs/results/cache-cost.md it cost the File API more system time than the copy
  /// it saves (six A/B pairs, io_uring, buffered). On, it needs no memory for the gather, so a
  /// full quota still gathers.
  bool vectored_write_back = false;
  /// Write-around (see the header comment): a write of at least this many bytes whose piece
  /// reaches a node that holds no block and has no children goes to the engine uncached, as
  /// BTreeTrivial would send it, instead of allocating blocks for it. 0: off (every write is
  /// cached when the quota allows). Default one page: smaller writes are cached (merged,
  /// gathered), a write of a page or more over a range the tree holds nothing of is not.
  std::uint64_t write_around_bytes = 4096;
};

/// Introspection counters of one tree (a snapshot; exact when the tree is idle).
/// Thread-safety: a plain value; one object must not be written by two threads at once.
/// Every field is a std::uint64_t listed in kBTreeStatsFields below, so that sums (operator+=)
/// cannot forget one: add a new field there too (a static_assert checks the count).
struct BTreeStats {
  std::uint64_t cached_bytes = 0;       ///< bytes of cache blocks held
  std::uint64_t dirty_bytes = 0;        ///< bytes in dirty ranges
  std::uint64_t blocks = 0;             ///< cache blocks held
  std::uint64_t dirty_blocks = 0;       ///< blocks with at least one dirty range
  std::uint64_t nodes = 0;              ///< nodes allocated (root included)
  std::uint64_t reroutes = 0;           ///< pieces sent to the engine because the quota refused a block
  std::uint64_t uncached = 0;           ///< pieces sent to the engine because no node may hold them
  std::uint64_t merges = 0;             ///< dirty ranges coalesced (overlap, adjacency, bridged gap)
  std::uint64_t merged_bytes = 0;       ///< bytes overwritten while dirty (they never reach the engine)
  std::uint64_t write_throughs = 0;     ///< writes the tiny-write rule sent straight to the engine
  std::uint64_t cache_hits = 0;         ///< read pieces served from a block without engine I/O
  std::uint64_t fills = 0;              ///< blocks filled from the engine
  std::uint64_t restructures = 0;       ///< whole-node overwrites that dropped children
  std::uint64_t quiesces = 0;           ///< ... of which had to wait for earlier steps below
  std::uint64_t engine_reads = 0;       ///< engine read requests issued
  std::uint64_t engine_writes = 0;      ///< engine write requests issued
  std::uint64_t bytes_from_engine = 0;  ///< bytes requested from the engine by reads
  std::uint64_t bytes_to_engine = 0;    ///< bytes written to the engine (reroutes, write-throughs, write-backs)
  std::uint64_t write_back_errors = 0;  ///< failed write-backs (each recorded for the file)
  std::uint64_t inline_ops = 0;         ///< reads/writes done inside start() (idle tree, one cached block)
  std::uint64_t size_refreshes = 0;     ///< reads past the known size that found the file grown by another writer
  std::uint64_t node_bytes = 0;         ///< heap bytes of the tree's nodes and child tables (an estimate for sparse tables)
  std::uint64_t collects = 0;           ///< collect operations completed (freeing nodes that hold nothing)
  std::uint64_t gathered_blocks = 0;    ///< blocks written back as part of a gathered engine write
  std::uint64_t write_arounds = 0;      ///< write pieces sent uncached by the write-around rule

  /// Adds every field of `o` (counters and "now" values alike: a sum over trees). Not
  /// thread-safe for *this (see above).
  BTreeStats& operator+=(const BTreeStats& o) noexcept;
};

/// Every field of BTreeStats, in declaration order: what operator+= sums and what tests walk.
inline constexpr std::uint64_t BTreeStats::*kBTreeStatsFields[] = {
    &BTreeStats::cached_bytes,   &BTreeStats::dirty_bytes,       &BTreeStats::blocks,
    &BTreeStats::dirty_blocks,   &BTreeStats::nodes,             &BTreeStats::reroutes,
    &BTreeStats::uncached,       &BTreeStats::merges,            &BTreeStats::merged_bytes,
    &BTreeStats::write_throughs, &BTreeStats::cache_hits,        &BTreeStats::fills,
    &BTreeStats::restructures,   &BTreeStats::quiesces,          &BTreeStats::engine_reads,
    &BTreeStats::engine_writes,  &BTreeStats::bytes_from_engine, &BTreeStats::bytes_to_engine,
    &BTreeStats::write_back_errors, &BTreeStats::inline_ops,     &BTreeStats::size_refreshes,
    &BTreeStats::node_bytes,     &BTreeStats::collects,          &BTreeStats::gathered_blocks,
    &BTreeStats::write_arounds,
};
// A field added to the struct but not to the list makes the struct bigger than the list says.
static_assert(sizeof(BTreeStats) == sizeof(std::uint64_t) * std::size(kBTreeStatsFields),
              "every BTreeStats field must be a std::uint64_t listed in kBTreeStatsFields");

inline BTreeStats& BTreeStats::operator+=(const BTreeStats& o) noexcept {
  for (std::uint64_t BTreeStats::*field : kBTreeStatsFields) this->*field += o.*field;
  return *this;
}

namespace detail {

class TreeCore;  // the tree itself: src/btree/tree_core.hpp, not installed (see TreeHandle)

/// Destroys a TreeCore (the tree must be idle, see the file comment). Out of line so that an
/// owner of a tree needs only the forward declaration: std::default_delete would need the
/// class complete wherever a unique_ptr of it might be destroyed, which is every header that
/// returns or holds one (tai/controller.hpp's make_tree, the handle below).
struct TreeCoreDeleter {
  void operator()(TreeCore* tree) const noexcept;
};
using TreePtr = std::unique_ptr<TreeCore, TreeCoreDeleter>;

/// Creates a tree of `levels` levels consuming bits[0], bits[1], ... address bits, top level
/// first (their sum must be 64, each at least 1: std::invalid_argument otherwise; BTree<Bits...>
/// checks that at compile time). The shape is a run-time argument so that one compiled copy of
/// the tree serves every shape, and callers need no more than this declaration: the controller
/// (tai/controller.hpp's make_tree) and BTree<Bits...> both create their trees here.
TreePtr make_tree_core(unsigned levels, const unsigned* bits, EngineFile* file, Quota& quota,
                       const BTreeOptions& options);

/// The shape-independent side of every BTree<Bits...>: it owns the tree's core and forwards to
/// it. Its members are compiled once, in src/btree/handle.cpp, where TreeCore is complete; the
/// controller does not use handles (it holds the core itself), so only a direct user of a tree
/// pays the forwarding call. Thread-safety: see the file comment.
class TreeHandle {
 public:
  TreeHandle(const TreeHandle&) = delete;
  TreeHandle& operator=(const TreeHandle&) = delete;

  /// Begins `op`: validates it (zero length: done at once with 0; a null buffer: -EFAULT; an end
  /// past 2^64: -EOVERFLOW, all completed before start() returns) and emits its root step.
  void start(Operation& op, StepSink& sink);
  BTreeStats stats() const noexcept;
  /// Unique per process; BlockRecord::tree_id names the tree with it.
  std::uint64_t id() const noexcept;
  EngineFile* file() const noexcept;
  Quota& quota() const noexcept;
  const BTreeOptions& options() const noexcept;
  unsigned levels() const noexcept;
  /// log2 of the size of a node at `depth` (64 for the root).
  unsigned node_shift(unsigned depth) const noexcept;
  /// True when the tree's nodes have grown enough that a TreeOp::collect operation should run
  /// (the caller then starts one, in the file's request order like any operation). A node that
  /// loses its block (eviction, drop) or never got one (a write the strict quota rerouted) is
  /// freed only by an operation passing through its parent later: without collect operations a
  /// file written for long, and never fsynced, would keep a node per block it ever cached. True
  /// once per collection (until that operation completes). Thread-safe.
  bool take_collect_request() noexcept;
  /// Every operation started on this tree has completed and its completion callback has
  /// returned. (A runner must also let the step that completed the last one return before it
  /// destroys the tree.)
  bool idle() const noexcept;
  /// The write-back error recorded and not yet reported by an fsync operation (empty if none).
  std::error_code recorded_error() const noexcept;
  /// The error of a failed engine sync that the tree has not recovered from (empty if none):
  /// every fsync/fdatasync operation fails with it until one started after the redirty succeeds
  /// (see "Failed engine syncs" above). Thread-safe.
  std::error_code sync_error() const noexcept;
  /// The logical size (nullopt: unknown): the known end, or the file's size when the file has
  /// grown past it since the tree took it (as a read past the known end would find). 2^64 is
  /// reported as UINT64_MAX. Thread-safe.
  std::optional<std::uint64_t> logical_size() const noexcept;
  /// Walks the whole tree and checks every structural invariant and counter; returns "" or what
  /// is wrong. Only when idle().
  std::string check_invariants() const;
  /// The tree itself, for runners (SequentialDriver) and for Step::tree.
  TreeCore& core() const noexcept { return *core_; }

 protected:
  TreeHandle(unsigned levels, const unsigned* bits, EngineFile* file, Quota& quota, const BTreeOptions& options)
      : core_(make_tree_core(levels, bits, file, quota, options)) {}
  ~TreeHandle() = default;

 private:
  TreePtr core_;
};

template <unsigned... Bits>
struct BitList {};

}  // namespace detail

/// A static radix tree over a file's 2^64 address space (see the file comment): the shape,
/// checked at compile time, over a tree created at run time (detail::TreeHandle).
/// Thread-safety: as detail::TreeHandle.
template <unsigned... Bits>
class BTree final : public detail::TreeHandle {
  static constexpr bool kPaperMisprint =
      std::is_same_v<detail::BitList<Bits...>, detail::BitList<43, 9, 9, 12>>;
  static_assert(!kPaperMisprint,
                "tai::BTree<43,9,9,12> is the paper's misprint: 43+9+9+12 = 73, not 64, and it "
                "contradicts the paper's own 16 EiB / 1 GiB / 2 MiB / 4 KiB node sizes. The 43 is a "
                "transposed 34: write BTree<34,9,9,12> (that is tai::BTreeDefault).");
  static_assert(sizeof...(Bits) >= 1, "tai::BTree needs at least one level");
  static_assert(kPaperMisprint || ((Bits >= 1) && ...),
                "every level of tai::BTree<Bits...> must consume at least one address bit");
  static_assert(kPaperMisprint || (0u + ... + Bits) == 64,
                "the levels of tai::BTree<Bits...> must sum to 64 bits (the file's address space); "
                "e.g. BTree<34,9,9,12> (nodes of 16 EiB / 1 GiB / 2 MiB / 4 KiB) or BTree<64>");

 public:
  static constexpr unsigned kLevels = sizeof...(Bits);
  static constexpr std::array<unsigned, kLevels> kBits{Bits...};
  static constexpr std::array<unsigned, kLevels> kShift = [] {
    std::array<unsigned, kLevels> s{};
    unsigned acc = 0;
    for (unsigned d = kLevels; d-- > 0;) {
      acc += kBits[d];
      s[d] = acc;
    }
    return s;
  }();

  /// A tree over `file` (may be nullptr when the runner's executor serves requests without an
  /// engine file), allocating blocks from `quota` (which must outlive the tree).
  BTree(EngineFile* file, Quota& quota, const BTreeOptions& options = {})
      : TreeHandle(kLevels, kBits.data(), file, quota, options) {}
};

namespace detail {
template <std::size_t... I>
BTree<2, (static_cast<void>(I), 1u)...> binary_tree(std::index_sequence<I...>);
}  // namespace detail

/// The paper's default: nodes of 16 EiB / 1 GiB / 2 MiB / 4 KiB.
using BTreeDefault = BTree<34, 9, 9, 12>;
/// No cache: every request goes to the engine.
using BTreeTrivial = BTree<64>;
/// A binary tree: a 2 then 62 ones (63 levels), for measuring the step pipeline.
using BTreeBinary = decltype(detail::binary_tree(std::make_index_sequence<62>{}));
static_assert(BTreeBinary::kLevels == 63 && BTreeBinary::kBits[0] == 2 && BTreeBinary::kBits[62] == 1,
              "BTreeBinary is a 2 then 62 ones");

}  // namespace tai
