// ProgramLog and TaiCrashOracle: see crash_checker.hpp.
#include "src/testing/crash_checker.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

namespace tai::engines {

// ---------------------------------------------------------------------------------------------
// ProgramLog

std::string ProgramOp::to_string(std::size_t index) const {
  static const char* const kNames[] = {"write", "truncate", "fsync", "fdatasync", "barrier", "close"};
  std::string s = std::string(kNames[static_cast<int>(kind)]) + "#" + std::to_string(index) + " t" +
                  std::to_string(thread);
  if (kind == Kind::write) s += " [" + std::to_string(offset) + ", +" + std::to_string(data.size()) + ")";
  s += " submitted " + std::to_string(submit_begin) + ".." + std::to_string(submit_end);
  if (done_seq) s += ok ? ", ok at " + std::to_string(done_seq) : ", failed at " + std::to_string(done_seq) + ": " + error;
  return s;
}

ProgramLog::ProgramLog(std::function<std::uint64_t()> clock) : clock_(std::move(clock)) {}

std::size_t ProgramLog::begin(ProgramOp op) {
  std::lock_guard<std::mutex> lock(mutex_);
  op.submit_begin = clock_();
  op.submit_end = 0;
  op.done_seq = 0;
  ops_.push_back(std::move(op));
  return ops_.size() - 1;
}

std::size_t ProgramLog::begin_write(const std::string& path, std::uint64_t offset, const void* data, std::size_t n,
                                    unsigned thread) {
  ProgramOp op;
  op.kind = ProgramOp::Kind::write;
  op.path = path;
  op.offset = offset;
  op.thread = thread;
  const auto* p = static_cast<const unsigned char*>(data);
  op.data.assign(p, p + n);
  return begin(std::move(op));
}

std::size_t ProgramLog::begin_op(ProgramOp::Kind kind, const std::string& path, unsigned thread) {
  ProgramOp op;
  op.kind = kind;
  op.path = path;
  op.thread = thread;
  return begin(std::move(op));
}

void ProgramLog::submitted(std::size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  ops_.at(index).submit_end = clock_();
}

void ProgramLog::finished(std::size_t index, bool ok, std::string error) {
  std::lock_guard<std::mutex> lock(mutex_);
  ProgramOp& op = ops_.at(index);
  op.done_seq = clock_();
  op.ok = ok;
  op.error = std::move(error);
}

bool ProgramLog::track(std::size_t index, Receipt& receipt) {
  ProgramLog* self = this;
  return receipt.then([self, index](const Receipt& r) {
    // The receipt has finished: ok() and message() do not wait.
    self->finished(index, r.ok(), r.ok() ? std::string() : r.message());
  });
}

std::vector<ProgramOp> ProgramLog::ops() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ops_;
}

// ---------------------------------------------------------------------------------------------
// TaiCrashOracle

namespace {

constexpr unsigned kEof = 256;  // "past the end of the file"

/// A set of byte values plus "past the end of file".
struct Bits {
  std::uint64_t w[5] = {0, 0, 0, 0, 0};
  void set(unsigned v) noexcept { w[v >> 6] |= std::uint64_t{1} << (v & 63); }
  bool has(unsigned v) const noexcept { return (w[v >> 6] >> (v & 63)) & 1; }
  void set_blank() noexcept {
    set(0);
    set(kEof);
  }
};

std::string value_text(unsigned v) {
  if (v == kEof) return "EOF";
  char b[8];
  std::snprintf(b, sizeof b, "0x%02x", v);
  return b;
}

}  // namespace

/// What the oracle knows of one file: its sources and the sets that do not depend on the crash
/// time, plus a cache of the last crash time's allowed sets.
struct TaiCrashOracle::FileModel {
  struct Source {
    int op = -1;  // index into ops_; -1: the initial content
    bool truncate = false;
    std::uint64_t begin = 0, end = 0;  // covered range (truncate and initial: [0, extent))
    std::uint64_t submit_begin = 0, submit_end = 0;
    unsigned thread = 0;
    const std::vector<unsigned char>* data = nullptr;  // write: its bytes; initial: the content
  };
  struct BeforeWrite {
    std::size_t source;
    std::vector<Bits> allowed;  // over the write's range: its value or that of a source not before it
  };
  struct Barrier {
    std::size_t op;
    std::vector<Bits> after, nonafter;  // over [0, extent)
    std::vector<BeforeWrite> before;
  };

