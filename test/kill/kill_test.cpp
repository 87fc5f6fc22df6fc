// The process-kill suite: tai_kill_child writes through a tai::Controller and narrates every
// operation on a pipe; this test SIGKILLs it at a moment picked from that narration (just after
// it announced a write or a sync, just after it saw one complete, or at a random time), with a
// random delay of 0-200 us, then reads the files with plain pread and checks that everything a
// successful fsync covered is there.
//
// SIGKILL loses the process, not the kernel: whatever TAI had handed to the kernel survives,
// whatever sat in TAI's own cache or queues is gone. So this suite checks that a sync receipt
// reports success only after every write it covers has left user space. Power loss (the kernel's
// page cache gone too) is the crash-simulation suite's business (test/crashsim_*); the two do not
// share code or counts.
//
// The oracle, per file and per byte position p, from the drained event log (kill_protocol.hpp):
//   S    = the largest operation number of a sync of this file whose completion the child
//          reported as ok (every operation of a clean shutdown reported ok counts as synced);
//          absent when there is none.
//   F(p) = the last write of this file with operation number < S that covers p (the writes are
//          numbered in submission order by the one submitting thread, and a sync covers every
//          write of its file submitted before it: DESIGN section 2, "Order" and "Durability").
//   If F(p) exists, the byte at p must exist (p < file size) and equal the content of some write
//   W covering p with W >= F(p): F(p) itself, or a later write of the same byte that may or may
//   not have reached the kernel. An older write, a zero, a short file: a violation.
//   If F(p) does not exist, the byte may be missing, zero, or the content of any announced write
//   covering p, nothing else (no invented bytes).
// The child announces a write before submitting it and reports a sync only after its receipt
// said ok(), so the log holds every write that can have reached the kernel and no sync that had
// not completed: the oracle never blames TAI for a race of the narration.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/controller_support.hpp"
#include "support/tally.hpp"
#include "support/test_env.hpp"
#include "tai/engine_selector.hpp"
#include "test/kill/kill_protocol.hpp"
#include "test/kill/spawn_reporting.hpp"

extern char** environ;

namespace tai::test::kill {
namespace {

struct KillConfig {
  std::string engine;  ///< "posix" or "uring"
  std::string tree;    ///< "default" (BTreeDefault) or "trivial" (BTreeTrivial)
  std::string label() const { return engine + "_" + (tree == "default" ? "BTreeDefault" : "BTreeTrivial"); }
};

// GoogleTest prints a parameter with this (instead of its bytes) in test names' descriptions.
void PrintTo(const KillConfig& c, std::ostream* os) { *os << c.label(); }

std::vector<KillConfig> kill_configs() {
  return {{"posix", "default"}, {"posix", "trivial"}, {"uring", "default"}, {"uring", "trivial"}};
}

/// Where the parent kills: just after the child's announcement of a kind of event (for an
/// operation numbered at least the chosen target), or at a random time after the child started.
enum class KillPoint { after_write_submitted, after_write_completed, after_sync_submitted, after_sync_done, wall_clock };

const char* name_of(KillPoint p) {
  switch (p) {
    case KillPoint::after_write_submitted: return "after write submitted";
    case KillPoint::after_write_completed: return "after write completed";
    case KillPoint::after_sync_submitted: return "after sync submitted";
    case KillPoint::after_sync_done: return "after sync done";
    case KillPoint::wall_clock: return "wall clock";
  }
  return "?";
}

struct KillPlan {
  KillPoint point = KillPoint::wall_clock;
  double target_fraction = 0;  ///< the target operation, as a fraction of the child's operations
  unsigned delay_us = 0;       ///< after the event (or, for wall_clock, after `started`)
};

/// Counts of one configuration (and, summed, of the suite).
struct KillCounts {
  std::uint64_t kills = 0;
  std::uint64_t kills_in_flight = 0;  ///< an operation announced and its completion not reported
  std::uint64_t kills_sync_in_flight = 0;
  std::uint64_t kills_after_clean_end = 0;  ///< the child had shut down before the chosen moment
  std::uint64_t fsyncs_verified = 0;        ///< sync receipts reported ok whose coverage was checked
  std::uint64_t bytes_verified = 0;         ///< bytes some successful sync covered, read back
  std::uint64_t violations = 0;
  std::uint64_t failed_operations = 0;  ///< receipts that failed (none should, no faults here)
  double seconds = 0;

