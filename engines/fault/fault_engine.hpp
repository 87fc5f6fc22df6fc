// engines/fault/fault_engine.hpp - the `fault` test engine: wraps any engine and makes chosen
// operations fail with an errno or transfer fewer bytes than asked.
//
//     auto fault = tai::engines::make_fault(tai::engines::make_posix({}));
//     fault->add_rule(tai::engines::FaultRule::parse("write:nth=3:errno=EIO:once").value());
//     fault->add_rules("fsync:every=2:errno=ENOSPC, read:p=0.1:seed=42:short=half");
//     ... use it as any engine; fault->injections(0) counts the EIOs injected by rule 0.
//
// Layering (engines/common/wrapper_engine.hpp): the fault engine is a WrapperEngine, so its
// native layer is the inner engine's; the fault engine's base class validates, bounces unaligned
// direct I/O and chains requests, and the inner engine only moves bytes. So the fault engine must
// be the outermost layer: faults are decided on the native requests the base issues.
//
// Short transfers. The base continues a short native read or write until done; that would hide
// an injected short transfer. The fault engine turns it off (continue_short_transfers() is
// false) and continues genuine short transfers of the inner engine itself, with the base's rules
// (continue after progress; on a direct file only from a block boundary; stop at 0 = end of
// file; an error after partial progress is reported as the error). An injected short transfer
// is not continued: its completion reports exactly what the shortened native I/O moved.
//
// What counts as "an operation": one native request the base hands over, i.e. one user request,
// except on direct files where an unaligned write also issues the reads of its partial edge
// blocks (they count as reads; a short read injected there looks like end of file to the
// read-modify-write, so prefer `write:` rules for direct writes) and an unaligned read is one
// aligned read. Requests that never reach the engine (invalid, zero-length, cancelled in a
// chain) do not count. The internal continuations of a genuine short transfer do not count.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tai/engine.hpp"
#include "tai/engines/common/wrapper_engine.hpp"
#include "tai/error.hpp"

namespace tai::engines {

/// Which operations a rule looks at.
/// `any` is every request (read, write, fsync, fdatasync); `open` and `close` are the engine's
/// open and close of a file (Engine::open / Engine::close), which `any` does not include, and take
/// errors only.
enum class FaultOp : std::uint8_t { read, write, fsync, fdatasync, sync /* fsync or fdatasync */, any, open, close };

/// One fault rule. Plain data; build it directly or with FaultRule::parse.
///
/// Trigger: each rule counts the operations it matches, k = 1, 2, 3 ...; k is "eligible" when
///  * Trigger::nth:         k == n (once) or k >= n (persistent: from the nth on, every one);
///  * Trigger::every:       k is a multiple of n;
///  * Trigger::probability: a draw that depends only on (seed, k) is below `probability`, so the
///    same seed and the same sequence of operations give the same faults on every run.
/// `once` disarms the rule after its first injection. Defaults: nth is once, every and
/// probability are persistent (FaultRule::parse applies them; the struct default is once).
///
/// Effect:
///  * Effect::error: the operation completes with -error (EIO, ENOSPC ...) without doing I/O.
///  * Effect::short_half / Effect::short_by: reads and writes only (a rule with a short effect
///    never matches fsync/fdatasync). The I/O is done with a shorter length (half, or
///    `short_bytes` fewer, floored at 0) and the completion reports what was really moved. On a
///    direct file the shorter length is rounded down to the file's block so that the I/O stays
///    valid. A length that becomes 0 completes with 0 without I/O.
///
/// Several rules: every rule counts every operation it matches; the first eligible rule (in the
/// order they were added) injects; later eligible rules are shadowed for that operation (they
/// inject nothing and a `once` rule stays armed). Keep nth rules on distinct operations.
struct FaultRule {
  enum class Trigger : std::uint8_t { nth, every, probability };
  enum class Effect : std::uint8_t { error, short_half, short_by };

  FaultOp op = FaultOp::any;
  Trigger trigger = Trigger::nth;
  std::uint64_t n = 1;        ///< nth / every (>= 1)
  double probability = 0.0;   ///< Trigger::probability, in [0, 1]
  std::uint64_t seed = 0;     ///< Trigger::probability
  Effect effect = Effect::error;
  int error = EIO;                 ///< Effect::error: the positive errno to report
  std::uint64_t short_bytes = 0;   ///< Effect::short_by: how many bytes fewer
  bool once = true;