  std::string path;
  std::vector<unsigned char> initial;
  std::vector<Source> sources;     // [0] is the initial content
  std::vector<std::size_t> syncs;  // ops: fsync, fdatasync, barrier of the file
  std::vector<std::size_t> file_ops;
  std::vector<Barrier> barriers;
  std::uint64_t extent = 0;

  // The cache for one context.
  bool cached = false;
  std::uint64_t cached_seq = 0;
  std::vector<Bits> allowed;             // over [0, extent)
  // Per byte (and per thread when the order is per thread: index x * threads + thread): the
  // latest submit_begin of a required source (0: none).
  std::vector<std::uint64_t> required;
  unsigned threads = 1;  // slots per byte in `required`
  std::vector<int> required_by_sync;     // per byte: the sync op making it required (-1)

  /// Whether source `v` is not before any required source of byte x (the initial content is
  /// before everything).
  bool allowed_source(const Source& v, std::uint64_t x) const {
    if (v.op < 0) {
      for (unsigned t = 0; t < threads; ++t)
        if (required[x * threads + t] != 0) return false;
      return true;
    }
    return v.submit_end >= required[x * threads + (threads > 1 ? v.thread : 0)];
  }

  void add_value(Bits& b, const Source& s, std::uint64_t x) const {
    if (s.truncate) {
      b.set_blank();
    } else if (s.op < 0) {
      if (x < initial.size())
        b.set(initial[x]);
      else
        b.set_blank();
    } else {
      b.set((*s.data)[x - s.begin]);
    }
  }
};

TaiCrashOracle::TaiCrashOracle(const CrashLog& log, std::vector<ProgramOp> ops, bool order_across_threads)
    : log_(log), ops_(std::move(ops)), order_across_threads_(order_across_threads) {}

bool TaiCrashOracle::before(std::uint64_t a_end, unsigned a_thread, std::uint64_t b_begin, unsigned b_thread) const {
  return a_end < b_begin && (order_across_threads_ || a_thread == b_thread);
}
bool TaiCrashOracle::write_before(std::uint64_t a_end, unsigned a_thread, std::uint64_t b_begin, unsigned b_thread) {
  return a_end < b_begin && a_thread == b_thread;
}
TaiCrashOracle::~TaiCrashOracle() = default;

