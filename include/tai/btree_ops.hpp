// tai/btree_ops.hpp - the vocabulary of tree operations: TreeOp and Operation (one request on one
// file's tree), Step (one node-local piece of work) and StepSink (what runs steps). Public API:
// a runner (the controller, tai/btree_driver.hpp, or a user's own) speaks it. Included by
// tai/btree.hpp; a header of its own so that code which only names operations and steps does not
// need the whole tree.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <system_error>
#include <type_traits>

#include "tai/engine.hpp"

namespace tai {

namespace detail {
class TreeCore;
struct Node;
}  // namespace detail

/// What an Operation does.
enum class TreeOp : std::uint8_t {
  read,        ///< bytes [offset, offset+length) into `buffer` (from cache, else engine)
  write,       ///< bytes from `buffer` (cached when the quota allows, else to the engine)
  write_back,  ///< write every dirty byte in the range to the engine; blocks stay cached
  drop,        ///< evict every block in the range: write back the dirty ones, then free them
  evict,       ///< evict the one block named by a BlockRecord (oldest-first recycling)
  fsync,       ///< write back the whole file, then the engine's fsync
  fdatasync,   ///< write back the whole file, then the engine's fdatasync
  collect,     ///< free the nodes that hold nothing (no block below) and that no operation is in;
               ///< cached and dirty data untouched (TreeCore::take_collect_request says when)
};
const char* to_string(TreeOp op) noexcept;

/// One request on one tree. The caller owns it (no allocation per request: a controller embeds
/// it in its task slot) and keeps it alive, unmoved, until it is done. Fill in the public fields,
/// then hand it to TreeCore::start(). Thread-safety: done()/result()/error() may be called from
/// any thread; the rest belongs to the caller until start() and to the tree until done().
class Operation {
  // The tree's state of the operation comes first and fits in 38 bytes: a controller puts it on
  // one cache line with its own completion state (detail::Task), so that the one line a worker
  // writes per request is all the submitting thread has to take back from it.
  friend class detail::TreeCore;
  // Steps of this operation not yet finished (+1 while the root step is queued). Incremented by
  // a step that itself holds a count (so never from 0), decremented with acq_rel by each
  // finishing step: the last one acquires every other step's writes (a read's data copied by
  // other workers) before it completes the operation.
  std::atomic<std::uint64_t> pending_{0};
  std::uint64_t seq_ = 0;    // the tree's sequence number of this operation (start order)
  std::uint64_t bytes_ = 0;  // written by the root step, read by the completing step
  std::int64_t result_ = 0;
  // First error (-errno) of any step: a CAS from 0, relaxed (read only after the acq_rel chain
  // on pending_ above).
  std::atomic<std::int32_t> first_error_{0};
  std::atomic<bool> done_{false};
  std::uint8_t phase_ = 0;  // fsync: 0 = writing back, 1 = engine sync in flight, 2 = redirty, 3 = release

 public:
  using Callback = void (*)(Operation& op, void* context);

  TreeOp kind = TreeOp::read;
  std::uint64_t offset = 0;
  /// read/write: bytes (0 completes at once with result 0); the end may not pass 2^64.
  /// write_back/drop: 0 means "to the end of the address space".
  std::uint64_t length = 0;
  /// read: destination; write: source. Borrowed until done(): the tree copies from it when the
  /// step that needs it runs, which can be rounds after start().
  std::byte* buffer = nullptr;
  std::uint64_t evict_seq = 0;    ///< evict: BlockRecord::seq
  std::uint32_t evict_depth = 0;  ///< evict: BlockRecord::depth
  /// Called once when the operation completes, on the thread that ran its last step, after
  /// done() became true. The operation must stay alive until the callback has returned.
  Callback on_complete = nullptr;
  void* context = nullptr;

