// bench/tai_bench/idle.cpp - `tai-bench idle`: how much CPU a controller uses when the program
// gives it nothing to do (DESIGN: an idle controller uses no CPU to speak of; the target: < 1%
// of one core).
//
// The run, all in one process:
//   1. baseline: no controller; the main thread sleeps for --seconds. The measurement's floor.
//   2. a controller with --workers (2) workers does some work first (--warmup-writes writes of
//      4 KiB to a scratch file under --dir through the posix engine and BTreeDefault, a few
//      Controller::submit tasks, then an fsync), so its workers have run rounds, spun and gone
//      to sleep; after --settle seconds the main thread sleeps for --seconds: "idle".
//   3. a burst (--burst writes of 4 KiB, waited for), then at once three back-to-back windows:
//      0-10 ms (the spin budget, the flush rounds writing the burst back), 10-100 ms, and
//      100 ms to --seconds, plus their total: "after burst". This shows the spin-then-sleep.
// CPU is getrusage(RUSAGE_SELF) user + system of the whole process (every worker, and the
// sleeping main thread) over each window, shown as percent of one core (CPU time / wall time).
// The controller's round and sleep counters (Controller::stats(), read outside the windows) say
// what it did meanwhile.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tai/tai.hpp"
#include "tai_bench/bench_util.hpp"
#include "tai_bench/commands.hpp"

