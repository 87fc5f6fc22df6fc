// The fault engine: see fault_engine.hpp.
#include "engines/fault/fault_engine.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <utility>

#include "engines/common/segments.hpp"

namespace tai::engines {
namespace {

// ---------------------------------------------------------------------------------------------
// Rule text

struct ErrnoName {
  const char* name;
  int value;
};
constexpr ErrnoName kErrnoNames[] = {
    {"EIO", EIO},         {"ENOSPC", ENOSPC},       {"EDQUOT", EDQUOT},   {"EAGAIN", EAGAIN},
    {"EINTR", EINTR},     {"EROFS", EROFS},         {"EFBIG", EFBIG},     {"EBADF", EBADF},
    {"EINVAL", EINVAL},   {"ENOMEM", ENOMEM},       {"ETIMEDOUT", ETIMEDOUT}, {"ECANCELED", ECANCELED},
    {"EPERM", EPERM},     {"EACCES", EACCES},       {"ENXIO", ENXIO},     {"ENODEV", ENODEV},
    {"EFAULT", EFAULT},   {"EOVERFLOW", EOVERFLOW}, {"EBUSY", EBUSY},     {"ENOSYS", ENOSYS},
    {"EOPNOTSUPP", EOPNOTSUPP}, {"EMFILE", EMFILE}, {"ESTALE", ESTALE},   {"EREMOTEIO", EREMOTEIO},
};

struct OpName {
  const char* name;
  FaultOp op;
};
constexpr OpName kOpNames[] = {{"read", FaultOp::read},           {"write", FaultOp::write},
                               {"fsync", FaultOp::fsync},         {"fdatasync", FaultOp::fdatasync},
                               {"sync", FaultOp::sync},           {"any", FaultOp::any},
                               {"open", FaultOp::open},           {"close", FaultOp::close}};

std::string errno_name(int value) {
  for (const auto& e : kErrnoNames)
    if (e.value == value) return e.name;
  return std::to_string(value);
}

Error parse_error(std::string_view text, const std::string& what) {
  std::string message = "fault rule '";
  message += text;
  message += "': ";
  message += what;
  return Error{std::make_error_code(std::errc::invalid_argument), std::move(message)};
}

bool parse_u64(std::string_view s, std::uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  out = v;
  return true;
}

bool parse_probability(std::string_view s, double& out) {
  if (s.empty() || s.size() > 64) return false;
  const std::string copy(s);  // strtod needs a terminated string
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(copy.c_str(), &end);
  if (errno != 0 || end != copy.c_str() + copy.size() || !(v >= 0.0 && v <= 1.0)) return false;
  out = v;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Decisions

/// A uniform number in [0, 1) that depends only on (seed, k): splitmix64 of their mix. Keeping
/// no generator state is what makes a probability rule reproducible whatever else happens.
double draw(std::uint64_t seed, std::uint64_t k) {
  std::uint64_t z = seed + k * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

/// Whether the k-th operation a rule matched triggers it (ignoring whether a once rule is spent).
bool eligible(const FaultRule& rule, std::uint64_t k) {
  switch (rule.trigger) {
    case FaultRule::Trigger::nth:
      return rule.once ? k == rule.n : k >= rule.n;
    case FaultRule::Trigger::every:
      return rule.n != 0 && k % rule.n == 0;
    case FaultRule::Trigger::probability:
      return draw(rule.seed, k) < rule.probability;
  }
  return false;
}

bool is_transfer(Op op) { return op == Op::read || op == Op::write; }

/// The block a direct file's native requests are aligned to (as the base plans them).
std::uint64_t direct_block(const EngineFile& file) {
  const Alignment& a = file.capabilities().alignment;
  return std::max<std::uint64_t>({a.offset, a.length, 1});
}

/// The length a short-transfer rule leaves of request `r`.
std::uint64_t shortened_length(const FaultRule& rule, const Request& r) {
  std::uint64_t len = rule.effect == FaultRule::Effect::short_half
                          ? r.length / 2
                          : (r.length > rule.short_bytes ? r.length - rule.short_bytes : 0);
  if (r.file->capabilities().direct) {
    const std::uint64_t block = direct_block(*r.file);
    len = len / block * block;  // an unaligned native length would come back as EINVAL
  }
  return len;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// FaultRule

bool FaultRule::matches(Op o) const noexcept {
  // A short transfer of a sync is meaningless: such rules look at reads and writes only.
  if (effect != Effect::error && !is_transfer(o)) return false;
  switch (op) {
    case FaultOp::read: return o == Op::read;
    case FaultOp::write: return o == Op::write;
    case FaultOp::fsync: return o == Op::fsync;
    case FaultOp::fdatasync: return o == Op::fdatasync;
    case FaultOp::sync: return o == Op::fsync || o == Op::fdatasync;
    case FaultOp::any: return true;
    case FaultOp::open:
    case FaultOp::close: return false;  // not requests: FaultEngine::do_open and do_close decide them
  }
  return false;
}

Result<FaultRule> FaultRule::parse(std::string_view text) {
  const std::string_view whole = trim(text);
  std::vector<std::string_view> parts;
  for (std::string_view rest = whole;;) {
    const std::size_t colon = rest.find(':');
    parts.push_back(trim(rest.substr(0, colon)));
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }

  FaultRule rule;
  bool op_found = false;
  for (const auto& o : kOpNames)
    if (parts[0] == o.name) {
      rule.op = o.op;
      op_found = true;
    }
  if (!op_found)
    return parse_error(whole, "the operation '" + std::string(parts[0]) +
                                  "' is not one of read, write, fsync, fdatasync, sync, any");

  bool have_trigger = false, have_effect = false, have_seed = false, have_lifetime = false;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string_view part = parts[i];
    const std::size_t eq = part.find('=');
    const std::string_view key = part.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1);
    const std::string shown(part);
    if (eq == std::string_view::npos) {
      if (key != "once" && key != "persistent")
        return parse_error(whole, "'" + shown + "' is neither key=value nor once/persistent");
      if (have_lifetime) return parse_error(whole, "once/persistent given twice");
      have_lifetime = true;
      rule.once = key == "once";
    } else if (key == "nth" || key == "every") {
      if (have_trigger) return parse_error(whole, "more than one trigger (nth=, every=, p=)");
      have_trigger = true;
      rule.trigger = key == "nth" ? Trigger::nth : Trigger::every;
      if (!parse_u64(value, rule.n) || rule.n == 0)
        return parse_error(whole, "'" + shown + "' needs a whole number >= 1");
    } else if (key == "p") {
      if (have_trigger) return parse_error(whole, "more than one trigger (nth=, every=, p=)");
      have_trigger = true;
      rule.trigger = Trigger::probability;
      if (!parse_probability(value, rule.probability))
        return parse_error(whole, "'" + shown + "' needs a probability between 0 and 1");
    } else if (key == "seed") {
      if (have_seed) return parse_error(whole, "seed given twice");
      have_seed = true;
      if (!parse_u64(value, rule.seed)) return parse_error(whole, "'" + shown + "' needs a whole number");
    } else if (key == "errno") {
      if (have_effect) return parse_error(whole, "more than one effect (errno=, short=)");
      have_effect = true;
      rule.effect = Effect::error;
      bool known = false;
      for (const auto& e : kErrnoNames)
        if (value == e.name) {
          rule.error = e.value;
          known = true;
        }
      std::uint64_t number = 0;
      if (!known && parse_u64(value, number) && number >= 1 && number <= 4095) {
        rule.error = static_cast<int>(number);
        known = true;
      }
      if (!known)
        return parse_error(whole, "'" + shown + "' needs an errno name such as EIO or ENOSPC, or a number 1..4095");
    } else if (key == "short") {
      if (have_effect) return parse_error(whole, "more than one effect (errno=, short=)");
      have_effect = true;
      if (value == "half") {
        rule.effect = Effect::short_half;
      } else if (!value.empty() && value.front() == '-' && parse_u64(value.substr(1), rule.short_bytes) &&
                 rule.short_bytes > 0) {
        rule.effect = Effect::short_by;
      } else {
        return parse_error(whole, "'" + shown + "' needs short=half or short=-BYTES (BYTES >= 1 fewer)");
      }
    } else {
      return parse_error(whole, "unknown field '" + std::string(key) +
                                    "' (expected nth, every, p, seed, errno, short, once, persistent)");
    }
  }
  if (!have_trigger) return parse_error(whole, "needs a trigger: nth=N, every=N or p=P");
  if (!have_effect) return parse_error(whole, "needs an effect: errno=NAME or short=half|-BYTES");
  if (have_seed && rule.trigger != Trigger::probability) return parse_error(whole, "seed= goes with p= only");
  if (rule.effect != Effect::error && (rule.op == FaultOp::fsync || rule.op == FaultOp::fdatasync ||
                                      rule.op == FaultOp::sync || rule.op == FaultOp::open || rule.op == FaultOp::close))
    return parse_error(whole, "a short transfer applies to read and write only");
  if (!have_lifetime) rule.once = rule.trigger == Trigger::nth;
  return rule;
}

Result<std::vector<FaultRule>> FaultRule::parse_list(std::string_view text) {
  std::vector<FaultRule> rules;
  for (std::string_view rest = text;;) {
    const std::size_t sep = rest.find_first_of(",;");
    const std::string_view one = trim(rest.substr(0, sep));
    if (!one.empty()) {
      auto rule = parse(one);
      if (!rule) return rule.error();
      rules.push_back(rule.value());
    }
    if (sep == std::string_view::npos) break;
    rest.remove_prefix(sep + 1);
  }
  return rules;
}

std::string FaultRule::to_string() const {
  std::string s;
  for (const auto& o : kOpNames)
    if (o.op == op) s = o.name;
  switch (trigger) {
    case Trigger::nth: s += ":nth=" + std::to_string(n); break;
    case Trigger::every: s += ":every=" + std::to_string(n); break;
    case Trigger::probability: {
      // The shortest of 15..17 significant digits that reads back as the same double.
      char p[40];
      for (int digits = 15; digits <= 17; ++digits) {
        std::snprintf(p, sizeof p, "%.*g", digits, probability);
        if (std::strtod(p, nullptr) == probability) break;
      }
      s += ":p=";
      s += p;
      s += ":seed=" + std::to_string(seed);
      break;
    }
  }
  switch (effect) {
    case Effect::error: s += ":errno=" + errno_name(error); break;
    case Effect::short_half: s += ":short=half"; break;
    case Effect::short_by: s += ":short=-" + std::to_string(short_bytes); break;
  }
  s += once ? ":once" : ":persistent";
  return s;
}

// ---------------------------------------------------------------------------------------------
// FaultEngine

FaultEngine::FaultEngine(std::unique_ptr<Engine> inner) : WrapperEngine("fault", std::move(inner)) {}

FaultEngine::~FaultEngine() = default;

std::size_t FaultEngine::add_rule(const FaultRule& rule) {
  rules_.emplace_back(rule);
  return rules_.size() - 1;
}

Result<std::size_t> FaultEngine::add_rules(std::string_view text) {
  auto rules = FaultRule::parse_list(text);
  if (!rules) return rules.error();
  for (const auto& r : rules.value()) add_rule(r);
  return rules.value().size();
}

std::uint64_t FaultEngine::matches(std::size_t index) const {
  return rules_.at(index).matched.load(std::memory_order_relaxed);
}

std::uint64_t FaultEngine::injections(std::size_t index) const {
  return rules_.at(index).injected.load(std::memory_order_relaxed);
}

std::uint64_t FaultEngine::total_injections() const {
  std::uint64_t sum = 0;
  for (const auto& r : rules_) sum += r.injected.load(std::memory_order_relaxed);
  return sum;
}


int FaultEngine::decide_open_close(FaultOp kind) {
  // Engine::open and close may run on any thread at once: one lock orders their counts. Rules of
  // these kinds are never looked at by do_submit (FaultRule::matches is false for them).
  std::lock_guard<std::mutex> lock(open_close_mu_);
  int fired = -1;
  for (std::size_t k = 0; k < rules_.size(); ++k) {
    RuleState& st = rules_[k];
    if (st.rule.op != kind || st.rule.effect != FaultRule::Effect::error) continue;
    const std::uint64_t count = st.matched.fetch_add(1, std::memory_order_relaxed) + 1;
    if (fired >= 0) continue;  // shadowed by an earlier rule
    if (st.rule.once && st.spent.load(std::memory_order_relaxed)) continue;
    if (!eligible(st.rule, count)) continue;
    fired = static_cast<int>(k);
    st.injected.fetch_add(1, std::memory_order_relaxed);
    if (st.rule.once) st.spent.store(true, std::memory_order_relaxed);
  }
  return fired;
}

Result<std::unique_ptr<EngineFile>> FaultEngine::do_open(const std::string& path, OpenMode mode) {
  const int fired = decide_open_close(FaultOp::open);
  if (fired < 0) return WrapperEngine::do_open(path, mode);
  const FaultRule& rule = rules_[static_cast<std::size_t>(fired)].rule;
  // As open(2) failing: no file, the errno, and a message that says it was injected.
  return Error{std::error_code(rule.error, std::generic_category()),
               "open " + path + ": " + std::generic_category().message(rule.error) + " (injected by fault rule " +
                   std::to_string(fired) + ", " + rule.to_string() + ")"};
}

std::error_code FaultEngine::do_close(EngineFile& file) {
  const int fired = decide_open_close(FaultOp::close);
  // As close(2) on Linux: the descriptor is released whatever the result, so the inner file is
  // closed in any case and the injected error is what the caller hears.
  const std::error_code inner_result = WrapperEngine::do_close(file);
  if (fired < 0) return inner_result;
  return std::error_code(rules_[static_cast<std::size_t>(fired)].rule.error, std::generic_category());
}

void FaultEngine::signal_local() noexcept {
  const int fd = inner().eventfd();
  if (fd < 0) return;
  const std::uint64_t one = 1;
  // An eventfd counter write only fails when the counter would overflow (it is then readable
  // anyway) or on a bad descriptor; neither loses a wake-up.
  (void)!::write(fd, &one, sizeof one);
}

void FaultEngine::resubmit_continuations() {
  std::size_t at = 0;
  while (at < continuations_.size()) {
    const std::size_t took = native_submit(inner(), continuations_.data() + at, continuations_.size() - at);
    if (took == 0) break;
    at += took;
  }
  continuations_.erase(continuations_.begin(), continuations_.begin() + static_cast<std::ptrdiff_t>(at));
}

std::size_t FaultEngine::do_submit(const Request* requests, std::size_t n) {
  resubmit_continuations();

  // Decide every request first, tentatively: the inner engine may take fewer than all of them,
  // and a decision only counts (matches, injections, a once rule spent) for requests taken.
  constexpr int kNoFault = -1;
  constexpr int kCancelled = -2;  // the rest of a kernel-linked chain an injection broke
  struct Outgoing {
    Request request;
    std::size_t index;  // in `requests`
    bool injected;      // shortened by a rule: not continued
  };
  struct Local {
    std::size_t index;
    Completion completion;
  };
  std::vector<Outgoing> outgoing;
  std::vector<Local> locals;
  std::vector<int> fired(n, kNoFault);
  std::vector<std::uint64_t> tentative(rules_.size(), 0);
  std::vector<char> spent_here(rules_.size(), 0);
  outgoing.reserve(n);

  // With kernel-linked requests (io_uring), a request the fault engine fails or shortens breaks
  // its chain: the rest of the chain completes with -ECANCELED, as the kernel would do, and the
  // request linked to it no longer links to anything.
  const bool kernel_links = inner().capabilities().linked_requests;
  bool cancel_rest_of_chain = false;
  auto unlink_previous = [&](std::size_t i) {
    if (i > 0 && !outgoing.empty() && outgoing.back().index == i - 1) outgoing.back().request.link = false;
  };

  for (std::size_t i = 0; i < n; ++i) {
    const Request& r = requests[i];
    if (cancel_rest_of_chain) {
      fired[i] = kCancelled;
      locals.push_back({i, {r.user_data, -ECANCELED}});
      cancel_rest_of_chain = r.link;
      continue;
    }
    int rule_index = kNoFault;
    for (std::size_t k = 0; k < rules_.size(); ++k) {
      RuleState& st = rules_[k];
      if (!st.rule.matches(r.op)) continue;
      const std::uint64_t count = st.matched.load(std::memory_order_relaxed) + ++tentative[k];
      if (rule_index != kNoFault) continue;  // shadowed by an earlier rule for this operation
      if (st.rule.once && (spent_here[k] || st.spent.load(std::memory_order_relaxed))) continue;
      if (!eligible(st.rule, count)) continue;
      rule_index = static_cast<int>(k);
      if (st.rule.once) spent_here[k] = 1;
    }
    fired[i] = rule_index;
    if (rule_index == kNoFault) {
      outgoing.push_back({r, i, false});
      continue;
    }
    const FaultRule& rule = rules_[static_cast<std::size_t>(rule_index)].rule;
    if (rule.effect == FaultRule::Effect::error) {
      locals.push_back({i, {r.user_data, -static_cast<std::int64_t>(rule.error)}});
      if (kernel_links) {
        unlink_previous(i);
        cancel_rest_of_chain = r.link;
      }
      continue;
    }
    const std::uint64_t length = shortened_length(rule, r);
    if (length == 0) {
      locals.push_back({i, {r.user_data, 0}});
      if (kernel_links) {
        unlink_previous(i);
        cancel_rest_of_chain = r.link;
      }
      continue;
    }
    Request shorter = r;
    shorter.length = length;
    if (r.iov_count != 0) {
      std::vector<::iovec>& cut = short_segments_[r.user_data];
      detail::segments_within(r, 0, length, cut);
      shorter.iov = cut.data();
      shorter.iov_count = static_cast<std::uint32_t>(cut.size());
    }
    if (kernel_links && r.link) {
      // The kernel fails a link chain on a short transfer: what follows is cancelled.
      shorter.link = false;
      cancel_rest_of_chain = true;
    }
    outgoing.push_back({shorter, i, true});
  }

  // Hand the real I/O to the inner engine.
  std::size_t sent = 0;
  if (!outgoing.empty()) {
    std::vector<Request> batch;
    batch.reserve(outgoing.size());
    for (const auto& o : outgoing) batch.push_back(o.request);
    while (sent < batch.size()) {
      const std::size_t took = native_submit(inner(), batch.data() + sent, batch.size() - sent);
      if (took == 0) break;
      sent += took;
    }
  }
  const std::size_t taken = sent == outgoing.size() ? n : outgoing[sent].index;

  // Commit the decisions of the requests taken.
  for (std::size_t i = 0; i < taken; ++i) {
    if (fired[i] == kCancelled) continue;
    for (std::size_t k = 0; k < rules_.size(); ++k) {
      RuleState& st = rules_[k];
      if (!st.rule.matches(requests[i].op)) continue;
      st.matched.fetch_add(1, std::memory_order_relaxed);
      if (fired[i] == static_cast<int>(k)) {
        st.injected.fetch_add(1, std::memory_order_relaxed);
        if (st.rule.once) st.spent.store(true, std::memory_order_relaxed);
      }
    }
  }
  for (std::size_t j = 0; j < sent; ++j) {
    const Outgoing& o = outgoing[j];
    if (!o.injected && is_transfer(o.request.op)) tracked_[o.request.user_data] = Tracked{o.request, 0};
  }
  bool added = false;
  for (const auto& l : locals) {
    if (l.index >= taken) break;  // locals are in request order
    local_.push_back(l.completion);
    added = true;
  }
  if (added) signal_local();
  return taken;
}

bool FaultEngine::on_inner(Completion& c) {
  auto it = tracked_.find(c.user_data);
  if (it == tracked_.end()) {  // a sync, or an injected short transfer: as it is
    short_segments_.erase(c.user_data);
    return true;
  }
  Tracked& t = it->second;
  const Request& r = t.request;
  if (c.result < 0) {  // an error after partial progress is the error, as in the base
    tracked_.erase(it);
    return true;
  }
  t.done += static_cast<std::uint64_t>(c.result);
  bool more = c.result > 0 && t.done < r.length;
  // On a direct file the rest must start on a block boundary; a read that ends off one is
  // end of file (the base's rule).
  if (more && r.file->capabilities().direct && t.done % direct_block(*r.file) != 0) more = false;
  if (!more) {
    c.result = static_cast<std::int64_t>(t.done);
    tracked_.erase(it);
    return true;
  }
  Request rest = r;
  if (r.iov_count != 0) {
    detail::segments_within(r, t.done, r.length - t.done, t.rest);
    rest.iov = t.rest.data();
    rest.iov_count = static_cast<std::uint32_t>(t.rest.size());
  } else {
    rest.buffer = static_cast<std::byte*>(r.buffer) + t.done;
  }
  rest.offset = r.offset + t.done;
  rest.length = r.length - t.done;
  rest.link = false;
  continuations_.push_back(rest);
  return false;
}

std::size_t FaultEngine::do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) {
  if (max == 0) return 0;
  std::size_t n = std::min(max, local_.size());
  std::copy(local_.begin(), local_.begin() + static_cast<std::ptrdiff_t>(n), out);
  local_.erase(local_.begin(), local_.begin() + static_cast<std::ptrdiff_t>(n));
  resubmit_continuations();

  const bool forever = timeout.count() < 0;
  const auto deadline = std::chrono::steady_clock::now() + (forever ? Timeout(0) : timeout);
  while (n < max) {
    const bool need = n < min;
    Timeout left(0);
    if (need) {
      left = forever ? kForever
                     : std::max(Timeout(0), std::chrono::duration_cast<Timeout>(
                                                deadline - std::chrono::steady_clock::now()));
    }
    inner_out_.resize(max - n);
    const std::size_t got = native_reap(inner(), inner_out_.data(), max - n, need ? 1 : 0, left);
    bool continued = false;
    for (std::size_t k = 0; k < got; ++k) {
      Completion c = inner_out_[k];
      if (on_inner(c))
        out[n++] = c;
      else
        continued = true;
    }
    resubmit_continuations();
    // A synchronous inner engine has already done the continuations: collect them now.
    if (n >= min && !(continued && !inner().capabilities().asynchronous)) break;
    if (got == 0) {
      // A synchronous inner engine has everything done already: nothing more will come.
      if (!inner().capabilities().asynchronous) break;
      if (!forever && std::chrono::steady_clock::now() >= deadline) break;
    }
  }
  return n;
}

std::unique_ptr<FaultEngine> make_fault(std::unique_ptr<Engine> inner, std::vector<FaultRule> rules) {
  auto engine = std::make_unique<FaultEngine>(std::move(inner));
  for (const auto& rule : rules) engine->add_rule(rule);
  return engine;
}

}  // namespace tai::engines