  void add(const KillCounts& o) {
    kills += o.kills;
    kills_in_flight += o.kills_in_flight;
    kills_sync_in_flight += o.kills_sync_in_flight;
    kills_after_clean_end += o.kills_after_clean_end;
    fsyncs_verified += o.fsyncs_verified;
    bytes_verified += o.bytes_verified;
    violations += o.violations;
    failed_operations += o.failed_operations;
    seconds += o.seconds;
  }
};

std::string describe(const Event& e) {
  std::ostringstream os;
  switch (e.kind) {
    case EventKind::write_submitted:
      os << "op " << e.op << " write file" << e.file << " [" << e.offset << ", +" << e.length << ")";
      break;
    case EventKind::sync_submitted: os << "op " << e.op << (e.detail ? " fdatasync" : " fsync") << " file" << e.file; break;
    case EventKind::op_completed: os << "op " << e.op << (e.detail ? " completed ok" : " FAILED"); break;
    case EventKind::shutdown_done: os << "shutdown " << (e.detail ? "ok" : "FAILED"); break;
    case EventKind::started: os << "started: " << e.file << " files, " << e.length << " ops"; break;
  }
  return os.str();
}

struct WriteOp {
  std::uint64_t op, offset, length;
  bool covers(std::uint64_t p) const { return p >= offset && p - offset < length; }
};

constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();

/// Checks the files of one killed run against the oracle of the file comment. Adds to `counts`
/// and appends a paragraph per violated file to `report`.
void verify(const std::string& dir, std::uint64_t seed, const std::vector<Event>& log, KillCounts& counts,
            std::string& report) {
  unsigned files = 0;
  std::vector<EventKind> kind_of_op;
  std::vector<std::uint32_t> file_of_op;
  std::vector<std::vector<WriteOp>> writes;
  std::vector<std::uint64_t> synced_before;  // S per file: writes numbered below it are covered
  bool clean_shutdown = false;
  for (const Event& e : log) {
    if (e.kind == EventKind::started) {
      files = e.file;
      writes.assign(files, {});
      synced_before.assign(files, 0);
      kind_of_op.assign(e.length, EventKind::started);
      file_of_op.assign(e.length, 0);
    } else if (e.kind == EventKind::write_submitted || e.kind == EventKind::sync_submitted) {
      kind_of_op.at(e.op) = e.kind;
      file_of_op.at(e.op) = e.file;
      if (e.kind == EventKind::write_submitted) writes.at(e.file).push_back({e.op, e.offset, e.length});
    } else if (e.kind == EventKind::op_completed) {
      if (!e.detail) {
        ++counts.failed_operations;
        continue;
      }
      if (kind_of_op.at(e.op) == EventKind::sync_submitted) {
        ++counts.fsyncs_verified;
        std::uint64_t& s = synced_before.at(file_of_op[e.op]);
        s = std::max(s, e.op);
      }
    } else if (e.kind == EventKind::shutdown_done && e.detail) {
      clean_shutdown = true;
    }
  }
  if (clean_shutdown) std::fill(synced_before.begin(), synced_before.end(), kNone);

  for (unsigned f = 0; f < files; ++f) {
    const std::vector<unsigned char> actual = read_with_pread(dir + "/file" + std::to_string(f));
    std::uint64_t extent = actual.size();
    for (const WriteOp& w : writes[f]) extent = std::max(extent, w.offset + w.length);
    // The writes are in operation order: painting them in turn leaves the last one per byte.
    std::vector<std::uint64_t> floor_op(extent, kNone), latest_op(extent, kNone);
    for (const WriteOp& w : writes[f]) {
      for (std::uint64_t p = w.offset; p < w.offset + w.length; ++p) {
        latest_op[p] = w.op;
        if (w.op < synced_before[f]) floor_op[p] = w.op;
      }
    }
    std::uint64_t bad = 0, first_bad = 0;
    std::string first_detail;
    for (std::uint64_t p = 0; p < extent; ++p) {
      const bool present = p < actual.size();
      const unsigned a = present ? actual[p] : 0;
      const std::uint64_t floor = floor_op[p];
      bool ok = false;
      if (floor == kNone) {
        ok = !present || a == 0;  // never synced: missing or a hole are fine
      } else {
        ++counts.bytes_verified;
      }
      if (!ok && present) {
        if (floor != kNone && a == content_byte(seed, f, floor, p)) ok = true;
        else if (latest_op[p] != kNone && a == content_byte(seed, f, latest_op[p], p)) ok = true;
        else
          for (const WriteOp& w : writes[f])
            if ((floor == kNone || w.op >= floor) && w.covers(p) && a == content_byte(seed, f, w.op, p)) {
              ok = true;
              break;
            }
      }
      if (ok) continue;
      if (bad++ == 0) {
        first_bad = p;
        std::ostringstream os;
        os << (present ? "byte " + std::to_string(a) : std::string("missing (file is ") + std::to_string(actual.size()) + " bytes)");
        if (floor != kNone) os << ", expected write op " << floor << " (" << unsigned(content_byte(seed, f, floor, p)) << ") or a later one";
        else os << ", no synced write covers it: expected 0 or an announced write";
        first_detail = os.str();
      }
    }
    if (bad) {
      ++counts.violations;
      std::ostringstream os;
      os << "  file" << f << ": " << bad << " bad bytes, first at offset " << first_bad << ": " << first_detail
         << " (writes below op " << (synced_before[f] == kNone ? std::string("end (clean shutdown)") : std::to_string(synced_before[f]))
         << " are synced)\n";
      report += os.str();
    }
  }
}

/// The path of tai_kill_child (a compile definition from CMake).
const char* child_path() { return TAI_KILL_CHILD_PATH; }

struct CycleOutcome {
  std::vector<Event> log;
  std::size_t events_before_kill = 0;  ///< how many events the parent had read when it killed
  bool finished_first = false;         ///< the child shut down before the chosen moment
  std::string error;                   ///< the child did not die by our SIGKILL
  std::int64_t run_us = -1;            ///< started -> shutdown_done, when the child got there
};

/// Starts the child on `dir`, kills it as `plan` says, waits for it and drains its log.
CycleOutcome run_and_kill(const KillConfig& config, const std::string& dir, std::uint64_t seed, const KillPlan& plan) {
  CycleOutcome out;
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  const ReportingChild child = spawn_reporting(
      {child_path(), "--dir", dir, "--seed", std::to_string(seed), "--engine", config.engine, "--tree", config.tree}, env,
      kEventFd);
  if (child.pid < 0) {
    out.error = child.error;
    return out;
  }
  const pid_t pid = child.pid;
  const int read_end = child.read_end;

  using Clock = std::chrono::steady_clock;
  const auto spawn_time = Clock::now();
  Clock::time_point started_at{}, wall_deadline = Clock::time_point::max();
  std::uint64_t target_op = 0;
  bool killed = false;
  auto kill_now = [&] {
    ::kill(pid, SIGKILL);
    killed = true;
    out.events_before_kill = out.log.size();
  };
  auto spin_for = [](unsigned us) {
    const auto until = Clock::now() + std::chrono::microseconds(us);
    while (Clock::now() < until) {
    }
  };
  // Event kinds of the operations, to tell a write's completion from a sync's.
  std::vector<EventKind> kind_of_op;
  char buffer[sizeof(Event) * 64];
  std::size_t held = 0;
  for (;;) {
    int timeout_ms = -1;
    const auto now = Clock::now();
    if (!killed) {
      // A child that hangs is a failure too: no run takes seconds.
      const auto limit = std::min(wall_deadline, spawn_time + std::chrono::seconds(30));
      if (now >= limit) {
        if (now >= spawn_time + std::chrono::seconds(30)) out.error = "the child neither finished nor died within 30 s";
        kill_now();
        continue;
      }
      timeout_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(limit - now).count()) + 1;
      if (wall_deadline != Clock::time_point::max()) {
        // Sub-millisecond deadlines: poll without sleeping, the check above kills on time.
        timeout_ms = std::chrono::duration_cast<std::chrono::microseconds>(wall_deadline - now).count() < 1000 ? 0 : timeout_ms;
      }
    }
    pollfd pfd{read_end, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;
    const ssize_t n = ::read(read_end, buffer + held, sizeof buffer - held);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file: the child is dead (or finished and closed it)
    held += static_cast<std::size_t>(n);
    std::size_t used = 0;
    for (; held - used >= sizeof(Event); used += sizeof(Event)) {
      Event e;
      std::memcpy(&e, buffer + used, sizeof e);
      out.log.push_back(e);
      if (e.kind == EventKind::started) {
        started_at = Clock::now();
        target_op = static_cast<std::uint64_t>(plan.target_fraction * static_cast<double>(e.length));
        kind_of_op.assign(e.length, EventKind::started);
        if (plan.point == KillPoint::wall_clock) wall_deadline = started_at + std::chrono::microseconds(plan.delay_us);
      }
      if (e.kind == EventKind::write_submitted || e.kind == EventKind::sync_submitted) kind_of_op.at(e.op) = e.kind;
      if (e.kind == EventKind::shutdown_done) out.run_us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_at).count();
      if (killed) continue;
      bool hit = false;
      switch (plan.point) {
        case KillPoint::after_write_submitted: hit = e.kind == EventKind::write_submitted && e.op >= target_op; break;
        case KillPoint::after_sync_submitted: hit = e.kind == EventKind::sync_submitted && e.op >= target_op; break;
        case KillPoint::after_write_completed:
          hit = e.kind == EventKind::op_completed && e.op >= target_op && kind_of_op.at(e.op) == EventKind::write_submitted;
          break;
        case KillPoint::after_sync_done:
          hit = e.kind == EventKind::op_completed && e.op >= target_op && kind_of_op.at(e.op) == EventKind::sync_submitted;
          break;
        case KillPoint::wall_clock: break;
      }
      if (hit) {
        spin_for(plan.delay_us);
        kill_now();
      } else if (e.kind == EventKind::shutdown_done) {
        out.finished_first = true;
        kill_now();
      }
    }
    std::memmove(buffer, buffer + used, held - used);
    held -= used;
  }
  ::close(read_end);
  if (!killed) ::kill(pid, SIGKILL);  // closed its pipe without dying: make sure it goes
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (out.error.empty() && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
    out.error = WIFEXITED(status) ? "the child exited with status " + std::to_string(WEXITSTATUS(status))
                                  : "the child died of signal " + std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : -1);
  }
  return out;
}