TaiCrashOracle::FileModel& TaiCrashOracle::model(std::uint32_t file) {
  auto it = models_.find(file);
  if (it != models_.end()) return *it->second;
  auto m = std::make_unique<FileModel>();
  m->path = file < log_.paths.size() ? log_.paths[file] : std::string();
  if (file < log_.initial.size()) m->initial = log_.initial[file];
  m->extent = m->initial.size();
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    const ProgramOp& op = ops_[i];
    if (op.path != m->path) continue;
    m->file_ops.push_back(i);
    if (op.kind == ProgramOp::Kind::write) m->extent = std::max<std::uint64_t>(m->extent, op.offset + op.data.size());
  }
  // The log may hold bytes past every program write only if TAI wrote them: keep the extent of
  // the program's writes (a longer image is a violation of its own).
  FileModel::Source init;
  init.begin = 0;
  init.end = m->extent;
  init.data = &m->initial;
  m->sources.push_back(init);
  for (std::size_t i : m->file_ops) {
    const ProgramOp& op = ops_[i];
    if (op.is_sync()) m->syncs.push_back(i);
    if (op.kind != ProgramOp::Kind::write && op.kind != ProgramOp::Kind::truncate) continue;
    if (op.kind == ProgramOp::Kind::write && op.data.empty()) continue;
    FileModel::Source s;
    s.op = static_cast<int>(i);
    s.truncate = op.kind == ProgramOp::Kind::truncate;
    s.begin = s.truncate ? 0 : op.offset;
    s.end = s.truncate ? m->extent : op.offset + op.data.size();
    s.submit_begin = op.submit_begin;
    s.submit_end = op.submit_end;
    s.thread = op.thread;
    s.data = &op.data;
    m->sources.push_back(s);
  }
  // Barriers: the sets that do not depend on the crash time. Sources submitted after the crash
  // add values that the durability check rejects anyway, so leaving them in costs nothing.
  for (std::size_t i : m->file_ops) {
    const ProgramOp& b = ops_[i];
    if (b.kind != ProgramOp::Kind::barrier) continue;
    FileModel::Barrier bar;
    bar.op = i;
    bar.after.resize(m->extent);
    bar.nonafter.resize(m->extent);
    bool any_after = false;
    for (const auto& s : m->sources) {
      const bool after = s.op >= 0 && before(b.submit_end, b.thread, s.submit_begin, s.thread);
      if (after && s.truncate) continue;  // a truncate after the barrier is no evidence of anything
      any_after |= after;
      for (std::uint64_t x = s.begin; x < s.end; ++x) m->add_value(after ? bar.after[x] : bar.nonafter[x], s, x);
    }
    if (!any_after) continue;  // nothing after it: nothing to check
    for (std::size_t si = 1; si < m->sources.size(); ++si) {
      const auto& v = m->sources[si];
      if (v.truncate || !before(v.submit_end, v.thread, b.submit_begin, b.thread)) continue;
      FileModel::BeforeWrite bw;
      bw.source = si;
      bw.allowed.resize(v.end - v.begin);
      for (const auto& u : m->sources) {
        const bool is_v = &u == &v;
        if (!is_v && (u.op < 0 || write_before(u.submit_end, u.thread, v.submit_begin, v.thread))) continue;  // u is before v
        const std::uint64_t lo = std::max(u.begin, v.begin), hi = std::min(u.end, v.end);
        for (std::uint64_t x = lo; x < hi; ++x) m->add_value(bw.allowed[x - v.begin], u, x);
      }
      bar.before.push_back(std::move(bw));
    }
    m->barriers.push_back(std::move(bar));
  }
  auto& ref = *m;
  models_.emplace(file, std::move(m));
  return ref;
}

std::uint64_t TaiCrashOracle::context(std::uint32_t file, std::uint64_t seq) const {
  auto& m = const_cast<TaiCrashOracle*>(this)->model(file);
  std::uint64_t submitted = 0, done = 0;
  for (std::size_t i : m.file_ops) {
    submitted += ops_[i].submit_begin < seq;
    done += ops_[i].done_seq != 0 && ops_[i].done_seq < seq;
  }
  return (submitted << 32) ^ done ^ 0x5A5A000000000000ull;
}

