// tai/testing/io_error_loop.hpp - the I/O-error loop: every engine operation of a workload
// failed in turn, in every way, and the program's view checked each time.
//
// SQLite's loop, over TAI: run a workload once to count its engine operations (n); then for every
// i in 1..n and every fault (EIO, ENOSPC, a transfer cut to 0 bytes, one byte short, half), once
// and persistently, run it again on a fresh controller whose engine is the fault engine with the
// rule "operation i fails so", and check (DESIGN section 2, "Errors are never lost"):
//  * the error reaches the program: when a fault was injected and no receipt failed, every byte
//    must be as written (a retried short transfer is fine; a silent loss is a "lost error");
//  * no sync success covers missing data: a byte whose last write succeeded and was followed by
//    a successful fsync, fdatasync, barrier or close must read as that write (the fsyncgate
//    rule: after a failed write-back, a later success is allowed only if the data was written
//    again); a write whose own receipt failed promises nothing;
//  * the controller stays usable: a file on the plain engine opened afterwards takes a write, an
//    fsync and a close;
//  * every receipt finishes (within 30 s) and the shutdown returns.
// Bytes are read back through the file's path after the controller closed it (the page cache:
// the fault engine fails requests before the kernel sees them, so what the kernel holds is what
// TAI managed to write).
//
// The engine's open and close of the file are failed in turn too (open: EIO, ENOSPC, EACCES,
// EMFILE; close: EIO, ENOSPC; once and persistently): a failed open must come back from
// Controller::open with the injected errno, and a second open of the path (as a program would
// try) must then work (once) or fail the same way (persistent: the workload stops there); a
// failed close must reach the close's receipt with its errno (DESIGN section 2, "Errors are never
// lost"); what a sync or close that succeeded before covered must still read back, and the
// controller must stay usable.
//
// Not covered yet: checking the shutdown report's list of losses.
//
// Usage (a test, or tai-bench):
//   tai::engines::ioerr::IoErrorLoop loop({tai::engines::crash::TreeKind::def, 16 << 10}, dir);
//   tai::engines::ioerr::LoopStats s = loop.run_all(workload, seed);
//   // s.injections, s.runs, s.violations (each message names the workload, fault and index)
#pragma once

#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tai/controller.hpp"
#include "tai/engine_selector.hpp"
#include "tai/engines/fault/fault_engine.hpp"
#include "tai/testing/crash_workload.hpp"

namespace tai::engines::ioerr {

using crash::TreeKind;
using crash::Workload;
using crash::WOp;

/// One way to fail an operation.
struct Fault {
  const char* name;
  FaultRule::Effect effect;
  int error;                 ///< Effect::error
  std::uint64_t short_bytes; ///< Effect::short_by
};

/// EIO, ENOSPC, a transfer cut to nothing, one byte short, half (the short ones apply to reads
/// and writes only; on a sync they never match, so that run injects nothing).
inline const std::vector<Fault>& all_faults() {
  static const std::vector<Fault> f = {
      {"EIO", FaultRule::Effect::error, EIO, 0},
      {"ENOSPC", FaultRule::Effect::error, ENOSPC, 0},
      {"short to 0 bytes", FaultRule::Effect::short_by, 0, std::uint64_t{1} << 62},
      {"short by 1 byte", FaultRule::Effect::short_by, 0, 1},
      {"short by half", FaultRule::Effect::short_half, 0, 0},
  };
  return f;
}

struct LoopConfig {
  TreeKind tree = TreeKind::def;
  std::uint64_t strict_quota = 0;  ///< 0: the controller's default (small ones force evictions)
  std::string label() const {
    return std::string(crash::tree_label(tree)) + (strict_quota ? "_q" + std::to_string(strict_quota >> 10) + "k" : "_default");
  }
};

struct LoopStats {
  std::uint64_t runs = 0;             ///< runs with a fault rule armed
  std::uint64_t injections = 0;       ///< runs in which the rule did inject
  std::uint64_t errors_reported = 0;  ///< of those, runs in which a receipt failed
  std::uint64_t violations = 0;
  std::vector<std::string> messages;  ///< the first violations, in full
  void add(const LoopStats& o) {
    runs += o.runs;
    injections += o.injections;
    errors_reported += o.errors_reported;
    violations += o.violations;
    for (const auto& m : o.messages)
      if (messages.size() < 20) messages.push_back(m);
  }
};

/// Not thread-safe (one loop per thread); each run makes its own controller and file in `dir`.
class IoErrorLoop {
 public:
  IoErrorLoop(LoopConfig config, std::string dir) : config_(config), dir_(std::move(dir)) {}

