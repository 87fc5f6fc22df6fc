// The controller fuzz harness: a bounded operation sequence decoded from the fuzzer's bytes, run
// by one or two submitting threads through a real tai::Controller and checked against a byte
// model.
// Shared by the libFuzzer target (fuzz_target.cpp, clang only) and the corpus replay
// (replay_main.cpp, any compiler, a ctest), so that a corpus file replays exactly what the
// fuzzer saw.
//
// Input layout: byte 0 picks the engine and the number of submitting threads (lanes), byte 1 the
// tree and the quota, byte 2 the controller's and the tree's options, byte 3 the receipt window;
// the rest is the operation list (one opcode byte, then the operation's parameter bytes; a
// missing byte reads as 0). At most kMaxOps operations run per lane, so an input costs
// milliseconds.
//
// Lanes: with two, the operation list is cut in half, the first half for lane 0 (files 0 and 2)
// and the second for lane 1 (file 1), each submitted from its own thread at once; so each lane's
// sequence and its model are deterministic per input, and only how the two interleave in the
// controller (its workers, its quota, its rounds, flushes) is left to the scheduler. With one
// lane the whole list is lane 0's and it has all three files.
//
// Engines:
//  * memory: MemoryEngine below, a synchronous test engine over an in-memory sparse disk (the
//    project has no in-memory engine: crashsim and recording wrap a real one). Reads, fsync
//    checks, close checks and the final comparison look at what the engine holds;
//  * posix: the posix engine on files in a scratch directory (one per input, under /dev/shm
//    when there is one, where fsync costs nothing; else $TAI_TEST_DIR or /var/tmp); the checks
//    read the file with plain pread; the directory is removed after each input;
//  * null: stores nothing, so a read may see the model's byte or a zero, and there is no
//    content to compare; what is checked is that every receipt completes as the contract says;
//  * uring: the uring engine on files as for posix, when the kernel lets this process make a
//    ring (probed once); where it does not, these inputs run on posix and say so;
//  * fault: the fault engine over posix, failing about one request in 25 (any kind) with EIO and
//    one write in 50 with ENOSPC, drawn from a seed the settings bytes give. A receipt may then
//    fail, but only with one of those errnos and only once a fault was injected; from the first
//    failed receipt on, no byte, size or engine check is made (a failed write-back may surface
//    on another file's receipt), only that every receipt finishes, refused requests stay
//    refused, hooks keep their order, and the shutdown completes.
//
// The model (per file): the bytes of three windows of the address space, the logical size (the
// largest end written since the last truncating open) and whether the handle is open. Writes
// stay inside the windows: [0, 64 KiB) (4 KiB block edges), 2 MiB +- 16 KiB and 1 GiB +- 16 KiB
// (BTreeDefault's node edges), so the files stay sparse and a full comparison stays cheap.
//
// Checks:
//  * every write, read, fsync, fdatasync, barrier, hook, flush and close receipt finishes (at
//    most 30 s) and succeeds, with the byte count asked for;
//  * a read returns exactly the model's bytes as of its submission (every earlier write, no
//    later one) and stops short only past the logical end (null: the model's byte or a zero);
//  * a hook runs after every earlier operation of its handle has finished;
//  * an fsync/fdatasync/close that the input waits for at once: afterwards the engine holds
//    exactly the model's bytes (memory: its store; posix: plain pread);
//  * operations on a closed handle and requests whose end passes 2^64 or that give no buffer
//    are refused on the receipt, never applied (the model stays as it was); zero lengths
//    complete with 0 bytes;
//  * when nothing is in flight, File::status().size equals the model's logical size;
//  * at the end every file is closed, the shutdown report is empty and every file holds
//    exactly the model's windows and size.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engines/fault/fault_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "support/test_env.hpp"
#include "tai/controller.hpp"
#include "tai/engine.hpp"
#include "tai/engine_selector.hpp"

namespace tai::test::controller_fuzz {

// ---------------------------------------------------------------------------------------------
// The in-memory engine

/// Sparse bytes of a 2^63 address space (absent pages read as zeros) and a size. Not
/// thread-safe: MemoryEngine locks around it.
class SparseFile {
 public:
  static constexpr std::uint64_t kPage = 4096;

  void read(std::uint64_t off, std::uint64_t len, std::uint8_t* out) const {
    while (len > 0) {
      const std::uint64_t in = off % kPage, n = std::min(len, kPage - in);
      const auto it = pages_.find(off / kPage);
      if (it == pages_.end()) {
        std::memset(out, 0, n);
      } else {
        std::memcpy(out, it->second.data() + in, n);
      }
      out += n;
      len -= n;
      off += n;
    }
  }
  void write(std::uint64_t off, std::uint64_t len, const std::uint8_t* in) {
    if (len == 0) return;
    size_ = std::max(size_, off + len);
    while (len > 0) {
      const std::uint64_t at = off % kPage, n = std::min(len, kPage - at);
      auto found = pages_.find(off / kPage);
      if (found == pages_.end()) found = pages_.emplace(off / kPage, Page{}).first;  // Page{}: zeros
      std::memcpy(found->second.data() + at, in, n);
      in += n;
      len -= n;
      off += n;
    }
  }
  void truncate_to_zero() {
    pages_.clear();
    size_ = 0;
  }
  std::uint64_t size() const { return size_; }

