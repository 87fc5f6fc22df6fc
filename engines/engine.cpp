// The engine base class: validation, direct-I/O bouncing with read-modify-write, short-transfer
// continuation and request chaining, shared by every engine (see include/tai/engine.hpp).
//
// Two drivers run the same decisions:
//  * the queue driver (Engine::submit/reap, one thread): each user request takes a slot of a
//    slab of depth() entries and becomes one or more native requests whose user_data names the
//    slot; native completions advance the slot's state until the user completion is ready.
//  * the inline driver (SyncEngine::execute, any thread): the same steps, run to completion on
//    the calling thread with SyncEngine::transfer().
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>

#include "tai/engine.hpp"

namespace tai {

const char* to_string(Op op) noexcept {
  switch (op) {
    case Op::read: return "read";
    case Op::write: return "write";
    case Op::fsync: return "fsync";
    case Op::fdatasync: return "fdatasync";
  }
  return "?";
}

namespace detail {
namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
// The largest offset the kernel's off_t can name; a request ending past it cannot be served.
constexpr std::uint64_t kMaxOffset = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
using BounceBuffer = std::unique_ptr<std::byte, FreeDeleter>;

BounceBuffer allocate_bounce(std::size_t alignment, std::size_t size) {
  void* p = nullptr;
  if (posix_memalign(&p, std::max<std::size_t>(alignment, sizeof(void*)), size) != 0) return nullptr;
  return BounceBuffer(static_cast<std::byte*>(p));
}

constexpr std::uint64_t kNoEof = std::numeric_limits<std::uint64_t>::max();

/// The segments of `r` past its first `skip` bytes, into `out` (reused between calls).
void rest_segments(const Request& r, std::uint64_t skip, std::vector<::iovec>& out) {
  out.clear();
  for (std::uint32_t k = 0; k < r.iov_count; ++k) {
    const ::iovec& v = r.iov[k];
    if (skip >= v.iov_len) {
      skip -= v.iov_len;
      continue;
    }
    out.push_back({static_cast<std::byte*>(v.iov_base) + skip, v.iov_len - skip});
    skip = 0;
  }
}
constexpr std::uint64_t kEndOfSpace = std::numeric_limits<std::uint64_t>::max();

/// Blocks of a direct file that a write in flight owns. A write on a direct file holds the
/// aligned blocks it touches from its first native request to its completion, so that a
/// read-modify-write never reads a block another write is changing, and never writes back a
/// stale copy over it.
///
/// An unaligned write whose last block lies past end of file pads the file to the block
/// boundary (O_DIRECT writes whole blocks) and must cut it back before it completes. Cutting
/// while another write past it is still in the kernel would cut that write's data too
/// (ftruncate waits for it, then truncates), so such a write also takes [a1, end of space)
/// before writing: nothing else writes past it until it has trimmed. A write waiting for that
/// only ever waits for writes at higher offsets, so the waits cannot form a cycle.
///
/// The lock orders this process's writes only: the fstat-then-ftruncate of the trim cannot be
/// ordered against another process's write past the block, which would be cut off if it landed
/// in between. A file opened with Open::shared_writers is therefore never trimmed: its padded
/// write keeps the zeros up to the block boundary, and, with no trim to protect, holds only its
/// own blocks [a0, a1) like any other write.
/// Thread-safe (the inline driver runs on many threads).
class BlockRangeLock {
 public:
  bool try_lock(std::uint64_t a, std::uint64_t b) {
    std::lock_guard<std::mutex> g(mu_);
    if (conflicts(a, b)) return false;
    held_.emplace_back(a, b);
    return true;
  }
  void lock(std::uint64_t a, std::uint64_t b) {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return !conflicts(a, b); });
    held_.emplace_back(a, b);
  }
  void unlock(std::uint64_t a, std::uint64_t b) {
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = std::find(held_.begin(), held_.end(), std::make_pair(a, b));
      assert(it != held_.end());
      *it = held_.back();
      held_.pop_back();
    }
    cv_.notify_all();
  }

 private:
  bool conflicts(std::uint64_t a, std::uint64_t b) const {
    for (auto& h : held_)
      if (h.first < b && a < h.second) return true;
    return false;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> held_;
};

/// How a read or write on a direct file must be carried out.
struct DirectPlan {
  bool bounce = false;       // false: the request is aligned, issue it as it is
  std::uint64_t a0 = 0;      // aligned start
  std::uint64_t a1 = 0;      // aligned end
  std::uint64_t block = 1;   // read-modify-write granule
  bool head_partial = false; // write: the first block must be read first
  bool tail_partial = false; // write: the last block must be read first (and is not the first)
};

