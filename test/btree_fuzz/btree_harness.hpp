// The model-based harness of tai::BTree, shared by test/btree_model_test.cpp (random operations
// from a seeded generator) and the libFuzzer target in this directory (operations decoded from
// the fuzzer's bytes), so that a corpus file replays exactly what the fuzzer saw.
//
// It runs random reads, writes, whole-node overwrites and reads, write-backs, drops, fsyncs and
// quota recycling against one tree, in batches (several operations in flight at once), through a
// SequentialDriver that can defer engine requests and complete them in random order. Every read
// is checked against a byte-map model of the file taken when the read was submitted; after the
// run a final fsync must leave nothing dirty, and the backing file must equal the model.
//
// Backends:
//  * memory: an in-memory file with the full 2^64 address space (an IoExecutor, no engine), so
//    offsets within 64 KiB of 2^64 are exercised end to end (the engine layer rejects ends past
//    2^63 - 1 with -EOVERFLOW, see tai/btree.hpp);
//  * null: the null engine (stores nothing: a read may only see the model's byte or a zero, and
//    there is no file to compare at the end);
//  * posix / posix_direct: the posix engine on a real file in a ScratchDir, buffered or O_DIRECT.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "engines/null/null_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "src/btree/tree_core.hpp"  // Step::run, for the test runners below
#include "support/test_env.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"
#include "tai/quota.hpp"

namespace tai::test::btree {

constexpr std::uint64_t kTop = ~std::uint64_t{0};  // last byte of the address space

/// Bytes of a sparse 2^64 address space (absent pages read as zeros). Not thread-safe.
class SparseBytes {
 public:
  static constexpr std::uint64_t kPage = 4096;
  using Page = std::array<std::uint8_t, kPage>;

  void read(std::uint64_t off, std::uint64_t len, std::uint8_t* out) const {
    while (len > 0) {
      const std::uint64_t in = off % kPage, n = std::min(len, kPage - in);
      auto it = pages_.find(off / kPage);
      if (it == pages_.end()) {
        std::memset(out, 0, n);
      } else {
        std::memcpy(out, it->second->data() + in, n);
      }
      out += n;
      len -= n;
      off += n;  // may wrap to 0 exactly when len reaches 0
    }
  }
  void write(std::uint64_t off, std::uint64_t len, const std::uint8_t* in) {
    while (len > 0) {
      const std::uint64_t at = off % kPage, n = std::min(len, kPage - at);
      auto& page = pages_[off / kPage];
      if (!page) {
        page = std::make_unique<Page>();
        page->fill(0);
      }
      std::memcpy(page->data() + at, in, n);
      in += n;
      len -= n;
      off += n;
    }
  }
  template <class Fn>
  void for_each_page(Fn&& fn) const {
    for (auto& [index, page] : pages_) fn(index * kPage, *page);
  }
  bool has_page(std::uint64_t index) const { return pages_.count(index) != 0; }

 private:
  std::unordered_map<std::uint64_t, std::unique_ptr<Page>> pages_;
};

/// A file's bytes and size (the size may reach 2^64: `top`).
struct FileImage {
  SparseBytes bytes;
  std::uint64_t end = 0;
  bool top = false;