std::string log_tail(const CycleOutcome& out, std::size_t lines) {
  std::ostringstream os;
  const std::size_t from = out.log.size() > lines ? out.log.size() - lines : 0;
  for (std::size_t i = from; i < out.log.size(); ++i) {
    if (i == out.events_before_kill) os << "    ---- SIGKILL sent (events below were already in the pipe or written before death)\n";
    os << "    " << describe(out.log[i]) << "\n";
  }
  if (out.events_before_kill == out.log.size()) os << "    ---- SIGKILL sent (no event after it)\n";
  return os.str();
}

/// The kill suite's tally directory (a compile definition), one counts file per configuration.
std::string tally_path(const std::string& label) { return std::string(TAI_KILL_TALLY_DIR) + "/" + label + ".txt"; }

void write_tally(const std::string& label, const KillCounts& c, double scale) {
  std::filesystem::create_directories(TAI_KILL_TALLY_DIR);
  std::ofstream(tally_path(label)) << c.kills << ' ' << c.kills_in_flight << ' ' << c.kills_sync_in_flight << ' '
                                   << c.kills_after_clean_end << ' ' << c.fsyncs_verified << ' ' << c.bytes_verified << ' '
                                   << c.violations << ' ' << c.failed_operations << ' ' << c.seconds << ' ' << scale << '\n';
}