DirectPlan plan_direct(const Request& r, const Alignment& al) {
  DirectPlan p;
  p.block = std::max<std::uint64_t>({al.offset, al.length, 1});
  p.a0 = r.offset / p.block * p.block;
  std::uint64_t end = r.offset + r.length;
  p.a1 = (end + p.block - 1) / p.block * p.block;
  const std::uint32_t mem = std::max<std::uint32_t>(al.memory, 1), len = std::max<std::uint32_t>(al.length, 1);
  bool aligned = r.offset % std::max<std::uint32_t>(al.offset, 1) == 0 && r.length % len == 0;
  if (r.iov_count == 0) {
    aligned = aligned && reinterpret_cast<std::uintptr_t>(r.buffer) % mem == 0;
  } else {
    // Every segment must be a whole number of aligned units, from aligned memory: the kernel
    // checks each one (a vectored O_DIRECT write with one bad segment fails with EINVAL).
    for (std::uint32_t k = 0; aligned && k < r.iov_count; ++k)
      aligned = reinterpret_cast<std::uintptr_t>(r.iov[k].iov_base) % mem == 0 && r.iov[k].iov_len % len == 0;
  }
  p.bounce = !aligned;
  if (p.bounce && r.op == Op::write) {
    p.head_partial = r.offset != p.a0;
    p.tail_partial = end != p.a1 && !(p.head_partial && p.a1 - p.a0 == p.block);
  }
  return p;
}

