// tai/posix.hpp's layer: open file descriptions and the descriptor table.
#include "src/posix/layer_internal.hpp"

namespace tai::posix::detail {

std::mutex g_pool_mu;
std::vector<Description*>& pool() {
  static auto* p = new std::vector<Description*>;  // descriptions are never freed (type-stable)
  return *p;
}

Description* new_description() {
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (!pool().empty()) {
      Description* d = pool().back();
      pool().pop_back();
      return d;
    }
  }
  return new Description;
}

// Drops a reference; the last one releases the inode. Returns the close's error (errno) when
// this was the inode's last description.
int release(Description* d) noexcept {
  if (d->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return 0;
  Inode* ino = std::exchange(d->inode, nullptr);
  const int err = ino ? inode_release_open(ino) : 0;
  std::lock_guard<std::mutex> lock(g_pool_mu);
  try {
    pool().push_back(d);
  } catch (...) {
    // Leaked rather than freed: a stale lookup may still touch its counter.
  }
  return err;
}
std::atomic<Chunk*> g_top[1u << kTopBits] = {};  // zero-initialised: untouched pages cost nothing
// One past the highest index of g_top that has (or is getting) a chunk: the scans (at exit, exec
// and fork) read only that far, so that a process touches none of the table's 512 KiB but the
// pages it uses (a scan of it all was 128 page faults, twice in a short process).
std::atomic<int> g_top_used{0};

std::atomic<Description*>* slot_of(int fd, bool make) {
  if (fd < 0 || fd >= kMaxFd) return nullptr;
  std::atomic<Chunk*>& top = g_top[fd >> kChunkBits];
  Chunk* c = top.load(std::memory_order_acquire);
  if (!c) {
    if (!make) return nullptr;
    auto* fresh = new (std::nothrow) Chunk;
    if (!fresh) return nullptr;
    // Raised before the chunk is published (release; the scans' acquire load pairs with it): a
    // scan made after a descriptor of the chunk was installed reads this far.
    const int index = fd >> kChunkBits;
    int used = g_top_used.load(std::memory_order_relaxed);
    while (used <= index && !g_top_used.compare_exchange_weak(used, index + 1, std::memory_order_release,
                                                               std::memory_order_relaxed)) {
    }
    if (top.compare_exchange_strong(c, fresh, std::memory_order_acq_rel, std::memory_order_acquire)) {
      c = fresh;
    } else {
      delete fresh;  // another thread made it; c holds theirs
    }
  }
  return &c->slot[fd & ((1 << kChunkBits) - 1)];
}

// A reference to fd's description, or nullptr when fd is not routed.
Description* acquire(int fd) noexcept {
  std::atomic<Description*>* s = slot_of(fd, false);
  if (!s) return nullptr;
  for (;;) {
    Description* d = s->load(std::memory_order_acquire);
    if (!d) return nullptr;
    long r = d->refs.load(std::memory_order_relaxed);
    bool got = false;
    while (r > 0) {
      if (d->refs.compare_exchange_weak(r, r + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
        got = true;
        break;
      }
    }
    if (got) {
      if (s->load(std::memory_order_acquire) == d) return d;
      release(d);
    }
    // Released or recycled meanwhile: look again.
  }
}

// Puts `d` (one reference, the slot's) at fd. A description left there by a descriptor the
// program closed behind the layer's back (::close) is stale: it is released.
void install(int fd, Description* d) {
  std::atomic<Description*>* s = slot_of(fd, true);
  Description* old = s->exchange(d, std::memory_order_acq_rel);
  if (old) {
    logf("fd %d was closed behind the layer's back; its old state is dropped", fd);
    release(old);
  }
}

}  // namespace tai::posix::detail
