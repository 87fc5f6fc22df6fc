// src/btree/tree_core.hpp - tai::detail::TreeCore, the cache tree, shared by the files of
// src/btree/, the controller (src/controller/) and the tests that reach into a tree, and by
// nothing installed: the class with its state (nodes, counters, epochs, the sync queue), the
// node and its dirty ranges, the sink the step handlers run with, the inline helpers that read
// a node's fields, and Step::run. The installed tai/btree.hpp only forward-declares TreeCore: a
// program that includes tai/controller.hpp does not parse the tree's state, and a change to it
// recompiles libtai, not its users. The rules the tree keeps are described in tai/btree.hpp.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "tai/btree.hpp"
#include "tai/btree_ops.hpp"
#include "tai/engine.hpp"
#include "tai/quota.hpp"
#include "src/btree/dirty.hpp"
#include "src/btree/node.hpp"

namespace tai::detail {

class RunContext;

/// The cache tree itself: its shape, options, quota, nodes, counters and the step handlers.
/// tai::BTree<Bits...> is a handle on one (tai/btree.hpp); the controller holds it directly.
class TreeCore final {
 public:
  /// A tree of `levels` levels consuming bits[0], bits[1], ... address bits, top level first
  /// (their sum must be 64, each at least 1: std::invalid_argument otherwise); see
  /// BTree::BTree for the other arguments. The shape is copied.
  TreeCore(unsigned levels, const unsigned* bits, EngineFile* file, Quota& quota, const BTreeOptions& options);
  ~TreeCore();
  TreeCore(const TreeCore&) = delete;
  TreeCore& operator=(const TreeCore&) = delete;

  /// Begins `op`: validates it (zero length: done at once with 0; a null buffer: -EFAULT; an end
  /// past 2^64: -EOVERFLOW, all completed before start() returns) and emits its root step.
  void start(Operation& op, StepSink& sink);

  /// Runs one step of this tree (Step::run calls it).
  void run(const Step& step, StepSink& sink);

  /// A caller write: a write the submitting thread carries out itself, from its own buffer, on
  /// a synchronous engine, instead of handing a copy to the runner. Taken only where the steps
  /// would send the whole request to the engine uncached anyway: the tree holds nothing (no
  /// node but the root) and the request goes around the cache (the write-around rule) or no
  /// block can ever hold it (BTreeTrivial). Returns false, having done nothing, otherwise; else
  /// does the engine write with `engine` and the effects of the uncached write-around (logical
  /// size, sync epoch stamp, counters) and returns true with `result` 0 or -errno (a short
  /// write is -EIO, as on the steps' path).
  /// Thread-safety: any number of caller writes may run at once, and with the steps of
  /// fsync/fdatasync operations; no other operation may be started or running (the
  /// controller's per-file traffic word excludes them, ControllerCore::try_caller_write). It
  /// reads no plain field an fsync's steps write (they may still be deleting empty nodes: the
  /// node count, an atomic, tells whether any is left).
  bool caller_write(const std::byte* src, std::uint64_t offset, std::uint64_t length, SyncEngine& engine,
                    std::int64_t& result) noexcept;
  /// The smallest write caller_write may take on this tree, from its shape and options alone
  /// (fixed for the tree's life); ~0 when it takes none: a direct file (a caller write there
  /// would be the device's latency on the program's thread, which is what the workers hide),
  /// write-around off, or a root that may hold a block itself. Thread-safe.
  std::uint64_t caller_write_min_bytes() const noexcept { return caller_write_min_; }

  BTreeStats stats() const noexcept;
  /// Unique per process; BlockRecord::tree_id names the tree with it.
  std::uint64_t id() const noexcept { return id_; }
  EngineFile* file() const noexcept { return file_; }
  Quota& quota() const noexcept { return quota_; }
  const BTreeOptions& options() const noexcept { return options_; }
  unsigned levels() const noexcept { return levels_; }
  /// log2 of the size of a node at `depth` (64 for the root).
  unsigned node_shift(unsigned depth) const noexcept { return shift_[depth]; }
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
  bool idle() const noexcept { return in_flight_.load(std::memory_order_acquire) == 0; }
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

  // Everything below is the algorithm's own: the step handlers and their helpers are defined in
  // src/btree/ (inline ones that need a node's fields further down in this header).
 private:
  static constexpr std::uint32_t kEntry = 1;  // Step::aux of a root visit not yet through enter()