namespace tai::bench {
namespace {

struct IdleOptions {
  unsigned workers = 2;
  double seconds = 2.0;
  double settle = 0.5;
  unsigned warmup_writes = 4096;
  unsigned burst = 1024;
  unsigned repeat = 1;
  std::string dir = "/var/tmp";
  std::string csv;
};

struct Window {
  std::string phase;
  double from_ms = 0, to_ms = 0;  // relative to the start of the phase
  Usage usage;
  bool has_stats = false;
  std::uint64_t rounds = 0, sleeps = 0;
  double percent() const { return usage.real_ms > 0 ? usage.cpu_ms() * 100.0 / usage.real_ms : 0; }
  // The controller's rounds and sleeps between two of its stats().
  void count_controller_work(const ControllerStats& before, const ControllerStats& after);
};

std::uint64_t all_rounds(const ControllerStats& s) {
  return s.rounds_normal + s.rounds_recycle + s.rounds_flush + s.rounds_idle + s.rounds_close;
}

void Window::count_controller_work(const ControllerStats& before, const ControllerStats& after) {
  has_stats = true;
  rounds = all_rounds(after) - all_rounds(before);
  sleeps = after.sleeps - before.sleeps;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

/// Sleeps until `ms` milliseconds after `start_ns` (steady clock), then returns the usage since
/// `meter` started and restarts it.
Usage window_until(UsageMeter& meter, std::int64_t start_ns, double ms) {
  const std::int64_t until = start_ns + static_cast<std::int64_t>(ms * 1e6);
  const std::int64_t left = until - now_ns();
  if (left > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(left));
  Usage u = meter.stop();
  meter.restart();
  return u;
}

/// Writes `count` blocks of 4 KiB at consecutive offsets from `first`, keeping 64 in flight,
/// and returns the first failure's message (empty when every write succeeded).
std::string write_blocks(File& f, std::uint64_t first, unsigned count) {
  std::vector<std::byte> block(4096, std::byte{0x3c});
  std::vector<Receipt> window(64);
  std::string error;
  for (unsigned i = 0; i < count; ++i) {
    Receipt& r = window[i % window.size()];
    if (r.valid() && !r.ok() && error.empty()) error = r.message();
    r = f.write(first + std::uint64_t{i} * block.size(), block.data(), block.size());
  }
  for (const auto& r : window)
    if (r.valid() && !r.ok() && error.empty()) error = r.message();
  return error;
}

/// One round of the three phases. Returns the windows, or throws std::runtime_error.
std::vector<Window> measure(const IdleOptions& o, const std::string& path) {
  std::vector<Window> out;
  {
    Window w{"no-controller", 0, o.seconds * 1e3};
    UsageMeter meter;
    sleep_s(o.seconds);
    w.usage = meter.stop();
    out.push_back(w);
  }
  ControllerOptions co;
  co.workers = o.workers;
  Controller ctl(co);
  auto opened = ctl.open<BTreeDefault>(path, OpenMode(Open::read | Open::write | Open::create | Open::truncate), "posix");
  if (!opened) throw std::runtime_error(opened.error().message);
  File file = std::move(opened.value());

  // Warm-up: writes, tasks, an fsync; everything waited for.
  if (auto err = write_blocks(file, 0, o.warmup_writes); !err.empty()) throw std::runtime_error("warm-up write: " + err);
  std::vector<Receipt> tasks;
  for (unsigned i = 0; i < 4 * o.workers; ++i) tasks.push_back(ctl.submit([] {}));
  for (const auto& t : tasks)
    if (!t.ok()) throw std::runtime_error("warm-up task: " + t.message());
  if (Receipt s = file.fsync(); !s.ok()) throw std::runtime_error("warm-up fsync: " + s.message());
  sleep_s(o.settle);

  {
    Window w{"idle", 0, o.seconds * 1e3};
    const ControllerStats before = ctl.stats();
    UsageMeter meter;
    sleep_s(o.seconds);
    w.usage = meter.stop();
    w.count_controller_work(before, ctl.stats());
    out.push_back(w);
  }

  // The burst lands on fresh offsets (after the warm-up's), so it leaves dirty data to flush.
  const std::uint64_t burst_at = std::uint64_t{o.warmup_writes} * 4096;
  if (auto err = write_blocks(file, burst_at, o.burst); !err.empty()) throw std::runtime_error("burst write: " + err);
  {
    // No stats() call between the burst and the windows: it would delay the first one.
    const ControllerStats before = ctl.stats();
    UsageMeter total;
    UsageMeter meter;
    const std::int64_t start = now_ns();
    const double end_ms = o.seconds * 1e3;
    const double marks[] = {0, std::min(10.0, end_ms), std::min(100.0, end_ms), end_ms};
    for (int i = 0; i < 3; ++i) {
      Window w{"after-burst", marks[i], marks[i + 1]};
      w.usage = window_until(meter, start, marks[i + 1]);
      out.push_back(w);
    }
    Window w{"after-burst", 0, end_ms};
    w.usage = total.stop();
    w.count_controller_work(before, ctl.stats());
    out.push_back(w);
  }
  if (Receipt c = file.close(); !c.ok()) throw std::runtime_error("close: " + c.message());
  if (ShutdownReport r = ctl.shutdown(); !r.ok()) throw std::runtime_error("shutdown: " + r.to_string());
  return out;
}

std::string fixed(double v, int decimals) { return fmt::format("{:.{}f}", v, decimals); }

int run_idle(const IdleOptions& o) {
  const std::string path = fmt::format("{}/tai-idle-{}.dat", o.dir, ::getpid());
  fmt::print("idle: CPU of the whole process while the main thread sleeps; a controller with {} worker(s), default "
             "options (spin {} us, idle flush after {} ms)\n",
             o.workers, ControllerOptions{}.spin_ns / 1000, ControllerOptions{}.flush_idle_ns / 1000000);
  fmt::print("machine: {}\n", describe(machine_info()));
  fmt::print("warm-up: {} writes of 4 KiB to {} (posix, BTreeDefault), {} tasks, fsync; settle {:.2f} s; burst: {} "
             "writes of 4 KiB\n",
             o.warmup_writes, path, 4 * o.workers, o.settle, o.burst);
  std::vector<std::vector<Window>> rounds;
  for (unsigned r = 0; r < o.repeat; ++r) {
    try {
      rounds.push_back(measure(o, path));
    } catch (const std::exception& e) {
      ::unlink(path.c_str());
      fmt::print(stderr, "idle: {}\n", e.what());
      return 1;
    }
    ::unlink(path.c_str());
  }

  Table table({"phase", "from_ms", "to_ms", "rtime", "utime", "stime", "cpu", "%core", "vcsw", "rounds", "sleeps"});
  CsvWriter csv;
  if (!o.csv.empty()) {
    auto err = csv.open(o.csv, {"phase", "from_ms", "to_ms", "workers", "rtime_ms", "utime_ms", "stime_ms", "cpu_ms",
                                "percent_core", "voluntary_switches", "rounds", "sleeps", "runs"});
    if (!err.empty()) {
      fmt::print(stderr, "idle: {}\n", err);
      return 1;
    }
  }
  // Row i of every round is the same window; report the round of median %core.
  double idle_percent = -1;
  for (std::size_t i = 0; i < rounds[0].size(); ++i) {
    std::vector<Window> ws;
    for (const auto& r : rounds) ws.push_back(r[i]);
    std::sort(ws.begin(), ws.end(), [](const Window& a, const Window& b) { return a.percent() < b.percent(); });
    const Window& w = ws[(ws.size() - 1) / 2];
    if (w.phase == "idle") idle_percent = w.percent();
    const std::string rounds_s = w.has_stats ? fmt::format("{}", w.rounds) : "-";
    const std::string sleeps_s = w.has_stats ? fmt::format("{}", w.sleeps) : "-";
    table.add_row({w.phase, fixed(w.from_ms, 0), fixed(w.to_ms, 0), fixed(w.usage.real_ms, 1),
                   fixed(w.usage.user_ms, 2), fixed(w.usage.sys_ms, 2), fixed(w.usage.cpu_ms(), 2), fixed(w.percent(), 3),
                   fmt::format("{}", w.usage.voluntary_switches), rounds_s, sleeps_s});
    csv.row({w.phase, fixed(w.from_ms, 0), fixed(w.to_ms, 0), fmt::format("{}", o.workers), fixed(w.usage.real_ms, 3),
             fixed(w.usage.user_ms, 3), fixed(w.usage.sys_ms, 3), fixed(w.usage.cpu_ms(), 3), fixed(w.percent(), 4),
             fmt::format("{}", w.usage.voluntary_switches), w.has_stats ? rounds_s : "", w.has_stats ? sleeps_s : "",
             fmt::format("{}", rounds.size())});
  }
  fmt::print("\n");
  table.print(stdout);
  fmt::print("(%core = CPU time / wall time x 100; vcsw = voluntary context switches of the process; rounds, sleeps: "
             "Controller::stats() deltas over the phase{})\n",
             o.repeat > 1 ? fmt::format("; the round of median %core of {} is shown", o.repeat) : "");
  fmt::print("\ntarget: idle controller with {} workers < 1% of one core: {:.3f}% -> {}\n", o.workers,
             idle_percent, idle_percent < 1.0 ? "met" : "MISSED");
  if (!o.csv.empty()) fmt::print("\nCSV written to {}\n", o.csv);
  return 0;
}

}  // namespace

void add_idle_command(CLI::App& app) {
  auto o = std::make_shared<IdleOptions>();
  CLI::App* sub = app.add_subcommand("idle", "CPU used by an idle tai::Controller, and right after a burst of writes");
  sub->add_option("--workers", o->workers, "controller worker threads")->capture_default_str();
  sub->add_option("--seconds", o->seconds, "length of each measured phase")->capture_default_str();
  sub->add_option("--settle", o->settle, "seconds between the warm-up and the idle phase")->capture_default_str();
  sub->add_option("--warmup-writes", o->warmup_writes, "4 KiB writes before the idle phase")->capture_default_str();
  sub->add_option("--burst", o->burst, "4 KiB writes of the burst")->capture_default_str();
  sub->add_option("--repeat", o->repeat, "rounds (medians reported)")->capture_default_str();
  sub->add_option("--dir", o->dir, "directory of the scratch file")->capture_default_str();
  sub->add_option("--csv", o->csv, "write the table as CSV to this file");
  sub->callback([o] {
    if (o->workers == 0 || o->repeat == 0 || o->seconds <= 0 || o->settle < 0) {
      fmt::print(stderr, "idle: --workers and --repeat must be at least 1, --seconds positive, --settle >= 0\n");
      throw CLI::RuntimeError(2);
    }
    const int rc = run_idle(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tai::bench
