// CopyBudget: back-pressure on write copies (ControllerOptions::write_copy_budget).
//
// The fast path is one fetch_add at submission (for a small write of a submitting thread, one
// per credit_chunk() of its writes: ControllerCore::credits), and one fetch_sub plus one load (of
// the waiters' line) per batch of completions (Worker::give_back_copies). No lost wake-up: a waiter
// increments waiters_ and then loads bytes_, a completer subtracts from bytes_ and then loads
// waiters_, all four seq_cst, so in their single total order at least one of the two sees the
// other's write: the waiter sees the room, or the completer sees the waiter and notifies it under
// mu_ (which the waiter holds from its increment until it sleeps, so the notification cannot
// fall between its check and its sleep). On x86 a seq_cst read-modify-write is the same locked
// instruction as a relaxed one and a seq_cst load a plain load: the ordering costs nothing there.
#include "src/controller/core.hpp"

#include <algorithm>

namespace tai::detail {

void ControllerCore::charge_copy(Task& t) {
  // A large write's task also holds the small copy it displaced (Task::displaced_copy) until
  // the write ends: counted with it, so that the budget bounds every byte the writes hold.
  const std::uint64_t n = t.data.size() + t.displaced_copy.size();
  if (n == 0) return;
  t.copy_charge = n;  // published to the worker by the push
  const bool inside = on_own_worker();
  // A small write of a submitting thread comes out of the thread's credit (see `credits`),
  // refilled a chunk at a time while the chunk fits the budget; otherwise, and for a worker's
  // writes, the write is charged alone.
  if (!inside && n <= copies.credit_chunk()) {
    if (const int p = producer_index(); p >= 0) {
      std::atomic<std::uint64_t>& credit = credits[static_cast<unsigned>(p)].bytes;
      std::uint64_t have = credit.load(std::memory_order_relaxed);  // this thread's own
      if (have < n) have += copies.try_reserve(copies.credit_chunk());
      if (have >= n) {
        credit.store(have - n, std::memory_order_relaxed);
        return;
      }
      credit.store(have, std::memory_order_relaxed);
    }
  }
  copies.charge(n, /*may_wait=*/!inside, &doorbell);
}

std::uint64_t CopyBudget::try_reserve(std::uint64_t want) noexcept {
  if (want == 0) return 0;
  // Relaxed, as in charge(): a count.
  const std::uint64_t held = bytes_.fetch_add(want, std::memory_order_relaxed);
  // Credit only while it fits next to what is held (and never past the budget, even when
  // fits() admits a write because nothing but credits is held).
  if (held <= budget_ && want <= budget_ - held) return want;
  release(want);
  return 0;
}

void CopyBudget::charge(std::uint64_t n, bool may_wait, Doorbell* wake) {
  // Relaxed: a count, nothing is published through it (the push publishes the task); the
  // completer's seq_cst subtraction and this addition are ordered by their atomicity alone.
  const std::uint64_t held = bytes_.fetch_add(n, std::memory_order_relaxed);
  // A worker of the controller never waits: the writes that would make room finish only in the
  // rounds it holds up.
  if (!may_wait || fits(held, n)) return;
  // Over the budget: take the bytes back (a waiter that saw them is woken by release(), since
  // bytes_ may now have room for it) and wait.
  release(n);
  if (wake != nullptr) wake->ring();
  wait_for_room(n);
}

void CopyBudget::release(std::uint64_t n) noexcept {
  // seq_cst: pairs with the waiter's seq_cst increment of waiters_ and load of bytes_ (see
  // above); on x86 the same instruction as relaxed.
  bytes_.fetch_sub(n, std::memory_order_seq_cst);
  // seq_cst: the other half of that pairing; usually 0 (nobody waits): the completion then
  // costs nothing more.
  if (waiters_.load(std::memory_order_seq_cst) != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
}

void CopyBudget::set_release_batch(unsigned workers) noexcept {
  release_batch_ = std::min<std::uint64_t>(std::uint64_t{1} << 20, budget_ / 4 / std::max(1u, workers));
}

void CopyBudget::wait_for_room(std::uint64_t n) {
  waits_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
  // Relaxed: a hint to the workers (wanted()); the room itself comes through bytes_.
  wanting_.fetch_add(1, std::memory_order_relaxed);
  struct Unwant {
    std::atomic<std::uint32_t>& w;
    ~Unwant() { w.fetch_sub(1, std::memory_order_relaxed); }
  } unwant{wanting_};
  // Admission on this path is a compare-and-swap, never an addition taken back, so it never
  // shows other waiters bytes it does not keep. Relaxed loads and CAS: a count (see above).
  auto try_admit = [this, n]() noexcept {
    std::uint64_t held = bytes_.load(std::memory_order_relaxed);
    while (fits(held, n))
      if (bytes_.compare_exchange_weak(held, held + n, std::memory_order_relaxed)) return true;
    return false;
  };
  // Spin first: writes into the cache finish within a round, often sooner than a sleep and a
  // wake-up would take.
  if (spin_until(spin_ns_, try_admit)) return;
  std::unique_lock<std::mutex> lock(mu_);
  // seq_cst: pairs with release()'s seq_cst load of waiters_ (see above).
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    // seq_cst load: the other half of the pairing with release()'s subtraction.
    if (fits(bytes_.load(std::memory_order_seq_cst), n) && try_admit()) break;
    cv_.wait(lock);
  }
  // Relaxed: under mu_; a completer that still sees the old value only notifies for nothing.
  waiters_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace tai::detail

namespace tai::detail {

CopyPool::CopyPool(std::uint64_t budget, bool huge_pages) {
  try {
    arena_ = CopyArena::create(budget, huge_pages);
  } catch (const std::bad_alloc&) {
    arena_ = nullptr;  // every large copy from the allocator
  }
}

CopyPool::~CopyPool() {
  if (arena_ != nullptr) arena_->drop();  // unmapped when the last lent copy comes back too
}

AlignedBuffer CopyPool::take(std::size_t n) noexcept {
  if (arena_ != nullptr) {
    bool mapped_new = false;
    AlignedBuffer b = arena_->take(n, mapped_new);
    if (!b.empty()) {
      (mapped_new ? allocations_ : reuses_).fetch_add(1, std::memory_order_relaxed);
      return b;
    }
  }
  allocations_.fetch_add(1, std::memory_order_relaxed);
  // Page-aligned and page-rounded like the arena's: the copy owns whole pages, and a large
  // memcpy into it runs on page boundaries.
  return AlignedBuffer::try_allocate((n + CopyArena::kPage - 1) / CopyArena::kPage * CopyArena::kPage, CopyArena::kPage);
}

void CopyPool::give(AlignedBuffer&& b) noexcept { b.reset(); }

std::uint64_t CopyPool::pooled_bytes() const noexcept { return arena_ != nullptr ? arena_->free_bytes() : 0; }
std::uint64_t CopyPool::mapped_bytes() const noexcept { return arena_ != nullptr ? arena_->mapped_bytes() : 0; }

}  // namespace tai::detail