void TaiCrashOracle::check(const CrashState& state, std::vector<std::string>& out) {
  FileModel& m = model(state.file);
  const std::uint64_t c = state.seq;
  const std::vector<unsigned char>& img = *state.image;
  const std::uint64_t E = m.extent;

  if (!m.cached || m.cached_seq != c) {
    // The allowed values of every byte at crash time c.
    m.cached = true;
    m.cached_seq = c;
    m.allowed.assign(E, Bits{});
    // One required slot per thread: writes of different threads are not ordered among
    // themselves, so each thread's latest required write (or a later one) may hold a byte.
    m.threads = 1;
    for (const auto& v : m.sources) m.threads = std::max(m.threads, v.thread + 1);
    m.required.assign(E * m.threads, 0);
    m.required_by_sync.assign(E, -1);
    // Required sources: before a sync that succeeded before c. The latest such sync's submit
    // decides (every source before an earlier one is before it too).
    for (std::size_t si : m.syncs) {
      const ProgramOp& s = ops_[si];
      if (!(s.done_seq != 0 && s.done_seq < c && s.ok)) continue;
      for (const auto& v : m.sources) {
        if (v.op < 0 || !before(v.submit_end, v.thread, s.submit_begin, s.thread)) continue;
        const ProgramOp& vop = ops_[static_cast<std::size_t>(v.op)];
        if (vop.done_seq != 0 && !vop.ok) continue;  // a write that failed is not promised
        for (std::uint64_t x = v.begin; x < v.end; ++x) {
          std::uint64_t& slot = m.required[x * m.threads + (m.threads > 1 ? v.thread : 0)];
          if (v.submit_begin > slot) {
            slot = v.submit_begin;
            m.required_by_sync[x] = static_cast<int>(si);
          }
        }
      }
    }
    for (const auto& v : m.sources) {
      if (v.op >= 0 && !(v.submit_begin < c)) continue;  // not submitted yet
      for (std::uint64_t x = v.begin; x < v.end; ++x)
        if (m.allowed_source(v, x)) m.add_value(m.allowed[x], v, x);
    }
  }

  auto observed = [&](std::uint64_t x) -> unsigned { return x < img.size() ? img[x] : kEof; };

  // 1. Durability and provenance.
  // Past every write only zeros may follow: a direct-I/O write of a partial last block writes
  // the whole block and the engine base trims the file back with ftruncate, a change of size
  // that no engine request carries and so no log holds; a crash may keep the padding.
  for (std::uint64_t x = E; x < img.size(); ++x)
    if (img[x] != 0) {
      out.push_back(m.path + ": the file is " + std::to_string(img.size()) + " bytes long and offset " +
                    std::to_string(x) + ", past every write (they end at " + std::to_string(E) + "), reads " +
                    value_text(img[x]));
      break;
    }
  std::uint64_t bad = 0, first_bad = 0;
  for (std::uint64_t x = 0; x < E; ++x)
    if (!m.allowed[x].has(observed(x))) {
      if (bad++ == 0) first_bad = x;
    }
  if (bad) {
    const std::uint64_t x = first_bad;
    std::string s = m.path + ": " + std::to_string(bad) + " byte(s) hold a value no allowed source explains; first at offset " +
                    std::to_string(x) + ": read " + value_text(observed(x));
    if (m.required_by_sync[x] >= 0)
      s += "; required durable by " + ops_[static_cast<std::size_t>(m.required_by_sync[x])].to_string(
                                          static_cast<std::size_t>(m.required_by_sync[x]));
    s += "; sources of that byte:";
    for (const auto& v : m.sources) {
      if (x < v.begin || x >= v.end) continue;
      Bits one;
      m.add_value(one, v, x);
      std::string vals;
      for (unsigned val = 0; val <= kEof; ++val)
        if (one.has(val)) vals += (vals.empty() ? "" : "/") + value_text(val);
      const bool submitted = v.op < 0 || v.submit_begin < c;
      const bool allowed = submitted && m.allowed_source(v, x);
      s += " {" + (v.op < 0 ? std::string("initial") : ops_[static_cast<std::size_t>(v.op)].to_string(static_cast<std::size_t>(v.op))) +
           " = " + vals + (allowed ? "" : submitted ? " (stale)" : " (not yet submitted)") + "}";
    }
    out.push_back(std::move(s));
  }

  // 2. Barriers.
  for (const auto& bar : m.barriers) {
    const ProgramOp& b = ops_[bar.op];
    if (!(b.submit_begin < c)) continue;
    std::uint64_t evidence = E;
    for (std::uint64_t x = 0; x < E; ++x) {
      const unsigned v = observed(x);
      if (bar.after[x].has(v) && !bar.nonafter[x].has(v)) {
        evidence = x;
        break;
      }
    }
    if (evidence == E) continue;
    for (const auto& bw : bar.before) {
      const auto& v = m.sources[bw.source];
      for (std::uint64_t x = v.begin; x < v.end; ++x) {
        if (bw.allowed[x - v.begin].has(observed(x))) continue;
        out.push_back(m.path + ": " + b.to_string(bar.op) + " broken: offset " + std::to_string(evidence) +
                      " holds data written after it (" + value_text(observed(evidence)) + "), but " +
                      ops_[static_cast<std::size_t>(v.op)].to_string(static_cast<std::size_t>(v.op)) +
                      ", submitted before it, is missing at offset " + std::to_string(x) + " (read " +
                      value_text(observed(x)) + ")");
        break;
      }
    }
  }
}

}  // namespace tai::engines