  /// The workload's engine operations without faults (timing can change it slightly between
  /// runs: write-back gathers what is dirty when it runs). 0 with *err on failure. `opens` and
  /// `closes`, when given, get the engine's opens and closes of the file.
  std::uint64_t count_ops(const Workload& w, std::uint64_t seed, std::string* err, std::uint64_t* opens = nullptr,
                          std::uint64_t* closes = nullptr) {
    FaultRule counter;
    counter.op = FaultOp::any;
    counter.trigger = FaultRule::Trigger::nth;
    counter.n = ~std::uint64_t{0};  // never reached: it only counts
    LoopStats s;
    std::uint64_t matched[3] = {0, 0, 0};
    const bool ok = run(w, seed, counter, "count", s, matched);
    if (!ok || s.violations) {
      if (err) *err = s.messages.empty() ? "the fault-free run failed" : s.messages.front();
      return 0;
    }
    if (opens) *opens = matched[1];
    if (closes) *closes = matched[2];
    return matched[0];
  }

  /// For i in 1..count_ops(w), every fault, once and persistent; then every open and every close
  /// of the file failed with each of their errors, once and persistent.
  LoopStats run_all(const Workload& w, std::uint64_t seed) {
    LoopStats total;
    std::string err;
    std::uint64_t opens = 0, closes = 0;
    const std::uint64_t n = count_ops(w, seed, &err, &opens, &closes);
    if (n == 0) {
      total.violations = err.empty() ? 0 : 1;
      if (!err.empty()) total.messages.push_back(config_.label() + " " + crash::to_string(w) + ": " + err);
      return total;
    }
    for (std::uint64_t i = 1; i <= n; ++i)
      for (const Fault& f : all_faults())
        for (bool persistent : {false, true}) {
          FaultRule r;
          r.op = FaultOp::any;
          r.trigger = FaultRule::Trigger::nth;
          r.n = i;
          r.effect = f.effect;
          r.error = f.error ? f.error : EIO;
          r.short_bytes = f.short_bytes;
          r.once = !persistent;
          const std::string what = std::string(f.name) + (persistent ? " from" : " at") + " operation " +
                                   std::to_string(i) + " of " + std::to_string(n);
          run(w, seed, r, what, total, nullptr);
        }
    struct OpenClose {
      FaultOp op;
      std::uint64_t count;
      std::vector<int> errors;
    };
    for (const OpenClose& oc : {OpenClose{FaultOp::open, opens, {EIO, ENOSPC, EACCES, EMFILE}},
                                OpenClose{FaultOp::close, closes, {EIO, ENOSPC}}})
      for (std::uint64_t i = 1; i <= oc.count; ++i)
        for (int e : oc.errors)
          for (bool persistent : {false, true}) {
            FaultRule r;
            r.op = oc.op;
            r.trigger = FaultRule::Trigger::nth;
            r.n = i;
            r.error = e;
            r.once = !persistent;
            const std::string what = std::string(std::strerror(e)) + (persistent ? " from " : " at ") +
                                     (oc.op == FaultOp::open ? "open " : "close ") + std::to_string(i) + " of " +
                                     std::to_string(oc.count);
            run(w, seed, r, what, total, nullptr);
          }
    return total;
  }