  // --- helpers for the step algorithms. Each touches only the node it is given (plus atomics
  // and, for children, nodes that are provably idle). ---------------------------------------
  std::uint64_t node_mask(unsigned depth) const noexcept {
    return shift_[depth] >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << shift_[depth]) - 1;
  }
  std::uint64_t node_last(const Node& n) const noexcept;
  /// The write-around rule (see the header comment): a write step of a big enough operation at
  /// a node with no block and no children (nothing cached in its range, nothing in flight below).
  bool writes_around(const Step& s) const noexcept;
  /// The size part of the write-around rule, for a piece of write `s.op`: the operation is big
  /// enough and, on a direct-I/O file, aligned for direct I/O as a whole. An unaligned write sent
  /// around would cost the engine a read-modify-write each time it is written, where cached
  /// blocks merge the overwrites and write the aligned superset once; and its aligned middle
  /// must not go around piece by piece beside its cached ends (one request per block).
  bool goes_around(const Step& s) const noexcept {
    return options_.write_around_bytes != 0 && s.op->length >= options_.write_around_bytes &&
           (!direct_ || (s.op->offset % io_align_ == 0 && s.op->length % io_align_ == 0));
  }
  bool cacheable(unsigned depth) const noexcept {
    return shift_[depth] < 63 && (std::uint64_t{1} << shift_[depth]) <= max_block_;
  }
  bool bottom(const Node& n) const noexcept;

  // Completion order. Every operation gets a sequence number in start() (start order); the
  // prefix is the highest number up to which every operation has completed. A node whose
  // last_seq the prefix has passed has nothing active in its subtree: no step queued, parked,
  // or waiting for I/O (each of those belongs to an operation that passed through the parent
  // into it, and that operation is not complete). This replaces per-level atomic counters: a
  // step that passes through a node touches no atomic at all.
  bool done_up_to(std::uint64_t seq) const noexcept { return seq <= prefix_.load(std::memory_order_acquire); }
  /// Records the completion of operation `seq` and advances the prefix as far as it can.
  void retire(std::uint64_t seq) noexcept;
  /// No operation that went into any child of n is still active.
  bool children_idle(Node& n);

  // Operations.
  static void op_add(Operation& op, std::uint64_t steps) noexcept;
  static void op_fail(Operation& op, std::int64_t error) noexcept;
  /// One step of `op` finished; completes the operation (or starts its fsync) when it was the last.
  void op_step_done(Operation& op, StepSink& sink);
  /// From a step handler: op_step_done once the step has returned (`sink` is the RunContext).
  static void step_done(Operation& op, StepSink& sink);
  void op_io_done(const Step& step, StepSink& sink);
  /// An fsync operation's engine sync: its epoch (under sync_mu_), then the request.
  void take_sync_epoch(Operation& op) noexcept;
  void issue_sync(Operation& op, StepSink& sink);
  /// Root bookkeeping of a visit (logical size); false when the step is already finished.
  bool enter(Step& step, StepSink& sink);

  // Children tables.
  Node* child(const Node& n, std::uint64_t index) const noexcept;
  Node& child_or_create(Node& n, std::uint64_t index);
  void erase_child(Node& n, std::uint64_t index) noexcept;
  /// Calls fn(index, Node*) for every existing child with index in [i0, i1], in order. fn may
  /// erase the child it is given (and only that one).
  template <class Fn>
  void for_each_child(Node& n, std::uint64_t i0, std::uint64_t i1, Fn&& fn);
  /// Deletes an idle subtree (its blocks go back to the quota); returns the dirty bytes dropped.
  std::uint64_t delete_subtree(Node* node) noexcept;

  // Blocks and counters.
  bool allocate_block(Node& n) noexcept;
  void free_block(Node& n) noexcept;
  void propagate_cached(Node& n, std::int64_t delta) noexcept;
  void propagate_dirty(Node& n, std::int64_t delta) noexcept;
  /// After n.dirty changed from `before_bytes` / `was_dirty`: fixes the dirty counters.
  void dirty_changed(Node& n, std::uint64_t before_bytes, bool was_dirty) noexcept;
  std::uint64_t block_size(const Node& n) const noexcept;
  /// How many bytes of n's block lie before the logical end of file (rounded up to the direct-I/O
  /// alignment; the whole block when the size is unknown).
  std::uint64_t fill_limit(const Node& n) const noexcept;
  /// The last byte of the logical file (UINT64_MAX when the size is unknown or reaches 2^64).
  std::uint64_t logical_last_or_max() const noexcept;
  void record_error(std::int64_t error) noexcept;

