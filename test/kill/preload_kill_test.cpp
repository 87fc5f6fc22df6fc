// The process-kill suite with the preload library: unmodified programs run under
// LD_PRELOAD=libtai-preload.so with their files in a routed directory, SIGKILLed mid-run.
//
// SIGKILL takes the process and what TAI still held in it; the kernel keeps what TAI had handed
// to it. What the drop-in promises for that end (README, "libtai-preload.so", the ends of a
// program), checked here after every kill against what the program reported before it:
//   * every byte a completed fsync covered is in the file, byte-exact;
//   * a write acknowledged more than the write-behind deadline (TAI_WRITE_BEHIND_MS, 200 ms by
//     default) plus a slack before the kill is in the file: the deadline bounds the loss in time;
//   * what is lost (acknowledged, not in the file) is at most what the cache may hold: the strict
//     quota (TAI_QUOTA) the writer runs with;
//   * no byte the program did not write (a hole is zeros; every written byte is nonzero).
// The oracle holds the writer to the default deadline whatever TAI_WRITE_BEHIND_MS says in the
// environment (which the writer inherits): run with TAI_WRITE_BEHIND_MS=100000 and this test
// fails, as it must against a preload without the deadline.
//
// Two programs: tai_kill_preload_writer (preload_writer.c: appends records with write(2), fsyncs
// at random moments, and reports every acknowledged write and completed fsync on a pipe with its
// CLOCK_MONOTONIC time), and Debian's sqlite3 (transactions committed with synchronous=FULL,
// each followed by a SELECT whose output says it committed; after the kill, plain sqlite3 recovers
// the database: it must be intact and hold every transaction it reported committed, with the
// same rows a run without TAI would have written).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/controller_support.hpp"
#include "support/small_loop_fs.hpp"
#include "support/test_env.hpp"
#include "test/kill/preload_kill_protocol.h"
#include "test/kill/spawn_reporting.hpp"

extern char** environ;

namespace tai::test::kill {
namespace {

/// The write-behind deadline the oracle holds the writer to: the preload's default.
constexpr std::uint64_t kDeadlineMs = 200;
/// The cache the writer runs with (TAI_QUOTA=weak,strict): what SIGKILL may take at most.
constexpr const char* kQuota = "16M,32M";
constexpr std::uint64_t kStrictQuota = 32u << 20;
/// The longest record the writer writes (preload_writer.c): one may be in the file unreported.
constexpr std::uint64_t kMaxRecord = 65536;

std::uint64_t mono_ns() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

const char* preload_lib() { return TAI_KILL_PRELOAD_LIB; }
const char* sanitizer_runtime() { return TAI_KILL_SANITIZER_RUNTIME; }

/// Why the preload cannot be tried here; empty when it can.
std::string preload_unavailable() {
  if (!*preload_lib()) return "this build has no tai_preload target (libtai-preload.so)";
  if (::access(preload_lib(), R_OK) != 0) return std::string(preload_lib()) + " is not readable";
  const std::string rt = sanitizer_runtime();
  if (!rt.empty() && ::access(rt.c_str(), R_OK) != 0)
    return "the instrumented library needs its sanitizer runtime preloaded first, and it was not found: " + rt;
  return {};
}

/// The environment of a preloaded child: this process's, with the library, the routed directory
/// and the given variables set (replacing any of the same names).
std::vector<std::string> preload_env(const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  std::vector<std::string> set = extra;
  const std::string rt = sanitizer_runtime();
  set.push_back("LD_PRELOAD=" + (rt.empty() ? std::string() : rt + ":") + preload_lib());
  set.push_back("TAI_PRELOAD_PATHS=" + dir);
  // The runtime is loaded before the library into an uninstrumented program; the leak check
  // would count the program's own allocations at a kill that never comes.
  const char* asan = std::getenv("ASAN_OPTIONS");
  set.push_back(std::string("ASAN_OPTIONS=") + (asan && *asan ? std::string(asan) + ":" : "") +
                "detect_leaks=0:verify_asan_link_order=0");
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const std::string& s : set)
      if (s.compare(0, name.size() + 1, name + "=") == 0) replaced = true;
    if (!replaced) out.push_back(kv);
  }
  out.insert(out.end(), set.begin(), set.end());
  return out;
}

using Child = ReportingChild;

/// Starts `args` under the preload (the environment `env` names it) with a pipe's write end as
/// descriptor `report_fd` (and `stdin_path` as its standard input when given).
Child spawn_preloaded(const std::vector<std::string>& args, const std::vector<std::string>& env, int report_fd,
                      const std::string& stdin_path = {}) {
  return spawn_reporting(args, env, report_fd, stdin_path);
}

/// Reads what is in the pipe now (wait_ms: how long to wait for the first bytes; -1: until end
/// of file). Returns false at end of file.
bool read_some(int fd, std::string& into, int wait_ms) {
  pollfd p{fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, wait_ms);
  if (ready <= 0) return true;
  char buf[65536];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  into.append(buf, static_cast<std::size_t>(n));
  return true;
}