  /// One run with `rule`; counts and checks into `stats`. `matched` (a counting run): three
  /// counts, the rule's matches and the engine's opens and closes of the file.
  /// False when the run could not be set up.
  bool run(const Workload& w, std::uint64_t seed, const FaultRule& rule, const std::string& what, LoopStats& stats,
           std::uint64_t* matched) {
    const std::string where = config_.label() + " " + crash::to_string(w) + ", " + what;
    auto violation = [&](const std::string& m) {
      ++stats.violations;
      if (stats.messages.size() < 20) stats.messages.push_back(where + ": " + m);
    };
    ControllerOptions o;
    o.workers = 1;  // one worker: a run is a handful of requests, and a thread less to start
    o.flush_idle_ns = -1;
    o.engine = "posix";
    if (config_.strict_quota) {
      o.strict_quota = config_.strict_quota;
      o.weak_quota = config_.strict_quota / 2;
    }
    auto inner = make_engine("posix");
    if (!inner) {
      violation("posix engine: " + inner.error().message);
      return false;
    }
    auto fe = make_fault(std::move(inner.value()));
    FaultEngine* fault = fe.get();
    const std::size_t rule_index = fault->add_rule(rule);
    // A counting run also counts the file's opens and closes (rules that never fire).
    std::size_t open_counter = 0, close_counter = 0;
    if (matched) {
      FaultRule c = rule;
      c.op = FaultOp::open;
      c.effect = FaultRule::Effect::error;
      open_counter = fault->add_rule(c);
      c.op = FaultOp::close;
      close_counter = fault->add_rule(c);
    }
    const std::string path = dir_ + "/" + config_.label() + "-" + std::to_string(serial_++);
    std::vector<unsigned char> model;
    std::vector<long> last_writer;  // op index of the last write of each byte (-1: none)
    struct Rec {
      std::size_t op;
      bool sync;  // fsync, fdatasync, barrier, close: success promises the bytes written before
      unsigned handle;  // which open of the file (a reopen starts the next)
      Receipt r;
    };
    unsigned handle = 0;
    std::vector<unsigned> writer_handle;  // the handle of each byte's last write
    std::vector<Rec> recs;
    bool setup_ok = true;
    bool any_failed = false;  // some receipt (or, for an injected open fault, an open) reported an error
    std::vector<std::string> other_file_problems;
    {
      Controller ctl(o);
      ctl.add_engine("fault", std::move(fe));
      // An open the rule failed is the program being told, with the injected errno. It tries
      // once more, as a program would: a failed open must leave nothing behind that spoils the
      // next one (a once rule lets it through; a persistent one fails it again, and the
      // workload stops there).
      auto open_checked = [&](bool truncate) -> File {
        for (int attempt = 0; attempt < 2; ++attempt) {
          const std::uint64_t before = fault->injections(rule_index);
          const Open mode = Open::read | Open::write | Open::create | (truncate ? Open::truncate : Open::none);
          Result<File> f = config_.tree == TreeKind::trivial ? ctl.open<BTreeTrivial>(path, mode, "fault")
                           : config_.tree == TreeKind::binary ? ctl.open<BTreeBinary>(path, mode, "fault")
                                                              : ctl.open<BTreeDefault>(path, mode, "fault");
          if (f) {
            if (rule.op == FaultOp::open && fault->injections(rule_index) != before)
              violation("open succeeded although the engine's open failed with the injected " +
                        std::string(std::strerror(rule.error)));
            return std::move(f.value());
          }
          if (rule.op != FaultOp::open || fault->injections(rule_index) == before) {
            violation("open: " + f.error().message);
            setup_ok = false;
            return File();
          }
          any_failed = true;
          if (f.error().code.value() != rule.error)
            violation("open failed with errno " + std::to_string(f.error().code.value()) + " ('" + f.error().message +
                      "'), not the injected " + std::to_string(rule.error) + " (" + std::strerror(rule.error) + ")");
        }
        return File();
      };
      File f = open_checked(true);
      for (std::size_t i = 0; i < w.ops.size() && f; ++i) {
        const WOp& op = w.ops[i];
        switch (op.kind) {
          case WOp::Kind::write: {
            const auto data = crash::op_bytes(seed, i, op);
            crash::detail::model_write(model, op.offset, data.data(), data.size());
            if (last_writer.size() < model.size()) {
              last_writer.resize(model.size(), -1);
              writer_handle.resize(model.size(), 0);
            }
            for (std::uint64_t x = op.offset; x < op.offset + op.length; ++x) {
              last_writer[x] = static_cast<long>(i);
              writer_handle[x] = handle;
            }
            recs.push_back({i, false, handle, f.write(op.offset, data.data(), data.size())});
            break;
          }
          case WOp::Kind::fsync: recs.push_back({i, true, handle, f.fsync()}); break;
          case WOp::Kind::fdatasync: recs.push_back({i, true, handle, f.fdatasync()}); break;
          case WOp::Kind::barrier: recs.push_back({i, true, handle, f.barrier()}); break;
          case WOp::Kind::reopen:
          case WOp::Kind::reopen_truncate: {
            const bool trunc = op.kind == WOp::Kind::reopen_truncate;
            recs.push_back({i, true, handle, f.close()});
            ++handle;
            f = open_checked(trunc);
            if (trunc) {
              model.clear();
              last_writer.clear();
              writer_handle.clear();
            }
            break;
          }
        }
      }
      if (f) recs.push_back({w.ops.size(), true, handle, f.close()});
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      for (const Rec& r : recs)
        if (!r.r.wait_for(std::max(deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration(0))))
          violation("the receipt of operation " + std::to_string(r.op) + " did not finish in 30 s");
      // The controller stays usable: a file on the plain engine.
      const std::string other = path + ".other";
      auto g = ctl.open<BTreeDefault>(other, Open::read | Open::write | Open::create | Open::truncate, "posix");
      if (!g) {
        other_file_problems.push_back("open: " + g.error().message);
      } else {
        const auto bytes = crash::detail::pattern(4096, seed ^ 0xA5A5);
        const Receipt a = g.value().write(0, bytes.data(), bytes.size());
        const Receipt b = g.value().fsync();
        const Receipt c = g.value().close();
        for (const Receipt* r : {&a, &b, &c})
          if (const std::string e = crash::detail::receipt_outcome(*r, deadline); !e.empty()) other_file_problems.push_back(e);
        if (other_file_problems.empty() && crash::detail::read_whole(other) != bytes)
          other_file_problems.push_back("its bytes differ from what was written");
      }
      ::unlink(other.c_str());
      if (matched) {
        matched[0] = fault->matches(rule_index);
        matched[1] = fault->matches(open_counter);
        matched[2] = fault->matches(close_counter);
      }
      const bool injected = fault->injections(rule_index) != 0;
      if (!matched) {
        ++stats.runs;
        if (injected) ++stats.injections;
      }
      for (const Rec& r : recs) any_failed |= r.r.finished() && !r.r.ok();
      if (injected && any_failed) ++stats.errors_reported;
      // An injected error must reach the program (a short transfer may be completed instead).
      if (injected && !any_failed && rule.effect == FaultRule::Effect::error)
        violation("lost error: the fault was injected and every receipt succeeded");
      // A failed engine close reaches that close's receipt with the injected errno.
      if (rule.op == FaultOp::close && injected) {
        bool told = false;
        for (const Rec& r : recs)
          if (r.sync && r.r.finished() && !r.r.ok() && r.r.error().value() == rule.error) told = true;
        if (!told) violation(std::string("no close or sync receipt reported the injected ") + std::strerror(rule.error));
      }
      (void)ctl.shutdown();  // must return (a hang is the test's deadline)
    }
    for (const std::string& p : other_file_problems) violation("a file on the plain engine afterwards: " + p);
    if (!setup_ok) return false;
    // Every byte whose last write a successful sync (or close) followed must read as written.
    const std::vector<unsigned char> got = crash::detail::read_whole(path);
    ::unlink(path.c_str());
    std::uint64_t bad = 0, first = 0;
    long first_writer = -1;
    std::size_t first_sync = 0;
    // A write whose own receipt failed promises nothing (it may have landed in part); the
    // program was told.
    std::vector<char> write_failed(w.ops.size() + 1, 0);
    for (const Rec& r : recs)
      if (!r.sync && r.r.finished() && !r.r.ok()) write_failed[r.op] = 1;
    for (std::uint64_t x = 0; x < model.size(); ++x) {
      const long wi = last_writer[x];
      if (wi < 0 || write_failed[static_cast<std::size_t>(wi)]) continue;
      const Rec* covering = nullptr;
      // Syncs of the same handle cover its writes (its close included). A later handle's sync
      // does not cover an earlier handle's writes whose close failed: that close told the
      // program (as a new descriptor's fsync does not repeat an error the kernel reported
      // before it was opened).
      for (const Rec& r : recs)
        if (r.sync && r.handle == writer_handle[x] && static_cast<long>(r.op) > wi && r.r.finished() && r.r.ok()) {
          covering = &r;
          break;
        }
      if (!covering) continue;
      if (x >= got.size() || got[x] != model[x]) {
        if (bad++ == 0) {
          first = x;
          first_writer = wi;
          first_sync = covering->op;
        }
      }
    }
    if (bad) {
      std::string m = std::to_string(bad) + " byte(s) differ from their last write although a later sync or close " +
                      "succeeded; first at offset " + std::to_string(first) + " (written by operation " +
                      std::to_string(first_writer) + ", covered by the success of operation " + std::to_string(first_sync) +
                      ")";
      if (!any_failed) m += "; no receipt reported an error: a lost error";
      violation(m);
    }
    return true;
  }

 private:
  LoopConfig config_;
  std::string dir_;
  std::uint64_t serial_ = 0;
};

}  // namespace tai::engines::ioerr