  // Sync epochs (see "Failed engine syncs" above).
  /// [lo, hi) of n's block reached the engine (a write-back or write-through succeeded).
  void note_block_written(Node& n, std::uint64_t lo, std::uint64_t hi) noexcept;
  /// The stamp an engine write takes when it is issued: the low 32 bits of the sync epoch,
  /// loaded before the request (seq_cst: a sync that takes a later epoch was issued after this
  /// load). A write's completion step may run after a later sync was issued and failed; that
  /// failure may have dropped the write's bytes (they reached the engine first), so failures
  /// are matched against the epoch at issue, durability against the epoch at completion.
  std::uint32_t write_issued_now() const noexcept {
    return static_cast<std::uint32_t>(epochs_.epoch.load(std::memory_order_seq_cst));
  }
  /// The full epoch of a write issued at `issued` (write_issued_now()), given the epoch `now`:
  /// fewer than 2^32 syncs run during one request.
  static std::uint64_t issued_epoch(std::uint64_t now, std::uint32_t issued) noexcept {
    return now - static_cast<std::uint32_t>(static_cast<std::uint32_t>(now) - issued);
  }
  /// A write reached the engine that no block holds (an uncached request) issued at `issued`.
  void note_uncached_write(std::uint32_t issued) noexcept {
    const std::uint64_t now = epochs_.epoch.load(std::memory_order_seq_cst);
    note_lost(now, issued_epoch(now, issued));
  }
  /// n's block is about to be freed by a drop or an eviction: its unsynced bytes leave the cache.
  void note_block_leaving(const Node& n) noexcept;
  /// Bytes stamped `epoch` that no block holds any more; a failed sync with an epoch at or
  /// above `affected_from` (default: `epoch`) may have dropped them.
  void note_lost(std::uint64_t epoch, std::uint64_t affected_from = 0) noexcept;
  /// The redirty of a failed sync at n's block: its live unsynced ranges join its dirty ones.
  void redirty_block(Node& n) noexcept;
  /// Is `op` (an fsync/fdatasync) in its redirty phase?
  static bool redirtying(const Operation& op) noexcept { return op.phase_ == 2; }
  /// Is `op` (an fsync/fdatasync whose sync succeeded) in its release phase (the clean budget's
  /// visit of the blocks that sync made releasable)?
  static bool releasing(const Operation& op) noexcept { return op.phase_ == 3; }
  /// The release phase at n's block: frees it if it is clean and synced while the quota holds
  /// more clean bytes than its budget.
  void release_synced_block(Node& n) noexcept;
  /// Is n's `unsynced` list live (not yet covered by a good sync)?
  bool unsynced_live(const Node& n) const noexcept;


  // Parking and uncached requests.
  static void park_back(Node& n, const Step& s);
  static void park_front(Node& n, const Step& s);
  /// Would an uncached request for `s` conflict with one in flight at n? (write vs anything)
  static bool conflicts_direct(const Node& n, const Step& s) noexcept;
  static void add_direct(Node& n, const Step& s);
  static void remove_direct(Node& n, const Step& s) noexcept;

  /// A write's descend step at c's parent, for the piece `piece` (a visit step for c, not yet
  /// emitted): when c is idle (no operation still in it, so no step of c runs or waits and the
  /// parent's step may touch it: see done_up_to) and the piece needs no engine I/O and no
  /// restructuring (c holds a block, or is a bottom leaf that gets one now, and the piece keeps
  /// at most DirtyRanges::kMax ranges), writes it into c's block as c's own step would, and
  /// returns true. Otherwise changes nothing and returns false: the caller emits the step
  /// (and raises c.last_seq). A piece written here leaves nothing of the operation in c, so
  /// c.last_seq is not raised for it: c stays idle.
  bool write_at_idle_child(Node& c, const Step& piece) noexcept;