  void write(std::uint64_t off, std::uint64_t len, const std::uint8_t* data) {
    bytes.write(off, len, data);
    const std::uint64_t last = off + (len - 1);
    if (last == kTop) {
      top = true;
    } else {
      end = std::max(end, last + 1);
    }
  }
  /// Bytes a read of [off, off+len) returns (pread semantics: stops at the end).
  std::uint64_t readable(std::uint64_t off, std::uint64_t len) const {
    if (top) return len;
    if (off >= end) return 0;
    return std::min(len, end - off);
  }
};

/// An in-memory file with the whole 2^64 address space, serving the tree's requests directly
/// (Request::file is ignored). Thread-safe. Can fail writes on demand.
class MemoryFile final : public IoExecutor {
 public:
  Completion execute(const Request& r) override {
    std::lock_guard<std::mutex> g(mu_);
    ++requests_;
    switch (r.op) {
      case Op::read: {
        const std::uint64_t n = image_.readable(r.offset, r.length);
        image_.bytes.read(r.offset, n, static_cast<std::uint8_t*>(r.buffer));
        return {r.user_data, static_cast<std::int64_t>(n)};
      }
      case Op::write:
        if (fail_writes_ != 0) return {r.user_data, fail_writes_};
        if (r.iov_count != 0) {
          // A vectored write (the tree's gathered write-back): the bytes of its segments.
          ++vectored_;
          std::vector<std::uint8_t> bytes(r.length);
          copy_request_bytes(r, bytes.data());
          if (r.length > 0) image_.write(r.offset, r.length, bytes.data());
        } else if (r.length > 0) {
          image_.write(r.offset, r.length, static_cast<const std::uint8_t*>(r.buffer));
        }
        bytes_written_ += r.length;
        return {r.user_data, static_cast<std::int64_t>(r.length)};
      case Op::fsync:
      case Op::fdatasync:
        ++syncs_;
        return {r.user_data, fail_syncs_};
    }
    return {r.user_data, -EINVAL};
  }
  const FileImage& image() const { return image_; }
  void fail_writes(std::int64_t err) { fail_writes_ = err; }
  void fail_syncs(std::int64_t err) { fail_syncs_ = err; }
  std::uint64_t bytes_written() const { return bytes_written_; }
  std::uint64_t requests() const { return requests_; }
  std::uint64_t syncs() const { return syncs_; }
  /// Vectored writes (Request::iov) served.
  std::uint64_t vectored() const { return vectored_; }

 private:
  std::mutex mu_;
  FileImage image_;
  std::int64_t fail_writes_ = 0;
  std::int64_t fail_syncs_ = 0;
  std::uint64_t bytes_written_ = 0;
  std::uint64_t requests_ = 0;
  std::uint64_t syncs_ = 0;
  std::uint64_t vectored_ = 0;
};

/// Passes requests on to another executor and logs them (for tests that check what reached
/// the engine, and in which order). Thread-safe if the inner executor is.
class RecordingExecutor final : public IoExecutor {
 public:
  explicit RecordingExecutor(IoExecutor& inner) : inner_(inner) {}
  Completion execute(const Request& r) override {
    Completion c = inner_.execute(r);
    std::lock_guard<std::mutex> g(mu_);
    log_.push_back({r.op, r.offset, r.length, c.result});
    return c;
  }
  struct Entry {
    Op op;
    std::uint64_t offset, length;
    std::int64_t result;
  };
  std::vector<Entry> log() const {
    std::lock_guard<std::mutex> g(mu_);
    return log_;
  }
  void clear() {
    std::lock_guard<std::mutex> g(mu_);
    log_.clear();
  }

 private:
  IoExecutor& inner_;
  mutable std::mutex mu_;
  std::vector<Entry> log_;
};

/// A runner whose engine requests wait until the test completes them, in the order it chooses:
/// for ordering tests. Steps run FIFO. Not thread-safe.
class ManualDriver final : public StepSink {
 public:
  explicit ManualDriver(IoExecutor& executor) : executor_(executor) {}
  void emit(const Step& s) override { steps_.push_back(s); }
  void io(const Request& r, const Step& c) override { io_.emplace_back(r, c); }
  void start(detail::TreeHandle& tree, Operation& op) { tree.start(op, *this); }
  /// Runs queued steps until none is left (requests stay pending).
  void run_steps() {
    while (!steps_.empty()) {
      const Step s = steps_.front();
      steps_.pop_front();
      s.run(*this);
    }
  }
  std::size_t pending_io() const { return io_.size(); }
  const Request& request(std::size_t i) const { return io_[i].first; }
  /// Carries out pending request i now and queues its continuation.
  void complete(std::size_t i) {
    auto item = io_[i];
    io_.erase(io_.begin() + static_cast<std::ptrdiff_t>(i));
    item.second.io_result = executor_.execute(item.first).result;
    steps_.push_back(item.second);
  }
  /// Runs everything, completing requests oldest first.
  void run_all() {
    for (;;) {
      run_steps();
      if (io_.empty()) return;
      complete(0);
    }
  }

