// bench/tai_bench/memory.cpp - `tai-bench memory`: the process's memory while a controller with a
// small quota writes much more than it (DESIGN "Memory is bounded").
//
// Three workloads, each writing --bytes in 64 KiB writes through the posix engine and
// BTreeDefault into a sparse file of 4 GiB under --dir, with weak quota 4 MiB and strict 8 MiB
// (the write-copy budget at its default):
//   sequential  consecutive offsets (wrapping at 4 GiB), 64 writes in flight;
//   random      random 64 KiB-aligned offsets in the 4 GiB, 64 writes in flight;
//   no-wait     consecutive offsets, every receipt dropped at once (never waited for), one
//               Controller::flush() at the end: what queues when nothing holds the program back.
// Each row: bytes written, seconds (the final flush included), MiB/s, peak RSS (VmHWM of
// /proc/self/status, reset before each workload by writing "5" to /proc/self/clear_refs; where
// that is refused the workload runs in a forked child, whose VmHWM starts afresh), and peak heap
// (jemalloc's stats.allocated, sampled every 64 submissions; "-" without jemalloc). The target
// line: peak RSS <= strict quota + 64 MiB.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tai/tai.hpp"
#include "tai_bench/bench_util.hpp"
#include "tai_bench/commands.hpp"

extern "C" int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp, std::size_t newlen)
    __attribute__((weak));

namespace tai::bench {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kWeak = 4 * kMiB;
constexpr std::uint64_t kStrict = 8 * kMiB;
constexpr std::uint64_t kFileSize = std::uint64_t{4} << 30;
constexpr std::size_t kWriteSize = 64 * 1024;
constexpr std::size_t kInFlight = 64;
constexpr std::uint64_t kTargetSlack = 64 * kMiB;

struct MemoryOptions {
  std::string bytes = "1G";
  std::string dir = "/var/tmp";
  unsigned workers = 2;
};

enum class Workload { sequential, random, no_wait };
const char* name_of(Workload w) {
  switch (w) {
    case Workload::sequential: return "sequential";
    case Workload::random: return "random";
    case Workload::no_wait: return "no-wait";
  }
  return "?";
}

// Trivially copyable: a forked child sends it back through a pipe.
struct Result {
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::uint64_t peak_rss = 0;   // bytes
  std::uint64_t peak_heap = 0;  // bytes; 0 without jemalloc
  std::uint64_t copy_waits = 0;
  char error[200] = {};
};

/// A field of /proc/self/status in bytes (the kernel prints kB), 0 when absent.
std::uint64_t status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  const std::size_t n = std::strlen(field);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::strtoull(line.c_str() + n + 1, nullptr, 10) * 1024;
  return 0;
}

/// Resets VmHWM to the current RSS; true when the kernel took it (VmHWM is then close to VmRSS).
bool reset_peak_rss() {
  {
    std::ofstream out("/proc/self/clear_refs");
    if (!out) return false;
    out << "5";
    out.flush();
    if (!out) return false;
  }
  const std::uint64_t hwm = status_bytes("VmHWM"), rss = status_bytes("VmRSS");
  return hwm != 0 && hwm <= rss + 4 * kMiB;
}

/// jemalloc's allocated bytes, refreshed (epoch); 0 without jemalloc.
std::uint64_t heap_allocated() {
  if (&mallctl == nullptr) return 0;
  std::uint64_t epoch = 1;
  std::size_t len = sizeof epoch;
  if (mallctl("epoch", &epoch, &len, &epoch, sizeof epoch) != 0) return 0;
  std::size_t allocated = 0;
  len = sizeof allocated;
  if (mallctl("stats.allocated", &allocated, &len, nullptr, 0) != 0) return 0;
  return allocated;
}

Result run(Workload w, const MemoryOptions& o, std::uint64_t bytes, const std::string& path) {
  Result res;
  auto fail = [&res](const std::string& what) {
    std::snprintf(res.error, sizeof res.error, "%s", what.c_str());
    return res;
  };
  {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(kFileSize)) != 0) {
      if (fd >= 0) ::close(fd);
      return fail("cannot make the sparse file " + path + ": " + std::strerror(errno));
    }
    ::close(fd);
  }
  ControllerOptions co;
  co.workers = o.workers;
  co.weak_quota = kWeak;
  co.strict_quota = kStrict;
  co.engine = "posix";
  std::uint64_t peak_heap = 0;
  std::int64_t start = 0;
  {
    Controller ctl(co);
    auto opened = ctl.open<BTreeDefault>(path, OpenMode(Open::read | Open::write), "posix");
    if (!opened) return fail(opened.error().message);
    File f = std::move(opened.value());
    std::vector<std::byte> src(kWriteSize, std::byte{0x5a});
    std::deque<Receipt> window;
    std::mt19937_64 rng(42);
    const std::uint64_t count = bytes / kWriteSize;
    start = now_ns();
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::uint64_t offset = w == Workload::random ? rng() % (kFileSize / kWriteSize) * kWriteSize
                                                         : i * kWriteSize % kFileSize;
      Receipt r = f.write(offset, src.data(), src.size());
      if (w != Workload::no_wait) {
        window.push_back(std::move(r));
        if (window.size() >= kInFlight) {
          if (!window.front().ok()) return fail("write: " + window.front().message());
          window.pop_front();
        }
      }
      if (i % 64 == 63) peak_heap = std::max(peak_heap, heap_allocated());
    }
    for (const Receipt& r : window)
      if (!r.ok()) return fail("write: " + r.message());
    window.clear();
    if (Receipt fl = ctl.flush(); !fl.ok()) return fail("flush: " + fl.message());
    res.seconds = static_cast<double>(now_ns() - start) / 1e9;
    peak_heap = std::max(peak_heap, heap_allocated());
    res.copy_waits = ctl.stats().write_copy_waits;
    if (Receipt c = f.close(); !c.ok()) return fail("close: " + c.message());
  }
  res.bytes = bytes / kWriteSize * kWriteSize;
  res.peak_rss = status_bytes("VmHWM");
  res.peak_heap = peak_heap;
  return res;
}

