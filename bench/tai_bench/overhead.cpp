// bench/tai_bench/overhead.cpp - `tai-bench overhead`: what one small request costs end to end
// through tai::Controller (submit, complete, wait returns), beside glibc POSIX AIO and plain
// pwrite doing the same writes to the page cache, in the same run.
//
// Configurations (every one writes --bs bytes, 512 by default, per request):
//   tai        null   BTreeTrivial  1 and 2 submitting threads (--threads): the framework's own
//                                   cost, nothing touches a file
//   glibc-aio  page cache           aio_write with --aio-depth (64) requests in flight, 1 thread
//   pwrite     page cache           plain pwrite, 1 thread
//   handoff    page cache           the same pwrites by a second thread, fed by a spinning ring:
//                                   the host's ceiling for any hand-off to a worker (below)
//   tai        posix  BTreeTrivial  1 thread: every request becomes a pwrite on a worker
//   tai        posix  BTreeDefault  1 thread: requests land in TAI's cache (4 KiB blocks),
//                                   written back later (flush rounds, flush(), close)
// --configs picks some of them (null, aio, pwrite, handoff, posix-trivial, posix-default; the
// ratios need aio). Each submitting thread keeps a window of --window (256) receipts in flight and
// waits for the oldest when the window is full; each TAI thread has its own file (the usual HPC
// shape: a file per writer; each file's requests go to its home worker, so two files can use two
// workers).
//
// What is where. The page-cache configurations write to one data file of --file-size (64 MiB)
// under --dir (/var/tmp), filled once before the first run so that every write overwrites a
// cached, allocated page (no block allocation, no disk I/O on the clock). Offsets are random
// --bs-aligned offsets within that size (--pattern random, the default: the harder case for a
// cache, since consecutive writes rarely meet in one block), or sequential, wrapping around.
//
// Timing. A run lasts --seconds; its time and CPU are steady_clock and getrusage(RUSAGE_SELF)
// deltas (user + system of every thread: TAI's workers and glibc's AIO helper threads count)
// from the start of the submission loop to the moment the last receipt's wait returned. For TAI
// the data may then still sit in the controller's cache (BTreeDefault): the run then calls
// Controller::flush() and waits, and that time is reported apart ("flush_ms") with the request
// rate it implies ("op/s+flush"), so that both readings are on the table. The configurations run
// interleaved (A B C ... A B C ...) for --repeat rounds (3) and the table shows medians; ratios to
// glibc AIO are medians of the per-round ratios (runs next to each other in time), and so are the
// target lines against the plain pwrite loop (the null rows' CPU per request, the posix Trivial
// row's request rate) and against the hand-off (the posix Trivial row's share of the host's
// ceiling).
#include <aio.h>
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tai/tai.hpp"
#include "tai_bench/bench_util.hpp"
#include "tai_bench/commands.hpp"

namespace tai::bench {
namespace {

struct OverheadOptions {
  double seconds = 1.0;
  unsigned repeat = 3;
  unsigned window = 256;
  unsigned aio_depth = 64;
  std::string threads = "1,2";
  std::string bs = "512";
  std::string file_size = "64M";
  std::string dir = "/var/tmp";
  std::string pattern = "random";
  unsigned workers = 0;
  std::string csv;
  std::string configs = "null,aio,pwrite,handoff,posix-trivial,posix-default";
  bool stats = false;
  // Parsed from the strings above.
  std::vector<std::string> only;
  std::vector<unsigned> thread_counts;
  std::uint64_t block = 512;
  std::uint64_t size = 64ull << 20;
  bool random = true;
};


/// The offsets one submitting thread writes at: random or sequential bs-aligned offsets within
/// the file size.
class Offsets {
 public:
  Offsets(const OverheadOptions& o, std::uint64_t seed)
      : rng_(seed), bs_(o.block), blocks_(o.size / o.block), random_(o.random) {}
  std::uint64_t next() {
    if (random_) return rng_.below(blocks_) * bs_;
    const std::uint64_t off = next_block_ * bs_;
    if (++next_block_ == blocks_) next_block_ = 0;
    return off;
  }

 private:
  Rng rng_;
  std::uint64_t bs_, blocks_;
  bool random_;
  std::uint64_t next_block_ = 0;
};

enum class Method { tai, glibc_aio, pwrite, handoff };

struct Config {
  Method method = Method::tai;
  std::string engine;      // TAI: "null" or "posix"
  bool default_tree = false;  // TAI: BTreeDefault, else BTreeTrivial
  unsigned threads = 1;

