// `tai-bench latency` (the io_uring/mmap latency study): per-read latency of random 8-byte-key lookups over a data file,
// through each way of reading a file: read(2) after lseek(2), pread(2), O_DIRECT pread, mmap, TAI's
// posix engine (buffered and direct), io_uring (direct and buffered), libaio, and io_uring with
// IOPOLL where the device polls. Then the study's multi-read mode: N reads per iteration, one after
// the other (blocking) or submitted together (uring, libaio).
//
// Every value read is compared with the data pattern (seeds_util.hpp), so a number cannot come
// from reading nothing: a mismatch stops the run with a message and exit status 3.
//
// Method, as in the study: `threads` threads each draw keys from their own deterministic sequence
// (the same in every variant) for `duration` seconds, timing each read (or each batch) with the
// steady clock; percentiles come from a log-linear histogram (<= 1.6 % error), the mean is exact.
// Page faults, context switches and user/system CPU are getrusage(RUSAGE_SELF) differences over
// the timed part (readers are opened before and closed after it).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tai/detail/aligned_buffer.hpp"
#include "engines/common/alignment.hpp"
#include "tai/engine.hpp"
#include "tai/engine_selector.hpp"
#include "tai_bench/bench_util.hpp"
#include "tai_bench/commands.hpp"
#include "tai_bench/seeds_util.hpp"

namespace tai::bench {
namespace {

using seeds::DataFile;
using seeds::Failure;
using seeds::run_command;
using seeds::LatencyHistogram;

using seeds::kExitMismatch;

struct LatencyOptions {
  std::string dir = "/var/tmp/tai-bench";
  std::string sizes = "tiny,medium";
  std::string large_size = "8G";
  unsigned threads = 2;
  double duration = 1.0;
  std::string variants = "read,pread,direct-pread,mmap,posix,posix-direct,uring,uring-buffered,libaio,uring-iopoll";
  unsigned multi_read = 4;
  std::string multi_methods = "blocking,uring,libaio,uring-iopoll";
  std::string multi_modes = "cached,direct";
  std::string multi_size;  // empty: the largest of --size
  std::string cache = "auto";
  std::string drop_with = "auto";
  std::uint64_t seed = 2;
  std::string csv;
  std::string plot;
  bool corrupt_for_test = false;
};

// --- variants ------------------------------------------------------------------------------------

enum class Kind { read_lseek, pread, mmap, posix_engine, async_engine };

struct Variant {
  std::string name;
  Kind kind = Kind::pread;
  bool direct = false;
  std::string engine;  // async_engine: "uring" or "libaio"
  bool iopoll = false;
};

std::optional<Variant> single_variant(const std::string& name) {
  if (name == "read") return Variant{name, Kind::read_lseek, false, {}, false};
  if (name == "pread") return Variant{name, Kind::pread, false, {}, false};
  if (name == "direct-pread") return Variant{name, Kind::pread, true, {}, false};
  if (name == "mmap") return Variant{name, Kind::mmap, false, {}, false};
  if (name == "posix") return Variant{name, Kind::posix_engine, false, {}, false};
  if (name == "posix-direct") return Variant{name, Kind::posix_engine, true, {}, false};
  if (name == "uring") return Variant{name, Kind::async_engine, true, "uring", false};
  if (name == "uring-buffered") return Variant{name, Kind::async_engine, false, "uring", false};
  if (name == "libaio") return Variant{name, Kind::async_engine, true, "libaio", false};
  if (name == "uring-iopoll") return Variant{name, Kind::async_engine, true, "uring", true};
  return std::nullopt;
}

/// The latency study's multi-read methods in a mode ("cached" or "direct"); nullopt when the combination
/// is not one (libaio and IOPOLL need O_DIRECT).
std::optional<Variant> multi_variant(const std::string& method, const std::string& mode) {
  const bool direct = mode == "direct";
  if (method == "blocking") return Variant{method, Kind::pread, direct, {}, false};
  if (method == "uring") return Variant{method, Kind::async_engine, direct, "uring", false};
  if (method == "libaio" && direct) return Variant{method, Kind::async_engine, true, "libaio", false};
  if (method == "uring-iopoll" && direct) return Variant{method, Kind::async_engine, true, "uring", true};
  return std::nullopt;
}

// --- what every reader of one variant shares ------------------------------------------------------

struct Shared {
  std::string path;
  std::uint64_t size = 0;
  std::uint64_t keys = 0;
  std::uint32_t block = 4096;       // bytes of one direct read (the file's offset/length alignment)
  std::uint32_t mem_align = 4096;   // buffer alignment for direct reads
  int fd = -1;                      // pread / direct-pread: one descriptor for all threads
  const unsigned char* map = nullptr;
  std::size_t map_len = 0;
  std::unique_ptr<Engine> posix;    // posix / posix-direct: one engine, execute() from every thread
  std::unique_ptr<EngineFile> posix_file;
  SyncEngine* posix_sync = nullptr;