/// Waits for the child; "" when SIGKILL ended it, else what did.
std::string reap(pid_t pid, bool* exited_zero) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  *exited_zero = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return {};
  return WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                           : "died of signal " + std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : -1);
}

/// The preload rows of the kill suite's tally (the kill.summary test adds them up).
void write_preload_tally(const std::string& name, std::uint64_t kills, std::uint64_t checked, std::uint64_t violations) {
  std::filesystem::create_directories(TAI_KILL_TALLY_DIR);
  std::ofstream(std::string(TAI_KILL_TALLY_DIR) + "/preload_" + name + ".txt") << kills << ' ' << checked << ' ' << violations << '\n';
}

// ---------------------------------------------------------------------------------------------
// The C writer

struct WriterCounts {
  std::uint64_t kills = 0, finished_first = 0, fsyncs = 0;
  std::uint64_t synced_bytes = 0;        ///< bytes below the last completed fsync, read back
  std::uint64_t aged_beyond_sync = 0;    ///< bytes checked by the deadline alone (past the fsync)
  std::uint64_t lost = 0, lost_max = 0;  ///< acknowledged and not in the file at the kill
  std::uint64_t oldest_lost_ms = 0;      ///< the oldest lost write's age at the kill
  std::uint64_t violations = 0;
};