  std::string method_name() const {
    switch (method) {
      case Method::tai: return "tai";
      case Method::glibc_aio: return "glibc-aio";
      case Method::pwrite: return "pwrite";
      case Method::handoff: return "handoff";
    }
    return "?";
  }
  std::string engine_name() const { return method == Method::tai ? engine : "page-cache"; }
  std::string tree_name() const { return method == Method::tai ? (default_tree ? "Default" : "Trivial") : "-"; }
  /// The name --only selects it by.
  std::string key() const {
    switch (method) {
      case Method::tai: return engine == "null" ? "null" : default_tree ? "posix-default" : "posix-trivial";
      case Method::glibc_aio: return "aio";
      case Method::pwrite: return "pwrite";
      case Method::handoff: return "handoff";
    }
    return "?";
  }
  std::string label() const {
    return fmt::format("{} {} {} x{}", method_name(), engine_name(), tree_name(), threads);
  }
};

struct Run {
  bool ok = false;
  std::string error;            // why the run failed (then the other fields mean nothing)
  std::uint64_t reqs = 0;
  Usage usage;                  // the submission loop up to the last wait
  double flush_ms = 0;          // TAI: Controller::flush() afterwards, waited for
  double ops_per_s() const { return usage.real_ms > 0 ? static_cast<double>(reqs) * 1e3 / usage.real_ms : 0; }
  double ops_per_s_with_flush() const {
    const double ms = usage.real_ms + flush_ms;
    return ms > 0 ? static_cast<double>(reqs) * 1e3 / ms : 0;
  }
  double cpu_ns_per_op() const { return reqs ? usage.cpu_ms() * 1e6 / static_cast<double>(reqs) : 0; }
};

/// What one submitting thread did.
struct ThreadTally {
  std::uint64_t reqs = 0;
  std::uint64_t failures = 0;
  std::string first_error;
  void check(const Receipt& r, std::uint64_t expect) {
    if (r.ok() && r.bytes() == static_cast<std::int64_t>(expect)) return;
    if (failures++ == 0)
      first_error = r.ok() ? fmt::format("a write returned {} bytes instead of {}", r.bytes(), expect) : r.message();
  }
};

/// Starts `threads` threads running body(thread_index) together, once the clock has started,
/// and returns when all have finished; the usage covers the bodies (thread start-up excluded).
template <class Body>
Usage run_threads(unsigned threads, Body body) {
  std::atomic<bool> go{false};  // release store by the main thread, acquire loads by the others
  std::atomic<unsigned> ready{0};  // relaxed: only counts, go publishes nothing they need
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1, std::memory_order_relaxed);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      body(t);
    });
  while (ready.load(std::memory_order_relaxed) + 1 < threads) std::this_thread::yield();
  UsageMeter meter;
  go.store(true, std::memory_order_release);
  body(0);
  for (auto& th : pool) th.join();
  return meter.stop();
}

// --- TAI ------------------------------------------------------------------------------------