BlockRangeLock* range_lock_of(const EngineFile& f, void* state) {
  (void)f;
  return static_cast<BlockRangeLock*>(state);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct EngineCore {
  enum class Stage : std::uint8_t {
    free_slot,
    plain,      // native request(s) of the user's own buffer in flight
    bounce_io,  // the aligned superset in flight through the bounce buffer
    rmw_read,   // edge blocks of an unaligned direct write being read
    deferred,   // waiting for a block range lock
    extending,  // a padded write waiting for [a1, end of space)
    chained,    // waiting for the previous request of its link chain
  };

  struct Slot {
    Request req;
    Stage stage = Stage::free_slot;
    std::uint64_t done = 0;        // bytes moved so far (plain and bounce)
    DirectPlan plan;
    BounceBuffer bounce;
    std::uint8_t reads_pending = 0;
    std::int64_t first_error = 0;
    std::uint64_t tail_eof = kNoEof;  // EOF seen by a short last-block read (padded write)
    bool locked = false;            // holds [a0, a1) of its file
    bool extended = false;          // also holds [a1, end of space): a padded write
    bool native_linked = false;    // the next request of the chain was linked in the kernel
    std::vector<::iovec> rest;     // a vectored write's segments still to go after a short one
    std::uint32_t chain_next = kNone;
    std::uint32_t next_free = kNone;
  };

  explicit EngineCore(Engine& e) : engine(e), slots(e.depth()) {
    for (std::uint32_t i = 0; i < slots.size(); ++i) slots[i].next_free = i + 1 < slots.size() ? i + 1 : kNone;
    free_head = slots.empty() ? kNone : 0;
    native_out.resize(2 * std::max<std::size_t>(slots.size(), 1));
  }

  Engine& engine;
  std::vector<Slot> slots;
  std::uint32_t free_head = kNone;
  std::size_t used = 0;              // slots not free
  std::size_t native_in_flight = 0;  // native requests the engine has taken
  std::vector<Completion> ready;     // user completions not yet returned
  std::vector<Request> to_issue;     // native requests not yet taken by the engine
  std::vector<std::uint32_t> waiting_lock;  // deferred and extending slots, oldest first
  std::vector<Completion> native_out;

  // --- validation, shared by both drivers ------------------------------------------------------
  static std::int64_t validate(const Engine& e, const Request& r) {
    if (r.file == nullptr || !e.owns(*r.file) || !r.file->is_open()) return -EBADF;
    if (r.op == Op::read || r.op == Op::write) {
      Open need = r.op == Op::read ? Open::read : Open::write;
      if (!has(r.file->mode().flags, need)) return -EBADF;
      if (r.length > std::numeric_limits<std::uint64_t>::max() - r.offset) return -EOVERFLOW;
      if (r.offset + r.length > kMaxOffset) return -EOVERFLOW;
      if (r.iov_count != 0) {
        if (r.op != Op::write || r.iov_count > Request::kMaxSegments) return -EINVAL;
        if (r.iov == nullptr) return -EFAULT;
        std::uint64_t sum = 0;
        for (std::uint32_t k = 0; k < r.iov_count; ++k) {
          if (r.iov[k].iov_len != 0 && r.iov[k].iov_base == nullptr) return -EFAULT;
          sum += r.iov[k].iov_len;
        }
        if (sum != r.length) return -EINVAL;
      } else if (r.length > 0 && r.buffer == nullptr) {
        return -EFAULT;
      }
    } else if (r.iov_count != 0) {
      return -EINVAL;
    }
    return 0;
  }
  static bool is_transfer(const Request& r) { return r.op == Op::read || r.op == Op::write; }
  static bool direct(const Request& r) { return r.file->capabilities().direct; }
  static BlockRangeLock* lock_of(const Request& r) {
    return range_lock_of(*r.file, r.file->core_state_);
  }
  // A padded write is trimmed back (and so holds [a1, end of space) until it has) unless other
  // processes write the file (Open::shared_writers): see BlockRangeLock.
  static bool trims_padding(const Request& r) { return !has(r.file->mode().flags, Open::shared_writers); }

  // A padded write (see BlockRangeLock) has landed while holding everything past its blocks:
  // if the file ends at the padding, nobody else has grown it, so cut it to what was asked.
  static void trim_padding(const Request& r, const DirectPlan& p, std::uint64_t tail_eof) {
    const int fd = r.file->fd();
    if (fd < 0) return;
    struct stat st {};
    const std::uint64_t want = std::max(r.offset + r.length, tail_eof);
    if (fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) == p.a1 && want < p.a1)
      (void)ftruncate(fd, static_cast<off_t>(want));
  }

  // An edge block of a read-modify-write came back short: end of file lies inside it. If it is
  // the last block and the user's write ends inside it, remember where the file ended so that
  // trim_padding() can undo the growth the aligned write causes.
  static void note_short_edge(const Request& r, const DirectPlan& p, std::uint64_t at, std::uint64_t got,
                              std::uint64_t& tail_eof) {
    const std::uint64_t block_start = p.a0 + at;
    if (block_start + p.block == p.a1 && r.offset + r.length != p.a1) tail_eof = block_start + got;
  }

  // Copies the bounced superset out to the user (read) and returns the user's byte count.
  static std::int64_t finish_bounced_read(const Request& r, const DirectPlan& p, const std::byte* b,
                                          std::uint64_t got) {
    std::uint64_t skip = r.offset - p.a0;
    std::uint64_t n = got > skip ? std::min(got - skip, r.length) : 0;
    if (n) std::memcpy(r.buffer, b + skip, n);
    return static_cast<std::int64_t>(n);
  }

  // --- queue driver ---------------------------------------------------------------------------
  std::uint32_t take_slot() {
    std::uint32_t i = free_head;
    free_head = slots[i].next_free;
    ++used;
    return i;
  }
  void release(std::uint32_t i) {
    Slot& s = slots[i];
    s.bounce.reset();
    s.stage = Stage::free_slot;
    s.next_free = free_head;
    free_head = i;
    --used;
  }
  static std::uint64_t tag(std::uint32_t slot, unsigned sub) { return std::uint64_t(slot) << 2 | sub; }

  void issue(std::uint32_t i, Op op, void* buf, std::uint64_t off, std::uint64_t len, unsigned sub,
             bool link = false) {
    Request n = slots[i].req;
    n.op = op;
    n.buffer = buf;
    n.offset = off;
    n.length = len;
    n.user_data = tag(i, sub);
    n.link = link;
    n.iov = nullptr;  // bounce and edge requests are plain; issue_plain() sends the segments
    n.iov_count = 0;
    to_issue.push_back(n);
  }

  // The user's own transfer from byte s.done on: its buffer, or its segments past s.done (or,
  // for an engine without vectored_writes, one copy of them). False: it completed at once
  // (no memory for that copy).
  bool issue_plain(std::uint32_t i, bool link = false) {
    Slot& s = slots[i];
    const Request& r = s.req;
    if (r.iov_count != 0 && !engine.capabilities().vectored_writes) {
      if (!s.bounce) {
        const std::size_t align = direct(r) ? r.file->capabilities().alignment.memory : 16;
        s.bounce = allocate_bounce(align, r.length);
        if (!s.bounce) {
          complete(i, -ENOMEM);
          return false;
        }
        copy_request_bytes(r, s.bounce.get());
      }
      issue(i, r.op, s.bounce.get() + s.done, r.offset + s.done, r.length - s.done, 0, link);
      return true;
    }
    if (r.iov_count == 0 || !is_transfer(r)) {
      issue(i, r.op, static_cast<std::byte*>(r.buffer) + s.done, r.offset + s.done, r.length - s.done, 0, link);
      return true;
    }
    Request n = r;
    n.buffer = nullptr;
    n.offset = r.offset + s.done;
    n.length = r.length - s.done;
    n.user_data = tag(i, 0);
    n.link = link;
    if (s.done != 0) {
      rest_segments(r, s.done, s.rest);
      n.iov = s.rest.data();
      n.iov_count = static_cast<std::uint32_t>(s.rest.size());
    }
    to_issue.push_back(n);
    return true;
  }

  void flush_issue() {
    std::size_t at = 0;
    while (at < to_issue.size()) {
      std::size_t took = engine.do_submit(to_issue.data() + at, to_issue.size() - at);
      if (took == 0) break;
      at += took;
      native_in_flight += took;
    }
    to_issue.erase(to_issue.begin(), to_issue.begin() + static_cast<std::ptrdiff_t>(at));
  }

  // Completes slot i for the user with `result`, then releases or cancels what was chained to it.
  void complete(std::uint32_t i, std::int64_t result) {
    Slot& s = slots[i];
    if (s.locked) {
      lock_of(s.req)->unlock(s.plan.a0, s.plan.a1);
      s.locked = false;
    }
    if (s.extended) {
      lock_of(s.req)->unlock(s.plan.a1, kEndOfSpace);
      s.extended = false;
    }
    ready.push_back({s.req.user_data, result});
    std::uint32_t next = s.chain_next;
    bool full = result >= 0 && (!is_transfer(s.req) || static_cast<std::uint64_t>(result) == s.req.length);
    bool native_linked = s.native_linked;
    s.chain_next = kNone;
    s.native_linked = false;
    release(i);
    if (next != kNone && !native_linked) {
      if (full)
        resume_chained(next);
      else
        cancel_chain(next);
    }
  }
  void cancel_chain(std::uint32_t i) {
    while (i != kNone) {
      Slot& s = slots[i];
      std::uint32_t next = s.chain_next;
      ready.push_back({s.req.user_data, -ECANCELED});
      s.chain_next = kNone;
      release(i);
      i = next;
    }
  }

  // Starts slot i (validated, non-empty). Returns true if it went out as one plain native
  // request (so that the next request of a chain may be linked to it in the kernel).
  bool start(std::uint32_t i, bool link_native = false) {
    Slot& s = slots[i];
    const Request& r = s.req;
    s.done = 0;
    s.first_error = 0;
    s.tail_eof = kNoEof;
    if (!is_transfer(r)) {
      s.stage = Stage::plain;
      issue(i, r.op, nullptr, 0, 0, 0, link_native);
      return true;
    }
    if (!direct(r)) {
      s.stage = Stage::plain;
      return issue_plain(i, link_native);
    }
    s.plan = plan_direct(r, r.file->capabilities().alignment);
    if (r.op == Op::write) {
      if (!lock_of(r)->try_lock(s.plan.a0, s.plan.a1)) {
        s.stage = Stage::deferred;
        waiting_lock.push_back(i);
        return false;
      }
      s.locked = true;
    }
    return launch_direct(i, link_native);
  }

  bool launch_direct(std::uint32_t i, bool link_native = false) {
    Slot& s = slots[i];
    const Request& r = s.req;
    const DirectPlan& p = s.plan;
    if (!p.bounce) {
      s.stage = Stage::plain;
      return issue_plain(i, link_native);
    }
    s.bounce = allocate_bounce(r.file->capabilities().alignment.memory, p.a1 - p.a0);
    if (!s.bounce) {
      complete(i, -ENOMEM);
      return false;
    }
    if (r.op == Op::read) {
      s.stage = Stage::bounce_io;
      issue(i, Op::read, s.bounce.get(), p.a0, p.a1 - p.a0, 0);
      return false;
    }
    if (p.head_partial || p.tail_partial) {
      s.stage = Stage::rmw_read;
      s.reads_pending = 0;
      if (p.head_partial) {
        ++s.reads_pending;
        issue(i, Op::read, s.bounce.get(), p.a0, p.block, 1);
      }
      if (p.tail_partial) {
        ++s.reads_pending;
        issue(i, Op::read, s.bounce.get() + (p.a1 - p.a0 - p.block), p.a1 - p.block, p.block, 2);
      }
      return false;
    }
    write_bounced(i);
    return false;
  }

  void write_bounced(std::uint32_t i) {
    Slot& s = slots[i];
    copy_request_bytes(s.req, s.bounce.get() + (s.req.offset - s.plan.a0));
    s.stage = Stage::bounce_io;
    s.done = 0;
    issue(i, Op::write, s.bounce.get(), s.plan.a0, s.plan.a1 - s.plan.a0, 0);
  }

  // The range a waiting slot needs next.
  std::pair<std::uint64_t, std::uint64_t> wanted_range(const Slot& s) const {
    return s.stage == Stage::extending ? std::make_pair(s.plan.a1, kEndOfSpace)
                                       : std::make_pair(s.plan.a0, s.plan.a1);
  }
  void got_range(std::uint32_t i) {
    Slot& s = slots[i];
    if (s.stage == Stage::extending) {
      s.extended = true;
      write_bounced(i);
    } else {
      s.locked = true;
      launch_direct(i);
    }
  }
  // Padded write: its edge reads are done; it needs everything past its blocks before writing.
  void extend_then_write(std::uint32_t i) {
    Slot& s = slots[i];
    if (lock_of(s.req)->try_lock(s.plan.a1, kEndOfSpace)) {
      s.extended = true;
      write_bounced(i);
    } else {
      s.stage = Stage::extending;
      waiting_lock.push_back(i);
    }
  }

  void retry_deferred() {
    for (std::size_t k = 0; k < waiting_lock.size();) {
      const std::uint32_t i = waiting_lock[k];
      const auto range = wanted_range(slots[i]);
      if (lock_of(slots[i].req)->try_lock(range.first, range.second)) {
        waiting_lock.erase(waiting_lock.begin() + static_cast<std::ptrdiff_t>(k));
        got_range(i);
      } else {
        ++k;
      }
    }
  }

  // Nothing of ours is in the kernel, yet slots wait for a range lock that retry_deferred()
  // could not take, so another thread's SyncEngine::execute holds it and will let go: block.
  // Not on any waiter, though: a deferred write may wait for blocks that one of our own padded
  // writes holds while it waits for the space past it. The padded write with the highest end
  // waits for nothing of ours, and with no padded write waiting, none of ours holds anything.
  void wait_for_deferred() {
    std::size_t pick = 0;
    for (std::size_t k = 0; k < waiting_lock.size(); ++k) {
      const Slot& s = slots[waiting_lock[k]];
      const Slot& best = slots[waiting_lock[pick]];
      if (s.stage == Stage::extending && (best.stage != Stage::extending || s.plan.a1 > best.plan.a1)) pick = k;
    }
    const std::uint32_t i = waiting_lock[pick];
    waiting_lock.erase(waiting_lock.begin() + static_cast<std::ptrdiff_t>(pick));
    const auto range = wanted_range(slots[i]);
    lock_of(slots[i].req)->lock(range.first, range.second);
    got_range(i);
  }

  void on_native(const Completion& c) {
    std::uint32_t i = static_cast<std::uint32_t>(c.user_data >> 2);
    unsigned sub = static_cast<unsigned>(c.user_data & 3);
    Slot& s = slots[i];
    const Request& r = s.req;
    switch (s.stage) {
      case Stage::plain: {
        if (!is_transfer(r)) return complete(i, c.result < 0 ? c.result : 0);
        if (c.result < 0) return complete(i, c.result);
        s.done += static_cast<std::uint64_t>(c.result);
        bool more = c.result > 0 && s.done < r.length && engine.continue_short_transfers();
        // On a direct file the rest must start on an aligned offset; a short read that ends
        // off alignment is end of file.
        if (more && direct(r) && (s.done % s.plan.block != 0)) more = false;
        if (!more) return complete(i, static_cast<std::int64_t>(s.done));
        issue_plain(i);
        return;
      }
      case Stage::bounce_io: {
        std::uint64_t total = s.plan.a1 - s.plan.a0;
        if (c.result < 0) return complete(i, c.result);
        s.done += static_cast<std::uint64_t>(c.result);
        bool more = c.result > 0 && s.done < total && s.done % s.plan.block == 0 &&
                    engine.continue_short_transfers();
        if (more) {
          issue(i, r.op, s.bounce.get() + s.done, s.plan.a0 + s.done, total - s.done, 0);
          return;
        }
        if (r.op == Op::read) return complete(i, finish_bounced_read(r, s.plan, s.bounce.get(), s.done));
        if (s.done < total) {
          // Short write of the superset: report how much of the user's range is on disk.
          std::uint64_t skip = r.offset - s.plan.a0;
          return complete(i, static_cast<std::int64_t>(s.done > skip ? std::min(s.done - skip, r.length) : 0));
        }
        if (s.extended) trim_padding(r, s.plan, s.tail_eof);
        return complete(i, static_cast<std::int64_t>(r.length));
      }
      case Stage::rmw_read: {
        if (c.result < 0 && s.first_error == 0) s.first_error = c.result;
        if (c.result >= 0) {
          std::uint64_t got = static_cast<std::uint64_t>(c.result);
          std::uint64_t at = sub == 1 ? 0 : s.plan.a1 - s.plan.a0 - s.plan.block;
          if (got < s.plan.block) {
            std::memset(s.bounce.get() + at + got, 0, s.plan.block - got);
            note_short_edge(r, s.plan, at, got, s.tail_eof);
          }
        }
        if (--s.reads_pending > 0) return;
        if (s.first_error < 0) return complete(i, s.first_error);
        if (s.tail_eof != kNoEof && trims_padding(r)) return extend_then_write(i);
        write_bounced(i);
        return;
      }
      case Stage::free_slot:
      case Stage::deferred:
      case Stage::extending:
      case Stage::chained:
        assert(false && "native completion for a slot without native requests");
        return;
    }
  }

  // A request that runs once the request it is chained behind completed in full.
  void resume_chained(std::uint32_t i) {
    Slot& s = slots[i];
    std::int64_t err = validate(engine, s.req);
    if (err != 0 || (is_transfer(s.req) && s.req.length == 0)) return complete(i, err);
    start(i);
  }

  // Would start() send this request out as one plain native request right now?
  static bool goes_out_plain(const Request& r) {
    if (!is_transfer(r) || !direct(r)) return true;
    // Direct writes take a block range lock first, and unaligned requests bounce.
    return r.op == Op::read && !plan_direct(r, r.file->capabilities().alignment).bounce;
  }

  std::size_t submit(const Request* reqs, std::size_t n) {
    std::size_t taken = 0;
    std::uint32_t prev = kNone;      // slot of the previous request when it asked for a link
    bool prev_went_plain = false;    // ... and went out as one plain native request
    for (; taken < n; ++taken) {
      const Request& r = reqs[taken];
      const std::int64_t err = validate(engine, r);
      const bool immediate = err != 0 || (is_transfer(r) && r.length == 0);
      if (immediate && prev == kNone) {  // needs no slot: complete it now
        ready.push_back({r.user_data, err});
        continue;
      }
      if (free_head == kNone) break;
      const std::uint32_t i = take_slot();
      Slot& s = slots[i];
      s.req = r;
      s.chain_next = kNone;
      s.native_linked = false;
      bool went_plain = false;
      if (prev != kNone) {
        slots[prev].chain_next = i;
        const bool kernel_link = prev_went_plain && engine.capabilities().linked_requests &&
                                 !immediate && goes_out_plain(r);
        if (kernel_link) {
          slots[prev].native_linked = true;
          to_issue.back().link = true;  // prev's native request is the last one queued
          went_plain = start(i);
        } else {
          s.stage = Stage::chained;  // resume_chained() runs it when prev completes in full
        }
      } else {
        went_plain = start(i);
      }
      prev = r.link ? i : kNone;
      prev_went_plain = went_plain;
    }
    flush_issue();
    return taken;
  }

  std::size_t reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) {
    std::size_t n = 0;
    auto drain = [&] {
      std::size_t k = std::min(max - n, ready.size());
      std::copy(ready.begin(), ready.begin() + static_cast<std::ptrdiff_t>(k), out + n);
      ready.erase(ready.begin(), ready.begin() + static_cast<std::ptrdiff_t>(k));
      n += k;
    };
    if (max == 0) return 0;
    min = std::min(min, max);
    drain();
    if (used == 0 || n == max) return n;  // nothing more can arrive yet: no system call
    const bool forever = timeout.count() < 0;
    const auto deadline = std::chrono::steady_clock::now() + (forever ? Timeout(0) : timeout);
    for (;;) {
      flush_issue();
      if (!waiting_lock.empty()) retry_deferred();
      flush_issue();
      // Deferred writes wait for blocks that nothing of ours in the kernel or queued holds:
      // another thread's SyncEngine::execute has them and will let go.
      if (native_in_flight == 0 && to_issue.empty() && !waiting_lock.empty()) {
        wait_for_deferred();
        flush_issue();
      }
      drain();
      if (n >= min && (n == max || native_in_flight == 0)) return n;
      if (native_in_flight == 0) return n;  // the engine refused to take more: do not spin
      const bool need = n < min;
      Timeout left(0);
      if (need) {
        if (forever) {
          left = kForever;
        } else {
          left = std::chrono::duration_cast<Timeout>(deadline - std::chrono::steady_clock::now());
          if (left.count() < 0) left = Timeout(0);
        }
      }
      const std::size_t got = engine.do_reap(native_out.data(), native_out.size(), need ? 1 : 0, left);
      native_in_flight -= got;
      for (std::size_t k = 0; k < got; ++k) on_native(native_out[k]);
      drain();
      if (n >= min) {
        flush_issue();
        return n;
      }
      if (got == 0 && !forever && std::chrono::steady_clock::now() >= deadline) return n;
    }
  }

  std::size_t in_flight() const { return used + ready.size(); }

  // --- inline driver (SyncEngine::execute) -----------------------------------------------------
  static std::int64_t transfer_all(SyncEngine& e, Request r, std::uint64_t block, bool direct_file,
                                   std::int64_t (SyncEngine::*xfer)(const Request&)) {
    std::uint64_t done = 0;
    const std::uint64_t total = r.length;
    const Request whole = r;
    std::vector<::iovec> rest;
    for (;;) {
      std::int64_t got = (e.*xfer)(r);
      if (got < 0) return got;
      done += static_cast<std::uint64_t>(got);
      if (got == 0 || done >= total || !e.continue_short_transfers()) break;
      if (direct_file && done % block != 0) break;
      if (r.iov_count != 0) {
        rest_segments(whole, done, rest);
        r.iov = rest.data();
        r.iov_count = static_cast<std::uint32_t>(rest.size());
      } else {
        r.buffer = static_cast<std::byte*>(r.buffer) + got;
      }
      r.offset += static_cast<std::uint64_t>(got);
      r.length -= static_cast<std::uint64_t>(got);
    }
    return static_cast<std::int64_t>(done);
  }
};

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Requests