  /// Parses "<op>:<trigger>:<effect>[:once|:persistent]", fields in any order after the op:
  ///   op:      read | write | fsync | fdatasync | sync | any | open | close
  ///   trigger: nth=N | every=N | p=P[:seed=S]     (P in [0,1]; seed defaults to 0)
  ///   effect:  errno=NAME|NUMBER (EIO, ENOSPC, EDQUOT, EAGAIN, EINTR, EROFS, EFBIG, EBADF,
  ///            EINVAL, ENOMEM, ETIMEDOUT, ECANCELED, EPERM, EACCES, ENXIO, ENODEV, EFAULT,
  ///            EOVERFLOW ...) | short=half | short=-BYTES (that many bytes fewer)
  /// Example: "write:nth=3:errno=EIO:once", "read:p=0.25:seed=7:short=half".
  /// Errors say which part of the text is wrong. Thread-safe.
  static Result<FaultRule> parse(std::string_view text);
  /// Several rules separated by ',' or ';' (spaces around them are ignored).
  static Result<std::vector<FaultRule>> parse_list(std::string_view text);
  /// The rule in the syntax parse() reads (round-trips). Thread-safe.
  std::string to_string() const;

  /// True when this rule looks at requests of kind `op` (never for open and close rules).
  bool matches(Op op) const noexcept;
};

/// The fault-injecting engine. Capabilities are the inner engine's; name() is "fault(<inner>)".
/// An open rule that fires makes Engine::open fail with its errno without opening anything; a
/// close rule that fires closes the inner file all the same (as close(2) releases the descriptor
/// whatever it returns) and returns its errno from Engine::close.
/// Thread-safety: as tai::Engine (submit/reap from the queue's owner thread). add_rule and
/// add_rules must not run concurrently with submit() (call them before submitting or from the
/// queue's owner thread). rule_count, matches, injections and rule are safe from any thread
/// once the rule exists.
class FaultEngine final : public WrapperEngine {
 public:
  explicit FaultEngine(std::unique_ptr<Engine> inner);
  ~FaultEngine() override;

  /// Adds a rule; returns its index for matches()/injections().
  std::size_t add_rule(const FaultRule& rule);
  /// Parses with FaultRule::parse_list and adds every rule, or none on a parse error.
  Result<std::size_t> add_rules(std::string_view text);
  std::size_t rule_count() const noexcept { return rules_.size(); }
  const FaultRule& rule(std::size_t index) const { return rules_.at(index).rule; }
  /// Operations rule `index` has matched so far (its k).
  std::uint64_t matches(std::size_t index) const;
  /// Faults rule `index` has injected so far.
  std::uint64_t injections(std::size_t index) const;
  /// Sum of injections() over all rules.
  std::uint64_t total_injections() const;

  // inner(), eventfd() and owns() come from WrapperEngine. Injected completions that do not
  // reach the inner engine increment its eventfd too (an eventfd counter write of 1), so a poll
  // loop wakes for them.

 protected:
  std::size_t do_submit(const Request* requests, std::size_t n) override;
  std::size_t do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) override;
  bool continue_short_transfers() const noexcept override { return false; }
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override;
  std::error_code do_close(EngineFile& file) override;

 private:
  struct RuleState {
    explicit RuleState(const FaultRule& r) : rule(r) {}
    FaultRule rule;
    // All three are relaxed: they are counters and a flag with no data published through them.
    // Writers are the submitting thread only (submit is single-threaded by contract); readers
    // on other threads (tests) get their happens-before from how they synchronise with that
    // thread (join, a completion handed over with a mutex ...), not from these atomics.
    std::atomic<std::uint64_t> matched{0};
    std::atomic<std::uint64_t> injected{0};
    std::atomic<bool> spent{false};  // a `once` rule that has injected
  };
  /// A read or write passed to the inner engine unchanged, continued here if it comes back short.
  struct Tracked {
    Request request;        // as the base issued it
    std::uint64_t done = 0; // bytes moved by the completed pieces
    std::vector<::iovec> rest;  // a vectored write's segments past `done` (the continuation's array)
  };

  /// The rule of kind `kind` (open or close) that fires for this call, or -1; counts and spends.
  int decide_open_close(FaultOp kind);
  void signal_local() noexcept;
  void resubmit_continuations();
  /// Handles one inner completion; returns true when it is a completion for the base.
  bool on_inner(Completion& c);

  std::deque<RuleState> rules_;  // deque: RuleState holds atomics (not movable); indices stay valid
  std::vector<Completion> local_;   // injected completions, returned by do_reap first
  std::unordered_map<std::uint64_t, Tracked> tracked_;  // native user_data -> request being continued
  std::vector<Request> continuations_;  // the rest of short transfers the inner engine has not taken yet
  // The cut segment arrays of vectored writes an injected short transfer shortened, until their
  // completion (native user_data -> array): the inner engine reads them until then.
  std::unordered_map<std::uint64_t, std::vector<::iovec>> short_segments_;
  std::vector<Completion> inner_out_;   // scratch for native_reap
  std::mutex open_close_mu_;            // decide_open_close: open and close come from any thread
};

/// Wraps `inner` (which must not be used directly afterwards) and adds `rules` in order (no
/// rules: it behaves exactly like `inner`). The fault engine has the inner engine's options and
/// capabilities. Never fails.
std::unique_ptr<FaultEngine> make_fault(std::unique_ptr<Engine> inner, std::vector<FaultRule> rules = {});

}  // namespace tai::engines