Run run_tai(const OverheadOptions& o, const Config& c, const std::string& data_path, unsigned round) {
  Run run;
  ControllerOptions co;
  co.workers = o.workers;
  // How late a write may wake a sleeping master (ControllerOptions::write_wake_delay_ns), for
  // measuring what the delay changes here.
  if (const char* wd = std::getenv("TAI_WRITE_WAKE_DELAY_NS"); wd && *wd) co.write_wake_delay_ns = std::strtoll(wd, nullptr, 10);
  // How long waits spin before they sleep (ControllerOptions::spin_ns), for A/B runs.
  if (const char* sp = std::getenv("TAI_SPIN_NS"); sp && *sp) co.spin_ns = std::strtoll(sp, nullptr, 10);
  // The engines' write-behind (EngineOptions::start_writeback_bytes, 0 turns it off), for A/B runs.
  if (const char* sw = std::getenv("TAI_START_WRITEBACK"); sw && *sw)
    co.engine_options.start_writeback_bytes = std::strtoull(sw, nullptr, 10);
  std::unique_ptr<Controller> ctl;
  try {
    ctl = std::make_unique<Controller>(co);
  } catch (const std::exception& e) {
    run.error = fmt::format("making the controller: {}", e.what());
    return run;
  }
  std::vector<File> files;
  for (unsigned t = 0; t < c.threads; ++t) {
    // The null engine never touches the path; the posix one writes the prepared data file (one
    // thread only: see the configuration list).
    const std::string path = c.engine == "null" ? fmt::format("{}/tai-overhead-null-{}", o.dir, t) : data_path;
    const OpenMode mode(Open::read | Open::write);
    auto f = c.default_tree ? ctl->open<BTreeDefault>(path, mode, c.engine) : ctl->open<BTreeTrivial>(path, mode, c.engine);
    if (!f) {
      run.error = f.error().message;
      return run;
    }
    files.push_back(std::move(f.value()));
  }
  std::vector<ThreadTally> tallies(c.threads);
  const std::int64_t deadline_ns = static_cast<std::int64_t>(o.seconds * 1e9);
  run.usage = run_threads(c.threads, [&](unsigned t) {
    const std::int64_t deadline = now_ns() + deadline_ns;
    File& file = files[t];
    ThreadTally& tally = tallies[t];
    Offsets offsets(o, 1000003ull * round + t + 1);
    std::vector<std::byte> data(o.block, std::byte{0x5a});
    // Receipts of the requests in flight, oldest at `slot` once the window has filled.
    std::vector<Receipt> window(o.window);
    std::size_t slot = 0;
    std::uint64_t n = 0;
    for (;; ++n) {
      if ((n & 63) == 0 && now_ns() >= deadline) break;
      Receipt& r = window[slot];
      if (r.valid()) tally.check(r, o.block);  // waits for the oldest
      r = file.write(offsets.next(), data.data(), data.size());
      if (++slot == window.size()) slot = 0;
    }
    for (std::size_t i = 0; i < window.size(); ++i) {
      const Receipt& r = window[(slot + i) % window.size()];
      if (r.valid()) tally.check(r, o.block);
    }
    tally.reqs = n;
  });
  if (o.stats) {
    std::ostringstream table;
    table << ctl->stats();
    fmt::print(stderr, "controller statistics, {} {} thread(s), round {}:\n{}\n", c.engine, c.threads, round + 1,
               table.str());
  }
  const std::int64_t f0 = now_ns();
  Receipt flushed = ctl->flush();
  const bool flush_ok = flushed.ok();
  run.flush_ms = static_cast<double>(now_ns() - f0) / 1e6;
  for (const auto& t : tallies) {
    run.reqs += t.reqs;
    if (t.failures && run.error.empty())
      run.error = fmt::format("{} of {} writes failed; first: {}", t.failures, t.reqs, t.first_error);
  }
  if (!flush_ok && run.error.empty()) run.error = "flush failed: " + flushed.message();
  for (auto& f : files) {
    Receipt closed = f.close();
    if (!closed.ok() && run.error.empty()) run.error = "close failed: " + closed.message();
  }
  const ShutdownReport report = ctl->shutdown();
  if (!report.ok() && run.error.empty()) run.error = "shutdown: " + report.to_string();
  run.ok = run.error.empty();
  return run;
}

// --- glibc POSIX AIO and pwrite -------------------------------------------------------------

// The page-cache configurations' data file, opened for writing; -1 with run.error set when it
// cannot be.
int open_data_file(const std::string& data_path, Run& run) {
  const int fd = ::open(data_path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) run.error = fmt::format("open '{}': {}", data_path, std::strerror(errno));
  return fd;
}

// Runs step(i) on one thread, i = 0, 1, ..., until --seconds passed (the clock read every 64
// steps) or a step returns false, then finish() (what is still in flight); n ends as the number
// of steps that returned true. The usage covers the loop and finish().
template <class Step, class Finish>
Usage timed_loop(const OverheadOptions& o, std::uint64_t& n, Step step, Finish finish) {
  const std::int64_t deadline_ns = static_cast<std::int64_t>(o.seconds * 1e9);
  return run_threads(1, [&](unsigned) {
    const std::int64_t deadline = now_ns() + deadline_ns;
    for (;; ++n) {
      if ((n & 63) == 0 && now_ns() >= deadline) break;
      if (!step(n)) break;
    }
    finish();
  });
}

// What a pwrite that did not write the whole record returned (errno read at once).
std::string pwrite_failure(ssize_t r) {
  return r < 0 ? fmt::format("pwrite: {}", std::strerror(errno)) : fmt::format("pwrite wrote {} bytes", r);
}

