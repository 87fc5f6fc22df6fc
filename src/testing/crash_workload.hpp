// tai/testing/crash_workload.hpp - workloads for crash simulation and the rig that runs
// them: Ace-style bounded sequences and random longer ones, the configurations (tree x engine x
// quota) they run over, and CrashRig, which puts a workload through a tai::Controller on the
// crashsim engine, enumerates the crash states of the log (crash_states.hpp) and checks them
// with TAI's oracle (crash_checker.hpp). Used by the test suite (test/crashsim_*_test.cpp) and
// by `tai-bench crash`; header-only, no GoogleTest.
//
// A workload is a list of operations on one file that starts empty. Offsets are concrete (the
// generators resolve "append" and "overwrite" against the file's size at that point), so a
// workload printed in a failure message is, with the seed, the whole reproduction.
//
// Thread-safety: the free functions are thread-safe; a CrashRig is used by one thread at a time.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tai/controller.hpp"
#include "tai/engine_selector.hpp"
#include "tai/engines/crashsim/crash_states.hpp"
#include "tai/engines/crashsim/crashsim_engine.hpp"
#include "tai/testing/byte_pattern.hpp"
#include "tai/testing/crash_checker.hpp"

namespace tai::engines::crash {



// ---------------------------------------------------------------------------------------------
// Small helpers (this header serves tai-bench too, so it uses no GoogleTest)

namespace detail {

/// `n` bytes of a pattern that depends on `seed` and on the position.
inline std::vector<unsigned char> pattern(std::size_t n, std::uint64_t seed) { return byte_pattern(n, seed); }

inline void model_write(std::vector<unsigned char>& model, std::uint64_t offset, const unsigned char* data,
                        std::size_t n) {
  if (n == 0) return;
  if (model.size() < offset + n) model.resize(offset + n, 0);
  std::memcpy(model.data() + offset, data, n);
}

/// "" when `r` finished successfully by `deadline`, else what went wrong (never waits past it).
inline std::string receipt_outcome(const Receipt& r, std::chrono::steady_clock::time_point deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (!r.wait_for(left > std::chrono::nanoseconds(0) ? left : std::chrono::nanoseconds(0)))
    return std::string("did not finish in time (state ") + to_string(r.state()) + ")";
  return r.ok() ? std::string() : r.message();
}

/// The whole file through its path (no TAI, no engine).
inline std::vector<unsigned char> read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline std::string first_difference(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want) {
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + ", expected " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) return "first difference at offset " + std::to_string(i);
  return "";
}

inline std::string engine_unavailable_reason(const std::string& engine) {
  for (const EngineInfo& e : list_engines())
    if (e.name == engine) return e.available ? std::string() : "engine '" + engine + "' unavailable: " + e.reason;
  return "engine '" + engine + "' is not known to this build";
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Workloads

struct WOp {
  enum class Kind : std::uint8_t { write, fsync, fdatasync, barrier, reopen, reopen_truncate };
  Kind kind = Kind::write;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

struct Workload {
  std::string name;  ///< how it was made ("ace3 #17", "random seed=...")
  std::vector<WOp> ops;
};

inline std::string to_string(const WOp& op) {
  switch (op.kind) {
    case WOp::Kind::write: return "write(" + std::to_string(op.offset) + ", " + std::to_string(op.length) + ")";
    case WOp::Kind::fsync: return "fsync";
    case WOp::Kind::fdatasync: return "fdatasync";
    case WOp::Kind::barrier: return "barrier";
    case WOp::Kind::reopen: return "close+reopen";
    case WOp::Kind::reopen_truncate: return "close+reopen(truncate)";
  }
  return "?";
}

inline std::string to_string(const Workload& w) {
  std::string s = w.name + ": ";
  for (std::size_t i = 0; i < w.ops.size(); ++i) s += (i ? "; " : "") + to_string(w.ops[i]);
  return s;
}

/// The block size the workloads' offsets are chosen around (BTreeDefault's leaf block and the
/// usual page and direct-I/O block).
inline constexpr std::uint64_t kBlock = 4096;

/// The alphabet of Ace-style workloads. Writes hit the same block, adjacent blocks, a block edge
/// and unaligned ranges; append and overwrite are resolved against the file's size.
enum class AceOp : std::uint8_t {
  write_block0,      // [0, 4096): a whole block
  write_in_block0,   // [1024, +1024): inside the same block
  write_block1,      // [4096, +4096): the adjacent block
  write_edge,        // [4000, +200): across the edge of blocks 0 and 1
  write_unaligned,   // [100, +300): small and unaligned
  write_span,        // [2048, +8192): unaligned, over three blocks
  append,            // [size, +1500)
  overwrite,         // [size/4, +size/2) of what exists (or write_unaligned on an empty file)
  fsync,
  fdatasync,
  barrier,
  reopen,            // close + reopen
  truncate,          // close + reopen with Open::truncate
  count_
};
inline constexpr unsigned kAceOps = static_cast<unsigned>(AceOp::count_);

/// Appends `op` to `w`, tracking the file's size (for append and overwrite).
inline void add_ace_op(Workload& w, AceOp op, std::uint64_t& size) {
  auto write = [&](std::uint64_t off, std::uint64_t len) {
    w.ops.push_back({WOp::Kind::write, off, len});
    size = std::max(size, off + len);
  };
  switch (op) {
    case AceOp::write_block0: write(0, 4096); break;
    case AceOp::write_in_block0: write(1024, 1024); break;
    case AceOp::write_block1: write(4096, 4096); break;
    case AceOp::write_edge: write(4000, 200); break;
    case AceOp::write_unaligned: write(100, 300); break;
    case AceOp::write_span: write(2048, 8192); break;
    case AceOp::append: write(size, 1500); break;
    case AceOp::overwrite:
      if (size >= 4) write(size / 4, size / 2);
      else write(100, 300);
      break;
    case AceOp::fsync: w.ops.push_back({WOp::Kind::fsync}); break;
    case AceOp::fdatasync: w.ops.push_back({WOp::Kind::fdatasync}); break;
    case AceOp::barrier: w.ops.push_back({WOp::Kind::barrier}); break;
    case AceOp::reopen: w.ops.push_back({WOp::Kind::reopen}); break;
    case AceOp::truncate:
      w.ops.push_back({WOp::Kind::reopen_truncate});
      size = 0;
      break;
    case AceOp::count_: break;
  }
}

/// The Ace-style workload number `index` among those of exactly `length` core operations
/// (kAceOps^length of them), ending with an fsync (the final persistence point, as Ace's
/// workloads end with one).
inline Workload ace_workload(unsigned length, std::uint64_t index) {
  Workload w;
  w.name = "ace" + std::to_string(length) + " #" + std::to_string(index);
  std::uint64_t size = 0;
  std::uint64_t rest = index;
  for (unsigned i = 0; i < length; ++i) {
    add_ace_op(w, static_cast<AceOp>(rest % kAceOps), size);
    rest /= kAceOps;
  }
  w.ops.push_back({WOp::Kind::fsync});
  return w;
}

inline std::uint64_t ace_count(unsigned length) {
  std::uint64_t n = 1;
  for (unsigned i = 0; i < length; ++i) n *= kAceOps;
  return n;
}

/// A random workload of `n` operations: writes (60%, of random offsets and lengths up to two
/// blocks within the first 6 blocks, or appends), fsync, fdatasync, barrier, reopen, truncate.
inline Workload random_workload(std::uint64_t seed, unsigned n) {
  std::mt19937_64 rng(seed);
  Workload w;
  w.name = "random seed=" + std::to_string(seed);
  std::uint64_t size = 0;
  for (unsigned i = 0; i < n; ++i) {
    const unsigned r = static_cast<unsigned>(rng() % 100);
    if (r < 45) {
      const std::uint64_t off = rng() % (6 * kBlock);
      const std::uint64_t len = 1 + rng() % (2 * kBlock);
      w.ops.push_back({WOp::Kind::write, off, len});
      size = std::max(size, off + len);
    } else if (r < 60) {
      add_ace_op(w, AceOp::append, size);
    } else if (r < 72) {
      w.ops.push_back({WOp::Kind::fsync});
    } else if (r < 80) {
      w.ops.push_back({WOp::Kind::fdatasync});
    } else if (r < 90) {
      w.ops.push_back({WOp::Kind::barrier});
    } else if (r < 96) {
      w.ops.push_back({WOp::Kind::reopen});
    } else {
      add_ace_op(w, AceOp::truncate, size);
    }
  }
  w.ops.push_back({WOp::Kind::fsync});
  return w;
}

// ---------------------------------------------------------------------------------------------
// Configurations

enum class TreeKind : std::uint8_t { def, trivial, binary };
inline const char* tree_label(TreeKind t) {
  return t == TreeKind::def ? "Default" : t == TreeKind::trivial ? "Trivial" : "Binary";
}

struct CrashConfig {
  const char* engine;  ///< the inner engine's name
  bool direct;         ///< open with Open::direct
  TreeKind tree;
  bool small_quota;    ///< weak 4 KiB / strict 8 KiB (eviction and uncached reroutes) or the defaults
  /// The crash log is taken by CrashSimSyncEngine, a synchronous engine, and the controller makes
  /// caller writes from the first thread (ControllerOptions::caller_writes, caller_write_threads
  /// = 1): a buffered file's writes of at least the write-around size, made while its tree holds
  /// nothing, are made by the program's thread. Otherwise the log is CrashSimEngine's, which is
  /// asynchronous to the controller: every write goes through its workers. Buffered posix only.
  bool caller_writes = false;

  std::string label() const {
    return std::string(engine) + (direct ? "_direct" : "") + "_" + tree_label(tree) + (small_quota ? "_small" : "_default") +
           (caller_writes ? "_caller" : "");
  }
};

inline std::vector<CrashConfig> crash_configs() {
  std::vector<CrashConfig> out;
  const std::pair<const char*, bool> engines[] = {
      {"posix", false}, {"posix", true}, {"uring", false}, {"uring", true}, {"libaio", true}};
  for (auto tree : {TreeKind::def, TreeKind::trivial, TreeKind::binary})
    for (const auto& e : engines)
      for (bool small : {true, false}) out.push_back({e.first, e.second, tree, small});
  for (auto tree : {TreeKind::def, TreeKind::trivial, TreeKind::binary})
    for (bool small : {true, false}) out.push_back({"posix", false, tree, small, true});
  return out;
}

/// The directory the crash tests put their files in: /dev/shm when it exists (tmpfs: syncs cost
/// nothing, and Linux >= 6.6 takes O_DIRECT there), else $TAI_TEST_DIR or /var/tmp. The crash
/// states come from the engine's log, not from the file system, so its durability is irrelevant;
/// its speed is not (an fdatasync costs ~4 ms on the development VM's ext4).
inline std::string crash_base_dir() {
  if (const char* d = std::getenv("TAI_CRASHSIM_DIR")) return d;
  struct stat st {};
  if (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  const char* base = std::getenv("TAI_TEST_DIR");
  return base ? base : "/var/tmp";
}

/// A scratch directory under crash_base_dir(), removed with its contents.
class CrashDir {
 public:
  CrashDir() {
    std::string tmpl = crash_base_dir() + "/tai-crash-XXXXXX";
    if (!mkdtemp(tmpl.data())) std::abort();
    path_ = tmpl;
  }
  ~CrashDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  CrashDir(const CrashDir&) = delete;
  CrashDir& operator=(const CrashDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// Why `c` cannot run here ("" when it can): the engine is missing or refused, or the scratch
/// file system refuses O_DIRECT.
inline std::string crash_config_unavailable(const CrashConfig& c, const std::string& dir) {
  const std::string why = detail::engine_unavailable_reason(c.engine);
  if (!why.empty()) return why;
  if (c.direct) {
    const std::string probe = dir + "/direct-probe";
    const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0) return "O_DIRECT refused in " + dir + ": " + std::strerror(errno);
    ::close(fd);
    ::unlink(probe.c_str());
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Running a workload

/// The bytes a workload writes at op `i`: a pattern of (seed, op index, offset), so that a byte
/// written by the wrong operation or to the wrong place shows.
inline std::vector<unsigned char> op_bytes(std::uint64_t seed, std::size_t i, const WOp& op) {
  return detail::pattern(static_cast<std::size_t>(op.length), seed * 1000003u + i * 7919u + op.offset);
}

struct RunResult {
  engines::CrashStats stats;
  std::vector<std::string> failures;  ///< each with the workload, the state and the violation
};

/// Not thread-safe: one thread at a time (run_concurrent starts threads of its own).
/// One controller on the crashsim engine for many workloads (a controller per workload would
/// cost more than the workload).
class CrashRig {
 public:
  /// Wraps the crashsim engine before the controller gets it (tests of the checker put a
  /// deliberately broken engine above it, so that the log shows what the broken engine did).
  using Wrap = std::function<std::unique_ptr<Engine>(std::unique_ptr<engines::CrashSimEngine>)>;

  CrashRig(const CrashConfig& config, const std::string& dir, Wrap wrap = {}) : config_(config), dir_(dir) {
    ControllerOptions o;
    o.workers = 2;
    o.flush_idle_ns = -1;  // write-back only where the workload causes it: runs are repeatable
    if (config.small_quota) {
      o.weak_quota = 4096;
      o.strict_quota = 8192;
    }
    // Caller writes are on by default; from the first thread here: most workloads are one thread's.
    if (config.caller_writes) o.caller_write_threads = 1;
    ctl_ = std::make_unique<Controller>(o);
    auto inner = make_engine(config.engine, o.engine_options);
    if (!inner) {
      error_ = inner.error().message;
      return;
    }
    if (config.caller_writes) {
      if (wrap) {
        error_ = "a wrapped crashsim engine is asynchronous to the controller: no caller writes under it";
        return;
      }
      auto sync = engines::make_crashsim_sync(std::move(inner.value()));
      if (!sync) {
        error_ = std::string("engine '") + config.engine + "' is not synchronous: no caller writes under it";
        return;
      }
      sim_ = &sync->log();
      ctl_->add_engine("crashsim", std::move(sync));
      return;
    }
    auto sim = engines::make_crashsim(std::move(inner.value()));
    sim_ = sim.get();
    if (wrap)
      ctl_->add_engine("crashsim", wrap(std::move(sim)));
    else
      ctl_->add_engine("crashsim", std::move(sim));
  }
  const std::string& error() const { return error_; }
  /// The crash log (under a caller-writes configuration, CrashSimSyncEngine's).
  engines::CrashSimEngine& sim() { return *sim_; }
  Controller& controller() { return *ctl_; }

  /// Runs the workloads of `per_thread` at once, one thread each, on one handle of a fresh file
  /// (their close/reopen operations are left out), then checks every crash state: the order
  /// promise across threads is the real-time order of submission (ProgramOp's "before").
  /// `order_across_threads` false checks only the order of each thread's own operations.
  RunResult run_concurrent(const std::vector<Workload>& per_thread, std::uint64_t seed,
                           const engines::CrashStateOptions& opt, bool order_across_threads = true) {
    switch (config_.tree) {
      case TreeKind::def: return run_concurrent_tree<BTreeDefault>(per_thread, seed, opt, order_across_threads);
      case TreeKind::trivial: return run_concurrent_tree<BTreeTrivial>(per_thread, seed, opt, order_across_threads);
      case TreeKind::binary: return run_concurrent_tree<BTreeBinary>(per_thread, seed, opt, order_across_threads);
    }
    return {};
  }

  /// Runs `w` on a fresh file, then enumerates and checks every crash state of its log.
  RunResult run(const Workload& w, std::uint64_t seed, const engines::CrashStateOptions& opt) {
    switch (config_.tree) {
      case TreeKind::def: return run_tree<BTreeDefault>(w, seed, opt);
      case TreeKind::trivial: return run_tree<BTreeTrivial>(w, seed, opt);
      case TreeKind::binary: return run_tree<BTreeBinary>(w, seed, opt);
    }
    return {};
  }

 private:
  template <class Tree>
  RunResult run_tree(const Workload& w, std::uint64_t seed, const engines::CrashStateOptions& opt) {
    RunResult res;
    // One file per run, named after the configuration too: rigs of several configurations may
    // share a directory (tai-bench crash).
    const std::string path = dir_ + "/" + config_.label() + "-w" + std::to_string(serial_++);
    sim_->clear();
    engines::ProgramLog prog([s = sim_] { return s->tick(); });
    std::vector<Receipt> receipts;
    std::vector<unsigned char> model;  // what the file must hold at the end
    const Open base = Open::read | Open::write | (config_.direct ? Open::direct : Open::none);
    auto open = [&](bool truncate) -> File {
      auto f = ctl_->open<Tree>(path, base | Open::create | (truncate ? Open::truncate : Open::none), "crashsim");
      if (!f) {
        res.failures.push_back(to_string(w) + ": open: " + f.error().message);
        return File();
      }
      return std::move(f.value());
    };
    auto track = [&](std::size_t idx, Receipt r) {
      prog.track(idx, r);
      receipts.push_back(std::move(r));
    };
    // The file starts empty: the program's first operation is the truncating open (it matters
    // when the path held something before, e.g. from an earlier run).
    const std::size_t first_truncate = prog.begin_op(engines::ProgramOp::Kind::truncate, path);
    File f = open(true);
    prog.submitted(first_truncate);
    prog.finished(first_truncate, static_cast<bool>(f));
    if (!f) return res;
    for (std::size_t i = 0; i < w.ops.size(); ++i) {
      const WOp& op = w.ops[i];
      switch (op.kind) {
        case WOp::Kind::write: {
          const auto data = op_bytes(seed, i, op);
          const std::size_t idx = prog.begin_write(path, op.offset, data.data(), data.size());
          Receipt r = f.write(op.offset, data.data(), data.size());
          prog.submitted(idx);
          track(idx, std::move(r));
          detail::model_write(model, op.offset, data.data(), data.size());
          break;
        }
        case WOp::Kind::fsync:
        case WOp::Kind::fdatasync:
        case WOp::Kind::barrier: {
          using K = engines::ProgramOp::Kind;
          const K k = op.kind == WOp::Kind::fsync ? K::fsync : op.kind == WOp::Kind::fdatasync ? K::fdatasync : K::barrier;
          const std::size_t idx = prog.begin_op(k, path);
          Receipt r = k == K::fsync ? f.fsync() : k == K::fdatasync ? f.fdatasync() : f.barrier();
          prog.submitted(idx);
          track(idx, std::move(r));
          break;
        }
        case WOp::Kind::reopen:
        case WOp::Kind::reopen_truncate: {
          const bool trunc = op.kind == WOp::Kind::reopen_truncate;
          const std::size_t idx = prog.begin_op(engines::ProgramOp::Kind::close, path);
          Receipt r = f.close();
          prog.submitted(idx);
          // No wait for the close here: a truncating open() waits for it itself (the earlier
          // handle's write-back must not land after the truncation), and every state checks it.
          track(idx, std::move(r));
          std::size_t tidx = 0;
          if (trunc) tidx = prog.begin_op(engines::ProgramOp::Kind::truncate, path);
          f = open(trunc);
          if (trunc) {
            prog.submitted(tidx);
            prog.finished(tidx, true);
            model.clear();
          }
          if (!f) return res;
          break;
        }
      }
    }
    Receipt closing = f.close();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (std::size_t i = 0; i < receipts.size(); ++i) {
      const std::string outcome = detail::receipt_outcome(receipts[i], deadline);
      if (!outcome.empty()) res.failures.push_back(to_string(w) + ": receipt " + std::to_string(i) + ": " + outcome);
    }
    if (const std::string outcome = detail::receipt_outcome(closing, deadline); !outcome.empty())
      res.failures.push_back(to_string(w) + ": final close: " + outcome);
    if (!res.failures.empty()) return res;

    // Without a crash the file holds exactly what the workload wrote.
    const auto on_disk = detail::read_whole(path);
    if (on_disk != model) {
      const std::string diff = detail::first_difference(on_disk, model);
      res.failures.push_back("seed " + std::to_string(seed) + ", " + to_string(w) +
                             ": after the final close (no crash) the file differs from what was written: " + diff);
    }

    check_states(path, prog, to_string(w), seed, opt, res);
    return res;
  }

  /// Enumerates and checks every crash state of `path` in the log; failures go to `res`.
  void check_states(const std::string& path, const engines::ProgramLog& prog, const std::string& what,
                    std::uint64_t seed, const engines::CrashStateOptions& opt, RunResult& res,
                    bool order_across_threads = true) {
    const engines::CrashLog log = sim_->snapshot();
    const int file = log.file_index(path);
    if (file < 0) {
      res.failures.push_back(what + ": the crash log never saw " + path);
      return;
    }
    engines::TaiCrashOracle oracle(log, prog.ops(), order_across_threads);
    if (std::getenv("TAI_CRASHSIM_DEBUG")) {
      const auto ops = prog.ops();
      for (std::size_t i = 0; i < ops.size(); ++i) std::printf("  op %s\n", ops[i].to_string(i).c_str());
      for (const auto& e : log.events) std::printf("  event %s\n", e.to_string().c_str());
    }
    res.stats = engines::enumerate_crash_states(
        log, static_cast<std::uint32_t>(file), opt, oracle,
        [&](const engines::CrashState& st, const std::vector<std::string>& lines) {
          if (res.failures.size() >= 3) return;
          std::string s = "seed " + std::to_string(seed) + ", config " + config_.label() + ", " + what +
                          "\n  crash state (" + engines::to_string(opt.order) + ", sector " +
                          std::to_string(opt.sector_size) + (st.sampled ? ", sampled" : "") + "): " + st.describe();
          for (const auto& l : lines) s += "\n  violation: " + l;
          res.failures.push_back(std::move(s));
        });
  }

  template <class Tree>
  RunResult run_concurrent_tree(const std::vector<Workload>& per_thread, std::uint64_t seed,
                                const engines::CrashStateOptions& opt, bool order_across_threads) {
    RunResult res;
    std::string what = "concurrent";
    for (std::size_t t = 0; t < per_thread.size(); ++t) what += " | thread " + std::to_string(t) + " " + to_string(per_thread[t]);
    const std::string path = dir_ + "/" + config_.label() + "-c" + std::to_string(serial_++);
    sim_->clear();
    engines::ProgramLog prog([s = sim_] { return s->tick(); });
    const Open mode = Open::read | Open::write | Open::create | Open::truncate | (config_.direct ? Open::direct : Open::none);
    const std::size_t first_truncate = prog.begin_op(engines::ProgramOp::Kind::truncate, path);
    auto opened = ctl_->open<Tree>(path, mode, "crashsim");
    prog.submitted(first_truncate);
    prog.finished(first_truncate, opened.ok());
    if (!opened) {
      res.failures.push_back(what + ": open: " + opened.error().message);
      return res;
    }
    File f = std::move(opened.value());
    // Every thread runs its workload on the one handle (File is thread-safe); close and reopen
    // are left out (a close by one thread would reject the others' later operations).
    std::vector<std::vector<Receipt>> receipts(per_thread.size());
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < per_thread.size(); ++t)
      threads.emplace_back([&, t] {
        const Workload& w = per_thread[t];
        const auto th = static_cast<unsigned>(t);
        for (std::size_t i = 0; i < w.ops.size(); ++i) {
          const WOp& op = w.ops[i];
          std::size_t idx = 0;
          Receipt r;
          using K = engines::ProgramOp::Kind;
          switch (op.kind) {
            case WOp::Kind::write: {
              const auto data = op_bytes(seed + t * 0x100000001ull, i, op);
              idx = prog.begin_write(path, op.offset, data.data(), data.size(), th);
              r = f.write(op.offset, data.data(), data.size());
              break;
            }
            case WOp::Kind::fsync: idx = prog.begin_op(K::fsync, path, th); r = f.fsync(); break;
            case WOp::Kind::fdatasync: idx = prog.begin_op(K::fdatasync, path, th); r = f.fdatasync(); break;
            case WOp::Kind::barrier: idx = prog.begin_op(K::barrier, path, th); r = f.barrier(); break;
            case WOp::Kind::reopen:
            case WOp::Kind::reopen_truncate: continue;
          }
          prog.submitted(idx);
          prog.track(idx, r);
          receipts[t].push_back(std::move(r));
        }
      });
    for (auto& th : threads) th.join();
    // Closed at once: every thread's operations were submitted before the close (the joins), so
    // none of them may be rejected as "closed".
    Receipt closing = f.close();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (std::size_t t = 0; t < receipts.size(); ++t)
      for (std::size_t i = 0; i < receipts[t].size(); ++i)
        if (const std::string outcome = detail::receipt_outcome(receipts[t][i], deadline); !outcome.empty())
          res.failures.push_back(what + ": thread " + std::to_string(t) + " receipt " + std::to_string(i) + ": " + outcome);
    if (const std::string outcome = detail::receipt_outcome(closing, deadline); !outcome.empty())
      res.failures.push_back(what + ": final close: " + outcome);
    if (!res.failures.empty()) return res;
    // No single final image to compare with (the threads interleave): the crash state after the
    // last event, with the final fsyncs acknowledged, is the check that every byte is the last
    // write of one of the threads.
    check_states(path, prog, what + (order_across_threads ? "" : " (order checked per thread)"), seed, opt, res,
                 order_across_threads);
    return res;
  }

  CrashConfig config_;
  std::string dir_;
  std::string error_;
  std::unique_ptr<Controller> ctl_;
  engines::CrashSimEngine* sim_ = nullptr;
  std::uint64_t serial_ = 0;
};

}  // namespace tai::engines::crash