TEST(PreloadKill, WriterKeepsSyncedAndDeadlineOldWrites) {
  if (const std::string why = preload_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const double scale = controller_test_scale("TAI_KILL_SCALE");
  const unsigned kills = std::max(3u, static_cast<unsigned>(12 * scale + 0.5));
  // Beyond the deadline: the keeper's write-back of up to a weak quota of cache, and the
  // scheduling of a shared 2-core machine; sanitizers make both slower.
  const std::uint64_t slack_ms = controller_test_scale("TAI_KILL_SLACK_SCALE") < 1 ? 1500 : 300;
  const std::uint64_t base_seed = test_seed();
  std::printf("[kill] preload writer: %u kills, deadline %llu ms + %llu ms slack, seed %llu (replay: TAI_TEST_SEED=%llu)\n", kills,
              static_cast<unsigned long long>(kDeadlineMs), static_cast<unsigned long long>(slack_ms),
              static_cast<unsigned long long>(base_seed), static_cast<unsigned long long>(base_seed));
  ScratchDir scratch;
  WriterCounts n;
  for (unsigned cycle = 0; cycle < kills; ++cycle) {
    std::mt19937_64 rng(preload_kill_mix64(base_seed ^ (0x5eedull + cycle)));
    const std::uint64_t seed = rng() | 1;
    const bool deadline_alone = cycle % 2 == 1;  // see the environment below
    // With the defaults: kills before the deadline too (the fsyncs alone are checked), most
    // after it. With the deadline alone: fewer fsyncs and later kills, so that most kills come
    // long after the last fsync and the deadline is what must have kept the older writes.
    const std::uint64_t kill_ms = deadline_alone ? 600 + rng() % 1201 : 50 + rng() % 1551;
    const std::string max_gap_ms = deadline_alone ? "2000" : "1200";
    const std::string dir = (scratch.path() / ("w" + std::to_string(cycle))).string();
    std::filesystem::create_directories(dir);
    const std::string file = dir + "/out";
    // Every other kill with the deadline alone: without the early write-back every 8 MiB
    // (TAI_START_WRITEBACK=0), the controller's idle flush (TAI_FLUSH_IDLE_MS=off, else any
    // 2 ms the writer is not scheduled hands everything over) and the write-around of writes of
    // a page or more (TAI_WRITE_AROUND=0: they would go to the kernel uncached, and the cached
    // writes around them with them) and write-through after small syncs (TAI_SYNC_THROUGH=0: a
    // file synced after at most 1 MiB would bypass the cache from then on), only the writer's
    // fsyncs and the deadline give its writes to the kernel (the quota is not reached at this
    // pace). The others run with the preload's defaults.
    std::vector<std::string> vars = {std::string("TAI_QUOTA=") + kQuota};
    if (deadline_alone)
      vars.insert(vars.end(), {"TAI_START_WRITEBACK=0", "TAI_FLUSH_IDLE_MS=off", "TAI_WRITE_AROUND=0", "TAI_SYNC_THROUGH=0"});
    const std::vector<std::string> env = preload_env(dir, vars);
    Child c = spawn_preloaded({TAI_KILL_PRELOAD_WRITER, file, std::to_string(seed), "2500", max_gap_ms}, env, PRELOAD_KILL_EVENT_FD);
    ASSERT_TRUE(c.error.empty()) << c.error;
    std::string raw;
    std::uint64_t started = 0, kill_at = 0, killed_ns = 0;
    bool open = true;
    const std::uint64_t spawn_ns = mono_ns();
    while (open && killed_ns == 0) {
      const std::uint64_t now = mono_ns();
      if (started == 0 && now > spawn_ns + 30'000'000'000ull) break;  // never started: reaped below
      if (started == 0 && raw.size() >= sizeof(preload_kill_event)) {
        preload_kill_event e;
        std::memcpy(&e, raw.data(), sizeof e);
        started = e.ns;
        kill_at = started + kill_ms * 1'000'000u;
      }
      if (started != 0 && now >= kill_at) {
        killed_ns = mono_ns();
        ::kill(c.pid, SIGKILL);
        break;
      }
      const int wait = started == 0 ? 100 : static_cast<int>(std::min<std::uint64_t>((kill_at - now) / 1'000'000u, 20));
      open = read_some(c.read_end, raw, wait);
    }
    if (killed_ns == 0) {
      killed_ns = mono_ns();
      ::kill(c.pid, SIGKILL);
    }
    while (read_some(c.read_end, raw, -1)) {
    }
    ::close(c.read_end);
    bool exited_zero = false;
    const std::string how = reap(c.pid, &exited_zero);
    const bool finished = !how.empty() && exited_zero;
    ASSERT_TRUE(how.empty() || finished) << "writer seed " << seed << ": " << how << " (not by the test's SIGKILL)";
    ASSERT_NE(started, 0u) << "writer seed " << seed << " never reported its start";

    // The reports: acknowledged end, synced end, and the end of the writes old enough at the kill.
    std::vector<preload_kill_event> events(raw.size() / sizeof(preload_kill_event));
    std::memcpy(events.data(), raw.data(), events.size() * sizeof(preload_kill_event));
    std::uint64_t acked = 0, synced = 0, aged = 0;
    for (const preload_kill_event& e : events) {
      if (e.kind == PRELOAD_KILL_WRITTEN) {
        acked = std::max(acked, e.end);
        if (e.ns + (kDeadlineMs + slack_ms) * 1'000'000u <= killed_ns) aged = std::max(aged, e.end);
      } else if (e.kind == PRELOAD_KILL_SYNCED) {
        synced = std::max(synced, e.end);
        ++n.fsyncs;
      }
    }
    if (finished) synced = aged = acked;  // a normal exit keeps everything (the atexit write-back)
    const std::vector<unsigned char> actual = read_with_pread(file);
    std::uint64_t bad_synced = 0, bad_aged = 0, invented = 0, lost = 0, first_lost = acked;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> lost_runs;
    for (std::uint64_t p = 0; p < std::max<std::uint64_t>(actual.size(), acked); ++p) {
      const bool present = p < actual.size();
      const bool right = present && actual[p] == preload_content_byte(seed, p);
      if (present && !right && actual[p] != 0) ++invented;
      if (right) continue;
      if (p < synced) ++bad_synced;
      else if (p < aged) ++bad_aged;
      if (p < acked) {
        ++lost;
        first_lost = std::min(first_lost, p);
        if (lost_runs.empty() || lost_runs.back().second != p) lost_runs.push_back({p, p});
        ++lost_runs.back().second;
      }
    }
    std::ostringstream runs;  // where the loss is: a tail, or ranges the write-back skipped
    for (std::size_t i = 0; i < lost_runs.size() && i < 6; ++i) runs << " [" << lost_runs[i].first << ", " << lost_runs[i].second << ")";
    if (lost_runs.size() > 6) runs << " and " << lost_runs.size() - 6 << " more";
    if (actual.size() > acked + kMaxRecord) invented += actual.size() - acked - kMaxRecord;
    std::uint64_t lost_age_ms = 0;
    for (const preload_kill_event& e : events)
      if (e.kind == PRELOAD_KILL_WRITTEN && e.end > first_lost) {
        lost_age_ms = (killed_ns - std::min(killed_ns, e.ns)) / 1'000'000u;
        break;
      }
    ++n.kills;
    n.finished_first += finished;
    n.synced_bytes += synced;
    n.aged_beyond_sync += aged > synced ? aged - synced : 0;
    n.lost += lost;
    n.lost_max = std::max(n.lost_max, lost);
    if (lost) n.oldest_lost_ms = std::max(n.oldest_lost_ms, lost_age_ms);
    std::printf("[kill]   %s kill at %llu ms: %llu acknowledged, %llu synced, %llu past the deadline, %llu lost (oldest %llu ms)%s\n",
                deadline_alone ? "deadline alone" : "defaults      ", static_cast<unsigned long long>(kill_ms),
                static_cast<unsigned long long>(acked), static_cast<unsigned long long>(synced), static_cast<unsigned long long>(aged),
                static_cast<unsigned long long>(lost), static_cast<unsigned long long>(lost_age_ms), runs.str().c_str());
    const bool violated = bad_synced || bad_aged || invented || lost > kStrictQuota;
    n.violations += violated;
    EXPECT_FALSE(violated) << "writer seed " << seed << " (" << TAI_KILL_PRELOAD_WRITER << " FILE " << seed
                           << " 2500 " << max_gap_ms << " under the preload"
                           << (deadline_alone ? " with TAI_START_WRITEBACK=0 TAI_FLUSH_IDLE_MS=off TAI_WRITE_AROUND=0" : "")
                           << "), killed " << kill_ms << " ms after its start: " << acked
                           << " bytes acknowledged, " << synced << " synced, " << aged << " acknowledged more than "
                           << kDeadlineMs + slack_ms << " ms before the kill; the file has " << actual.size() << " bytes: "
                           << bad_synced << " synced bytes missing or wrong, " << bad_aged
                           << " bytes older than the write-behind deadline missing or wrong, " << invented
                           << " bytes nobody wrote, " << lost << " bytes lost (bound: the strict quota, " << kStrictQuota
                           << "):" << runs.str() << "; the oldest lost write was " << lost_age_ms << " ms old";
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::printf("[kill] preload writer: %llu kills (%llu after a normal end), %llu fsyncs, %llu synced bytes verified, "
              "%llu more bytes verified by the write-behind deadline alone, %llu bytes lost in all (at most %llu in one kill, "
              "the oldest %llu ms before its kill), %llu violations\n",
              static_cast<unsigned long long>(n.kills), static_cast<unsigned long long>(n.finished_first),
              static_cast<unsigned long long>(n.fsyncs), static_cast<unsigned long long>(n.synced_bytes),
              static_cast<unsigned long long>(n.aged_beyond_sync), static_cast<unsigned long long>(n.lost),
              static_cast<unsigned long long>(n.lost_max), static_cast<unsigned long long>(n.oldest_lost_ms),
              static_cast<unsigned long long>(n.violations));
  std::fflush(stdout);
  // Not a formality: the deadline must have been what kept some bytes (kills long after an
  // fsync), and some fsyncs must have been checked.
  if (kills >= 10) {
    EXPECT_GT(n.aged_beyond_sync, 0u);
    EXPECT_GT(n.fsyncs, 0u);
  }
  write_preload_tally("writer", n.kills, n.synced_bytes + n.aged_beyond_sync, n.violations);
}

// ---------------------------------------------------------------------------------------------
// sqlite3

/// Runs `command` with /bin/sh (no preload), returns its standard output; `ok` says it exited 0.
std::string run_plain(const std::string& command, bool* ok) {
  const std::string cmd = "env -u LD_PRELOAD timeout -k 5 60 " + command;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  if (!p) {
    *ok = false;
    return out;
  }
  char buf[4096];
  std::size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  *ok = ::pclose(p) == 0;
  return out;
}

/// The value of row i: 100..999 bytes that only i makes (the same expression checks it).
std::string row_value_sql(const std::string& i) {
  return "substr(replace(hex(zeroblob(100 + " + i + " % 900)), '00', printf('%08d', " + i + ")), 1, 100 + " + i + " % 900)";
}

TEST(PreloadKill, Sqlite3KeepsCommittedTransactions) {
  if (const std::string why = preload_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const std::string rt = sanitizer_runtime();
  if (rt.find("tsan") != std::string::npos)
    GTEST_SKIP() << "under ThreadSanitizer an uninstrumented program cannot host the instrumented library (the preload.* "
                    "cases skip for the same reason); the release and ASan presets run it";
  bool ok = false;
  if (run_plain("sqlite3 -version", &ok).empty() || !ok) GTEST_SKIP() << "sqlite3 is not installed (Debian package sqlite3)";
  const double scale = controller_test_scale("TAI_KILL_SCALE");
  const unsigned kills = std::max(2u, static_cast<unsigned>(8 * scale + 0.5));
  const std::uint64_t base_seed = test_seed();
  ScratchDir scratch;
  // The script: one table, then transactions of one row each, every COMMIT followed by a SELECT
  // that prints its number (the shell runs the statements in order, so "c|k" means k committed).
  const unsigned transactions = 4000;
  const std::string script = (scratch.path() / "script.sql").string();
  {
    std::ofstream s(script);
    s << "PRAGMA journal_mode=DELETE;\nPRAGMA synchronous=FULL;\nCREATE TABLE t(i INTEGER PRIMARY KEY, v TEXT);\n";
    for (unsigned k = 1; k <= transactions; ++k)
      s << "BEGIN; INSERT INTO t VALUES(" << k << ", " << row_value_sql(std::to_string(k)) << "); COMMIT; SELECT 'c', " << k << ";\n";
  }
  std::uint64_t total_committed = 0, violations = 0, done = 0;
  std::uint64_t typical_ms = 1000;
  for (unsigned cycle = 0; cycle < kills; ++cycle) {
    std::mt19937_64 rng(preload_kill_mix64(base_seed ^ (0x5a17ull + cycle)));
    const std::uint64_t kill_ms = 20 + rng() % typical_ms;
    const std::string dir = (scratch.path() / ("s" + std::to_string(cycle))).string();
    std::filesystem::create_directories(dir);
    const std::string db = dir + "/db";
    Child c = spawn_preloaded({"sqlite3", "-batch", db}, preload_env(dir, {}), 1, script);
    ASSERT_TRUE(c.error.empty()) << c.error;
    std::string out;
    const std::uint64_t start = mono_ns(), kill_at = start + kill_ms * 1'000'000u;
    bool open = true;
    while (open && mono_ns() < kill_at)
      open = read_some(c.read_end, out, static_cast<int>(std::max<std::uint64_t>(1, (kill_at - std::min(kill_at, mono_ns())) / 1'000'000u)));
    if (!open) typical_ms = std::max<std::uint64_t>(100, (mono_ns() - start) / 1'000'000u);  // finished first
    ::kill(c.pid, SIGKILL);
    while (read_some(c.read_end, out, -1)) {
    }
    ::close(c.read_end);
    bool exited_zero = false;
    const std::string how = reap(c.pid, &exited_zero);
    ASSERT_TRUE(how.empty() || exited_zero) << "sqlite3 " << how << "; its output ends: " << out.substr(out.size() > 300 ? out.size() - 300 : 0);
    // The last whole "c|k" line.
    std::uint64_t committed = 0;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("c|", 0) == 0 && !lines.eof()) committed = std::strtoull(line.c_str() + 2, nullptr, 10);
    // Plain sqlite3 recovers the database (a hot journal is rolled back) and checks it. A kill
    // before the script's CREATE TABLE committed leaves no table t; the check then makes an empty
    // one, which is right only when no transaction was reported (every report follows a commit
    // that came after the CREATE), so a lost table with reported commits still fails below.
    const std::string check = run_plain("sqlite3 -batch " + db + " \"PRAGMA integrity_check; "
                                            "CREATE TABLE IF NOT EXISTS t(i INTEGER PRIMARY KEY, v TEXT); "
                                            "SELECT count(*), coalesce(max(i), 0) FROM t; "
                                            "SELECT count(*) FROM t WHERE v IS NOT " + row_value_sql("i") + ";\"",
                                        &ok);
    std::uint64_t count = 0, max_i = 0, wrong = 0;
    std::string integrity;
    std::istringstream res(check);
    std::getline(res, integrity);
    std::string counts_line, wrong_line;
    std::getline(res, counts_line);
    std::getline(res, wrong_line);
    const bool parsed = std::sscanf(counts_line.c_str(), "%llu|%llu", reinterpret_cast<unsigned long long*>(&count),
                                    reinterpret_cast<unsigned long long*>(&max_i)) == 2 &&
                        std::sscanf(wrong_line.c_str(), "%llu", reinterpret_cast<unsigned long long*>(&wrong)) == 1;
    // Every reported transaction is there, every row is whole and each transaction all or nothing.
    const bool good = ok && parsed && integrity == "ok" && max_i >= committed && count == max_i && wrong == 0;
    violations += !good;
    EXPECT_TRUE(good) << "sqlite3 killed " << kill_ms << " ms after its start, having reported " << committed
                      << " transactions committed; plain sqlite3 then says (exit " << (ok ? "0" : "non-zero") << "):\n"
                      << check;
    total_committed += committed;
    ++done;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::printf("[kill] preload sqlite3: %llu kills, %llu committed transactions verified, %llu violations\n",
              static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_committed),
              static_cast<unsigned long long>(violations));
  std::fflush(stdout);
  write_preload_tally("sqlite3", done, total_committed, violations);
}

// ---------------------------------------------------------------------------------------------
// sqlite3 under TAI_FSYNC=order, killed, and every other kill a power cut
//
// Under `order` an fsync returns at once and closes an epoch; the order thread hands epoch n+1's
// writes to the kernel only after epoch n's writes are written and synced. SIGKILL takes what TAI
// holds (the later epochs); the "power cut" (the loop-mounted ext4 shut down without flushing its
// log, then mounted again: xfstests' godown) also takes what the kernel had not synced. Either way
// SQLite must recover a database that is intact and holds a prefix of the transactions it ran:
// rows 1..k for some k, each row as written. An epoch handed over before the one ahead of it
// breaks that: SQLite's database pages on disk without the journal (or WAL frames) that would
// roll them back, or a checkpoint's pages lost behind a WAL already reset.
// Bounds on k: at most one past the last commit sqlite3 reported (the shell prints "c|k" right
// after each COMMIT), and at least what the contract makes durable by then. With a rollback
// journal SQLite ends each transaction with its commit (the journal's unlink under DELETE, its
// header zeroed under PERSIST) and the release of its lock; the preload's unlink and record-lock
// calls wait until the epochs before them are durable and publish the file's writes to the kernel:
// a kill alone keeps every reported commit, and a power cut all but the last (the commit itself
// is made durable by the next transaction's syncs). In WAL mode a commit is an fsync, which
// returns before it is durable: only a normal end (exit waits for every fsync's epoch) requires
// anything. The durability delay (TAI_FSYNC_MAX_DELAY) is measured, not required: the age at the
// kill of the oldest reported commit lost. Back-pressure makes an fsync wait only once the oldest
// epoch in the queue is older than the delay, and then for every epoch queued behind it, so on a
// device slower than the program the lag grows past the delay (about the delay times the
// program's fsync rate over the device's).

/// fsync of a directory (its new entries durable before a power cut).
void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

struct OrderKillCounts {
  std::uint64_t kills = 0, power_cuts = 0, finished_first = 0;
  std::uint64_t reported = 0;          ///< commits sqlite3 reported before its kills, summed
  std::uint64_t rows = 0;              ///< rows found and checked after the kills, summed
  std::uint64_t lost = 0, lost_max = 0;  ///< reported commits missing after a kill (allowed: later epochs)
  std::uint64_t required = 0;          ///< rows the contract required, summed
  std::uint64_t lag_max_ms = 0;        ///< the oldest reported commit lost: its age at the kill
  std::uint64_t reported_cut = 0, rows_cut = 0;  ///< the same two, of the kills with a power cut
  std::uint64_t violations = 0;
};

// with_log: the order mode keeps its log of epochs (TAI_FSYNC_LOG_DIR, on the same file system,
// through the same power cuts). After each kill a preloaded `cat` of the database makes the
// controller that replays the dead process's log into the files (what the next program to route
// them does), and only then does plain sqlite3 look.
void sqlite3_order_kills(const std::vector<std::string>& journal_modes, const std::string& tally, bool with_log = false) {
  if (const std::string why = preload_unavailable(); !why.empty()) GTEST_SKIP() << why;
  if (std::string(sanitizer_runtime()).find("tsan") != std::string::npos)
    GTEST_SKIP() << "under ThreadSanitizer an uninstrumented program cannot host the instrumented library (the preload.* "
                    "cases skip for the same reason); the release and ASan presets run it";
  bool ok = false;
  if (run_plain("sqlite3 -version", &ok).empty() || !ok) GTEST_SKIP() << "sqlite3 is not installed (Debian package sqlite3)";
  // TAI_ORDER_KILLS: the count itself (make soak: 500); else 8 scaled like the other kill tests.
  unsigned kills = std::max(2u, static_cast<unsigned>(8 * controller_test_scale("TAI_KILL_SCALE") + 0.5));
  if (const char* k = std::getenv("TAI_ORDER_KILLS"); k && *k) kills = static_cast<unsigned>(std::strtoul(k, nullptr, 10));
  // Under the sanitizers the preloaded sqlite3 takes most of a second to start: kill later.
  const std::uint64_t late_ms = controller_test_scale("TAI_KILL_SLACK_SCALE") < 1 ? 800 : 0;
  const std::uint64_t base_seed = test_seed();
  ScratchDir scratch;
  // The power cut needs a file system of its own to shut down: a loop-mounted ext4 (root, a loop
  // device, mkfs.ext4 and the shutdown ioctl). Without one every cycle is a kill alone, on the
  // scratch directory, and the reason is printed.
  SmallLoopFs fs(FsType::ext4, 96);
  std::string no_power_cut = fs.mounted() ? fs.shutdown_support() : fs.skip_reason();
  const std::string root = no_power_cut.empty() ? fs.file("") : scratch.path().string() + "/";
  std::string modes;
  for (const std::string& m : journal_modes) modes += (modes.empty() ? "" : ", ") + m;
  const std::string log_dir = root + "order-log";
  if (with_log) {
    std::filesystem::create_directories(log_dir);
    sync_dir(root);
  }
  std::printf("[kill] preload sqlite3, journal_mode %s, TAI_FSYNC=order%s: %u kills, %s, seed %llu (replay: TAI_TEST_SEED=%llu)\n",
              modes.c_str(), with_log ? " with its log of epochs" : "", kills,
              no_power_cut.empty() ? "every other one a power cut (ext4 on a loop device, shut down without its log)"
                                   : ("no power cuts: " + no_power_cut).c_str(),
              static_cast<unsigned long long>(base_seed), static_cast<unsigned long long>(base_seed));
  const unsigned transactions = 20000;  // more than any run reaches before its kill
  // One script per journal mode. WAL checkpoints every 50 pages (the default is 1000, more than a
  // run commits before its kill): each checkpoint writes the database, syncs it and then restarts
  // the WAL over the frames it copied, the step whose order matters most.
  for (const std::string& mode : journal_modes) {
    std::ofstream s((scratch.path() / ("script-" + mode + ".sql")).string());
    s << "PRAGMA journal_mode=" << mode << ";\nPRAGMA synchronous=FULL;\n" << (mode == "WAL" ? "PRAGMA wal_autocheckpoint=50;\n" : "")
      << "CREATE TABLE t(i INTEGER PRIMARY KEY, v TEXT);\n";
    for (unsigned k = 1; k <= transactions; ++k)
      s << "BEGIN; INSERT INTO t VALUES(" << k << ", " << row_value_sql(std::to_string(k)) << "); COMMIT; SELECT 'c', " << k << ";\n";
  }
  OrderKillCounts n;
  for (unsigned cycle = 0; cycle < kills; ++cycle) {
    std::mt19937_64 rng(preload_kill_mix64(base_seed ^ (0x0dd5ull + cycle)));
    const std::uint64_t kill_ms = 20 + late_ms + rng() % 1200;
    const bool power_cut = no_power_cut.empty() && cycle % 2 == 1;
    // Two modes: DELETE kill, PERSIST kill + cut, PERSIST kill, DELETE kill + cut, again: every
    // pair of the four within four kills, and both modes within two (the sanitizers' count).
    const std::string& journal_mode = journal_modes[(cycle + cycle / 2) % journal_modes.size()];
    const std::string script = (scratch.path() / ("script-" + journal_mode + ".sql")).string();
    const std::string dir = root + "s" + std::to_string(cycle);
    std::filesystem::create_directories(dir);
    sync_dir(dir);
    sync_dir(root);  // the directory itself survives the power cut
    const std::string db = dir + "/db";
    std::vector<std::string> order_env = {"TAI_FSYNC=order"};
    if (with_log) order_env.push_back("TAI_FSYNC_LOG_DIR=" + log_dir);
    Child c = spawn_preloaded({"sqlite3", "-batch", db}, preload_env(dir, order_env), 1, script);
    ASSERT_TRUE(c.error.empty()) << c.error;
    // Each "c|k" line with the time it arrived (the commit was before).
    std::string out;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> reports;  // (k, ns)
    std::size_t parsed_to = 0;
    auto take_lines = [&](std::uint64_t now) {
      for (std::size_t nl; (nl = out.find('\n', parsed_to)) != std::string::npos; parsed_to = nl + 1)
        if (out.compare(parsed_to, 2, "c|") == 0)
          reports.push_back({std::strtoull(out.c_str() + parsed_to + 2, nullptr, 10), now});
    };
    const std::uint64_t start = mono_ns(), kill_at = start + kill_ms * 1'000'000u;
    bool open = true;
    while (open && mono_ns() < kill_at) {
      open = read_some(c.read_end, out, static_cast<int>(std::max<std::uint64_t>(1, std::min<std::uint64_t>(5, (kill_at - std::min(kill_at, mono_ns())) / 1'000'000u))));
      take_lines(mono_ns());
    }
    const bool finished = !open;
    ::kill(c.pid, SIGKILL);
    const std::uint64_t killed_ns = mono_ns();
    while (read_some(c.read_end, out, -1)) {
    }
    take_lines(killed_ns);
    ::close(c.read_end);
    bool exited_zero = false;
    const std::string how = reap(c.pid, &exited_zero);
    ASSERT_TRUE(how.empty() || exited_zero) << "sqlite3 " << how << "; its output ends: " << out.substr(out.size() > 300 ? out.size() - 300 : 0);
    if (power_cut) {
      const std::string why = fs.shut_down();
      ASSERT_TRUE(why.empty()) << why;
      const std::string again = fs.remount();
      ASSERT_TRUE(again.empty()) << again;
    }
    std::string replayed;
    if (with_log) {
      std::string cmd = "env";
      for (const std::string& v : preload_env(dir, order_env)) cmd += " '" + v + "'";
      cmd += " cat " + db + " > /dev/null 2>&1; ls " + log_dir + " | wc -l";
      replayed = run_plain(cmd, &ok);
      ASSERT_TRUE(ok) << "the preloaded cat that replays the log failed: " << replayed;
      ASSERT_EQ(std::strtoul(replayed.c_str(), nullptr, 10), 0u) << "a log of epochs is left in " << log_dir << " after its replay";
    }
    const std::uint64_t committed = reports.empty() ? 0 : reports.back().first;
    // What the contract requires (above): with a rollback journal, every reported commit under the
    // kill alone and all but the last under a power cut; with WAL, nothing unless it ended.
    std::uint64_t must_keep = 0;
    const bool rollback = journal_mode != "WAL";
    if (rollback || finished) must_keep = rollback && power_cut && committed > 0 ? committed - 1 : committed;
    const std::string check = run_plain("sqlite3 -batch " + db + " \"PRAGMA integrity_check; "
                                            "CREATE TABLE IF NOT EXISTS t(i INTEGER PRIMARY KEY, v TEXT); "
                                            "SELECT count(*), coalesce(min(i), 1), coalesce(max(i), 0) FROM t; "
                                            "SELECT count(*) FROM t WHERE v IS NOT " + row_value_sql("i") + ";\" 2>&1",
                                        &ok);
    std::uint64_t count = 0, min_i = 0, max_i = 0, wrong = 0;
    std::string integrity, counts_line, wrong_line;
    std::istringstream res(check);
    std::getline(res, integrity);
    std::getline(res, counts_line);
    std::getline(res, wrong_line);
    const bool parsed = std::sscanf(counts_line.c_str(), "%llu|%llu|%llu", reinterpret_cast<unsigned long long*>(&count),
                                    reinterpret_cast<unsigned long long*>(&min_i), reinterpret_cast<unsigned long long*>(&max_i)) == 3 &&
                        std::sscanf(wrong_line.c_str(), "%llu", reinterpret_cast<unsigned long long*>(&wrong)) == 1;
    // A prefix: rows 1..max_i, each whole; none past the one commit that may not have been
    // reported yet; none missing that the contract made durable (above).
    const bool prefix = ok && parsed && integrity == "ok" && min_i == 1 && count == max_i && wrong == 0;
    const bool bounded = max_i <= committed + 1 && max_i >= must_keep;
    const bool good = prefix && bounded;
    ++n.kills;
    n.power_cuts += power_cut;
    n.finished_first += finished;
    n.reported += committed;
    n.rows += count;
    if (power_cut) {
      n.reported_cut += committed;
      n.rows_cut += count;
    }
    const std::uint64_t lost = committed > max_i ? committed - max_i : 0;
    n.lost += lost;
    n.lost_max = std::max(n.lost_max, lost);
    n.required += must_keep;
    std::uint64_t lag_ms = 0;  // the first reported commit not kept: how long before the kill it was reported
    for (const auto& [k, ns] : reports)
      if (k == max_i + 1) lag_ms = (killed_ns - std::min(killed_ns, ns)) / 1'000'000u;
    n.lag_max_ms = std::max(n.lag_max_ms, lag_ms);
    n.violations += !good;
    std::printf("[kill]   %-7s %s at %4llu ms: %llu commits reported, %llu rows kept (%llu required)%s%s\n",
                journal_mode.c_str(), power_cut ? "kill + power cut" : "kill            ", static_cast<unsigned long long>(kill_ms),
                static_cast<unsigned long long>(committed), static_cast<unsigned long long>(count),
                static_cast<unsigned long long>(must_keep), finished ? " (it had finished)" : "",
                lag_ms ? (", the oldest commit lost was reported " + std::to_string(lag_ms) + " ms before the kill").c_str() : "");
    EXPECT_TRUE(good) << "sqlite3 (journal_mode=" << journal_mode << ", TAI_FSYNC=order) "
                      << (power_cut ? "killed, then a power cut," : "killed") << " " << kill_ms << " ms after its start, having reported "
                      << committed << " transactions committed (" << must_keep << " of them required to survive)" << (finished ? " and ended normally" : "")
                      << "; plain sqlite3 then says (exit " << (ok ? "0" : "non-zero")
                      << "; integrity, then count|min|max of the rows, then rows not as written):\n"
                      << check;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    sync_dir(root);
  }
  std::printf("[kill] preload sqlite3 order mode (journal_mode %s): %llu kills (%llu with a power cut, %llu after a normal end), "
              "%llu commits reported, %llu rows verified as a prefix (%llu required), %llu reported commits lost (at most %llu in "
              "one kill; the oldest reported %llu ms before its kill), %llu violations\n",
              modes.c_str(), static_cast<unsigned long long>(n.kills), static_cast<unsigned long long>(n.power_cuts),
              static_cast<unsigned long long>(n.finished_first), static_cast<unsigned long long>(n.reported),
              static_cast<unsigned long long>(n.rows), static_cast<unsigned long long>(n.required),
              static_cast<unsigned long long>(n.lost), static_cast<unsigned long long>(n.lost_max),
              static_cast<unsigned long long>(n.lag_max_ms), static_cast<unsigned long long>(n.violations));
  std::fflush(stdout);
  if (kills >= 8) {
    EXPECT_GT(n.rows, 0u) << "no kill came after a commit: the check saw only empty tables";
  }
  // An empty table is a prefix too: a layer that never made an epoch durable would pass the check
  // above after every power cut. Across several, some commits must have been made durable.
  if (n.power_cuts >= 4 && n.reported_cut >= 100) {
    EXPECT_GT(n.rows_cut, 0u) << "after " << n.power_cuts << " power cuts, none of the " << n.reported_cut
                              << " reported commits was durable: no epoch was synced";
  }
  write_preload_tally(tally, n.kills, n.rows, n.violations);
}

// The rollback journal: DELETE (the default: the journal unlinked at each commit, and a directory
// fsync at its creation) and PERSIST (the journal kept, its header zeroed: no unlink, no
// directory fsync). Either way SQLite's lock release at the end of a transaction waits for its
// epochs, so only the epochs of one transaction (journal, its header, the database) queue.
TEST(PreloadKill, Sqlite3OrderModeKeepsAPrefixOfCommits) { sqlite3_order_kills({"DELETE", "PERSIST"}, "sqlite3_order"); }

TEST(PreloadKill, Sqlite3WalOrderModeKeepsAPrefixOfCommits) { sqlite3_order_kills({"WAL"}, "sqlite3_wal_order"); }

// The same with the log of epochs: the epochs queued behind the device written to the log in
// batches, the files written after it unsynced; a power cut leaves them out of order until the
// log's replay.
TEST(PreloadKill, Sqlite3OrderModeWithTheLogKeepsAPrefixOfCommits) {
  sqlite3_order_kills({"DELETE", "PERSIST"}, "sqlite3_order_log", true);
}

TEST(PreloadKill, Sqlite3WalOrderModeWithTheLogKeepsAPrefixOfCommits) {
  sqlite3_order_kills({"WAL"}, "sqlite3_wal_order_log", true);
}

}  // namespace
}  // namespace tai::test::kill