Run run_glibc_aio(const OverheadOptions& o, const std::string& data_path, unsigned round) {
  Run run;
  const int fd = open_data_file(data_path, run);
  if (fd < 0) return run;
  std::vector<std::byte> data(o.block, std::byte{0x5a});  // shared by every request: never changes
  std::vector<aiocb> cbs(o.aio_depth);
  std::vector<bool> busy(o.aio_depth, false);
  Offsets offsets(o, 1000003ull * round + 1);
  std::uint64_t failures = 0;
  std::string first_error;
  // Waits for control block i and checks its result.
  auto reap = [&](std::size_t i) {
    const aiocb* list[1] = {&cbs[i]};
    int err;
    while ((err = ::aio_error(&cbs[i])) == EINPROGRESS) ::aio_suspend(list, 1, nullptr);
    const ssize_t r = ::aio_return(&cbs[i]);
    busy[i] = false;
    if (err == 0 && r == static_cast<ssize_t>(o.block)) return;
    if (failures++ == 0)
      first_error = err ? fmt::format("aio_write: {}", std::strerror(err)) : fmt::format("aio_write wrote {} bytes", r);
  };
  std::uint64_t n = 0;
  std::size_t slot = 0;
  run.usage = timed_loop(
      o, n,
      [&](std::uint64_t) {
        if (busy[slot]) reap(slot);  // the oldest request
        aiocb& cb = cbs[slot];
        std::memset(&cb, 0, sizeof cb);
        cb.aio_fildes = fd;
        cb.aio_buf = data.data();
        cb.aio_nbytes = data.size();
        cb.aio_offset = static_cast<off_t>(offsets.next());
        cb.aio_sigevent.sigev_notify = SIGEV_NONE;
        if (::aio_write(&cb) != 0) {
          if (failures++ == 0) first_error = fmt::format("aio_write refused a request: {}", std::strerror(errno));
          return false;
        }
        busy[slot] = true;
        if (++slot == cbs.size()) slot = 0;
        return true;
      },
      [&] {
        for (std::size_t i = 0; i < cbs.size(); ++i)
          if (busy[i]) reap(i);
      });
  ::close(fd);
  run.reqs = n;
  if (failures) run.error = fmt::format("{} of {} requests failed; first: {}", failures, n, first_error);
  run.ok = run.error.empty();
  return run;
}

Run run_pwrite(const OverheadOptions& o, const std::string& data_path, unsigned round) {
  Run run;
  const int fd = open_data_file(data_path, run);
  if (fd < 0) return run;
  std::vector<std::byte> data(o.block, std::byte{0x5a});
  Offsets offsets(o, 1000003ull * round + 1);
  std::uint64_t n = 0;
  run.usage = timed_loop(
      o, n,
      [&](std::uint64_t) {
        const ssize_t r = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offsets.next()));
        if (r == static_cast<ssize_t>(data.size())) return true;
        run.error = pwrite_failure(r);
        return false;
      },
      [] {});
  ::close(fd);
  run.reqs = n;
  run.ok = run.error.empty();
  return run;
}

// The host's ceiling for any hand-off to a worker: the pwrite loop's calls made by a second thread
// that a spinning single-producer ring of --window slots feeds, each record copied into its slot
// (as File::write copies it). No sleeps, no wake-ups, no bookkeeping: what it loses against the
// loop is what moving the record and the call to another CPU costs on this host (cache lines
// crossing between CPUs, how a virtual machine schedules its vCPUs). Both threads spin (yielding
// the CPU while they wait), so its CPU per request says nothing.
Run run_handoff(const OverheadOptions& o, const std::string& data_path, unsigned round) {
  Run run;
  const int fd = open_data_file(data_path, run);
  if (fd < 0) return run;
  struct Slot {
    std::vector<std::byte> bytes;
    std::uint64_t offset = 0;
  };
  std::vector<Slot> ring(std::max(1u, o.window));
  for (auto& slot : ring) slot.bytes.resize(o.block);
  const std::vector<std::byte> data(o.block, std::byte{0x5a});
  Offsets offsets(o, 1000003ull * round + 1);
  // head: slots published, a release store by the producer that the consumer's acquire load
  // pairs with (the slot's bytes and offset are visible); tail: slots written, the reverse (the
  // producer may fill them again). done: release store after the last slot was written.
  alignas(64) std::atomic<std::uint64_t> head{0};
  alignas(64) std::atomic<std::uint64_t> tail{0};
  std::atomic<bool> done{false};
  std::string consumer_error;  // the consumer's, read after join()
  std::thread consumer([&] {
    std::uint64_t t = 0;
    for (;;) {
      const std::uint64_t h = head.load(std::memory_order_acquire);
      if (h == t) {
        if (done.load(std::memory_order_acquire)) break;
        std::this_thread::yield();  // a host with one CPU: let the producer run
        continue;
      }
      for (; t != h; ++t) {
        const Slot& slot = ring[t % ring.size()];
        const ssize_t r = ::pwrite(fd, slot.bytes.data(), slot.bytes.size(), static_cast<off_t>(slot.offset));
        if (r != static_cast<ssize_t>(slot.bytes.size()) && consumer_error.empty())
          consumer_error = pwrite_failure(r);
      }
      tail.store(t, std::memory_order_release);
    }
  });
  std::uint64_t n = 0;
  run.usage = timed_loop(
      o, n,
      [&](std::uint64_t i) {
        while (i - tail.load(std::memory_order_acquire) >= ring.size()) std::this_thread::yield();
        Slot& slot = ring[i % ring.size()];
        std::memcpy(slot.bytes.data(), data.data(), data.size());
        slot.offset = offsets.next();
        head.store(i + 1, std::memory_order_release);
        return true;
      },
      [&] {  // on the clock: the run ends when the last record is written
        while (tail.load(std::memory_order_acquire) != n) std::this_thread::yield();
      });
  done.store(true, std::memory_order_release);
  consumer.join();
  ::close(fd);
  run.reqs = n;
  run.error = consumer_error;
  run.ok = run.error.empty();
  return run;
}