  // Gathered write-back (see "Write-back of a block" in the file comment).
  /// The first engine write of n's write-back, as n's own write-back would issue it: the first
  /// `groups` dirty ranges, as block offsets [b, e) (the aligned superset on a direct file).
  void write_back_range(const Node& n, int& groups, std::uint64_t& b, std::uint64_t& e) const noexcept;
  /// May a write-back step at n's parent write back n's first group itself? n is idle (no
  /// operation is still in it, so no step of n runs or waits: the parent's step may touch it),
  /// holds a dirty block and nothing keeps it busy.
  bool gatherable(const Node& n) const noexcept;

  /// How many of targets[i..] (children of one parent in index order, each holding one count
  /// of `op`) one engine write can carry: consecutive blocks whose first write-back groups
  /// meet at the block boundaries, at most options_.gather_bytes in all. 0 or 1: no gather.
  std::size_t gather_run(Node* const* targets, std::size_t count) const noexcept;
  /// Writes back the first group of each of the k blocks `members` (from gather_run) with one
  /// engine write, through a staging copy charged to the quota; false (nothing done) when the
  /// quota cannot take the copy. Marks each member busy until its own io_done step runs.
  bool issue_gather(Operation& op, Node* const* members, std::size_t k, StepSink& sink);
  /// The completion of a gathered write (a node-less step): one write_back io_done step per
  /// member, each with its share of the result (the error, -EIO for a short write, to all).
  void gather_done(const Step& s, StepSink& sink);


  Request make_request(Op op, void* buffer, std::uint64_t offset, std::uint64_t length) const noexcept {
    Request r;
    r.op = op;
    r.file = file_;
    r.buffer = buffer;
    r.offset = offset;
    r.length = length;
    return r;
  }
  static std::byte* op_data(const Step& s) noexcept { return s.op->buffer + (s.first - s.op->offset); }
  static std::uint64_t step_length(const Step& s) noexcept { return s.last - s.first + 1; }

  // Shape. Held in the core rather than pointed to in the BTree<Bits...> instantiation: the
  // factory takes the shape at run time, so that neither the controller's header nor a shape's
  // instantiation needs this class; a tree has at most 64 levels (each consumes a bit).
  static constexpr unsigned kMaxLevels = 64;
  const unsigned levels_;
  std::array<unsigned, kMaxLevels> shift_{};  // log2 node size per depth
  std::array<unsigned, kMaxLevels> bits_{};   // address bits per depth (fanout = 2^bits for all but the last)
  static constexpr unsigned kArrayBits = 10;  // levels of up to 2^10 children use an array

  EngineFile* const file_;
  Quota& quota_;
  BTreeOptions options_;
  const std::uint64_t id_;
  std::uint64_t min_block_;     // nodes with size - 1 < this are leaves (options, raised for direct I/O)
  std::uint64_t max_block_;
  std::uint64_t smallest_block_;  // size of the smallest block a request could get
  std::uint64_t io_align_ = 1;  // direct file: offset/length alignment for write-back expansion
  std::size_t mem_align_ = 16;  // block memory alignment (>= the direct-I/O memory alignment)
  bool direct_ = false;

  Node* root_ = nullptr;
  // The root is a leaf no block can hold (BTreeTrivial): every request goes to the engine.
  bool root_bottom_uncacheable_ = false;
  // See caller_write_min_bytes(). Set by the constructor.
  std::uint64_t caller_write_min_ = ~std::uint64_t{0};

  // Completion order (see done_up_to). next_seq_ is written by start() only (start() calls of a
  // tree are serialised by the caller). in_flight_: +1 in start(), -1 as the last thing a
  // completing operation does to the tree, after its callback returned (acq_rel/acquire:
  // idle() then sees all its effects and everything its callback did).
  // ring_: slot seq % kRing holds seq once operation seq completed (release store, acquire
  // load by the advancer). prefix_: advanced by CAS (acq_rel) by any completing thread over
  // consecutive completed slots. An operation completing while kRing or more older ones are
  // still active cannot be recorded without losing one: it is not, the prefix stalls below it
  // (every done_up_to answer stays conservative: no pruning, no garbage collection, overwrites
  // quiesce their subtree), and start() resets it the next time the tree is idle.
  static constexpr std::uint64_t kRing = 1024;
  std::uint64_t next_seq_ = 0;
  std::atomic<std::uint64_t> in_flight_{0};
  std::atomic<std::uint64_t> prefix_{0};
  std::unique_ptr<std::atomic<std::uint64_t>[]> ring_;