std::uint64_t segment_bytes(const Request& r) noexcept {
  std::uint64_t sum = 0;
  for (std::uint32_t k = 0; k < r.iov_count; ++k) sum += r.iov[k].iov_len;
  return sum;
}

std::uint64_t copy_request_bytes(const Request& r, void* out) noexcept {
  auto* dst = static_cast<std::byte*>(out);
  if (r.iov_count == 0) {
    if (r.length != 0) std::memcpy(dst, r.buffer, r.length);
    return r.length;
  }
  std::uint64_t done = 0;
  for (std::uint32_t k = 0; k < r.iov_count && done < r.length; ++k) {
    const std::uint64_t n = std::min<std::uint64_t>(r.iov[k].iov_len, r.length - done);
    if (n != 0) std::memcpy(dst + done, r.iov[k].iov_base, n);
    done += n;
  }
  return done;
}

// ---------------------------------------------------------------------------------------------
// EngineFile

EngineFile::EngineFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps)
    : engine_(&engine), path_(std::move(path)), mode_(mode), caps_(caps) {}

EngineFile::~EngineFile() { delete static_cast<detail::BlockRangeLock*>(core_state_); }

std::optional<std::uint64_t> EngineFile::size() const noexcept {
  const int d = fd();
  struct stat st {};
  if (d < 0 || ::fstat(d, &st) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(st.st_size);
}

// ---------------------------------------------------------------------------------------------
// Engine

Engine::Engine(std::string name, Capabilities caps, EngineOptions options)
    : name_(std::move(name)), caps_(caps), options_(options) {
  if (options_.depth == 0) options_.depth = 1;
  core_ = std::make_unique<detail::EngineCore>(*this);
}

Engine::~Engine() = default;

Result<std::unique_ptr<EngineFile>> Engine::open(const std::string& path, OpenMode mode) {
  if (!has(mode.flags, Open::read) && !has(mode.flags, Open::write))
    return Error{std::make_error_code(std::errc::invalid_argument),
                 "open " + path + ": the mode asks for neither read nor write"};
  if (has(mode.flags, Open::direct) && !caps_.direct_io)
    return Error{std::make_error_code(std::errc::invalid_argument),
                 "open " + path + ": engine '" + name_ + "' cannot do direct I/O (Open::direct)"};
  auto file = do_open(path, mode);
  if (!file) return file;
  EngineFile& f = *file.value();
  f.caps_.engine = caps_;
  f.caps_.direct = has(mode.flags, Open::direct);
  f.caps_.dsync = f.caps_.dsync || has(mode.flags, Open::dsync);
  if (f.caps_.direct && f.core_state_ == nullptr) f.core_state_ = new detail::BlockRangeLock();
  return file;
}

std::error_code Engine::close(EngineFile& file) {
  if (!owns(file) || !file.open_) return std::make_error_code(std::errc::bad_file_descriptor);
  file.open_ = false;
  return do_close(file);
}

std::size_t Engine::submit(const Request* requests, std::size_t n) { return core_->submit(requests, n); }

std::size_t Engine::reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) {
  return core_->reap(out, max, min, timeout);
}