 private:
  IoExecutor& executor_;
  std::deque<Step> steps_;
  std::vector<std::pair<Request, Step>> io_;
};

/// Runs one operation to completion on a driver and returns its result.
inline std::int64_t run_op(SequentialDriver& driver, detail::TreeHandle& tree, TreeOp kind, std::uint64_t offset,
                           std::uint64_t length, void* buffer = nullptr) {
  Operation op(kind, offset, length, buffer);
  driver.run_one(tree, op);
  return op.done() ? op.result() : std::numeric_limits<std::int64_t>::min();
}

/// A tree over an in-memory file, run by a SequentialDriver whose engine requests are logged:
/// the setting of most single-behaviour tree tests. `options.file_size` defaults to 0 (an empty
/// file); the quota's weak and strict limits are both `strict_bytes`.
template <class Tree = BTreeDefault>
struct TreeOnMemory {
  explicit TreeOnMemory(BTreeOptions options = empty_file(), std::uint64_t strict_bytes = Quota::kUnlimited,
                        SequentialDriver::Options driver_options = {})
      : quota(strict_bytes, strict_bytes), tree(std::make_unique<Tree>(nullptr, quota, options)) {
    driver_options.executor = &rec;
    driver = std::make_unique<SequentialDriver>(driver_options);
  }
  // Every write cached (write-around off): these trees test what the cache does with writes.
  static BTreeOptions empty_file() {
    BTreeOptions o;
    o.file_size = 0;
    o.write_around_bytes = 0;
    return o;
  }
  std::int64_t op(TreeOp kind, std::uint64_t offset, std::uint64_t length, void* buffer = nullptr) {
    return run_op(*driver, *tree, kind, offset, length, buffer);
  }
  MemoryFile mem;
  RecordingExecutor rec{mem};
  Quota quota;
  std::unique_ptr<Tree> tree;
  std::unique_ptr<SequentialDriver> driver;
};

enum class Backend { memory, null, posix, posix_direct };
inline const char* to_string(Backend b) {
  switch (b) {
    case Backend::memory: return "memory";
    case Backend::null: return "null";
    case Backend::posix: return "posix";
    case Backend::posix_direct: return "posix_direct";
  }
  return "?";
}

struct Config {
  Backend backend = Backend::memory;
  std::uint64_t strict = Quota::kUnlimited;
  std::uint64_t weak = Quota::kUnlimited;
  bool defer_io = true;
  std::uint64_t min_block = 512;
  std::uint64_t max_block = std::uint64_t{2} << 20;
  bool tiny_write_rule = true;
  std::uint64_t request_cost = std::uint64_t{16} << 10;  // BTreeOptions::request_cost_bytes
  std::uint64_t write_around = 0;  // BTreeOptions::write_around_bytes (0: every write cached)
  std::uint64_t operations = 10000;
  std::uint64_t seed = 1;
  std::string scratch;  // directory for posix backends
};

/// Where decisions come from: a seeded generator, or the fuzzer's bytes.
class Source {
 public:
  virtual ~Source() = default;
  virtual std::uint64_t next() = 0;
  virtual bool exhausted() const = 0;
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
  bool chance(unsigned percent) { return below(100) < percent; }
};

class RandomSource final : public Source {
 public:
  explicit RandomSource(std::uint64_t seed) : rng_(seed) {}
  std::uint64_t next() override { return rng_(); }
  bool exhausted() const override { return false; }