  Shared() = default;
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  ~Shared() {
    if (posix_file && posix) (void)posix->close(*posix_file);
    posix_file.reset();
    posix.reset();
    if (map) ::munmap(const_cast<unsigned char*>(map), map_len);
    if (fd >= 0) ::close(fd);
  }
};

/// Opens what `v` shares between threads. Returns an error message, empty on success.
std::string open_shared(Shared& sh, const Variant& v) {
  const int probe = ::open(sh.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (probe >= 0) {
    const Alignment a = detail::discover_alignment(probe);
    sh.block = std::max<std::uint32_t>({a.offset, a.length, 8});
    sh.mem_align = std::max<std::uint32_t>(a.memory, 64);
    ::close(probe);
  }
  switch (v.kind) {
    case Kind::read_lseek:
    case Kind::async_engine:
      return {};
    case Kind::pread:
      sh.fd = ::open(sh.path.c_str(), O_RDONLY | O_CLOEXEC | (v.direct ? O_DIRECT : 0));
      if (sh.fd < 0) return fmt::format("open '{}'{}: {}", sh.path, v.direct ? " O_DIRECT" : "", std::strerror(errno));
      return {};
    case Kind::mmap: {
      sh.fd = ::open(sh.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (sh.fd < 0) return fmt::format("open '{}': {}", sh.path, std::strerror(errno));
      void* m = ::mmap(nullptr, sh.size, PROT_READ, MAP_SHARED, sh.fd, 0);
      if (m == MAP_FAILED) return fmt::format("mmap '{}': {}", sh.path, std::strerror(errno));
      sh.map = static_cast<const unsigned char*>(m);
      sh.map_len = sh.size;
      return {};
    }
    case Kind::posix_engine: {
      auto e = make_engine("posix");
      if (!e) return e.error().message;
      sh.posix = std::move(e.value());
      sh.posix_sync = dynamic_cast<SyncEngine*>(sh.posix.get());
      if (!sh.posix_sync) return "the posix engine is not a SyncEngine";
      auto f = sh.posix->open(sh.path, OpenMode{v.direct ? Open::read | Open::direct : Open::read});
      if (!f) return f.error().message;
      sh.posix_file = std::move(f.value());
      return {};
    }
  }
  return {};
}

// --- readers: one per thread; read(keys, values, n) fills values[i] with the word of keys[i] ------

class LseekReader {
 public:
  std::string open(const Shared& sh, const Variant&, unsigned) {
    fd_ = ::open(sh.path.c_str(), O_RDONLY | O_CLOEXEC);  // own descriptor: lseek moves a shared offset
    return fd_ < 0 ? fmt::format("open '{}': {}", sh.path, std::strerror(errno)) : std::string();
  }
  ~LseekReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool read(const std::uint64_t* keys, std::uint64_t* values, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      if (::lseek(fd_, static_cast<off_t>(keys[i] * 8), SEEK_SET) < 0) return fail("lseek", errno, keys[i]);
      const ssize_t r = ::read(fd_, &values[i], 8);
      if (r != 8) return fail("read", r < 0 ? errno : EIO, keys[i]);
    }
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  bool fail(const char* what, int err, std::uint64_t key) {
    error_ = fmt::format("{} of key {}: {}", what, key, std::strerror(err));
    return false;
  }
  int fd_ = -1;
  std::string error_;
};

class PreadReader {
 public:
  std::string open(const Shared& sh, const Variant& v, unsigned) {
    fd_ = sh.fd;
    direct_ = v.direct;
    block_ = sh.block;
    if (direct_) buf_ = detail::AlignedBuffer(block_, sh.mem_align);
    return {};
  }
  bool read(const std::uint64_t* keys, std::uint64_t* values, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t pos = keys[i] * 8;
      if (!direct_) {
        const ssize_t r = ::pread(fd_, &values[i], 8, static_cast<off_t>(pos));
        if (r != 8) return fail(r < 0 ? errno : EIO, keys[i]);
      } else {
        const std::uint64_t off = detail::round_down(pos, block_);
        const ssize_t r = ::pread(fd_, buf_.data(), block_, static_cast<off_t>(off));
        if (r != static_cast<ssize_t>(block_)) return fail(r < 0 ? errno : EIO, keys[i]);
        std::memcpy(&values[i], buf_.data() + (pos - off), 8);
      }
    }
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  bool fail(int err, std::uint64_t key) {
    error_ = fmt::format("pread of key {}: {}", key, std::strerror(err));
    return false;
  }
  int fd_ = -1;
  bool direct_ = false;
  std::uint32_t block_ = 0;
  detail::AlignedBuffer buf_;
  std::string error_;
};

class MmapReader {
 public:
  std::string open(const Shared& sh, const Variant&, unsigned) {
    base_ = sh.map;
    return {};
  }
  bool read(const std::uint64_t* keys, std::uint64_t* values, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) std::memcpy(&values[i], base_ + keys[i] * 8, 8);
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  const unsigned char* base_ = nullptr;
  std::string error_;
};

/// TAI's posix engine: SyncEngine::execute() on the calling thread (thread-safe), one shared file.
class PosixEngineReader {
 public:
  std::string open(const Shared& sh, const Variant& v, unsigned) {
    engine_ = sh.posix_sync;
    file_ = sh.posix_file.get();
    direct_ = v.direct;
    block_ = sh.block;
    if (direct_) buf_ = detail::AlignedBuffer(block_, sh.mem_align);
    return {};
  }
  bool read(const std::uint64_t* keys, std::uint64_t* values, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t pos = keys[i] * 8;
      Request r;
      r.op = Op::read;
      r.file = file_;
      if (!direct_) {
        r.buffer = &values[i];
        r.offset = pos;
        r.length = 8;
      } else {
        r.buffer = buf_.data();
        r.offset = detail::round_down(pos, block_);
        r.length = block_;
      }
      const Completion c = engine_->execute(r);
      if (c.result != static_cast<std::int64_t>(r.length)) return fail(c, keys[i]);
      if (direct_) std::memcpy(&values[i], buf_.data() + (pos - r.offset), 8);
    }
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  bool fail(const Completion& c, std::uint64_t key) {
    error_ = c.result < 0 ? fmt::format("read of key {}: {}", key, c.error().message())
                          : fmt::format("read of key {}: short read ({} bytes)", key, c.result);
    return false;
  }
  SyncEngine* engine_ = nullptr;
  EngineFile* file_ = nullptr;
  bool direct_ = false;
  std::uint32_t block_ = 0;
  detail::AlignedBuffer buf_;
  std::string error_;
};

EngineOptions async_options(const Variant& v, unsigned depth) {
  EngineOptions o;
  o.depth = std::max(depth, 1u);
  o.uring_iopoll = v.iopoll;
  return o;
}

/// uring or libaio: one engine (ring / AIO context) per thread, made and used on that thread.
/// A batch of n reads is handed to the engine in one submit() and reaped together.
class AsyncReader {
 public:
  std::string open(const Shared& sh, const Variant& v, unsigned batch) {
    auto e = make_engine(v.engine, async_options(v, batch));
    if (!e) return e.error().message;
    engine_ = std::move(e.value());
    auto f = engine_->open(sh.path, OpenMode{v.direct ? Open::read | Open::direct : Open::read});
    if (!f) return f.error().message;
    file_ = std::move(f.value());
    direct_ = v.direct;
    block_ = sh.block;
    buf_ = detail::AlignedBuffer(static_cast<std::size_t>(block_) * batch, sh.mem_align);
    requests_.resize(batch);
    completions_.resize(batch);
    return {};
  }
  ~AsyncReader() {
    if (file_) (void)engine_->close(*file_);
    file_.reset();  // files go before their engine
  }
  bool read(const std::uint64_t* keys, std::uint64_t* values, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t pos = keys[i] * 8;
      Request& r = requests_[i];
      r.op = Op::read;
      r.file = file_.get();
      r.buffer = buf_.data() + i * block_;
      r.offset = direct_ ? detail::round_down(pos, block_) : pos;
      r.length = direct_ ? block_ : 8;
      r.user_data = i;
    }
    std::size_t submitted = 0;
    while (submitted < n) {
      const std::size_t taken = engine_->submit(requests_.data() + submitted, n - submitted);
      if (taken == 0) {
        error_ = fmt::format("submit took no request ({} in flight, depth {})", engine_->in_flight(),
                             engine_->depth());
        return false;
      }
      submitted += taken;
    }
    std::size_t done = 0;
    while (done < n) {
      const std::size_t got = engine_->reap(completions_.data(), n - done, n - done);
      for (std::size_t k = 0; k < got; ++k) {
        const Completion& c = completions_[k];
        const Request& r = requests_[c.user_data];
        if (c.result != static_cast<std::int64_t>(r.length)) {
          error_ = c.result < 0 ? fmt::format("read of key {}: {}", keys[c.user_data], c.error().message())
                                : fmt::format("read of key {}: short read ({} bytes)", keys[c.user_data], c.result);
          drain(n - done - k - 1);
          return false;
        }
        std::memcpy(&values[c.user_data], static_cast<unsigned char*>(r.buffer) + (keys[c.user_data] * 8 - r.offset), 8);
      }
      done += got;
    }
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  void drain(std::size_t remaining) {
    while (remaining > 0) {
      const std::size_t got = engine_->reap(completions_.data(), remaining, remaining);
      if (got == 0) break;
      remaining -= got;
    }
  }
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineFile> file_;
  bool direct_ = false;
  std::uint32_t block_ = 0;
  detail::AlignedBuffer buf_;
  std::vector<Request> requests_;
  std::vector<Completion> completions_;
  std::string error_;
};

// --- running one variant ---------------------------------------------------------------------------

struct ThreadOut {
  LatencyHistogram hist;
  std::string open_error;
  std::string error;  // I/O error
  std::string mismatch;
};

/// Start line for the threads: all open their readers, then the clock starts for all at once.
struct Gate {
  std::mutex mutex;
  std::condition_variable cv;
  unsigned ready = 0;
  bool go = false;
  std::int64_t deadline_ns = 0;
};

struct RunResult {
  bool ran = false;
  std::string note;
  std::string mismatch;  // non-empty: the data did not check
  LatencyHistogram hist;
  Usage usage;
  seeds::Faults faults;
};

template <class Reader>
void thread_body(const Shared& sh, const Variant& v, unsigned batch, std::uint64_t seed, Gate& gate,
                 std::atomic<bool>& stop, ThreadOut& out) {
  Reader reader;
  out.open_error = reader.open(sh, v, batch);
  std::int64_t deadline = 0;
  {
    std::unique_lock<std::mutex> lock(gate.mutex);
    ++gate.ready;
    gate.cv.notify_all();
    gate.cv.wait(lock, [&] { return gate.go; });
    deadline = gate.deadline_ns;
  }
  if (!out.open_error.empty()) return;
  seeds::KeyGenerator keys_gen(seed);
  std::vector<std::uint64_t> keys(batch), values(batch);
  // `stop` is a plain flag: relaxed loads and stores; the messages it announces are read by the
  // main thread only after join(), which orders them.
  while (!stop.load(std::memory_order_relaxed)) {
    for (auto& k : keys) k = keys_gen.below(sh.keys);
    const std::int64_t t0 = now_ns();
    if (!reader.read(keys.data(), values.data(), batch)) {
      out.error = reader.error();
      stop.store(true, std::memory_order_relaxed);
      return;
    }
    const std::int64_t t1 = now_ns();
    for (unsigned i = 0; i < batch; ++i) {
      if (values[i] != seeds::expected_word(keys[i])) {
        out.mismatch = fmt::format("key {} {}", keys[i], seeds::describe_mismatch(&values[i], keys[i] * 8));
        stop.store(true, std::memory_order_relaxed);
        return;
      }
    }
    out.hist.record(static_cast<std::uint64_t>(t1 - t0));
    if (t1 >= deadline) return;
  }
}

template <class Reader>
RunResult run_threads(const Shared& sh, const Variant& v, unsigned threads, unsigned batch, double duration,
                      std::uint64_t seed) {
  RunResult res;
  Gate gate;
  std::atomic<bool> stop{false};
  std::vector<ThreadOut> outs(threads);
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back(thread_body<Reader>, std::cref(sh), std::cref(v), batch, seeds::thread_seed(seed, t),
                      std::ref(gate), std::ref(stop), std::ref(outs[t]));
  UsageMeter meter;
  seeds::Faults f0;
  {
    std::unique_lock<std::mutex> lock(gate.mutex);
    gate.cv.wait(lock, [&] { return gate.ready == threads; });
    meter.restart();
    f0 = seeds::faults_now();
    gate.deadline_ns = now_ns() + static_cast<std::int64_t>(duration * 1e9);
    gate.go = true;
  }
  gate.cv.notify_all();
  for (auto& th : pool) th.join();
  res.usage = meter.stop();
  const seeds::Faults f1 = seeds::faults_now();
  res.faults = {f1.minor - f0.minor, f1.major - f0.major};
  for (unsigned t = 0; t < threads; ++t) {
    const ThreadOut& o = outs[t];
    if (!o.mismatch.empty() && res.mismatch.empty()) res.mismatch = fmt::format("thread {}: {}", t, o.mismatch);
    if (!o.open_error.empty() && res.note.empty()) res.note = "not run: " + o.open_error;
    if (!o.error.empty() && res.note.empty()) res.note = fmt::format("I/O error (thread {}): {}", t, o.error);
    res.hist.merge(o.hist);
  }
  res.ran = res.note.empty() && res.mismatch.empty();
  return res;
}

/// Why an engine variant cannot run here, or empty. For IOPOLL: the device's io_poll setting and
/// what the engine answers to one polled read.
std::string engine_unavailable(const Shared& sh, const Variant& v, std::string* remark) {
  if (v.kind != Kind::async_engine) return {};
  auto e = make_engine(v.engine, async_options(v, 1));
  if (!e) return e.error().message;
  if (!v.iopoll) return {};
  const std::string poll_reason = seeds::io_poll_unsupported_reason(sh.path);
  auto f = e.value()->open(sh.path, OpenMode{Open::read | Open::direct});
  if (!f) {
    // The engine may have checked io_poll itself and said so; then its message is enough.
    const std::string& m = f.error().message;
    return poll_reason.empty() || m.find("io_poll") != std::string::npos ? m : poll_reason + "; " + m;
  }
  detail::AlignedBuffer buf(sh.block, sh.mem_align);
  Request r;
  r.op = Op::read;
  r.file = f.value().get();
  r.buffer = buf.data();
  r.length = sh.block;
  Completion c;
  std::string result;
  if (e.value()->submit(&r, 1) != 1) {
    result = "the engine took no request";
  } else if (e.value()->reap(&c, 1, 1, std::chrono::seconds(5)) != 1) {
    result = "a polled read did not complete within 5 s";
  } else if (c.result < 0) {
    result = fmt::format("a polled read failed: {} ({})", c.error().message(), -c.result);
  }
  (void)e.value()->close(*f.value());
  if (!result.empty()) return poll_reason.empty() ? result : poll_reason + "; " + result;
  if (!poll_reason.empty()) *remark = "polled reads completed although " + poll_reason;
  return {};
}

RunResult run_variant(const Shared& sh, const Variant& v, unsigned threads, unsigned batch, double duration,
                      std::uint64_t seed) {
  switch (v.kind) {
    case Kind::read_lseek: return run_threads<LseekReader>(sh, v, threads, batch, duration, seed);
    case Kind::pread: return run_threads<PreadReader>(sh, v, threads, batch, duration, seed);
    case Kind::mmap: return run_threads<MmapReader>(sh, v, threads, batch, duration, seed);
    case Kind::posix_engine: return run_threads<PosixEngineReader>(sh, v, threads, batch, duration, seed);
    case Kind::async_engine: return run_threads<AsyncReader>(sh, v, threads, batch, duration, seed);
  }
  return {};
}

// --- the command ------------------------------------------------------------------------------------

struct Row {
  std::string kind;  // "single" or "multi"
  std::uint64_t size = 0;
  std::string variant;
  std::string mode;  // multi: cached/direct; single: buffered/direct/mmap
  unsigned batch = 1;
  unsigned threads = 0;
  RunResult r;
  std::string cache;
};

std::uint64_t size_of(const std::string& name, const LatencyOptions& o) {
  if (name == "tiny") return 64ull << 10;
  if (name == "medium") return 64ull << 20;
  if (name == "large") return parse_size(o.large_size);
  return parse_size(name);
}

std::string percent(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? "?" : fmt::format("{:.0f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

/// Puts the file in the cache state of `mode` ("warm" or "drop") and returns the column text.
std::string set_cache(const DataFile& f, const std::string& mode, seeds::DropMethod method, std::string* how) {
  std::string error;
  std::optional<std::string> done;
  if (mode == "drop") {
    done = seeds::drop_cache(f.path, method, &error);
  } else if (seeds::resident_bytes(f.path) < f.size) {
    done = seeds::warm_cache(f.path, &error);
  } else {
    done = std::string("warm (already cached)");
  }
  if (!done) throw Failure(1, error);
  if (how->empty() || how->find("already") != std::string::npos) *how = *done;
  return fmt::format("{} {}", mode == "drop" ? "dropped" : "warm", percent(seeds::resident_bytes(f.path), f.size));
}

std::string us(double ns) { return fmt::format("{:.1f}", ns / 1e3); }

/// Long notes (an engine's full reason for not running) would stretch the table: the table
/// gets "[n] <first words>" and the text is printed in full under it, once per distinct text.
std::string footnote(const std::string& note, std::vector<std::string>& notes) {
  constexpr std::size_t kInline = 48;
  if (note.size() <= kInline) return note;
  auto it = std::find(notes.begin(), notes.end(), note);
  if (it == notes.end()) it = notes.insert(notes.end(), note);
  const std::size_t n = static_cast<std::size_t>(it - notes.begin()) + 1;
  std::string head = note.substr(0, note.find(':') == std::string::npos ? kInline : note.find(':'));
  return fmt::format("{} [{}]", head, n);
}

void add_table_row(Table& t, const Row& row, std::vector<std::string>& notes) {
  const RunResult& r = row.r;
  const LatencyHistogram& h = r.hist;
  auto lat = [&](double q) { return r.ran ? (row.kind == "single" ? us(h.percentile(q)) : fmt::format("{:.0f}", h.percentile(q))) : "-"; };
  const std::string avg = r.ran ? (row.kind == "single" ? us(h.mean()) : fmt::format("{:.0f}", h.mean())) : "-";
  std::vector<std::string> cells = {format_size(row.size), row.variant};
  if (row.kind == "multi") {
    cells.push_back(row.mode);
    cells.push_back(std::to_string(row.batch));
  }
  cells.push_back(std::to_string(row.threads));
  for (const double q : {0.5, 0.99, 0.999, 0.9999}) cells.push_back(lat(q));
  cells.push_back(avg);
  cells.push_back(r.ran ? seeds::format_total(static_cast<double>(h.count())) : "-");
  if (row.kind == "single") {
    cells.push_back(r.ran ? std::to_string(r.faults.minor) : "-");
    cells.push_back(r.ran ? std::to_string(r.faults.major) : "-");
  }
  cells.push_back(r.ran ? std::to_string(r.usage.voluntary_switches) : "-");
  cells.push_back(r.ran ? std::to_string(r.usage.involuntary_switches) : "-");
  cells.push_back(r.ran ? fmt::format("{:.2f}", r.usage.user_ms / 1e3) : "-");
  cells.push_back(r.ran ? fmt::format("{:.2f}", r.usage.sys_ms / 1e3) : "-");
  cells.push_back(row.cache);
  cells.push_back(footnote(r.note, notes));
  t.add_row(std::move(cells));
}

std::string plot_latency(const std::vector<Row>& rows, const std::string& png, const std::string& machine,
                         unsigned threads) {
  const std::string dat = seeds::sibling_path(png, ".dat");
  std::FILE* out = std::fopen(dat.c_str(), "w");
  if (!out) return fmt::format("cannot write '{}': {}", dat, std::strerror(errno));
  // One data block per panel (a size of the single-read table, then a multi-read mode); blocks
  // are separated by two blank lines so that gnuplot's `index` picks them.
  std::vector<std::string> titles;
  std::vector<std::pair<std::string, std::uint64_t>> panels;
  for (const Row& r : rows) {
    const auto key = std::make_pair(r.kind == "single" ? std::string("single") : "multi " + r.mode, r.size);
    if (std::find(panels.begin(), panels.end(), key) == panels.end()) panels.push_back(key);
  }
  std::size_t blocks = 0;
  for (const auto& p : panels) {
    bool any = false;
    for (const Row& r : rows) {
      const std::string k = r.kind == "single" ? std::string("single") : "multi " + r.mode;
      if (k != p.first || r.size != p.second || !r.r.ran) continue;
      if (!any && blocks > 0) std::fprintf(out, "\n\n");
      any = true;
      auto v = [&](double q) { return std::max(r.r.hist.percentile(q) / 1e3, 0.001); };
      std::fprintf(out, "\"%s\" %.4f %.4f %.4f %.4f\n", r.variant.c_str(), v(0.5), v(0.99), v(0.999), v(0.9999));
    }
    if (!any) continue;
    ++blocks;
    titles.push_back(p.first == "single"
                         ? fmt::format("one read at a time, {} file", format_size(p.second))
                         : fmt::format("{} reads per iteration ({}), {} file: latency per iteration", rows.back().batch,
                                       p.first.substr(6), format_size(p.second)));
  }
  std::fclose(out);
  if (blocks == 0) return "nothing ran: no figure";
  std::string gp = fmt::format(
      "# Generated by tai-bench latency; re-run with: gnuplot {}\n"
      "set terminal pngcairo size 1100,{} font ',10'\n"
      "set output {}\n"
      "set multiplot layout {},1 title {}\n"
      "set style data histograms\nset style histogram clustered gap 1\n"
      "set style fill solid 0.85 border -1\nset logscale y\nset grid ytics\n"
      "set ylabel 'microseconds (log)'\nset xtics rotate by -25 nomirror\nset key top left\n",
      seeds::gnuplot_quote(seeds::sibling_path(png, ".gp")), 330 * blocks + 40, seeds::gnuplot_quote(png), blocks,
      seeds::gnuplot_quote(fmt::format("tai-bench latency (the io_uring/mmap latency study), {} threads - {}", threads, machine)));
  for (std::size_t i = 0; i < blocks; ++i) {
    gp += fmt::format("set title {}\n", seeds::gnuplot_quote(titles[i]));
    gp += fmt::format(
        "plot {0} index {1} using 2:xtic(1) title 'p50', '' index {1} using 3 title 'p99', "
        "'' index {1} using 4 title 'p999', '' index {1} using 5 title 'p9999'\n",
        seeds::gnuplot_quote(dat), i);
  }
  gp += "unset multiplot\n";
  return seeds::run_gnuplot(gp, seeds::sibling_path(png, ".gp"));
}

// What a latency run reads: the files' sizes (single reads on `sizes`, multi-read on `multi_size`),
// the variants of each kind, and every file to prepare.
struct LatencyPlan {
  std::vector<std::uint64_t> sizes;
  std::vector<Variant> singles;
  std::vector<std::pair<std::string, Variant>> multis;  // (mode, method)
  std::uint64_t multi_size = 0;
  std::vector<std::uint64_t> files;
};

LatencyPlan plan_latency(const LatencyOptions& o) {
  LatencyPlan p;
  for (const auto& s : split_list(o.sizes)) {
    const std::uint64_t bytes = detail::round_up(size_of(s, o), seeds::kPatternPage);
    if (std::find(p.sizes.begin(), p.sizes.end(), bytes) == p.sizes.end()) p.sizes.push_back(bytes);
  }
  for (const auto& name : split_list(o.variants)) {
    if (name == "none") continue;
    auto v = single_variant(name);
    if (!v) throw Failure(2, fmt::format("unknown variant '{}' (known: {})", name, LatencyOptions{}.variants));
    p.singles.push_back(*v);
  }
  if (o.multi_read > 0) {
    for (const auto& mode : split_list(o.multi_modes)) {
      if (mode != "cached" && mode != "direct") throw Failure(2, fmt::format("unknown multi-read mode '{}'", mode));
      for (const auto& method : split_list(o.multi_methods)) {
        if (method != "blocking" && method != "uring" && method != "libaio" && method != "uring-iopoll")
          throw Failure(2, fmt::format("unknown multi-read method '{}'", method));
        if (auto v = multi_variant(method, mode)) p.multis.emplace_back(mode, *v);
      }
    }
  }
  if (!p.multis.empty()) {
    p.multi_size = o.multi_size.empty()
                       ? (p.sizes.empty() ? (64ull << 20) : *std::max_element(p.sizes.begin(), p.sizes.end()))
                       : detail::round_up(size_of(o.multi_size, o), seeds::kPatternPage);
  }
  p.files = p.sizes;
  if (p.multi_size && std::find(p.files.begin(), p.files.end(), p.multi_size) == p.files.end())
    p.files.push_back(p.multi_size);
  if (p.files.empty()) throw Failure(2, "nothing to run: no --size and no multi-read");
  return p;
}

void print_latency_tables(const std::vector<Row>& rows, unsigned multi_read) {
  Table single({"size", "variant", "threads", "p50", "p99", "p999", "p9999", "avg", "total", "minflt", "majflt",
                "vcsw", "ivcsw", "user_s", "sys_s", "cache", "note"});
  Table multi({"size", "method", "mode", "reads/iter", "threads", "p50_ns", "p99_ns", "p999_ns", "p9999_ns", "avg_ns",
               "total", "vcsw", "ivcsw", "user_s", "sys_s", "cache", "note"});
  std::vector<std::string> single_notes, multi_notes;
  for (const Row& r : rows)
    add_table_row(r.kind == "single" ? single : multi, r, r.kind == "single" ? single_notes : multi_notes);
  auto print_notes = [](const std::vector<std::string>& notes) {
    for (std::size_t i = 0; i < notes.size(); ++i) fmt::print("# [{}] {}\n", i + 1, notes[i]);
  };
  if (single.size() > 0) {
    fmt::print("\n");
    std::fflush(stdout);
    single.print();
    print_notes(single_notes);
  }
  if (multi.size() > 0) {
    fmt::print("\n# multi-read: {} random keys per iteration, read one after the other (blocking) or submitted "
               "together (uring, libaio)\n",
               multi_read);
    std::fflush(stdout);
    multi.print();
    print_notes(multi_notes);
  }
  std::fflush(stdout);
}

void write_latency_csv(const std::vector<Row>& rows, const std::string& path, const std::string& machine) {
  CsvWriter csv;
  if (auto err = csv.open(path, {"kind", "file_bytes", "variant", "mode", "reads_per_iter", "threads", "p50_ns",
                                 "p99_ns", "p999_ns", "p9999_ns", "avg_ns", "total", "minflt", "majflt", "vcsw",
                                 "ivcsw", "user_s", "sys_s", "cache", "note", "machine"});
      !err.empty())
    throw Failure(1, err);
  for (const Row& row : rows) {
    const RunResult& r = row.r;
    auto num = [&](double v) { return r.ran ? fmt::format("{:.0f}", v) : std::string(); };
    csv.row({row.kind, std::to_string(row.size), row.variant, row.mode, std::to_string(row.batch),
             std::to_string(row.threads), num(r.hist.percentile(0.5)), num(r.hist.percentile(0.99)),
             num(r.hist.percentile(0.999)), num(r.hist.percentile(0.9999)), num(r.hist.mean()),
             r.ran ? std::to_string(r.hist.count()) : "", r.ran ? std::to_string(r.faults.minor) : "",
             r.ran ? std::to_string(r.faults.major) : "", r.ran ? std::to_string(r.usage.voluntary_switches) : "",
             r.ran ? std::to_string(r.usage.involuntary_switches) : "",
             r.ran ? fmt::format("{:.3f}", r.usage.user_ms / 1e3) : "",
             r.ran ? fmt::format("{:.3f}", r.usage.sys_ms / 1e3) : "", row.cache, r.note, machine});
  }
  csv.close();
  fmt::print("# csv: {}\n", path);
}

int run(const LatencyOptions& o) {
  const auto drop_method = seeds::parse_drop_method(o.drop_with);
  if (!drop_method) throw Failure(2, "--drop-with must be auto, drop-caches or fadvise");
  if (o.cache != "auto" && o.cache != "warm" && o.cache != "drop")
    throw Failure(2, "--cache must be auto, warm or drop");

  const LatencyPlan plan = plan_latency(o);
  const std::vector<std::uint64_t>& sizes = plan.sizes;
  const std::uint64_t multi_size = plan.multi_size;

  {
    std::error_code ec;
    std::filesystem::create_directories(o.dir, ec);
    if (ec) throw Failure(1, fmt::format("cannot create '{}': {}", o.dir, ec.message()));
  }
  const std::string machine = describe(machine_info());
  fmt::print("# tai-bench latency (the io_uring/mmap latency study): random 8-byte-key lookups, every value checked against the data pattern\n");
  fmt::print("# machine: {}; {}\n# storage: {}\n", machine, seeds::load_average(), seeds::describe_storage(o.dir));
  fmt::print("# {} threads, {} s per variant; single reads in microseconds, multi-read in nanoseconds per iteration "
             "(as the io_uring/mmap latency study)\n",
             o.threads, o.duration);

  std::vector<Row> rows;
  const std::uint64_t avail = seeds::meminfo_bytes("MemAvailable");
  for (const std::uint64_t size : plan.files) {
    std::string error;
    auto file = seeds::StudyDataFile::prepare(o.dir, size, o.corrupt_for_test, &error);
    if (!file) throw Failure(1, error);
    if (o.corrupt_for_test) {
      // Flip a byte of the first key thread 0 reads: every variant meets it on its first read.
      seeds::KeyGenerator g(seeds::thread_seed(o.seed, 0));
      const std::uint64_t key = g.below(size / 8);
      if (auto err = seeds::corrupt_byte(file->path, key * 8 + 3); !err.empty()) throw Failure(1, err);
      fmt::print("# corrupt-for-test: flipped byte {} (key {})\n", key * 8 + 3, key);
    }
    std::string mode = o.cache;
    std::string why = "--cache " + o.cache;
    if (mode == "auto") {
      mode = size <= avail / 2 ? "warm" : "drop";
      why = fmt::format("auto: {} {} half of MemAvailable ({})", format_size(size), mode == "warm" ? "<=" : ">",
                        format_size(avail / 2));
    }
    Shared base;
    base.path = file->path;
    base.size = size;
    base.keys = size / 8;
    std::string how;
    const bool has_singles = std::find(sizes.begin(), sizes.end(), size) != sizes.end();

    auto run_one = [&](const Variant& v, const std::string& kind, const std::string& cache_mode, unsigned batch,
                       const std::string& label_mode) {
      Row row;
      row.kind = kind;
      row.size = size;
      row.variant = v.name;
      row.mode = label_mode;
      row.batch = batch;
      row.threads = o.threads;
      Shared sh;
      sh.path = base.path;
      sh.size = base.size;
      sh.keys = base.keys;
      if (std::string err = open_shared(sh, v); !err.empty()) {
        row.r.note = "not run: " + err;
      } else {
        std::string remark;
        if (std::string why_not = engine_unavailable(sh, v, &remark); !why_not.empty()) {
          row.r.note = "not run: " + why_not;
        } else {
          row.cache = set_cache(*file, cache_mode, *drop_method, &how);
          row.r = run_variant(sh, v, o.threads, batch, o.duration, o.seed);
          if (row.r.ran && !remark.empty()) row.r.note = remark;
          if (v.direct) row.r.note = row.r.note.empty() ? fmt::format("O_DIRECT reads of {} B", sh.block)
                                                        : fmt::format("O_DIRECT reads of {} B; {}", sh.block, row.r.note);
        }
      }
      if (!row.r.mismatch.empty())
        throw Failure(kExitMismatch, fmt::format("checksum mismatch in variant '{}'{} ({} file '{}'): {}", v.name,
                                                 kind == "multi" ? " (multi-read, " + label_mode + ")" : "",
                                                 format_size(size), file->path, row.r.mismatch));
      rows.push_back(std::move(row));
    };

    if (has_singles) {
      for (const Variant& v : plan.singles) run_one(v, "single", mode, 1, v.direct ? "direct" : "buffered");
    }
    if (size == multi_size) {
      for (const auto& [mmode, v] : plan.multis) run_one(v, "multi", mmode == "cached" ? "warm" : mode, o.multi_read, mmode);
    }
    fmt::print("# file {}: {} ({}); page cache: {} [{}]\n", format_size(size), file->path,
               file->created ? fmt::format("created in {:.1f} s", file->create_seconds) : "reused", how, why);
  }

  print_latency_tables(rows, o.multi_read);
  if (!o.csv.empty()) write_latency_csv(rows, o.csv, machine);
  if (!o.plot.empty()) {
    if (auto err = plot_latency(rows, o.plot, machine, o.threads); !err.empty()) throw Failure(1, "plot: " + err);
    fmt::print("# plot: {}\n", o.plot);
  }
  return 0;
}

}  // namespace

void add_latency_command(CLI::App& app) {
  auto o = std::make_shared<LatencyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "latency", "The io_uring/mmap latency study: per-read latency percentiles of random 8-byte-key lookups, by read method");
  cmd->add_option("--dir", o->dir, "Directory of the data files (created once per size, then reused)")
      ->capture_default_str();
  cmd->add_option("--size", o->sizes, "Data file sizes: tiny (64 KiB), medium (64 MiB), large (--large-size) or bytes")
      ->capture_default_str();
  cmd->add_option("--large-size", o->large_size, "Size of 'large'")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Concurrent readers (the latency study's concurrency)")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  cmd->add_option("--duration", o->duration, "Seconds per variant")->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  cmd->add_option("--variants", o->variants, "Single-read variants (or 'none')")->capture_default_str();
  cmd->add_option("--multi-read", o->multi_read, "Reads per iteration of the multi-read mode (0: skip it)")
      ->check(CLI::Range(0u, 4096u))
      ->capture_default_str();
  cmd->add_option("--multi-methods", o->multi_methods, "Multi-read methods")->capture_default_str();
  cmd->add_option("--multi-modes", o->multi_modes, "Multi-read modes: cached (warm, buffered), direct")
      ->capture_default_str();
  cmd->add_option("--multi-size", o->multi_size, "File size of the multi-read mode (default: the largest --size)");
  cmd->add_option("--cache", o->cache,
                  "Page cache before each variant: warm (read the file once), drop, or auto (warm when the file "
                  "fits in half of MemAvailable)")
      ->capture_default_str();
  cmd->add_option("--drop-with", o->drop_with,
                  "How to drop: drop-caches (sync; echo 1 > /proc/sys/vm/drop_caches), fadvise (fdatasync + "
                  "POSIX_FADV_DONTNEED on the file), auto (the first that works)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the key sequences")->capture_default_str();
  cmd->add_option("--csv", o->csv, "Write the rows as CSV to this file");
  cmd->add_option("--plot", o->plot, "Draw a PNG figure with gnuplot (also writes .dat and .gp next to it)");
  cmd->add_flag("--corrupt-for-test", o->corrupt_for_test,
                "Test hook: use a private data file with one flipped byte; the run must fail")
      ->group("");
  cmd->callback([o] { run_command("latency", [o] { return run(*o); }); });
}

}  // namespace tai::bench