  Operation() = default;
  Operation(TreeOp k, std::uint64_t off, std::uint64_t len, void* buf = nullptr)
      : kind(k), offset(off), length(len), buffer(static_cast<std::byte*>(buf)) {}
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  /// True once the operation is complete. Acquire: pairs with the release store in
  /// TreeCore::complete, so the result and a read's data are visible after it returns true.
  bool done() const noexcept { return done_.load(std::memory_order_acquire); }
  /// Valid once done(): read/write: bytes transferred (a read stops at the end of the file);
  /// other kinds: 0; negative: -errno.
  std::int64_t result() const noexcept { return result_; }
  std::error_code error() const noexcept {
    return result_ < 0 ? std::error_code(static_cast<int>(-result_), std::generic_category()) : std::error_code();
  }
  /// The tree's sequence number of this operation (start order, from 1); valid after start().
  std::uint64_t seq() const noexcept { return seq_; }
  /// Makes a completed (or never started) operation reusable; the public fields are kept.
  void reset() noexcept {
    done_.store(false, std::memory_order_relaxed);
    result_ = 0;
  }

};

/// What a Step does when it runs.
enum class StepKind : std::uint8_t {
  visit,       ///< an operation reaches a node
  io_done,     ///< an engine request of this node completed (io_result is set)
  resume,      ///< this node's children went quiet: run the step that waited for them
  op_io_done,  ///< a node-less engine request of the operation completed (fsync)
  quiesce,     ///< passes behind every earlier step of a subtree, for an overwrite waiting above
};

/// Why a node's engine request was issued (for io_done). `gather`: one write-back request for
/// the dirty ranges of several adjacent blocks (a node-less io_done step: it hands the result to
/// one write_back io_done step per block, see TreeCore::gather_done).
enum class IoPurpose : std::uint8_t { none, fill, direct, write_through, write_back, sync, gather };

class StepSink;

/// One node-local piece of work. A step touches one node (plus atomic counters) and emits steps
/// for the child nodes it needs: no recursion, no mutex. 56 bytes, trivially copyable and
/// destructible, so it is queued by value: a boost::lockfree::queue<Step> or spsc_queue<Step>
/// (preallocated, bounded_push) carries steps with no heap allocation per request; the
/// operation a step belongs to is owned by the caller (see Operation).
///
/// The contract a runner (the sequential driver here, the controller's rounds later) keeps:
///  * steps with the same node() run one at a time, with a happens-before edge between them
///    (a round barrier or a queue hand-off gives it);
///  * visit and quiesce steps of the same node run in the order they were emitted (FIFO per
///    node; start() emits root steps in the caller's order). io_done and resume steps may run in
///    any order relative to them. Steps of different nodes may run at once on different threads;
///  * node-less steps (node() == nullptr) may run anywhere, any time.
struct Step {
  detail::TreeCore* tree = nullptr;
  detail::Node* node = nullptr;
  Operation* op = nullptr;
  std::uint64_t first = 0;  ///< first byte of the operation inside this node
  std::uint64_t last = 0;   ///< last byte (inclusive: a range may end at 2^64 - 1)
  std::int64_t io_result = 0;  ///< io_done / op_io_done: the engine's result (bytes or -errno)
  std::uint32_t aux = 0;       ///< per-kind progress (entry flag, fill cursor, ranges in flight)
  StepKind kind = StepKind::visit;
  IoPurpose purpose = IoPurpose::none;

  /// Runs the step. Thread-safety: see the contract above. Defined in the library's private
  /// src/btree/tree_core.hpp, beside the TreeCore it calls: the runners are the library's own
  /// (the controller's rounds, SequentialDriver), and inline there a round's call goes straight
  /// into the tree without this header needing the tree's definition.
  inline void run(StepSink& sink) const;
  /// The key a runner serialises on: steps with equal keys must not run at once.
  const void* node_key() const noexcept { return node; }
};
static_assert(std::is_trivially_copyable_v<Step> && std::is_trivially_destructible_v<Step>,
              "Step must be queueable by value in a lock-free queue");

/// Where a running step sends its follow-up work. Implemented by the driver.
class StepSink {
 public:
  virtual ~StepSink() = default;
  /// Queue `step` to run later (the next round). Called from inside Step::run, possibly by
  /// several threads at once for steps of different nodes: implementations must allow that.
  virtual void emit(const Step& step) = 0;
  /// Carry out `request` (its buffer is a cache block or the operation's buffer and stays valid
  /// and untouched until completion; request.file may be nullptr for a tree without a file, in
  /// which case the driver's executor knows what to do). When it completes, run `continuation`
  /// as a step with io_result set to the completion's result. Same thread rules as emit().
  virtual void io(const Request& request, const Step& continuation) = 0;
  /// The inline path's I/O (TreeCore::start() only, while the tree is idle): carry out `request`
  /// of `op` now, on the calling thread, if the engine completes synchronously, and return true
  /// with `result` set (bytes or -errno); return false, having done nothing, when it cannot (an
  /// asynchronous engine, a runner that defers I/O). The default cannot.
  virtual bool io_now(const Request& request, Operation& op, std::int64_t& result) {
    (void)request;
    (void)op;
    (void)result;
    return false;
  }
};

}  // namespace tai