std::size_t Engine::in_flight() const noexcept { return core_->in_flight(); }

// ---------------------------------------------------------------------------------------------
// SyncEngine

SyncEngine::SyncEngine(std::string name, Capabilities caps, EngineOptions options)
    : Engine(std::move(name), caps, options) {}

std::size_t SyncEngine::do_submit(const Request* requests, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) done_.push_back({requests[k].user_data, transfer(requests[k])});
  return n;
}

std::size_t SyncEngine::do_reap(Completion* out, std::size_t max, std::size_t, Timeout) {
  std::size_t k = std::min(max, done_.size());
  std::copy(done_.begin(), done_.begin() + static_cast<std::ptrdiff_t>(k), out);
  done_.erase(done_.begin(), done_.begin() + static_cast<std::ptrdiff_t>(k));
  return k;
}

Completion SyncEngine::execute(const Request& r) {
  using Core = detail::EngineCore;
  if (std::int64_t err = Core::validate(*this, r)) return {r.user_data, err};
  if (r.iov_count != 0 && !capabilities().vectored_writes) {
    // One copy of the segments, run as a plain write (see Capabilities::vectored_writes).
    const std::size_t align = Core::direct(r) ? r.file->capabilities().alignment.memory : 16;
    auto flat = detail::allocate_bounce(align, r.length);
    if (!flat) return {r.user_data, -ENOMEM};
    copy_request_bytes(r, flat.get());
    Request plain = r;
    plain.buffer = flat.get();
    plain.iov = nullptr;
    plain.iov_count = 0;
    return execute(plain);
  }
  if (!Core::is_transfer(r)) {
    std::int64_t got = transfer(r);
    return {r.user_data, got < 0 ? got : 0};
  }
  if (r.length == 0) return {r.user_data, 0};
  auto xfer = &SyncEngine::transfer;
  if (!Core::direct(r)) return {r.user_data, Core::transfer_all(*this, r, 1, false, xfer)};

  const detail::DirectPlan p = detail::plan_direct(r, r.file->capabilities().alignment);
  detail::BlockRangeLock* lock = r.op == Op::write ? Core::lock_of(r) : nullptr;
  if (lock) lock->lock(p.a0, p.a1);
  bool extended = false;  // a padded write holds [a1, end of space) too (see BlockRangeLock)
  struct Unlock {
    detail::BlockRangeLock* l;
    const detail::DirectPlan& p;
    const bool& extended;
    ~Unlock() {
      if (l) l->unlock(p.a0, p.a1);
      if (extended) l->unlock(p.a1, detail::kEndOfSpace);
    }
  } unlock{lock, p, extended};

  if (!p.bounce) return {r.user_data, Core::transfer_all(*this, r, p.block, true, xfer)};
  auto bounce = detail::allocate_bounce(r.file->capabilities().alignment.memory, p.a1 - p.a0);
  if (!bounce) return {r.user_data, -ENOMEM};
  Request n = r;
  n.buffer = bounce.get();
  n.iov = nullptr;
  n.iov_count = 0;
  n.offset = p.a0;
  n.length = p.a1 - p.a0;
  if (r.op == Op::read) {
    std::int64_t got = Core::transfer_all(*this, n, p.block, true, xfer);
    if (got < 0) return {r.user_data, got};
    return {r.user_data, Core::finish_bounced_read(r, p, bounce.get(), static_cast<std::uint64_t>(got))};
  }
  std::uint64_t tail_eof = detail::kNoEof;
  auto read_edge = [&](std::uint64_t at) -> std::int64_t {
    Request e = r;
    e.iov = nullptr;
    e.iov_count = 0;
    e.op = Op::read;
    e.buffer = bounce.get() + at;
    e.offset = p.a0 + at;
    e.length = p.block;
    std::int64_t got = Core::transfer_all(*this, e, p.block, true, xfer);
    if (got < 0) return got;
    if (static_cast<std::uint64_t>(got) < p.block) {
      std::memset(bounce.get() + at + got, 0, p.block - static_cast<std::uint64_t>(got));
      Core::note_short_edge(r, p, at, static_cast<std::uint64_t>(got), tail_eof);
    }
    return 0;
  };
  if (p.head_partial)
    if (std::int64_t e = read_edge(0)) return {r.user_data, e};
  if (p.tail_partial)
    if (std::int64_t e = read_edge(p.a1 - p.a0 - p.block)) return {r.user_data, e};
  if (tail_eof != detail::kNoEof && Core::trims_padding(r)) {
    lock->lock(p.a1, detail::kEndOfSpace);
    extended = true;
  }
  copy_request_bytes(r, bounce.get() + (r.offset - p.a0));
  std::int64_t wrote = Core::transfer_all(*this, n, p.block, true, xfer);
  if (wrote < 0) return {r.user_data, wrote};
  if (static_cast<std::uint64_t>(wrote) < n.length) {
    std::uint64_t skip = r.offset - p.a0, w = static_cast<std::uint64_t>(wrote);
    return {r.user_data, static_cast<std::int64_t>(w > skip ? std::min(w - skip, r.length) : 0)};
  }
  if (extended) Core::trim_padding(r, p, tail_eof);
  return {r.user_data, static_cast<std::int64_t>(r.length)};
}

}  // namespace tai
