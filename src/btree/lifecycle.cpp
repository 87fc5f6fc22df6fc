// A tree's life and its nodes: construction (the shape's arrays, the direct-I/O alignment, the
// file's size), destruction, the child tables, blocks and the counters that follow them up the
// tree, the logical size, node collection, and the introspection (stats, check_invariants).
#include "src/btree/tree_core.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <stdexcept>
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

namespace {
// The compile-time checks of BTree<Bits...>, again for a shape given at run time: the descent
// relies on them (a node at the last level covers its block exactly, the root covers 2^64).
unsigned checked_levels(unsigned levels, const unsigned* bits) {
  if (levels == 0 || levels > 64 || bits == nullptr) throw std::invalid_argument("tai::BTree: 1 to 64 levels");
  unsigned sum = 0;
  for (unsigned d = 0; d < levels; ++d) {
    if (bits[d] == 0 || bits[d] > 64) throw std::invalid_argument("tai::BTree: every level consumes 1 to 64 bits");
    sum += bits[d];
  }
  if (sum != 64) throw std::invalid_argument("tai::BTree: the levels must sum to 64 bits");
  return levels;
}
}  // namespace

TreeCore::TreeCore(unsigned levels, const unsigned* bits, EngineFile* file, Quota& quota, const BTreeOptions& options)
    : levels_(checked_levels(levels, bits)), file_(file), quota_(quota), options_(options), id_(next_tree_id()) {
  for (unsigned d = levels_, acc = 0; d-- > 0;) {
    bits_[d] = bits[d];
    acc += bits[d];
    shift_[d] = acc;
  }
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
  root_bottom_uncacheable_ = bottom(*root_) && !cacheable(0);
  if (!direct_) {
    if (root_bottom_uncacheable_)
      caller_write_min_ = 1;
    else if (!bottom(*root_) && options_.write_around_bytes != 0)
      caller_write_min_ = options_.write_around_bytes;
  }
  count(counters_.nodes);
  count(node_bytes_, sizeof(Node));
}

TreeCore::~TreeCore() {
  assert(idle() && "a tai::BTree destroyed with operations in flight");
  delete_subtree(root_);  // dirty data still cached is discarded: write back before destroying
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