  // Node memory (see take_collect_request). node_bytes_: relaxed counter (count/uncount) of the
  // heap bytes of nodes and child tables, changed by the steps that make and delete them.
  // collect_threshold_: relaxed, written by collect_done. collecting_: a collect operation was
  // asked for and has not completed (acq_rel exchange / release store).
  static constexpr std::uint64_t kMapEntryBytes = 64;  // a std::map node with its allocator overhead, about
  static constexpr std::uint64_t kCollectFloorBytes = 512 * 1024;
  std::atomic<std::uint64_t> node_bytes_{0};
  std::atomic<std::uint64_t> collect_threshold_{kCollectFloorBytes};
  std::atomic<std::uint64_t> collects_{0};
  std::atomic<bool> collecting_{false};
  std::uint64_t array_bytes(const Node& n) const noexcept;
  void collect_done() noexcept;

  // Logical size: written by root steps only, read by fills and write-backs of any node.
  // Relaxed: a stale (smaller) value only makes a fill or a write-back expansion stop earlier,
  // which is always correct; ordering against the data comes from the node's own steps.
  bool size_known_ = false;
  std::atomic<std::uint64_t> size_end_{0};  // first byte past the end (when !size_top_)
  std::atomic<bool> size_top_{false};       // the file reaches 2^64

  // The error of a failed write-back not yet reported (-errno, 0 = none). exchange/store are
  // acq_rel/release: the reporting fsync must see the error recorded by an earlier write-back.
  std::atomic<std::int64_t> recorded_error_{0};

  // Sync epochs. epochs_.epoch: the stamp of engine writes completing now; an fsync operation's
  // engine sync takes it and advances it (fetch_add), and a write completion loads it after its
  // engine request returned (both seq_cst, see note_lost): a write stamped e completed before
  // the sync that took e was issued. epochs_.synced: every write stamped at or below it is durable (release
  // store under sync_mu_, acquire loads). epochs_.lost: the newest stamp of bytes that reached the
  // engine but that no block holds (seq_cst CAS to the maximum: see note_lost). Their own line:
  // write completions only load epoch and synced, which change once per sync.
  struct alignas(64) SyncEpochs {
    std::atomic<std::uint64_t> epoch{1};
    std::atomic<std::uint64_t> synced{0};
    std::atomic<std::uint64_t> lost{0};
    // While a sync error is unrecovered: the newest epoch a failed sync took (0: none), and
    // whether bytes stamped after `synced` and at or before it have left the cache since that
    // failure was recorded (they were affected by it, and cannot be written again). seq_cst,
    // paired with note_lost: each side stores, then loads the other's (see note_lost).
    std::atomic<std::uint64_t> failed{0};
    std::atomic<bool> lost_affected{false};
  } epochs_;
  // Under sync_mu_: the unrecovered sync error (-errno, 0: none; also an atomic for sync_error()
  // readers), how many syncs have failed (fail_gen_) and which failure's redirty has completed
  // (redirty_gen_), and whether recovery is impossible (lost bytes at a failure).
  mutable std::mutex sync_mu_;
  std::atomic<std::int32_t> sync_error_{0};
  std::uint64_t fail_gen_ = 0;
  std::uint64_t redirty_gen_ = 0;
  bool unrecoverable_ = false;
  // One engine sync of the tree at a time: the kernel reports a write-back error to one of
  // several overlapping fsyncs of a file only (errseq, once per open file), so the success of
  // one that overlapped a failing one would prove nothing. Operations whose write-back is done
  // wait here, FIFO, while one runs (sync_running_); the memory is kept for reuse.
  bool sync_running_ = false;
  std::vector<Operation*> sync_queue_;
  std::size_t sync_head_ = 0;

  // Counters (BTreeStats). Relaxed: each is exact through its atomic read-modify-write; none
  // publishes other memory. They are read consistently only when the tree is idle.
  struct Counters {
    std::atomic<std::uint64_t> cached_bytes{0}, dirty_bytes{0}, blocks{0}, dirty_blocks{0}, nodes{0};
    std::atomic<std::uint64_t> reroutes{0}, uncached{0}, merges{0}, merged_bytes{0}, write_throughs{0};
    std::atomic<std::uint64_t> cache_hits{0}, fills{0}, restructures{0}, quiesces{0};
    std::atomic<std::uint64_t> engine_reads{0}, engine_writes{0}, bytes_from_engine{0}, bytes_to_engine{0};
    std::atomic<std::uint64_t> write_back_errors{0}, inline_ops{0}, size_refreshes{0}, gathered_blocks{0};
    std::atomic<std::uint64_t> write_arounds{0};
  } counters_;
  static void count(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
    if (n != 0) c.fetch_add(n, std::memory_order_relaxed);
  }
  static void uncount(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
    c.fetch_sub(n, std::memory_order_relaxed);
  }
  /// count() for the inline path only: no step of the tree runs then (see try_inline), so a
  /// relaxed load and store cannot lose an update, and skip the locked instruction.
  static void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
    if (n != 0) c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  /// count() from a step (`exclusive` false) or bump() from the inline path (true).
  static void add(std::atomic<std::uint64_t>& c, std::uint64_t n, bool exclusive) noexcept {
    exclusive ? bump(c, n) : count(c, n);
  }