 private:
  std::mt19937_64 rng_;
};

class BytesSource final : public Source {
 public:
  BytesSource(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint64_t next() override {
    std::uint64_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | (pos_ < size_ ? data_[pos_++] : 0);
    return v;
  }
  bool exhausted() const override { return pos_ >= size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

template <class Tree>
class Harness {
 public:
  Harness(const Config& config, Source& source) : cfg_(config), src_(source), quota_(config.weak, config.strict) {}

  /// Runs the configured number of operations (or until the source is exhausted); returns ""
  /// or a description of the first mismatch.
  std::string run() {
    if (std::string e = open(); !e.empty()) return e;
    std::string err = body();
    if (tree_) final_stats_ = tree_->stats();
    if (err.empty()) err = finish();
    close();
    if (!err.empty()) {
      std::ostringstream o;
      o << "[backend " << to_string(cfg_.backend) << ", strict " << cfg_.strict << ", weak " << cfg_.weak
        << ", defer " << cfg_.defer_io << ", min_block " << cfg_.min_block << ", request_cost " << cfg_.request_cost
        << ", seed " << cfg_.seed << ", op #"
        << op_index_ << "] " << err;
      return o.str();
    }
    return err;
  }

  std::uint64_t operations_run() const { return op_index_; }
  /// The tree's counters at the end of run() (for coverage checks).
  const BTreeStats& final_stats() const { return final_stats_; }

 private:
  struct Pending {
    std::unique_ptr<Operation> op;
    std::vector<std::uint8_t> data;      // write source / read destination
    std::vector<std::uint8_t> expected;  // read: the model's bytes at submission
    std::uint64_t expected_result = 0;
    std::uint64_t index = 0;
  };

  bool engine_backend() const { return cfg_.backend != Backend::memory; }
  bool stores_data() const { return cfg_.backend != Backend::null; }
  // Highest byte the generator may touch: the engine layer stops at 2^63 - 1; keep files sparse
  // but modest on a real file system (ext4 allows 16 TiB).
  std::uint64_t address_limit() const {
    switch (cfg_.backend) {
      case Backend::memory: return kTop;
      case Backend::null: return (std::uint64_t{1} << 62) - 1;
      default: return (std::uint64_t{1} << 42) - 1;
    }
  }

  std::string open() {
    BTreeOptions options;
    options.min_block_bytes = cfg_.min_block;
    options.max_block_bytes = cfg_.max_block;
    options.tiny_write_rule = cfg_.tiny_write_rule;
    options.request_cost_bytes = cfg_.request_cost;
    options.write_around_bytes = cfg_.write_around;
    EngineFile* file = nullptr;
    SequentialDriver::Options dopt;
    dopt.defer_io = cfg_.defer_io;
    dopt.seed = cfg_.seed ^ 0x5eed;
    switch (cfg_.backend) {
      case Backend::memory:
        options.file_size = 0;
        dopt.executor = &memory_;
        break;
      case Backend::null:
        engine_ = engines::make_null({});
        break;
      case Backend::posix:
      case Backend::posix_direct:
        engine_ = engines::make_posix({});
        path_ = cfg_.scratch + "/model.bin";
        break;
    }
    if (engine_) {
      Open flags = Open::read | Open::write | Open::create | Open::truncate;
      if (cfg_.backend == Backend::posix_direct) flags = flags | Open::direct;
      auto f = engine_->open(path_.empty() ? std::string("null") : path_, OpenMode(flags));
      if (!f) return "open: " + f.error().message;
      file_ = std::move(f.value());
      file = file_.get();
    }
    tree_ = std::make_unique<Tree>(file, quota_, options);
    driver_ = std::make_unique<SequentialDriver>(dopt);
    return "";
  }

  void close() {
    tree_.reset();
    if (file_) (void)engine_->close(*file_);
    file_.reset();
    engine_.reset();
  }

  // --- generation -------------------------------------------------------------------------
  std::uint64_t node_size(unsigned depth) const {
    const unsigned s = Tree::kShift[depth];
    return s >= 64 ? 0 : std::uint64_t{1} << s;  // 0 stands for 2^64
  }

  std::uint64_t pick_length() {
    switch (src_.below(8)) {
      case 0: return 1 + src_.below(16);
      case 1: case 2: return 1 + src_.below(512);
      case 3: case 4: return 1 + src_.below(4096);
      case 5: return 4096;
      case 6: return 1 + src_.below(16384);
      default: return 1 + src_.below(65536);
    }
  }

  // An offset near a node boundary of a random level (or near 2^64), so that requests cross
  // boundaries of every level; a few hot boundaries keep reads hitting earlier writes.
  std::uint64_t pick_offset(std::uint64_t len) {
    const std::uint64_t limit = address_limit();
    if (limit == kTop && src_.chance(15)) {  // the top 64 KiB of the address space
      const std::uint64_t back = len + src_.below(65536 - std::min<std::uint64_t>(len, 65536) + 1);
      return kTop - back + 1;
    }
    std::uint64_t boundary = 0;
    const unsigned depth = 1 + static_cast<unsigned>(src_.below(std::max(1u, Tree::kLevels - 1)));
    if (depth < Tree::kLevels) {
      const std::uint64_t size = node_size(depth);
      const std::uint64_t k = src_.below(4);
      if (size != 0 && k <= (limit - 2 * 65536) / size) boundary = k * size;
    }
    std::uint64_t off;
    if (src_.chance(50) && boundary >= len) {
      off = boundary - len + 1 + src_.below(2 * len);  // crosses (or touches) the boundary
    } else {
      off = boundary + src_.below(3 * 65536);
    }
    if (off > limit || len - 1 > limit - off) off = limit - len + 1;
    return off;
  }

  void fill_pattern(std::vector<std::uint8_t>& v) {
    // Eight bytes per xorshift step; a fresh seed per write so that stale data cannot pass.
    std::uint64_t x = src_.next() | 1;
    std::size_t i = 0;
    for (; i + 8 <= v.size(); i += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::memcpy(v.data() + i, &x, 8);
    }
    for (; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>(x >> (8 * (i % 8)));
  }

  // --- operations -------------------------------------------------------------------------
  Pending& add(TreeOp kind, std::uint64_t off, std::uint64_t len) {
    batch_.emplace_back();
    Pending& p = batch_.back();
    p.op = std::make_unique<Operation>();
    p.op->kind = kind;
    p.op->offset = off;
    p.op->length = len;
    p.index = op_index_;
    return p;
  }

  void submit_write(std::uint64_t off, std::uint64_t len) {
    Pending& p = add(TreeOp::write, off, len);
    p.data.resize(len);
    fill_pattern(p.data);
    p.op->buffer = reinterpret_cast<std::byte*>(p.data.data());
    p.expected_result = len;
    model_.write(off, len, p.data.data());
    driver_->start(*tree_, *p.op);
  }

  void submit_read(std::uint64_t off, std::uint64_t len) {
    Pending& p = add(TreeOp::read, off, len);
    p.data.assign(len, 0xA5);
    p.op->buffer = reinterpret_cast<std::byte*>(p.data.data());
    p.expected_result = cfg_.backend == Backend::null ? len : model_.readable(off, len);
    p.expected.resize(p.expected_result);
    model_.bytes.read(off, p.expected_result, p.expected.data());
    driver_->start(*tree_, *p.op);
  }

  void submit_plain(TreeOp kind, std::uint64_t off, std::uint64_t len) {
    Pending& p = add(kind, off, len);
    driver_->start(*tree_, *p.op);
  }

  std::string check_batch() {
    for (Pending& p : batch_) {
      const Operation& op = *p.op;
      if (!op.done()) return describe(p, "not done after the driver ran dry");
      if (op.result() < 0) return describe(p, "failed: " + op.error().message());
      if (static_cast<std::uint64_t>(op.result()) != p.expected_result)
        return describe(p, "result " + std::to_string(op.result()) + ", expected " + std::to_string(p.expected_result));
      if (op.kind != TreeOp::read) continue;
      if (p.expected_result == 0 || std::memcmp(p.data.data(), p.expected.data(), p.expected_result) == 0) continue;
      for (std::uint64_t i = 0; i < p.expected_result; ++i) {
        const std::uint8_t got = p.data[i], want = p.expected[i];
        if (got == want || (!stores_data() && got == 0)) continue;
        return describe(p, "byte " + std::to_string(i) + " (address " + std::to_string(op.offset + i) + ") is " +
                               std::to_string(got) + ", model says " + std::to_string(want));
      }
    }
    batch_.clear();
    return "";
  }

  std::string describe(const Pending& p, const std::string& what) const {
    std::ostringstream o;
    o << to_string(p.op->kind) << " #" << p.index << " [" << p.op->offset << ", +" << p.op->length << ") " << what;
    return o.str();
  }

  std::string check_idle() {
    if (!tree_->idle()) return "tree not idle after the driver ran dry";
    if (std::string e = tree_->check_invariants(); !e.empty()) return "invariant: " + e;
    const BTreeStats st = tree_->stats();
    if (quota_.used() != st.cached_bytes)
      return "quota used " + std::to_string(quota_.used()) + " != cached bytes " + std::to_string(st.cached_bytes);
    if (quota_.peak() > cfg_.strict) return "quota peak " + std::to_string(quota_.peak()) + " above the strict limit";
    return "";
  }

  // Evicts the oldest blocks until the quota is under its weak limit (what recycle rounds do).
  void recycle() {
    BlockRecord r;
    int budget = 64;
    while (quota_.over_weak() && budget-- > 0 && quota_.pop_oldest(r)) {
      if (r.tree_id != tree_->id()) continue;
      Pending& p = add(TreeOp::evict, r.base, 0);
      p.op->evict_seq = r.seq;
      p.op->evict_depth = r.depth;
      driver_->start(*tree_, *p.op);
    }
  }

  std::string body() {
    const std::uint64_t limit = address_limit();
    while (op_index_ < cfg_.operations && !src_.exhausted()) {
      const std::uint64_t batch = 1 + src_.below(4);
      for (std::uint64_t b = 0; b < batch && op_index_ < cfg_.operations; ++b, ++op_index_) {
        const std::uint64_t what = src_.below(100);
        if (what < 32) {
          const std::uint64_t len = pick_length();
          submit_write(pick_offset(len), len);
        } else if (what < 40) {
          // Tiny writes scattered inside a few blocks: several dirty ranges per block, the
          // tiny-write rule and bridging.
          const std::uint64_t len = 1 + src_.below(16);
          if (scatter_bases_.empty())
            for (int i = 0; i < 4; ++i) scatter_bases_.push_back(pick_offset(65536) & ~std::uint64_t{4095});
          const std::uint64_t base = scatter_bases_[src_.below(scatter_bases_.size())];
          submit_write(std::min(base + src_.below(src_.chance(50) ? 4096 : 65536), limit - len + 1), len);
        } else if (what < 75) {
          const std::uint64_t len = pick_length();
          submit_read(pick_offset(len), len);
        } else if (what < 80) {
          // A whole node of a level that may hold a block (<= 2 MiB): overwriting one with
          // children drops them. Nodes above 64 KiB cost megabytes of copying: keep them rare.
          std::vector<std::uint64_t> sizes;
          for (unsigned d = 1; d < Tree::kLevels; ++d) {
            const std::uint64_t sz = node_size(d);
            if (sz != 0 && sz <= (std::uint64_t{2} << 20) && (sz <= 65536 || src_.chance(8))) sizes.push_back(sz);
          }
          std::uint64_t size = sizes.empty() ? 4096u << src_.below(5) : sizes[src_.below(sizes.size())];
          const std::uint64_t k = src_.below(4);
          std::uint64_t off = k <= (limit - size) / size ? k * size : 0;
          if (limit == kTop && src_.chance(20)) off = kTop - size + 1;  // the last node of its level
          if (src_.chance(70)) {
            submit_write(off, size);
          } else {
            submit_read(off, size);
          }
        } else if (what < 85) {
          const std::uint64_t len = 1 + src_.below(4 << 20);
          submit_plain(TreeOp::write_back, pick_offset(std::min(len, limit)), len);
        } else if (what < 90) {
          const std::uint64_t len = 1 + src_.below(4 << 20);
          submit_plain(TreeOp::drop, pick_offset(std::min(len, limit)), len);
        } else if (what < 93) {
          // A real file pays milliseconds for the engine's sync: there most of these are
          // write-backs of everything (the same tree work without the engine sync).
          if (engine_backend() && cfg_.backend != Backend::null && !src_.chance(5)) {
            submit_plain(TreeOp::write_back, 0, 0);
          } else {
            submit_plain(src_.chance(50) ? TreeOp::fsync : TreeOp::fdatasync, 0, 0);
          }
        } else {
          recycle();
        }
      }
      driver_->run();
      if (std::string e = check_batch(); !e.empty()) return e;
      if (++batches_ % 256 == 0 || src_.exhausted()) {
        if (std::string e = check_idle(); !e.empty()) return e;
      }
    }
    return check_idle();
  }

  std::string finish() {
    submit_plain(TreeOp::fsync, 0, 0);
    driver_->run();
    if (std::string e = check_batch(); !e.empty()) return "final fsync: " + e;
    if (std::string e = check_idle(); !e.empty()) return "after the final fsync: " + e;
    const BTreeStats st = tree_->stats();
    if (st.dirty_bytes != 0 || st.dirty_blocks != 0) return "dirty data left after the final fsync";
    // Drop everything: the cache must give all its memory back.
    submit_plain(TreeOp::drop, 0, 0);
    driver_->run();
    if (std::string e = check_batch(); !e.empty()) return "final drop: " + e;
    if (tree_->stats().cached_bytes != 0 || quota_.used() != 0) return "cache not empty after dropping everything";
    return compare_file();
  }

  BTreeStats final_stats_;

  std::string compare_file() {
    if (cfg_.backend == Backend::null) return "";
    if (cfg_.backend == Backend::memory) {
      const FileImage& img = memory_.image();
      if (img.top != model_.top || (!img.top && img.end != model_.end))
        return "file size " + std::to_string(img.end) + " != model " + std::to_string(model_.end);
      std::string err;
      auto cmp = [&](const SparseBytes& a, const SparseBytes& b, const char* which) {
        a.for_each_page([&](std::uint64_t at, const SparseBytes::Page& page) {
          if (!err.empty()) return;
          SparseBytes::Page other;
          b.read(at, SparseBytes::kPage, other.data());
          if (std::memcmp(page.data(), other.data(), SparseBytes::kPage) != 0)
            err = std::string("file and model differ in the page at ") + std::to_string(at) + " (" + which + ")";
        });
      };
      cmp(model_.bytes, img.bytes, "model page");
      if (err.empty()) cmp(img.bytes, model_.bytes, "file page");
      return err;
    }
    // posix: read the real file through a separate descriptor.
    const int fd = ::open(path_.c_str(), O_RDONLY);
    if (fd < 0) return "cannot reopen " + path_;
    const off_t size = ::lseek(fd, 0, SEEK_END);
    std::string err;
    if (static_cast<std::uint64_t>(size) != model_.end)
      err = "file size " + std::to_string(size) + " != model " + std::to_string(model_.end);
    model_.bytes.for_each_page([&](std::uint64_t at, const SparseBytes::Page& page) {
      if (!err.empty() || at >= model_.end) return;
      SparseBytes::Page got{};
      const std::uint64_t n = std::min<std::uint64_t>(SparseBytes::kPage, model_.end - at);
      if (::pread(fd, got.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n) ||
          std::memcmp(got.data(), page.data(), n) != 0)
        err = "file and model differ in the page at " + std::to_string(at);
    });
    ::close(fd);
    return err;
  }

  Config cfg_;
  Source& src_;
  Quota quota_;
  MemoryFile memory_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineFile> file_;
  std::string path_;
  std::unique_ptr<Tree> tree_;
  std::unique_ptr<SequentialDriver> driver_;
  FileImage model_;
  std::vector<Pending> batch_;
  std::uint64_t op_index_ = 0;
  std::uint64_t batches_ = 0;
  std::vector<std::uint64_t> scatter_bases_;  // blocks that collect tiny scattered writes
};

/// Runs one configuration for a tree chosen by index (0 Default, 1 Trivial, 2 Binary).
/// `stats`, when given, receives the tree's counters as they were before the final fsync.
inline std::string run_model(unsigned tree, const Config& config, Source& source, BTreeStats* stats = nullptr) {
  auto go = [&](auto&& harness) {
    std::string err = harness.run();
    if (stats) *stats = harness.final_stats();
    return err;
  };
  switch (tree % 3) {
    case 0: return go(Harness<BTreeDefault>(config, source));
    case 1: return go(Harness<BTreeTrivial>(config, source));
    default: return go(Harness<BTreeBinary>(config, source));
  }
}

/// The fuzzer's entry: the first bytes choose the configuration (memory backend: fast and the
/// whole address space), the rest drive the operations.
inline std::string run_fuzz_input(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return "";
  Config c;
  c.backend = Backend::memory;
  const unsigned tree = data[0] % 3;
  static constexpr std::uint64_t kQuotas[] = {0, 4096, 8192, 65536, std::uint64_t{1} << 20, Quota::kUnlimited};
  c.strict = kQuotas[data[1] % 6];
  c.weak = (data[1] & 0x80) != 0 ? c.strict / 2 : c.strict;
  c.defer_io = (data[2] & 1) != 0;
  c.tiny_write_rule = (data[2] & 2) == 0;
  c.min_block = (data[2] & 4) != 0 ? 1 : 512;
  c.max_block = (data[2] & 8) != 0 ? 65536 : std::uint64_t{2} << 20;
  c.request_cost = (data[2] & 16) != 0 ? 64 : std::uint64_t{16} << 10;
  c.write_around = (data[2] & 32) != 0 ? 4096 : 0;
  c.seed = data[3];
  c.operations = 1000;
  BytesSource src(data + 4, size - 4);
  return run_model(tree, c, src);
}

}  // namespace tai::test::btree