void print_counts(const char* prefix, const std::string& label, const KillCounts& c) {
  std::printf("[kill] %s%-20s %llu kills (%llu with operations in flight, %llu with a sync in flight, %llu after a clean "
              "end), %llu fsyncs verified, %llu bytes verified, %llu failed operations, %llu violations, %.1f s\n",
              prefix, label.c_str(), static_cast<unsigned long long>(c.kills), static_cast<unsigned long long>(c.kills_in_flight),
              static_cast<unsigned long long>(c.kills_sync_in_flight), static_cast<unsigned long long>(c.kills_after_clean_end),
              static_cast<unsigned long long>(c.fsyncs_verified), static_cast<unsigned long long>(c.bytes_verified),
              static_cast<unsigned long long>(c.failed_operations), static_cast<unsigned long long>(c.violations), c.seconds);
  std::fflush(stdout);
}

/// Kills per configuration in an optimised build: four configurations make the 1,000 per CI run.
constexpr unsigned kKillsPerConfig = 260;

class KillSuite : public ::testing::TestWithParam<KillConfig> {};

TEST_P(KillSuite, EverythingASuccessfulFsyncCoveredSurvivesSigkill) {
  const KillConfig config = GetParam();
  if (config.engine != "posix") {
    for (const EngineInfo& e : list_engines())
      if (e.name == config.engine && !e.available) GTEST_SKIP() << "engine '" << e.name << "' unavailable here: " << e.reason;
  }
  // Sanitizer and debug builds: a fifth (every child starts a controller, dear there).
  const double scale = controller_test_scale("TAI_KILL_SCALE");
  const unsigned cycles = std::max(1u, static_cast<unsigned>(kKillsPerConfig * scale + 0.5));
  const std::uint64_t base_seed = test_seed();
  std::printf("[kill] %s: %u kills, seed %llu (replay: TAI_TEST_SEED=%llu)\n", config.label().c_str(), cycles,
              static_cast<unsigned long long>(base_seed), static_cast<unsigned long long>(base_seed));
  ScratchDir scratch;
  KillCounts counts;
  // A wall-clock kill lands anywhere in a typical run: learned from runs that got to the end.
  double typical_run_us = 5000;
  const auto start = std::chrono::steady_clock::now();
  for (unsigned cycle = 0; cycle < cycles; ++cycle) {
    std::mt19937_64 rng(mix64(base_seed ^ mix64(std::hash<std::string>{}(config.label())) ^ cycle));
    const std::uint64_t child_seed = rng();
    KillPlan plan;
    const unsigned roll = static_cast<unsigned>(rng() % 100);
    plan.point = roll < 20   ? KillPoint::wall_clock
                 : roll < 45 ? KillPoint::after_write_submitted
                 : roll < 60 ? KillPoint::after_write_completed
                 : roll < 85 ? KillPoint::after_sync_submitted
                             : KillPoint::after_sync_done;
    plan.target_fraction = std::uniform_real_distribution<double>(0, 1)(rng);
    plan.delay_us = plan.point == KillPoint::wall_clock ? static_cast<unsigned>(rng() % static_cast<std::uint64_t>(typical_run_us * 1.2 + 1))
                    : rng() % 4 == 0                   ? 0
                                                       : static_cast<unsigned>(rng() % 201);
    const std::string dir = (scratch.path() / ("run" + std::to_string(cycle))).string();
    std::filesystem::create_directories(dir);

    const CycleOutcome out = run_and_kill(config, dir, child_seed, plan);
    if (!out.error.empty()) {
      ADD_FAILURE() << config.label() << " seed " << child_seed << ": " << out.error << "\n" << log_tail(out, 20);
      break;
    }
    if (out.run_us > 0) typical_run_us = 0.8 * typical_run_us + 0.2 * static_cast<double>(out.run_us);
    ++counts.kills;
    if (out.finished_first) ++counts.kills_after_clean_end;
    // In flight at death, by the log: announced, and no completion reported.
    std::vector<bool> is_sync;
    std::uint64_t in_flight = 0, syncs_in_flight = 0;
    for (const Event& e : out.log) {
      if (e.kind == EventKind::started) is_sync.assign(e.length, false);
      if (e.kind == EventKind::write_submitted || e.kind == EventKind::sync_submitted) {
        ++in_flight;
        if (e.kind == EventKind::sync_submitted) {
          is_sync.at(e.op) = true;
          ++syncs_in_flight;
        }
      }
      if (e.kind == EventKind::op_completed) {
        --in_flight;
        if (is_sync.at(e.op)) --syncs_in_flight;
      }
    }
    if (in_flight > 0) ++counts.kills_in_flight;
    if (syncs_in_flight > 0) ++counts.kills_sync_in_flight;

    const std::uint64_t violations_before = counts.violations;
    std::string report;
    verify(dir, child_seed, out.log, counts, report);
    if (counts.violations != violations_before) {
      ADD_FAILURE() << "SIGKILL lost synced data: " << config.label() << ", child seed " << child_seed << " (tai_kill_child --dir D --seed "
                    << child_seed << " --engine " << config.engine << " --tree " << config.tree << "), killed "
                    << (plan.point == KillPoint::wall_clock
                            ? std::string("at a random time, ") + std::to_string(plan.delay_us) + " us after the child started"
                            : std::string(name_of(plan.point)) + " (an op from " + std::to_string(static_cast<unsigned>(plan.target_fraction * 100)) +
                                  "% of the run on) + " + std::to_string(plan.delay_us) + " us")
                    << "\n"
                    << report << "  the log's tail:\n"
                    << log_tail(out, 30);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  counts.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print_counts("", config.label(), counts);
  EXPECT_EQ(counts.violations, 0u);
  EXPECT_EQ(counts.failed_operations, 0u) << "no operation should fail: this suite injects no faults";
  // The kill points are not a formality: some kills must find operations, syncs included, still
  // in flight, and some syncs must have been checked.
  if (cycles >= 50) {
    EXPECT_GT(counts.kills_in_flight, cycles / 10);
    EXPECT_GT(counts.kills_sync_in_flight, 0u);
    EXPECT_GT(counts.fsyncs_verified, 0u);
  }
  write_tally(config.label(), counts, scale);
}

INSTANTIATE_TEST_SUITE_P(Configs, KillSuite, ::testing::ValuesIn(kill_configs()),
                         [](const ::testing::TestParamInfo<KillConfig>& info) { return info.param.label(); });

// The suite's total, run by ctest after every configuration as `kill.summary` (a fixture
// cleanup that sets TAI_KILL_SUMMARY=1); skipped when run otherwise.
TEST(KillSummary, Total) {
  if (!std::getenv("TAI_KILL_SUMMARY")) GTEST_SKIP() << "run as the ctest test kill.summary, after the suite";
  KillCounts sum;
  double scale = 1;
  std::size_t configs = 0;
  for (const KillConfig& c : kill_configs()) {
    std::ifstream in(tally_path(c.label()));
    KillCounts t;
    if (!(in >> t.kills >> t.kills_in_flight >> t.kills_sync_in_flight >> t.kills_after_clean_end >> t.fsyncs_verified >>
          t.bytes_verified >> t.violations >> t.failed_operations >> t.seconds >> scale))
      continue;
    sum.add(t);
    ++configs;
  }
  if (configs == 0) GTEST_SKIP() << "no configuration left a tally: run the kill.* tests first";
  const std::string label = std::to_string(configs) + " of " + std::to_string(kill_configs().size()) + " configs";
  print_counts("TOTAL: ", label, sum);
  write_reliability_row("process kills (SIGKILL)", configs, kill_configs().size(),
                        std::to_string(sum.kills) + " kills (" + std::to_string(sum.kills_in_flight) +
                            " with operations in flight), " + std::to_string(sum.fsyncs_verified) + " fsyncs verified",
                        sum.violations);
  EXPECT_EQ(sum.violations, 0u);
  // The preload's programs (preload_kill_test.cpp), a row of their own: their tallies count kills,
  // what was checked (bytes for the writer, committed transactions for sqlite3) and violations.
  std::uint64_t preload_programs = 0, preload_violations = 0;
  std::string preload_checked;
  const std::vector<const char*> programs = {"writer", "sqlite3", "sqlite3_order", "sqlite3_wal_order", "sqlite3_order_log",
                                            "sqlite3_wal_order_log"};
  for (const char* program : programs) {
    std::ifstream in(std::string(TAI_KILL_TALLY_DIR) + "/preload_" + program + ".txt");
    std::uint64_t kills = 0, checked = 0, violations = 0;
    if (!(in >> kills >> checked >> violations)) continue;
    ++preload_programs;
    preload_violations += violations;
    preload_checked += std::string(preload_checked.empty() ? "" : ", ") + program + " " + std::to_string(kills) + " kills, " +
                       std::to_string(checked) + (std::string(program) == "writer" ? " bytes" : std::string(program) == "sqlite3" ? " commits" : " rows") + " verified";
  }
  if (preload_programs > 0) {
    std::printf("[kill] TOTAL preload: %s, %llu violations\n", preload_checked.c_str(), static_cast<unsigned long long>(preload_violations));
    write_reliability_row("preload under SIGKILL", preload_programs, programs.size(), preload_checked, preload_violations);
  }
  EXPECT_EQ(preload_violations, 0u);
  // At least 1,000 kills per CI run in an optimised build with every configuration available.
  if (scale >= 1.0 && configs == kill_configs().size()) {
    EXPECT_GE(sum.kills, 1000u);
  }
}

}  // namespace
}  // namespace tai::test::kill