  // Pieces shared by the steps and the inline path (`exclusive`: called from the inline path).
  /// The root's bookkeeping of a write ending at `last`: grows the logical size.
  void grow_size(std::uint64_t last) noexcept;
  /// A root step's read reaches `known_end`, the logical size: asks the engine for the file's
  /// size, takes it when larger (another writer grew the file) and returns the end to use.
  std::uint64_t refresh_size(std::uint64_t known_end) noexcept;
  /// n's block (valid or not) holds the file's bytes [0, hi) outside its dirty ranges: it is
  /// valid and was filled past hi, or up to what is now the end of file.
  bool mirrors(const Node& n, std::uint64_t hi) const noexcept;

  /// Copies [lo, hi) of n's block from `src` and merges it into the dirty ranges (the caller
  /// has checked that the ranges can take it: a whole block, or at most kMax ranges after).
  void absorb_write(Node& n, std::uint64_t lo, std::uint64_t hi, const std::byte* src, bool exclusive) noexcept;
  /// Counts an uncached engine request of `len` bytes for an operation of `kind`.
  void count_direct(TreeOp kind, std::uint64_t len, bool exclusive) noexcept;
  /// The outcome of an uncached request of `len` bytes at `data` that returned `result`:
  /// counts the bytes written, zero-fills a short read (a hole inside the logical size), and
  /// returns the operation's error (0, or -errno; a short write is -EIO).
  std::int64_t direct_outcome(TreeOp kind, std::int64_t result, std::byte* data, std::uint64_t len,
                              bool exclusive) noexcept;

  // The step handlers (src/btree/steps.cpp). One runs one step at one node; it ends the step
  // with finished() or keeps it alive (parked, waiting for engine I/O, or handed to the child
  // steps it emitted).
  void visit(const Step& s, StepSink& sink);
  bool process(Step s, StepSink& sink);
  bool transfer(const Step& s, StepSink& sink);
  bool at_leaf(const Step& s, StepSink& sink);
  bool at_block(const Step& s, StepSink& sink);
  bool overwrite(const Step& s, StepSink& sink);
  bool descend(const Step& s, StepSink& sink);
  bool maintain(const Step& s, StepSink& sink);
  bool go_direct(const Step& s, StepSink& sink);
  bool fill_from(const Step& s, std::uint64_t from, StepSink& sink);
  bool serve_read(const Step& s, StepSink& sink);
  bool write_into_block(const Step& s, StepSink& sink);
  bool write_back_next(const Step& s, StepSink& sink);
  void io_done(const Step& s, StepSink& sink);
  void resume(const Step& s, StepSink& sink);
  void quiesce(const Step& s, StepSink& sink);
  void drain(Node& n, StepSink& sink);
  bool finished(const Step& s, StepSink& sink);

  /// The inline path of start() (see src/btree/): true when it did the whole operation.
  bool try_inline(Operation& op, StepSink& sink) noexcept;
  /// try_inline() for a request no block can hold (the node `n` is a leaf that is never cached).
  bool inline_uncached(Operation& op, Node& n, std::uint64_t first, std::uint64_t last, StepSink& sink) noexcept;
  /// Completes an operation of the inline path (no sequence number, nothing in flight).
  static void complete_inline(Operation& op, std::uint64_t bytes, std::int64_t error) noexcept;
  void complete(Operation& op) noexcept;
  void delete_node(Node* n) noexcept;
};

}  // namespace tai::detail