/// Creates the page-cache configurations' data file: `size` bytes written with buffered writes,
/// so that it is allocated and in the page cache when the runs overwrite it.
std::string prepare_data_file(const std::string& path, std::uint64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("cannot create '{}': {}", path, std::strerror(errno));
  std::vector<std::byte> chunk(1u << 20, std::byte{0xa5});
  for (std::uint64_t off = 0; off < size;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), size - off));
    const ssize_t w = ::pwrite(fd, chunk.data(), n, static_cast<off_t>(off));
    if (w <= 0) {
      const int err = w < 0 ? errno : ENOSPC;
      ::close(fd);
      return fmt::format("writing '{}': {}", path, std::strerror(err));
    }
    off += static_cast<std::uint64_t>(w);
  }
  // Written back and allocated now, so that the kernel's own write-back of this file does not
  // run during (and weigh on) whichever configuration happens to be measured then.
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!synced) return fmt::format("fsync of '{}': {}", path, std::strerror(err));
  return {};
}

// --- report ---------------------------------------------------------------------------------

struct Row {
  Config config;
  std::vector<Run> runs;     // one per round (failed ones included, ok = false)
  Run median_run;            // the run of median op/s
  double ops = 0, ops_with_flush = 0, cpu_ns = 0, flush_ms = 0;
  double vs_aio = 0, vs_aio_with_flush = 0;  // medians of per-round ratios; 0 when unknown
  // Against the plain pwrite loop of the same rounds (medians of per-round ratios; 0 when
  // unknown): request rate, and CPU per request.
  double vs_pwrite = 0, cpu_vs_pwrite = 0;
  std::string error;         // first failure
};

std::string fixed(double v, int decimals) { return fmt::format("{:.{}f}", v, decimals); }

void summarise(Row& row, const Row* aio, const Row* pw) {
  std::vector<Run> good;
  std::vector<double> ops, opsf, cpu, flush, ratio, ratiof, ratio_pw, cpu_pw;
  for (std::size_t i = 0; i < row.runs.size(); ++i) {
    const Run& r = row.runs[i];
    if (!r.ok) {
      if (row.error.empty()) row.error = r.error;
      continue;
    }
    good.push_back(r);
    ops.push_back(r.ops_per_s());
    opsf.push_back(r.ops_per_s_with_flush());
    cpu.push_back(r.cpu_ns_per_op());
    flush.push_back(r.flush_ms);
    if (aio && i < aio->runs.size() && aio->runs[i].ok && aio->runs[i].ops_per_s() > 0) {
      ratio.push_back(r.ops_per_s() / aio->runs[i].ops_per_s());
      ratiof.push_back(r.ops_per_s_with_flush() / aio->runs[i].ops_per_s());
    }
    if (pw && i < pw->runs.size() && pw->runs[i].ok && pw->runs[i].ops_per_s() > 0 && pw->runs[i].cpu_ns_per_op() > 0) {
      ratio_pw.push_back(r.ops_per_s() / pw->runs[i].ops_per_s());
      cpu_pw.push_back(r.cpu_ns_per_op() / pw->runs[i].cpu_ns_per_op());
    }
  }
  if (good.empty()) return;
  std::sort(good.begin(), good.end(), [](const Run& a, const Run& b) { return a.ops_per_s() < b.ops_per_s(); });
  row.median_run = good[(good.size() - 1) / 2];
  row.ops = median(ops);
  row.ops_with_flush = median(opsf);
  row.cpu_ns = median(cpu);
  row.flush_ms = median(flush);
  row.vs_aio = median(ratio);
  row.vs_aio_with_flush = median(ratiof);
  row.vs_pwrite = median(ratio_pw);
  row.cpu_vs_pwrite = median(cpu_pw);
}

// The configurations of one run: TAI over the null engine per thread count, glibc AIO, the pwrite
// loop, TAI over posix with both trees; only those of --only when it is given.
std::vector<Config> overhead_configs(const OverheadOptions& o) {
  std::vector<Config> configs;
  for (unsigned t : o.thread_counts) configs.push_back({Method::tai, "null", false, t});
  configs.push_back({Method::glibc_aio, "", false, 1});
  configs.push_back({Method::pwrite, "", false, 1});
  configs.push_back({Method::handoff, "", false, 1});
  configs.push_back({Method::tai, "posix", false, 1});
  configs.push_back({Method::tai, "posix", true, 1});
  if (!o.only.empty())
    configs.erase(std::remove_if(configs.begin(), configs.end(),
                                 [&](const Config& c) {
                                   return std::find(o.only.begin(), o.only.end(), c.key()) == o.only.end();
                                 }),
                  configs.end());
  return configs;
}