 private:
  using Page = std::array<std::uint8_t, kPage>;
  std::unordered_map<std::uint64_t, Page> pages_;
  std::uint64_t size_ = 0;
};

/// The in-memory "disk" of a MemoryEngine: files by path. Shared (shared_ptr) between the engine,
/// which the controller owns, and the harness, which compares it with the model.
class MemoryDisk {
 public:
  /// Runs fn(SparseFile*) under the disk's lock; nullptr when `path` does not exist.
  template <class Fn>
  auto with_file(const std::string& path, Fn&& fn) {
    std::lock_guard<std::mutex> g(mu_);
    const auto it = files_.find(path);
    return fn(it == files_.end() ? nullptr : it->second.get());
  }
  /// Opens (creating or truncating as asked) under the lock; false when the file does not exist
  /// and `create` is not set.
  bool open(const std::string& path, bool create, bool truncate) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = files_.find(path);
    if (it == files_.end()) {
      if (!create) return false;
      it = files_.emplace(path, std::make_unique<SparseFile>()).first;
    } else if (truncate) {
      it->second->truncate_to_zero();
    }
    return true;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<SparseFile>> files_;
};

/// A synchronous engine over a MemoryDisk: pread/pwrite semantics (a read stops at the size), a
/// sync is a no-op that succeeds (the store is the stable storage). Thread-safe (the controller's
/// workers may call it at once for different files).
class MemoryEngine final : public SyncEngine {
 public:
  MemoryEngine(std::shared_ptr<MemoryDisk> disk, EngineOptions options)
      : SyncEngine("memory", memory_capabilities(), options), disk_(std::move(disk)) {}

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override {
    if (!disk_->open(path, has(mode.flags, Open::create), has(mode.flags, Open::truncate)))
      return Error::from_errno(ENOENT, "memory engine: open " + path);
    FileCapabilities caps;
    caps.engine = capabilities();
    caps.direct = has(mode.flags, Open::direct);
    caps.dsync = has(mode.flags, Open::dsync);
    return std::unique_ptr<EngineFile>(std::make_unique<MemoryFile>(*this, path, mode, caps, disk_));
  }
  std::error_code do_close(EngineFile&) override { return {}; }
  std::int64_t transfer(const Request& r) override {
    return disk_->with_file(r.file->path(), [&](SparseFile* f) -> std::int64_t {
      if (f == nullptr) return -EBADF;
      switch (r.op) {
        case Op::read: {
          const std::uint64_t n = r.offset >= f->size() ? 0 : std::min(r.length, f->size() - r.offset);
          f->read(r.offset, n, static_cast<std::uint8_t*>(r.buffer));
          return static_cast<std::int64_t>(n);
        }
        case Op::write:
          f->write(r.offset, r.length, static_cast<const std::uint8_t*>(r.buffer));
          return static_cast<std::int64_t>(r.length);
        case Op::fsync:
        case Op::fdatasync:
          return 0;
      }
      return -EINVAL;
    });
  }

 private:
  static Capabilities memory_capabilities() {
    Capabilities c;
    c.asynchronous = false;
    c.direct_io = true;  // no alignment to honour
    c.durable_sync = true;
    c.stores_data = true;
    return c;
  }
  /// A file of the memory engine: no descriptor, so it reports its size itself (the tree takes
  /// the logical size at open from EngineFile::size()).
  class MemoryFile final : public EngineFile {
   public:
    MemoryFile(Engine& e, std::string path, OpenMode mode, FileCapabilities caps, std::shared_ptr<MemoryDisk> disk)
        : EngineFile(e, std::move(path), mode, caps), disk_(std::move(disk)) {}
    std::optional<std::uint64_t> size() const noexcept override {
      return disk_->with_file(path(), [](SparseFile* f) -> std::optional<std::uint64_t> {
        if (f == nullptr) return std::nullopt;
        return f->size();
      });
    }