/// Runs the workload in a forked child (a fresh VmHWM) and returns what it sent back.
Result run_forked(Workload w, const MemoryOptions& o, std::uint64_t bytes, const std::string& path) {
  Result res;
  int fds[2];
  if (::pipe(fds) != 0) {
    std::snprintf(res.error, sizeof res.error, "pipe: %s", std::strerror(errno));
    return res;
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const Result r = run(w, o, bytes, path);
    [[maybe_unused]] ssize_t n = ::write(fds[1], &r, sizeof r);
    ::_exit(0);
  }
  ::close(fds[1]);
  if (pid < 0 || ::read(fds[0], &res, sizeof res) != static_cast<ssize_t>(sizeof res))
    std::snprintf(res.error, sizeof res.error, "the child running the workload failed");
  ::close(fds[0]);
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  return res;
}

std::string mib(std::uint64_t b) { return fmt::format("{:.1f}", static_cast<double>(b) / static_cast<double>(kMiB)); }

int run_memory(const MemoryOptions& o) {
  std::uint64_t bytes = 0;
  try {
    bytes = parse_size(o.bytes);
  } catch (const std::exception& e) {
    fmt::print(stderr, "memory: --bytes: {}\n", e.what());
    return 2;
  }
  if (bytes < kWriteSize) {
    fmt::print(stderr, "memory: --bytes must be at least 64K\n");
    return 2;
  }
  const std::string path = fmt::format("{}/tai-memory-{}.dat", o.dir, ::getpid());
  const bool resettable = reset_peak_rss();
  const std::uint64_t budget = ControllerOptions{}.write_copy_budget;
  fmt::print("memory: 64 KiB writes through posix + BTreeDefault into a sparse 4 GiB file ({}); weak quota {} MiB, "
             "strict {} MiB, write-copy budget {} MiB, {} workers\n",
             path, kWeak / kMiB, kStrict / kMiB, budget / kMiB, o.workers);
  fmt::print("machine: {}\n", describe(machine_info()));
  fmt::print("peak RSS: {}\n", resettable ? "VmHWM, reset before each workload (/proc/self/clear_refs)"
                                          : "VmHWM of a forked child per workload (/proc/self/clear_refs refused)");
  Table table({"workload", "bytes", "seconds", "MiB/s", "peak_rss_MiB", "peak_heap_MiB", "copy_waits"});
  const std::uint64_t target = kStrict + kTargetSlack;
  bool all_met = true;
  for (Workload w : {Workload::sequential, Workload::random, Workload::no_wait}) {
    Result r;
    if (resettable && reset_peak_rss())
      r = run(w, o, bytes, path);
    else
      r = run_forked(w, o, bytes, path);
    ::unlink(path.c_str());
    if (r.error[0] != '\0') {
      fmt::print(stderr, "memory: {}: {}\n", name_of(w), r.error);
      return 1;
    }
    all_met = all_met && r.peak_rss <= target;
    table.add_row({name_of(w), format_size(r.bytes), fmt::format("{:.2f}", r.seconds),
                   fmt::format("{:.0f}", r.seconds > 0 ? static_cast<double>(r.bytes) / kMiB / r.seconds : 0.0),
                   mib(r.peak_rss), r.peak_heap ? mib(r.peak_heap) : "-", fmt::format("{}", r.copy_waits)});
  }
  fmt::print("\n");
  table.print(stdout);
  fmt::print("(peak_rss: the whole process, VmHWM; peak_heap: jemalloc stats.allocated sampled every 64 writes; "
             "copy_waits: writes that waited for write-copy room)\n");
  fmt::print("\ntarget: peak RSS <= strict quota + 64 MiB = {} MiB -> {}\n", target / kMiB, all_met ? "met" : "MISSED");
  return 0;
}

}  // namespace

void add_memory_command(CLI::App& app) {
  auto o = std::make_shared<MemoryOptions>();
  CLI::App* sub = app.add_subcommand(
      "memory", "peak RSS and heap while writing far more than a small quota (sequential, random, no-wait)");
  sub->add_option("--bytes", o->bytes, "bytes each workload writes (K, M, G suffixes)")->capture_default_str();
  sub->add_option("--dir", o->dir, "directory of the sparse scratch file")->capture_default_str();
  sub->add_option("--workers", o->workers, "controller worker threads")->capture_default_str();
  sub->callback([o] {
    if (o->workers == 0) {
      fmt::print(stderr, "memory: --workers must be at least 1\n");
      throw CLI::RuntimeError(2);
    }
    const int rc = run_memory(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tai::bench