void print_overhead_setup(const OverheadOptions& o, const std::string& data_path, bool page_cache, unsigned workers) {
  fmt::print("overhead: {} B writes, end to end (submit, complete, wait returns), {} offsets within {}\n", o.block,
             o.random ? "random aligned" : "sequential", format_size(o.size));
  fmt::print("machine: {}\n", describe(machine_info()));
  if (page_cache)
    fmt::print("page cache: data file {} ({}) written before the runs, so every write overwrites a cached page\n",
               data_path, format_size(o.size));
  fmt::print("tai: a controller per run with {} worker(s) and default options; each submitting thread keeps {} "
             "receipts in flight and has its own file; glibc-aio: {} requests in flight, one thread\n",
             workers, o.window, o.aio_depth);
  fmt::print("{:.2f} s per run, {} round(s) of every configuration interleaved{}\n", o.seconds, o.repeat,
             o.repeat > 1 ? ", medians" : "");
  fmt::print("CPU: getrusage user+sys of the whole process (workers, AIO helper threads) per request; flush_ms: "
             "Controller::flush() after the run, op/s+flush counts it\n");
}

// A table row and a CSV line per configuration, of its median run; true when a run failed.
bool add_overhead_rows(const OverheadOptions& o, const std::vector<Row>& rows, const Row* aio, Table& table,
                       CsvWriter& csv) {
  bool failed = false;
  for (const auto& row : rows) {
    const Config& c = row.config;
    const Run& m = row.median_run;
    const std::string window = fmt::format("{}", c.method == Method::tai || c.method == Method::handoff ? o.window
                                                 : c.method == Method::glibc_aio                         ? o.aio_depth
                                                                                                         : 1);
    const bool is_tai = c.method == Method::tai;
    if (!m.ok) {
      failed = true;
      table.add_row({c.method_name(), c.engine_name(), c.tree_name(), fmt::format("{}", c.threads), window, "failed",
                     "-", "-", "-", "-", "-", "-", "-", "-"});
      csv.row({c.method_name(), c.engine_name(), c.tree_name(), fmt::format("{}", c.threads), window,
               fmt::format("{}", o.block), o.pattern, "", "", "", "", "", "", "", "", "", "", "", "0"});
      continue;
    }
    std::size_t good = 0;
    for (const auto& r : row.runs) good += r.ok ? 1 : 0;
    if (good < row.runs.size()) failed = true;
    const bool has_ratio = aio && &row != aio && row.vs_aio > 0;
    table.add_row({c.method_name(), c.engine_name(), c.tree_name(), fmt::format("{}", c.threads), window,
                   fmt::format("{}", m.reqs), fixed(m.usage.real_ms, 0), fixed(m.usage.cpu_ms(), 0), fixed(row.ops, 0),
                   fixed(row.cpu_ns, 0), is_tai ? fixed(row.flush_ms, 1) : "-", is_tai ? fixed(row.ops_with_flush, 0) : "-",
                   has_ratio ? fixed(row.vs_aio, 2) : "-", has_ratio && is_tai ? fixed(row.vs_aio_with_flush, 2) : "-"});
    csv.row({c.method_name(), c.engine_name(), c.tree_name(), fmt::format("{}", c.threads), window,
             fmt::format("{}", o.block), o.pattern, fmt::format("{}", m.reqs), fixed(m.usage.real_ms, 3),
             fixed(m.usage.user_ms, 3), fixed(m.usage.sys_ms, 3), fixed(m.usage.cpu_ms(), 3), fixed(row.ops, 1),
             fixed(row.cpu_ns, 1), is_tai ? fixed(row.flush_ms, 3) : "", is_tai ? fixed(row.ops_with_flush, 1) : "",
             has_ratio ? fixed(row.vs_aio, 4) : "", has_ratio && is_tai ? fixed(row.vs_aio_with_flush, 4) : "",
             fmt::format("{}", good)});
  }
  return failed;
}