namespace tai {
// Defined here, not in tai/btree_ops.hpp, because it needs TreeCore complete. The runners that
// call it (the controller's rounds, SequentialDriver::run, the tests' own sinks) include this
// header; inline, so a round's call goes straight into TreeCore::run.
inline void Step::run(StepSink& sink) const { tree->run(*this, sink); }
}  // namespace tai

namespace tai::detail {

/// The sink a tree's run() hands to its step handlers: forwards emit/io to the runner's sink and
/// collects the operations whose step finished, so that run() completes them only after the
/// step is done touching its node (a completed operation lets the parent's next step delete an
/// idle node, see TreeCore::done_up_to).
class RunContext final : public StepSink {
 public:
  explicit RunContext(StepSink& outer) noexcept : outer_(outer) {}
  void emit(const Step& s) override { outer_.emit(s); }
  void io(const Request& r, const Step& c) override { outer_.io(r, c); }
  void finish_later(Operation& op) {
    if (count_ < kInline) {
      inline_[count_++] = &op;
    } else {
      if (!more_) more_ = std::make_unique<std::vector<Operation*>>();  // a long drain only
      more_->push_back(&op);
    }
  }
  template <class Fn>
  void for_each_finished(Fn&& fn) {
    for (std::size_t i = 0; i < count_; ++i) fn(*inline_[i]);
    if (more_)
      for (Operation* op : *more_) fn(*op);
  }
  StepSink& outer() noexcept { return outer_; }

 private:
  static constexpr std::size_t kInline = 8;
  StepSink& outer_;
  Operation* inline_[kInline];
  std::size_t count_ = 0;
  std::unique_ptr<std::vector<Operation*>> more_;
};

inline bool is_transfer(const Step& s) noexcept {
  return s.kind == StepKind::visit && (s.op->kind == TreeOp::read || s.op->kind == TreeOp::write);
}

inline std::uint64_t TreeCore::node_last(const Node& n) const noexcept { return n.base + node_mask(n.depth); }

inline std::uint64_t TreeCore::block_size(const Node& n) const noexcept { return node_mask(n.depth) + 1; }

inline bool TreeCore::writes_around(const Step& s) const noexcept {
  const Node& n = *s.node;
  return s.op->kind == TreeOp::write && goes_around(s) && n.block == nullptr && n.child_count == 0 &&
         !(bottom(n) && !cacheable(n.depth));  // where no block can ever be, it is "uncached" as before
}

inline bool TreeCore::bottom(const Node& n) const noexcept {
  return n.depth + 1u >= levels_ || node_mask(n.depth) < min_block_;
}

inline void TreeCore::step_done(Operation& op, StepSink& sink) { static_cast<RunContext&>(sink).finish_later(op); }

inline bool TreeCore::finished(const Step& s, StepSink& sink) {
  step_done(*s.op, sink);
  return true;
}

inline bool TreeCore::unsynced_live(const Node& n) const noexcept {
  return !n.unsynced.empty() && n.unsynced_epoch > epochs_.synced.load(std::memory_order_acquire);
}

inline bool TreeCore::gatherable(const Node& n) const noexcept {
  // done_up_to first: until it holds, n's own fields may be changing under n's steps (its
  // acquire load makes their last writes visible once it does).
  return done_up_to(n.last_seq) && n.block != nullptr && !n.dirty.empty() && !n.busy && !n.has_parked() &&
         n.direct_count == 0;
}

inline std::uint64_t TreeCore::array_bytes(const Node& n) const noexcept {
  return (std::uint64_t{1} << bits_[n.depth]) * sizeof(Node*);
}

inline bool TreeCore::mirrors(const Node& n, std::uint64_t hi) const noexcept {
  return n.valid && (hi <= n.fill_end || n.fill_end >= fill_limit(n));
}

template <class Fn>
void TreeCore::for_each_child(Node& n, std::uint64_t i0, std::uint64_t i1, Fn&& fn) {
  // erase_child() frees the table with the last child: re-check it after every call.
  if (n.sparse) {
    if (n.map == nullptr) return;
    auto it = n.map->lower_bound(i0);
    while (it != n.map->end() && it->first <= i1) {
      auto next = std::next(it);
      fn(it->first, it->second);  // may erase `it`
      if (n.map == nullptr) return;
      it = next;
    }
  } else {
    for (std::uint64_t i = i0; n.array != nullptr; ++i) {
      if (n.array[i] != nullptr) fn(i, n.array[i]);
      if (i == i1) break;
    }
  }
}

}  // namespace tai::detail