   private:
    std::shared_ptr<MemoryDisk> disk_;
  };
  std::shared_ptr<MemoryDisk> disk_;
};

// ---------------------------------------------------------------------------------------------
// Input decoding

enum class EngineKind { null, memory, posix, fault, uring };
inline const char* to_string(EngineKind e) {
  switch (e) {
    case EngineKind::null: return "null";
    case EngineKind::memory: return "memory";
    case EngineKind::posix: return "posix";
    case EngineKind::fault: return "fault";
    case EngineKind::uring: return "uring";
  }
  return "?";
}
/// Engines whose files are real files in a scratch directory.
inline bool on_files(EngineKind e) { return e == EngineKind::posix || e == EngineKind::fault || e == EngineKind::uring; }

/// Whether this process can make a uring engine (once; "" when it can, else why not).
inline const std::string& uring_unavailable() {
  static const std::string why = [] {
    auto e = make_engine("uring");
    return e ? std::string() : e.error().message;
  }();
  return why;
}

enum class TreeKind { default_tree, trivial, binary };
inline const char* to_string(TreeKind t) {
  switch (t) {
    case TreeKind::default_tree: return "BTreeDefault";
    case TreeKind::trivial: return "BTreeTrivial";
    case TreeKind::binary: return "BTreeBinary";
  }
  return "?";
}

/// Reads the fuzzer's bytes; past the end every byte is 0 (so a short input is still a full,
/// deterministic one).
class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(byte() | byte() << 8); }
  bool exhausted() const { return pos_ >= size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

constexpr unsigned kFiles = 3;
constexpr unsigned kMaxOps = 64;
constexpr std::uint64_t kBlock = 4096;
constexpr std::uint64_t kMaxLength = 3 * kBlock + 100;  // writes and reads of up to a few blocks

/// The parts of the address space the model covers: writes and reads stay inside them.
struct Window {
  std::uint64_t start, length;
  std::uint64_t end() const { return start + length; }
};
constexpr std::array<Window, 3> kWindows = {{
    {0, 64 << 10},                                           // 16 blocks: block edges, merges
    {(std::uint64_t{2} << 20) - (16 << 10), 32 << 10},       // a 2 MiB node edge
    {(std::uint64_t{1} << 30) - (16 << 10), 32 << 10},       // a 1 GiB node edge
}};

struct Settings {
  EngineKind engine = EngineKind::memory;
  TreeKind tree = TreeKind::default_tree;
  ControllerOptions controller;
  BTreeOptions tree_options;
  unsigned window = 8;  // receipts kept in flight before the oldest is checked
  unsigned lanes = 1;   // submitting threads
  std::uint64_t fault_seed = 0;  // fault: the rules' seed
  std::string describe() const {
    std::ostringstream s;
    s << to_string(engine);
    if (engine == EngineKind::fault) s << " seed=" << fault_seed;
    if (engine == EngineKind::uring && !uring_unavailable().empty()) s << " (unavailable, on posix: " << uring_unavailable() << ")";
    s << " lanes=" << lanes << " " << to_string(tree) << " strict=" << controller.strict_quota
      << " weak=" << controller.weak_quota << " workers=" << controller.workers
      << " depth=" << controller.engine_options.depth << " pending=" << controller.pending_capacity << " spin_ns=" << controller.spin_ns << " flush_idle_ns=" << controller.flush_idle_ns
      << " copy_budget=" << controller.write_copy_budget << " min_block=" << tree_options.min_block_bytes
      << " max_block=" << tree_options.max_block_bytes << " tiny_write_rule=" << tree_options.tiny_write_rule
      << " inline_path=" << tree_options.inline_path << " gather=" << tree_options.gather_bytes
      << " window=" << window;
    return s.str();
  }
};

inline Settings decode_settings(ByteReader& in) {
  Settings s;
  const std::uint8_t engine = in.byte(), tree = in.byte(), options = in.byte(), window = in.byte();
  s.engine = static_cast<EngineKind>((engine & 0x1f) % 5);
  s.lanes = (engine & 0x20) != 0 ? 2 : 1;
  s.fault_seed = std::uint64_t{engine} | std::uint64_t{tree} << 8 | std::uint64_t{options} << 16 | std::uint64_t{window} << 24;
  s.tree = static_cast<TreeKind>(tree % 3);
  // Quotas from none at all to the default: the small ones force eviction, uncached writes and
  // recycle rounds; a weak quota below the strict one starts recycling early.
  static constexpr std::uint64_t kStrict[] = {0, 4096, 16 << 10, 64 << 10, 1 << 20, std::uint64_t{512} << 20};
  s.controller.strict_quota = kStrict[(tree / 3) % 6];
  s.controller.weak_quota = (tree & 0x80) != 0 ? s.controller.strict_quota / 4 : s.controller.strict_quota / 2;
  s.controller.workers = (options & 1) != 0 ? 2 : 1;
  static constexpr unsigned kDepth[] = {256, 1, 2, 8};
  s.controller.engine_options.depth = kDepth[(options >> 1) & 3];
  static constexpr std::int64_t kFlushIdle[] = {2'000'000, -1, 0, 50'000};
  s.controller.flush_idle_ns = kFlushIdle[(options >> 3) & 3];
  // A write-copy budget of 0 admits one write at a time: the submitter waits in File::write.
  s.controller.write_copy_budget = (options & 0x20) != 0 ? ((options & 0x40) != 0 ? 0 : 8192) : std::uint64_t{32} << 20;
  // The smallest Pending queues: a controller costs less to make (the default 16,384 slots per
  // worker took most of an input's time) and a burst of operations meets back-pressure.
  s.controller.pending_capacity = 64;
  // Short spins: waits spin 20 us by default before they sleep, which under ThreadSanitizer
  // made the corpus replay several times slower; a sleep-and-wake is what needs checking anyway.
  s.controller.spin_ns = (engine & 0x40) != 0 ? 0 : 2'000;
  s.controller.engine = "posix";
  s.tree_options.min_block_bytes = (window & 0x20) != 0 ? 1 : 512;
  s.tree_options.max_block_bytes = (window & 0x40) != 0 ? 64 << 10 : std::uint64_t{2} << 20;
  s.tree_options.tiny_write_rule = (window & 0x80) == 0;
  s.tree_options.inline_path = (options & 0x80) == 0;
  s.tree_options.gather_bytes = (engine & 0x80) != 0 ? 0 : std::uint64_t{1} << 20;
  s.window = 1 + (window & 0x1f);
  return s;
}

// ---------------------------------------------------------------------------------------------
// The run

/// The byte written by operation `index` at `offset` (differs between operations and offsets,
/// never 0, so a zero read where data belongs is always a difference).
inline std::uint8_t data_byte(std::uint32_t index, std::uint64_t offset) {
  std::uint64_t x = (std::uint64_t{index} << 40) ^ offset ^ 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  const auto b = static_cast<std::uint8_t>(x ^ (x >> 31));
  return b == 0 ? 1 : b;
}

/// Where the posix engine's scratch directory for one input (a ScratchDir) goes: /dev/shm when there is one (fsync
/// costs nothing there), else $TAI_TEST_DIR or /var/tmp; removed with its files when the input
/// ends. One per input rather than per process: a process that ends without running static
/// destructors (abort on a finding, _Exit) left its per-process directory behind (four empty
/// ones were found in /dev/shm after the first fuzzing runs).
inline std::filesystem::path scratch_root() {
  struct stat st {};
  if (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return ScratchDir::default_root();
}

class Run {
 public:
  /// `ops`: the operation list (the input after the settings bytes).
  Run(const Settings& s, const std::uint8_t* ops, std::size_t n) : s_(s) {
    if (s_.lanes == 2) {
      const std::size_t half = n / 2;
      lanes_.emplace_back(0, ByteReader(ops, half), std::vector<unsigned>{0, 2});
      lanes_.emplace_back(1, ByteReader(ops + half, n - half), std::vector<unsigned>{1});
    } else {
      lanes_.emplace_back(0, ByteReader(ops, n), std::vector<unsigned>{0, 1, 2});
    }
  }

  /// Runs the input; "" or a description of the first divergence.
  std::string run() {
    ControllerOptions opts = s_.controller;
    ctl_ = std::make_unique<Controller>(opts);
    EngineOptions eo;
    eo.depth = opts.engine_options.depth;
    if (s_.engine == EngineKind::memory) {
      disk_ = std::make_shared<MemoryDisk>();
      ctl_->add_engine("memory", std::make_unique<MemoryEngine>(disk_, eo));
    }
    if (s_.engine == EngineKind::fault) {
      std::vector<engines::FaultRule> rules;
      for (const char* text : {"any:p=0.04:errno=EIO", "write:p=0.02:errno=ENOSPC"}) {
        engines::FaultRule r = engines::FaultRule::parse(text).value();
        r.seed = s_.fault_seed + rules.size();
        rules.push_back(r);
      }
      auto fault = engines::make_fault(engines::make_posix(eo), std::move(rules));
      fault_ = fault.get();  // owned by the controller from here on, which outlives every use
      ctl_->add_engine("fault", std::move(fault));
    }
    if (on_files(s_.engine)) scratch_ = std::make_unique<ScratchDir>(scratch_root());
    for (unsigned f = 0; f < kFiles; ++f)
      files_[f].path = (scratch_ ? scratch_->path().string() : std::string("/fuzz")) + "/file-" + std::to_string(f);
    std::string error;
    for (unsigned f = 0; f < kFiles && error.empty(); ++f) error = open(f, true);
    if (trace_) std::fprintf(stderr, "controller fuzz: %s\n", s_.describe().c_str());
    if (error.empty()) {
      if (lanes_.size() == 2) {
        std::thread other([this] { run_lane(lanes_[1]); });
        run_lane(lanes_[0]);
        other.join();
      } else {
        run_lane(lanes_[0]);
      }
      for (Lane& l : lanes_)
        if (error.empty()) error = l.error;
    }
    if (error.empty()) error = finish(lanes_[0]);
    if (trace_ && fault_)
      std::fprintf(stderr, "controller fuzz: %llu faults injected; receipts failed: %s\n",
                   static_cast<unsigned long long>(fault_->total_injections()), model_known() ? "none" : "some");
    // Whatever happened, leave nothing behind: the controller first (it may still write), then
    // the scratch directory. After a divergence reads may still be in flight into the lanes'
    // pending buffers: the shutdown waits for every task before those buffers go.
    if (ctl_) {
      for (auto& f : files_) f.handle = File();
      ctl_->shutdown();
      for (Lane& l : lanes_) l.pending.clear();
      ctl_.reset();
    }
    scratch_.reset();
    if (!error.empty()) error += " [" + s_.describe() + "]";
    return error;
  }

 private:
  enum class Kind { write, read, fsync, fdatasync, barrier, flush, hook, close, refused, zero_length };

  struct FileModel {
    std::string path;
    File handle;
    bool open = false;
    std::array<std::vector<std::uint8_t>, kWindows.size()> bytes;
    std::uint64_t size = 0;  // the logical size: the largest end written since the last truncation
    std::vector<std::pair<std::uint64_t, std::uint32_t>> recent;  // recent write ranges, for overwrites
    Receipt last_write;
    unsigned generation = 0;  // bumped by every open: a hook orders only its own handle's operations
  };

  /// A submitted operation whose receipt is still to be checked.
  struct Pending {
    Kind kind = Kind::write;
    unsigned file = 0;
    std::uint32_t index = 0;
    std::uint64_t offset = 0, length = 0;
    Receipt receipt;
    std::vector<std::uint8_t> got;   // read: the destination (borrowed until the receipt finishes)
    std::vector<std::uint8_t> want;  // read: the model's bytes at submission
    std::uint64_t size_at_submission = 0;
    unsigned generation = 0;
    std::shared_ptr<std::atomic<bool>> hook_saw_unfinished;
  };

  static constexpr auto kReceiptTimeout = std::chrono::seconds(30);

  /// One submitting thread: its part of the input, its files, its receipts in flight.
  struct Lane {
    Lane(unsigned number, ByteReader reader, std::vector<unsigned> owned)
        : id(number), in(reader), files(std::move(owned)) {}
    unsigned id;
    ByteReader in;
    std::vector<unsigned> files;
    std::deque<Pending> pending;
    std::string trace_line;
    std::string error;
  };

  void run_lane(Lane& l) {
    std::string error;
    for (std::uint32_t i = 0; i < kMaxOps && error.empty() && !l.in.exhausted(); ++i) {
      error = step(l, i);
      if (trace_) std::fprintf(stderr, "  lane %u: %s\n", l.id, l.trace_line.c_str());
      while (error.empty() && l.pending.size() > s_.window) error = check_oldest(l);
    }
    if (error.empty()) error = drain_and_check_sizes(l);
    l.error = error;
  }

  /// fault: whether byte, size and engine checks still hold (no receipt has failed yet).
  bool model_known() const { return !failed_.load(std::memory_order_acquire); }

  /// fault: a failed receipt is allowed when it carries an injected errno and a fault was
  /// injected; from then on the model is not known. "" or the divergence.
  std::string failure_allowed(const std::string& what, const Receipt& r) {
    if (s_.engine != EngineKind::fault) return what + " failed: " + r.message();
    const int e = r.error().value();
    if (r.error().category() != std::generic_category() && r.error().category() != std::system_category())
      return what + " failed with a non-errno error: " + r.message();
    if (e != EIO && e != ENOSPC) return what + " failed with " + r.message() + ", not an injected errno (EIO, ENOSPC)";
    if (fault_->total_injections() == 0) return what + " failed (" + r.message() + ") before any fault was injected";
    failed_.store(true, std::memory_order_release);
    return "";
  }

  std::string describe(const Pending& p) const {
    static const char* const kNames[] = {"write",  "read", "fsync", "fdatasync", "barrier", "flush",
                                         "hook",   "close", "refused request", "zero-length request"};
    std::ostringstream s;
    s << "op #" << p.index << " " << kNames[static_cast<int>(p.kind)] << " file " << p.file;
    if (p.kind == Kind::write || p.kind == Kind::read) s << " [" << p.offset << ", +" << p.length << ")";
    return s.str();
  }

  // --- the model -----------------------------------------------------------------------------

  static bool locate(std::uint64_t offset, std::size_t* window, std::uint64_t* at) {
    for (std::size_t w = 0; w < kWindows.size(); ++w)
      if (offset >= kWindows[w].start && offset < kWindows[w].end()) {
        *window = w;
        *at = offset - kWindows[w].start;
        return true;
      }
    return false;
  }

  /// The model's bytes of [offset, offset + n) (inside one window).
  std::vector<std::uint8_t> model_bytes(unsigned f, std::uint64_t offset, std::uint64_t n) const {
    std::size_t w;
    std::uint64_t at;
    if (!locate(offset, &w, &at)) std::abort();  // the decoder keeps ranges inside windows
    const auto& b = files_[f].bytes[w];
    return std::vector<std::uint8_t>(b.begin() + static_cast<std::ptrdiff_t>(at),
                                     b.begin() + static_cast<std::ptrdiff_t>(at + n));
  }

  void reset_model(unsigned f) {
    for (std::size_t w = 0; w < kWindows.size(); ++w) files_[f].bytes[w].assign(kWindows[w].length, 0);
    files_[f].size = 0;
    files_[f].recent.clear();
  }

  /// A range inside one window: raw offsets, block edges +- a few bytes, the window's node edge,
  /// whole aligned blocks; lengths from 1 byte to a few blocks, cut at the window's end.
  std::pair<std::uint64_t, std::uint64_t> decode_range(ByteReader& in) {
    const std::uint8_t how = in.byte();
    const Window& w = kWindows[(how & 3) % kWindows.size()];
    const std::uint16_t a = in.u16(), b = in.u16();
    std::uint64_t off;
    switch ((how >> 2) & 3) {
      case 0:  // anywhere
        off = a % w.length;
        break;
      case 1:  // a block edge, up to 16 bytes either side
        off = (a % (w.length / kBlock)) * kBlock + (b & 0x1f);
        off = off >= 16 ? off - 16 : off;
        break;
      case 2:  // the window's middle (its node edge), up to 4 KiB either side
        off = w.length / 2 - kBlock + a % (2 * kBlock);
        break;
      default:  // whole aligned blocks
        off = (a % (w.length / kBlock)) * kBlock;
        break;
    }
    std::uint64_t len;
    switch ((how >> 4) & 3) {
      case 0: len = 1 + b % 64; break;
      case 1: len = 1 + b % kMaxLength; break;
      case 2: len = kBlock * (1 + b % 3); break;
      default: len = 1 + (b % 512) * 8; break;
    }
    off = std::min(off, w.length - 1);
    len = std::min(len, w.length - off);
    return {w.start + off, len};
  }

  // --- the operations ------------------------------------------------------------------------

  Result<File> open_handle(unsigned f, bool truncate) {
    Open flags = Open::read | Open::write | Open::create;
    if (truncate) flags = flags | Open::truncate;
    OpenOptions how;
    how.engine = s_.engine == EngineKind::uring && !uring_unavailable().empty() ? "posix" : to_string(s_.engine);
    how.tree_options = s_.tree_options;
    switch (s_.tree) {
      case TreeKind::default_tree: return ctl_->open<BTreeDefault>(files_[f].path, flags, how);
      case TreeKind::trivial: return ctl_->open<BTreeTrivial>(files_[f].path, flags, how);
      case TreeKind::binary: return ctl_->open<BTreeBinary>(files_[f].path, flags, how);
    }
    return Error{std::make_error_code(std::errc::invalid_argument), "unknown tree"};
  }

  std::string open(unsigned f, bool truncate) {
    Result<File> h = open_handle(f, truncate);
    if (!h) return "open of " + files_[f].path + " failed: " + h.error().message;
    files_[f].handle = std::move(h.value());
    files_[f].open = true;
    ++files_[f].generation;
    files_[f].last_write = Receipt();
    if (truncate || files_[f].bytes[0].empty()) reset_model(f);
    return "";
  }

  std::string step(Lane& l, std::uint32_t index) {
    ByteReader& in_ = l.in;
    std::deque<Pending>& pending_ = l.pending;
    std::string& trace_line_ = l.trace_line;
    const std::uint8_t op = in_.byte();
    const unsigned f = l.files[(op >> 5) % l.files.size()];
    if (trace_) trace_line_ = "op #" + std::to_string(index) + " code " + std::to_string(op & 0x1f) + " file " + std::to_string(f);
    FileModel& m = files_[f];
    Pending p;
    p.file = f;
    p.index = index;
    p.generation = m.generation;
    switch (op & 0x1f) {
      case 0: case 1: case 2: case 3: case 4: case 5: case 6: {  // write (or overwrite a recent range)
        std::uint64_t off, len;
        if ((op & 0x1f) == 6 && !m.recent.empty()) {
          const auto& r = m.recent[in_.byte() % m.recent.size()];
          off = r.first;
          len = r.second;
        } else {
          std::tie(off, len) = decode_range(in_);
        }
        std::vector<std::uint8_t> data(len);
        for (std::uint64_t i = 0; i < len; ++i) data[i] = data_byte(index, off + i);
        p.kind = m.open ? Kind::write : Kind::refused;
        p.offset = off;
        p.length = len;
        p.receipt = m.handle.write(off, data.data(), len);
        if (m.open) {
          std::size_t w = 0;
          std::uint64_t at = 0;
          locate(off, &w, &at);
          std::copy(data.begin(), data.end(), m.bytes[w].begin() + static_cast<std::ptrdiff_t>(at));
          m.size = std::max(m.size, off + len);
          if (m.recent.size() < 16) {
            m.recent.emplace_back(off, static_cast<std::uint32_t>(len));
          } else {
            m.recent[index % 16] = {off, static_cast<std::uint32_t>(len)};
          }
          m.last_write = p.receipt;
        }
        break;
      }
      case 7: case 8: case 9: case 10: case 11: {  // read; 11: from near the logical end, past it
        std::uint64_t off, len;
        if ((op & 0x1f) == 11) {
          // From up to 255 bytes before the logical size, inside the last window that starts at or
          // below it, for up to 4 KiB: the read crosses the end (a short read) or starts past it.
          const std::uint64_t back = in_.byte();
          std::size_t w = 0;
          for (std::size_t k = 0; k < kWindows.size(); ++k)
            if (kWindows[k].start <= m.size) w = k;
          const std::uint64_t from = m.size > back ? m.size - back : 0;
          off = std::min(std::max(from, kWindows[w].start), kWindows[w].end() - 1);
          len = std::min<std::uint64_t>(1 + in_.byte() * 16, kWindows[w].end() - off);
        } else if ((op & 0x1f) == 10) {  // a whole window: a wrong byte is seen before it is overwritten
          const Window& w = kWindows[in_.byte() % kWindows.size()];
          off = w.start;
          len = w.length;
        } else {
          std::tie(off, len) = decode_range(in_);
        }
        p.kind = m.open ? Kind::read : Kind::refused;
        p.offset = off;
        p.length = len;
        p.got.assign(len, 0xA5);
        if (m.open) {
          p.want = model_bytes(f, off, len);
          p.size_at_submission = m.size;
        }
        p.receipt = m.handle.read(off, p.got.data(), len);
        break;
      }
      case 12: case 13: {  // fsync / fdatasync; with the top bit of the next byte: wait and compare
        const bool check_now = (in_.byte() & 1) != 0;
        p.kind = !m.open ? Kind::refused : (op & 0x1f) == 12 ? Kind::fsync : Kind::fdatasync;
        p.receipt = (op & 0x1f) == 12 ? m.handle.fsync() : m.handle.fdatasync();
        if (check_now && m.open) {
          pending_.push_back(std::move(p));
          return check_at(l, pending_.size() - 1, true);
        }
        break;
      }
      case 14:
        p.kind = m.open ? Kind::barrier : Kind::refused;
        p.receipt = m.handle.barrier();
        break;
      case 15:
        p.kind = Kind::flush;
        p.receipt = ctl_->flush();
        break;
      case 16: {  // a hook: every earlier receipt of this file must have finished when it runs
        p.kind = m.open ? Kind::hook : Kind::refused;
        auto earlier = std::make_shared<std::vector<Receipt>>();
        for (const Pending& q : pending_)
          if (q.file == f && q.generation == m.generation && q.kind != Kind::flush && q.kind != Kind::close)
            earlier->push_back(q.receipt);
        if (m.last_write.valid()) earlier->push_back(m.last_write);
        p.hook_saw_unfinished = std::make_shared<std::atomic<bool>>(false);
        p.receipt = m.handle.hook([earlier, flag = p.hook_saw_unfinished] {
          for (const Receipt& r : *earlier)
            if (!r.finished()) flag->store(true);
        });
        break;
      }
      case 17: case 18: {  // close (17: and wait, then compare the engine's bytes)
        if (!m.open) return "";
        p.kind = Kind::close;
        p.receipt = m.handle.close();
        m.open = false;
        if ((op & 0x1f) == 17) {
          pending_.push_back(std::move(p));
          return check_at(l, pending_.size() - 1, true);
        }
        break;
      }
      case 19: case 20: {  // (re)open; 20: truncating. An open handle is closed first.
        if (m.open) {
          Pending c;
          c.kind = Kind::close;
          c.file = f;
          c.index = index;
          c.receipt = m.handle.close();
          m.open = false;
          pending_.push_back(std::move(c));
        }
        return open(f, (op & 0x1f) == 20);
      }
      case 21: {  // requests the contract refuses: an end past 2^64, no buffer
        const std::uint8_t which = in_.byte();
        const std::uint64_t off = std::numeric_limits<std::uint64_t>::max() - (which & 0x0f);
        std::uint8_t buf[64] = {};
        p.kind = Kind::refused;
        switch ((which >> 4) % 4) {
          case 0: p.receipt = m.handle.write(off, buf, sizeof buf); break;
          case 1: p.receipt = m.handle.read(off, buf, sizeof buf); break;
          case 2: p.receipt = m.handle.write(kBlock, nullptr, 16); break;
          default: p.receipt = m.handle.read(kBlock, nullptr, 16); break;
        }
        // The receipt must not borrow `buf` past this scope: a refused request never touches it,
        // and an accepted one is a divergence, reported once it finishes.
        pending_.push_back(std::move(p));
        return check_at(l, pending_.size() - 1, false);
      }
      case 22: {  // zero-length write and read: complete at once with 0 bytes
        std::uint8_t buf[1] = {0};
        p.kind = m.open ? Kind::zero_length : Kind::refused;
        p.offset = decode_range(in_).first;
        p.receipt = (in_.byte() & 1) != 0 ? m.handle.write(p.offset, buf, 0) : m.handle.read(p.offset, buf, 0);
        pending_.push_back(std::move(p));
        return check_at(l, pending_.size() - 1, false);
      }
      case 23: case 24: {  // check the oldest receipt / all of them (then the logical size)
        if ((op & 0x1f) == 23) return pending_.empty() ? "" : check_oldest(l);
        return drain_and_check_sizes(l);
      }
      default: {  // check a receipt out of order
        if (pending_.empty()) return "";
        return check_at(l, in_.byte() % pending_.size(), false);
      }
    }
    if (trace_) trace_line_ = describe(p);
    pending_.push_back(std::move(p));
    return "";
  }

  // --- checks --------------------------------------------------------------------------------

  std::string check_oldest(Lane& l) { return check_at(l, 0, false); }

  /// Waits for pending receipt i, checks it and removes it. `compare_engine`: afterwards the
  /// engine must hold the file's model (a sync or close the input waited for at once, nothing
  /// submitted to the file since).
  std::string check_at(Lane& l, std::size_t i, bool compare_engine) {
    Pending p = std::move(l.pending[i]);
    l.pending.erase(l.pending.begin() + static_cast<std::ptrdiff_t>(i));
    if (!p.receipt.wait_for(kReceiptTimeout))
      return describe(p) + ": receipt not finished after 30 s (state " + tai::to_string(p.receipt.state()) + ")";
    if (p.kind == Kind::refused) {
      if (p.receipt.ok()) return describe(p) + ": succeeded but should have been refused";
      return "";
    }
    if (!p.receipt.ok()) return failure_allowed(describe(p), p.receipt);
    if (s_.engine == EngineKind::fault && (compare_engine || p.kind == Kind::read)) {
      // An earlier request to the file that the faults failed reports on its own receipt, which
      // the window may still hold: a later read, or a sync's success, does not cover it. So the
      // file's earlier receipts (those before i) are checked first; checking one of them takes
      // it, and maybe its own earlier ones, out of the deque, never one after p.
      const std::size_t later = l.pending.size() - i;
      for (std::size_t k = 0; k + later < l.pending.size() && model_known();) {
        if (l.pending[k].file != p.file || l.pending[k].kind == Kind::refused) {
          ++k;
          continue;
        }
        std::string e = check_at(l, k, false);
        if (!e.empty()) return e;
      }
    }
    switch (p.kind) {
      case Kind::write:
        if (model_known() && static_cast<std::uint64_t>(p.receipt.bytes()) != p.length)
          return describe(p) + ": wrote " + std::to_string(p.receipt.bytes()) + " bytes";
        break;
      case Kind::read:
        return model_known() ? check_read(p) : "";
      case Kind::zero_length:
        if (p.receipt.bytes() != 0) return describe(p) + ": returned " + std::to_string(p.receipt.bytes()) + " bytes";
        break;
      case Kind::hook:
        if (p.hook_saw_unfinished->load()) return describe(p) + ": ran before an earlier operation of its file finished";
        break;
      default:
        break;
    }
    if (compare_engine && model_known()) return compare_with_engine(p.file, describe(p));
    return "";
  }

  std::string check_read(const Pending& p) {
    const std::int64_t got = p.receipt.bytes();
    if (got < 0 || static_cast<std::uint64_t>(got) > p.length)
      return describe(p) + ": returned " + std::to_string(got) + " bytes";
    const auto n = static_cast<std::uint64_t>(got);
    if (s_.engine == EngineKind::null) {
      // Nothing is stored: a byte may come from the cache (the model's) or from the engine (0).
      for (std::uint64_t k = 0; k < n; ++k)
        if (p.got[k] != p.want[k] && p.got[k] != 0)
          return describe(p) + ": byte " + std::to_string(p.offset + k) + " is " + std::to_string(p.got[k]) +
                 ", neither the model's " + std::to_string(p.want[k]) + " nor 0";
      return "";
    }
    const std::uint64_t readable =
        p.offset >= p.size_at_submission ? 0 : std::min(p.length, p.size_at_submission - p.offset);
    if (n < readable)
      return describe(p) + ": returned " + std::to_string(n) + " bytes, but the file's logical size " +
             std::to_string(p.size_at_submission) + " makes " + std::to_string(readable) + " readable";
    if (std::memcmp(p.got.data(), p.want.data(), n) == 0) return "";
    for (std::uint64_t k = 0; k < n; ++k)
      if (p.got[k] != p.want[k])
        return describe(p) + ": byte " + std::to_string(p.offset + k) + " is " + std::to_string(p.got[k]) +
               ", the model says " + std::to_string(p.want[k]);
    return "";
  }

  /// The engine's bytes of file f over the model's windows, and its size; false when unknown.
  bool engine_contents(unsigned f, std::array<std::vector<std::uint8_t>, kWindows.size()>* out,
                       std::uint64_t* size) {
    if (s_.engine == EngineKind::memory) {
      return disk_->with_file(files_[f].path, [&](SparseFile* file) {
        if (file == nullptr) return false;
        *size = file->size();
        for (std::size_t w = 0; w < kWindows.size(); ++w) {
          (*out)[w].assign(kWindows[w].length, 0);
          file->read(kWindows[w].start, kWindows[w].length, (*out)[w].data());
        }
        return true;
      });
    }
    const int fd = ::open(files_[f].path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st {};
    ::fstat(fd, &st);
    *size = static_cast<std::uint64_t>(st.st_size);
    for (std::size_t w = 0; w < kWindows.size(); ++w) {
      (*out)[w].assign(kWindows[w].length, 0);
      std::uint64_t done = 0;
      while (done < kWindows[w].length) {
        const ssize_t r = ::pread(fd, (*out)[w].data() + done, kWindows[w].length - done,
                                  static_cast<off_t>(kWindows[w].start + done));
        if (r <= 0) break;  // past the end: zeros (the size is compared separately)
        done += static_cast<std::uint64_t>(r);
      }
    }
    ::close(fd);
    return true;
  }

  /// The engine must hold exactly the model of file f (bytes of every window and the size).
  std::string compare_with_engine(unsigned f, const std::string& after) {
    if (s_.engine == EngineKind::null) return "";
    std::array<std::vector<std::uint8_t>, kWindows.size()> have;
    std::uint64_t size = 0;
    if (!engine_contents(f, &have, &size)) return after + ": the engine has no file " + files_[f].path;
    const FileModel& m = files_[f];
    for (std::size_t w = 0; w < kWindows.size(); ++w) {
      if (have[w] == m.bytes[w]) continue;  // memcmp: a byte loop here cost most of an input's time
      for (std::uint64_t k = 0; k < kWindows[w].length; ++k)
        if (have[w][k] != m.bytes[w][k])
          return after + ": the engine's byte " + std::to_string(kWindows[w].start + k) + " of file " +
                 std::to_string(f) + " is " + std::to_string(have[w][k]) + ", the model says " +
                 std::to_string(m.bytes[w][k]);
    }
    if (size != m.size)
      return after + ": the engine's file " + std::to_string(f) + " is " + std::to_string(size) +
             " bytes long, the model says " + std::to_string(m.size);
    return "";
  }

  std::string drain_and_check_sizes(Lane& l) {
    while (!l.pending.empty()) {
      const std::string e = check_oldest(l);
      if (!e.empty()) return e;
    }
    if (s_.engine == EngineKind::null || !model_known()) return "";  // no size to know
    for (unsigned f : l.files) {
      if (!files_[f].open) continue;
      const FileStatus st = files_[f].handle.status();
      if (st.size && *st.size != files_[f].size)
        return "status of file " + std::to_string(f) + " with nothing in flight: size " + std::to_string(*st.size) +
               ", the model says " + std::to_string(files_[f].size);
    }
    return "";
  }

  /// Closes every file (each close must succeed), shuts the controller down (its report must be
  /// empty) and compares every file with the model.
  std::string finish(Lane& l) {
    std::deque<Pending>& pending_ = l.pending;
    std::string e = drain_and_check_sizes(l);
    if (!e.empty()) return e;
    for (unsigned f = 0; f < kFiles; ++f) {
      if (!files_[f].open) continue;
      Pending c;
      c.kind = Kind::close;
      c.file = f;
      c.index = kMaxOps;
      c.receipt = files_[f].handle.close();
      files_[f].open = false;
      pending_.push_back(std::move(c));
    }
    while (!pending_.empty())
      if (!(e = check_oldest(l)).empty()) return e;
    const ShutdownReport report = ctl_->shutdown();
    if (!report.ok()) {
      if (s_.engine != EngineKind::fault || fault_->total_injections() == 0) return "shutdown: " + report.to_string();
      failed_.store(true, std::memory_order_release);  // a write-back the faults failed: reported here
    }
    if (!model_known()) return "";
    for (unsigned f = 0; f < kFiles; ++f)
      if (!(e = compare_with_engine(f, "after shutdown")).empty()) return e;
    return "";
  }

  Settings s_;
  std::vector<Lane> lanes_;
  // TAI_FUZZ_TRACE=1: print every operation as it is submitted (for reading a finding).
  const bool trace_ = std::getenv("TAI_FUZZ_TRACE") != nullptr;
  std::unique_ptr<ScratchDir> scratch_;  // engines on real files only
  std::unique_ptr<Controller> ctl_;
  std::shared_ptr<MemoryDisk> disk_;
  engines::FaultEngine* fault_ = nullptr;  // fault only; owned by ctl_
  std::atomic<bool> failed_{false};        // fault: a receipt failed (release/acquire: lanes and the finish)
  std::array<FileModel, kFiles> files_;    // each file used by one lane only (its owner)
};

/// Runs one fuzz input; "" or the first divergence (with the settings it ran under).
inline std::string run_fuzz_input(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return "";
  ByteReader in(data, size);
  const Settings s = decode_settings(in);
  Run run(s, data + 4, size - 4);
  return run.run();
}

}  // namespace tai::test::controller_fuzz