// TAI's overhead targets (docs/results/README.md).
void print_overhead_targets(const OverheadOptions& o, const std::vector<Row>& rows, const Row* pw) {
  fmt::print("\ntargets:\n");
  auto verdict = [](bool met) { return met ? "met" : "MISSED"; };
  for (const auto& row : rows) {
    const Config& c = row.config;
    if (c.method != Method::tai || c.engine != "null" || !row.median_run.ok) continue;
    fmt::print("  null engine, BTreeTrivial, {} thread(s): {:.0f} CPU ns per request end to end (target <= 300): {}\n",
               c.threads, row.cpu_ns, verdict(row.cpu_ns <= 300));
  }
  for (const auto& row : rows) {
    const Config& c = row.config;
    if (c.method != Method::tai || c.engine != "posix") continue;
    const double target = c.default_tree ? 5.0 : 2.5;
    if (row.vs_aio <= 0) {
      fmt::print("  TAI posix {} / glibc AIO request rate: no ratio (glibc AIO not run, or a run failed)\n", c.tree_name());
      continue;
    }
    fmt::print("  TAI posix {} / glibc AIO request rate: {:.2f}x (target >= {:.1f}x): {}; counting the flush after "
               "the run: {:.2f}x\n",
               c.tree_name(), row.vs_aio, target, verdict(row.vs_aio >= target), row.vs_aio_with_flush);
  }
  // The cache-cost targets (docs/results/cache-cost.md), against the plain pwrite loop of the
  // same rounds: what the framework costs next to the system call it stands in for.
  for (const auto& row : rows) {
    const Config& c = row.config;
    if (c.method != Method::tai || row.cpu_vs_pwrite <= 0) continue;
    if (c.engine == "null")
      fmt::print("  null engine, BTreeTrivial, {} thread(s): CPU per request {:.3f}x a {} B page-cache pwrite's "
                 "(target <= 0.10x): {}\n",
                 c.threads, row.cpu_vs_pwrite, o.block, verdict(row.cpu_vs_pwrite <= 0.10));
    else if (c.engine == "posix" && !c.default_tree)
      fmt::print("  TAI posix Trivial / plain pwrite loop request rate: {:.2f}x (target >= 0.9x): {}\n", row.vs_pwrite,
                 verdict(row.vs_pwrite >= 0.9));
  }
  // What the host allows any hand-off, and TAI against that (medians of per-round ratios).
  const Row* handoff = nullptr;
  const Row* trivial = nullptr;
  for (const auto& row : rows) {
    if (row.config.method == Method::handoff) handoff = &row;
    if (row.config.method == Method::tai && row.config.engine == "posix" && !row.config.default_tree) trivial = &row;
  }
  if (handoff && handoff->vs_pwrite > 0) {
    fmt::print("  ideal hand-off (a spinning ring to a second thread) / plain pwrite loop request rate: {:.2f}x: the "
               "host's ceiling for the line above\n",
               handoff->vs_pwrite);
    std::vector<double> ratio;
    for (std::size_t i = 0; trivial && i < trivial->runs.size() && i < handoff->runs.size(); ++i)
      if (trivial->runs[i].ok && handoff->runs[i].ok && handoff->runs[i].ops_per_s() > 0)
        ratio.push_back(trivial->runs[i].ops_per_s() / handoff->runs[i].ops_per_s());
    if (!ratio.empty()) fmt::print("  TAI posix Trivial / ideal hand-off request rate: {:.2f}x\n", median(ratio));
  }
  if (!pw)
    fmt::print("  against pwrite: no ratio (pwrite not run)\n");
}

int run_overhead(const OverheadOptions& o) {
  const std::vector<Config> configs = overhead_configs(o);
  const std::string data_path = o.dir + "/tai-overhead.dat";
  const bool page_cache = std::any_of(configs.begin(), configs.end(), [](const Config& c) { return c.key() != "null"; });
  if (page_cache) {
    if (auto err = prepare_data_file(data_path, o.size); !err.empty()) {
      fmt::print(stderr, "overhead: {}\n", err);
      return 1;
    }
  }
  const unsigned workers = o.workers ? o.workers : std::max(1u, std::thread::hardware_concurrency());
  print_overhead_setup(o, data_path, page_cache, workers);

  std::vector<Row> rows(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i) rows[i].config = configs[i];
  for (unsigned round = 0; round < o.repeat; ++round) {
    for (auto& row : rows) {
      const Config& c = row.config;
      Run r;
      switch (c.method) {
        case Method::tai: r = run_tai(o, c, data_path, round); break;
        case Method::glibc_aio: r = run_glibc_aio(o, data_path, round); break;
        case Method::pwrite: r = run_pwrite(o, data_path, round); break;
        case Method::handoff: r = run_handoff(o, data_path, round); break;
      }
      if (!r.ok) fmt::print(stderr, "overhead: {} (round {}): {}\n", c.label(), round + 1, r.error);
      row.runs.push_back(std::move(r));
    }
  }
  if (page_cache) ::unlink(data_path.c_str());

  const Row* aio = nullptr;
  const Row* pw = nullptr;
  for (const auto& row : rows) {
    if (row.config.method == Method::glibc_aio) aio = &row;
    if (row.config.method == Method::pwrite) pw = &row;
  }
  for (auto& row : rows)
    summarise(row, &row == aio ? nullptr : aio,
              row.config.method == Method::tai || row.config.method == Method::handoff ? pw : nullptr);

  Table table({"method", "engine", "tree", "threads", "window", "reqs", "rtime", "cpu", "op/s", "cpu_ns/op", "flush_ms",
               "op/s+flush", "vs_aio", "vs_aio+flush"});
  CsvWriter csv;
  if (!o.csv.empty()) {
    auto err = csv.open(o.csv, {"method", "engine", "tree", "threads", "window", "bs", "pattern", "reqs", "rtime_ms",
                                "utime_ms", "stime_ms", "cpu_ms", "ops_per_s", "cpu_ns_per_op", "flush_ms",
                                "ops_per_s_with_flush", "ratio_vs_aio", "ratio_vs_aio_with_flush", "runs"});
    if (!err.empty()) {
      fmt::print(stderr, "overhead: {}\n", err);
      return 1;
    }
  }
  const bool failed = add_overhead_rows(o, rows, aio, table, csv);
  fmt::print("\n");
  table.print(stdout);

  print_overhead_targets(o, rows, pw);
  if (!o.csv.empty()) fmt::print("\nCSV written to {}\n", o.csv);
  return failed ? 1 : 0;
}

}  // namespace

void add_overhead_command(CLI::App& app) {
  auto o = std::make_shared<OverheadOptions>();
  CLI::App* sub = app.add_subcommand(
      "overhead", "Cost of a small request through tai::Controller (null engine; posix vs glibc AIO and pwrite)");
  sub->add_option("--seconds", o->seconds, "length of one run")->capture_default_str();
  sub->add_option("--repeat", o->repeat, "rounds of every configuration, interleaved; medians reported")
      ->capture_default_str();
  sub->add_option("--window", o->window, "receipts in flight per TAI submitting thread")->capture_default_str();
  sub->add_option("--aio-depth", o->aio_depth, "glibc aio_write requests in flight")->capture_default_str();
  sub->add_option("--threads", o->threads, "submitting thread counts of the null-engine rows, comma-separated")
      ->capture_default_str();
  sub->add_option("--bs", o->bs, "bytes per write")->capture_default_str();
  sub->add_option("--file-size", o->file_size, "the data file's size: offsets lie within it")->capture_default_str();
  sub->add_option("--dir", o->dir, "directory of the data file (a disk file system)")->capture_default_str();
  sub->add_option("--pattern", o->pattern, "offsets: random or sequential")->capture_default_str();
  sub->add_option("--workers", o->workers, "controller worker threads (0: hardware concurrency)")->capture_default_str();
  sub->add_option("--configs", o->configs,
                  "configurations to run, comma-separated (ratios need aio): null, aio, pwrite, handoff, "
                  "posix-trivial, posix-default")
      ->capture_default_str();
  sub->add_option("--csv", o->csv, "write the table as CSV to this file");
  sub->add_flag("--stats", o->stats, "print each TAI run's controller statistics (to stderr)");
  sub->callback([o] {
    OverheadOptions opt = *o;
    try {
      opt.block = parse_size(opt.bs);
      opt.size = parse_size(opt.file_size);
      for (const auto& t : split_list(opt.threads)) opt.thread_counts.push_back(static_cast<unsigned>(std::stoul(t)));
    } catch (const std::exception& e) {
      fmt::print(stderr, "overhead: {}\n", e.what());
      throw CLI::RuntimeError(2);
    }
    std::string bad;
    if (opt.pattern != "random" && opt.pattern != "sequential") bad = "--pattern must be random or sequential";
    else if (opt.block == 0 || opt.size < opt.block) bad = "--bs must be at least 1 and at most --file-size";
    else if (opt.window == 0 || opt.aio_depth == 0 || opt.repeat == 0) bad = "--window, --aio-depth and --repeat must be at least 1";
    else if (opt.seconds <= 0) bad = "--seconds must be positive";
    for (unsigned t : opt.thread_counts)
      if (t == 0) bad = "--threads holds a 0";
    if (!bad.empty()) {
      fmt::print(stderr, "overhead: {}\n", bad);
      throw CLI::RuntimeError(2);
    }
    opt.only = split_list(opt.configs);
    for (const auto& k : opt.only)
      if (k != "null" && k != "aio" && k != "pwrite" && k != "handoff" && k != "posix-trivial" && k != "posix-default")
        bad = fmt::format("--configs: unknown configuration '{}'", k);
    if (opt.only.empty()) bad = "--configs is empty";
    if (!bad.empty()) {
      fmt::print(stderr, "overhead: {}\n", bad);
      throw CLI::RuntimeError(2);
    }
    opt.random = opt.pattern == "random";
    const int rc = run_overhead(opt);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tai::bench
