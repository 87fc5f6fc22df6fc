// The engine selector (tai/engine_selector.hpp): the list of engines, "auto", unknown names,
// and every unavailable path of the asynchronous engines, forced through
// tai::detail::ProbeOverrides so that each message is checked without changing the machine,
// plus one real path: RLIMIT_MEMLOCK too low for io_uring registered buffers.
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tai/config.hpp"
#include "engines/common/probe_overrides.hpp"
#include "tai/engine_selector.hpp"
#if TAI_WITH_LIBAIO
#include "engines/libaio/libaio_engine.hpp"
#endif
#if TAI_WITH_URING
#include "engines/uring/uring_engine.hpp"
#endif

namespace tai {
namespace {

using detail::ProbeOverrides;
using detail::ScopedProbeOverrides;

const char* const kUringNotBuilt =
    "engine 'uring' unavailable: not built (liburing was not found at configure time; install liburing-dev and "
    "reconfigure with -DTAI_WITH_URING=ON)";
const char* const kLibaioNotBuilt =
    "engine 'libaio' unavailable: not built (libaio was not found at configure time; install libaio-dev and "
    "reconfigure with -DTAI_WITH_LIBAIO=ON)";
// What this build says when an option turned the engine off (cmake_smoke.add_subdirectory
// checks these in a build made so).
const char* const kUringTurnedOff =
    "engine 'uring' unavailable: not built (turned off at configure time with TAI_WITH_URING=OFF; reconfigure "
    "with -DTAI_WITH_URING=ON to build it)";
const char* const kLibaioTurnedOff =
    "engine 'libaio' unavailable: not built (turned off at configure time with TAI_WITH_LIBAIO=OFF; reconfigure "
    "with -DTAI_WITH_LIBAIO=ON to build it)";
// What this build says about an engine it does not contain.
const char* const kUringMissing = TAI_URING_TURNED_OFF ? kUringTurnedOff : kUringNotBuilt;
const char* const kLibaioMissing = TAI_LIBAIO_TURNED_OFF ? kLibaioTurnedOff : kLibaioNotBuilt;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const EngineInfo* find_info(const std::vector<EngineInfo>& list, const std::string& name) {
  for (const auto& e : list)
    if (e.name == name) return &e;
  return nullptr;
}

/// The reason a factory gives under the overrides in force, or "" when it succeeds.
std::string factory_reason(const std::string& name, const EngineOptions& options = {}) {
#if TAI_WITH_URING
  if (name == "uring") {
    auto r = engines::make_uring(options);
    return r ? std::string() : r.error().message;
  }
#endif
#if TAI_WITH_LIBAIO
  if (name == "libaio") {
    auto r = engines::make_libaio(options);
    return r ? std::string() : r.error().message;
  }
#endif
  (void)options;
  ADD_FAILURE() << "engine '" << name << "' is not built: no factory to ask";
  return "";
}

/// Expects make_engine(name) to fail with exactly "engine '<name>' unavailable: <the factory's
/// reason>", with `errno_value` as the code, and the message to contain every part of `says`.
void expect_unavailable(const std::string& name, int errno_value, const std::vector<std::string>& says,
                        const EngineOptions& options = {}) {
  auto made = make_engine(name, options);
  ASSERT_FALSE(made.ok()) << name << " was made although forced unavailable";
  const std::string& message = made.error().message;
  EXPECT_EQ(message, "engine '" + name + "' unavailable: " + factory_reason(name, options));
  EXPECT_EQ(made.error().code, std::error_code(errno_value, std::generic_category())) << message;
  for (const auto& part : says) EXPECT_TRUE(contains(message, part)) << "'" << part << "' missing from: " << message;

  // list_engines reports the same reason, without the prefix.
  auto list = list_engines(options);
  const EngineInfo* info = find_info(list, name);
  ASSERT_NE(info, nullptr);
  EXPECT_FALSE(info->available);
  EXPECT_EQ("engine '" + name + "' unavailable: " + info->reason, message);
}

// ---------------------------------------------------------------------------------------------

TEST(EngineSelector, ListsEveryEngineButFault) {
  const std::vector<std::string> want = {"uring", "libaio", "posix", "cstdio", "fstream", "null"};
  EXPECT_EQ(engine_names(), want);
  auto list = list_engines();
  ASSERT_EQ(list.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const EngineInfo& e = list[i];
    EXPECT_EQ(e.name, want[i]);
    EXPECT_EQ(e.available, e.reason.empty()) << e.name << ": an unavailable engine has a reason, an available one none";
    std::printf("  %-8s %s\n", e.name.c_str(), e.available ? "available" : ("unavailable: " + e.reason).c_str());
  }
  // The synchronous engines are always there.
  for (const char* name : {"posix", "cstdio", "fstream", "null"}) {
    const EngineInfo* e = find_info(list, name);
    ASSERT_NE(e, nullptr);
    EXPECT_TRUE(e->available) << name << ": " << e->reason;
    EXPECT_FALSE(e->capabilities.asynchronous) << name;
  }
  EXPECT_TRUE(find_info(list, "posix")->capabilities.direct_io);
  EXPECT_TRUE(find_info(list, "posix")->capabilities.durable_sync);
  EXPECT_FALSE(find_info(list, "null")->capabilities.stores_data);
  EXPECT_EQ(find_info(list, "fault"), nullptr) << "fault wraps an engine; it is not listed";
  // An engine compiled in is listed with its real capabilities; one not compiled in says so.
  const EngineInfo* uring = find_info(list, "uring");
  const EngineInfo* libaio = find_info(list, "libaio");
  // The reason matches how configure left it out: turned off by the option, or not found.
  if (!TAI_WITH_URING) { EXPECT_EQ("engine 'uring' unavailable: " + uring->reason, kUringMissing); }
  if (!TAI_WITH_LIBAIO) { EXPECT_EQ("engine 'libaio' unavailable: " + libaio->reason, kLibaioMissing); }
  static_assert(!(TAI_WITH_URING && TAI_URING_TURNED_OFF) && !(TAI_WITH_LIBAIO && TAI_LIBAIO_TURNED_OFF),
                "config.hpp: an engine cannot be both built and turned off");
  if (uring->available) { EXPECT_TRUE(uring->capabilities.asynchronous && uring->capabilities.async_sync); }
  if (libaio->available) { EXPECT_TRUE(libaio->capabilities.asynchronous && libaio->capabilities.eventfd); }
}

TEST(EngineSelector, AutoPicksTheBestAvailableHereAndSaysWhy) {
  auto list = list_engines();
  std::string expected;
  std::string skipped;
  for (const char* name : {"uring", "libaio", "posix"}) {
    const EngineInfo* e = find_info(list, name);
    if (e->available) {
      expected = name;
      break;
    }
    skipped += std::string(skipped.empty() ? "" : "; ") + name + " unavailable: " + e->reason;
  }
  std::string note;
  auto made = make_engine("auto", {}, &note);
  ASSERT_TRUE(made.ok()) << made.error().message;
  EXPECT_EQ(made.value()->name(), expected);
  std::printf("  %s\n", note.c_str());
  if (skipped.empty())
    EXPECT_EQ(note, "auto -> " + expected + " (the best engine; available here)");
  else
    EXPECT_EQ(note, "auto -> " + expected + " (" + skipped + ")");
}

TEST(EngineSelector, MakesEachAvailableEngineByName) {
  for (const auto& e : list_engines()) {
    std::string note;
    auto made = make_engine(e.name, {}, &note);
    EXPECT_EQ(made.ok(), e.available) << e.name;
    if (!made) continue;
    EXPECT_EQ(made.value()->name(), e.name);
    EXPECT_EQ(note, e.name);
  }
  EngineOptions options;
  options.depth = 8;
  auto posix = make_engine("posix", options);
  ASSERT_TRUE(posix.ok());
  EXPECT_EQ(posix.value()->depth(), 8u) << "the options reach the engine";
}

TEST(EngineSelector, UnknownNamesFailListingTheKnownOnes) {
  for (const char* name : {"bogus", "", "fault", "AUTO", "io_uring"}) {
    std::string note = "untouched";
    auto made = make_engine(name, {}, &note);
    ASSERT_FALSE(made.ok()) << name;
    EXPECT_EQ(made.error().code, std::errc::invalid_argument);
    EXPECT_EQ(made.error().message, std::string("unknown engine '") + name +
                                        "'; known engines: auto, uring, libaio, posix, cstdio, fstream, null");
    EXPECT_EQ(note, "untouched");
  }
}

// ---------------------------------------------------------------------------------------------
// Forced unavailable paths

TEST(EngineSelector, NotBuiltIsReportedExactly) {
  ProbeOverrides o;
  o.uring_not_built = true;
  o.libaio_not_built = true;
  ScopedProbeOverrides scope(o);
  auto uring = make_engine("uring");
  ASSERT_FALSE(uring.ok());
  EXPECT_EQ(uring.error().message, kUringNotBuilt);
  EXPECT_EQ(uring.error().code, std::errc::not_supported);
  auto libaio = make_engine("libaio");
  ASSERT_FALSE(libaio.ok());
  EXPECT_EQ(libaio.error().message, kLibaioNotBuilt);
  auto list = list_engines();
  EXPECT_EQ("engine 'uring' unavailable: " + find_info(list, "uring")->reason, kUringNotBuilt);
  EXPECT_EQ("engine 'libaio' unavailable: " + find_info(list, "libaio")->reason, kLibaioNotBuilt);

  std::string note;
  auto picked = make_engine("auto", {}, &note);
  ASSERT_TRUE(picked.ok());
  EXPECT_EQ(picked.value()->name(), "posix");
  const std::string uring_reason = std::string(kUringNotBuilt).substr(std::strlen("engine 'uring' unavailable: "));
  const std::string libaio_reason = std::string(kLibaioNotBuilt).substr(std::strlen("engine 'libaio' unavailable: "));
  EXPECT_EQ(note, "auto -> posix (uring unavailable: " + uring_reason + "; libaio unavailable: " + libaio_reason + ")");
}

TEST(EngineSelector, UringRefusedBySetup) {
  if (!TAI_WITH_URING) GTEST_SKIP() << kUringMissing;
  struct Case {
    int err;
    const char* name;
  };
  for (const Case& c : {Case{EPERM, "(EPERM)"}, Case{ENOSYS, "(ENOSYS)"}, Case{EOPNOTSUPP, "(EOPNOTSUPP)"}}) {
    SCOPED_TRACE(c.name);
    ProbeOverrides o;
    o.io_uring_setup_errno = c.err;
    o.io_uring_disabled = 0;  // the sysctl permits it: the refusal comes from setup itself
    ScopedProbeOverrides scope(o);
    expect_unavailable("uring", c.err, {"io_uring_setup", c.name});
  }
}

TEST(EngineSelector, UringDisabledBySysctl) {
  if (!TAI_WITH_URING) GTEST_SKIP() << kUringMissing;
  ProbeOverrides o;
  o.io_uring_disabled = 2;
  ScopedProbeOverrides scope(o);
  expect_unavailable("uring", EPERM, {"io_uring_setup", "(EPERM)", "kernel.io_uring_disabled = 2"});
}

TEST(EngineSelector, UringRegisteredBuffersAboveMemlockForced) {
  if (!TAI_WITH_URING) GTEST_SKIP() << kUringMissing;
  ProbeOverrides o;
  o.uring_register_buffers_errno = ENOMEM;
  o.memlock_limit = 0;
  ScopedProbeOverrides scope(o);
  EngineOptions options;
  options.uring_register_buffers = true;
  expect_unavailable("uring", ENOMEM, {"RLIMIT_MEMLOCK"}, options);
  // Without registered buffers the same overrides do not matter.
  EXPECT_EQ(make_engine("uring").ok(), find_info(list_engines(), "uring")->available);
}

/// Removes CAP_IPC_LOCK from this process's effective and permitted sets (raw capset: no
/// libcap needed). Returns false when the kernel refuses.
bool drop_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
  return ::syscall(SYS_capset, &header, data) == 0;
}

// The real path: in a child process (so that the test runner keeps its limits), drop
// CAP_IPC_LOCK (root has it, and it exempts a process from the locked-memory charge), then raise
// the soft RLIMIT_MEMLOCK one page at a time from 0 and ask for registered buffers each time.
// On this kernel the ring itself is charged too, so the first refusals come from
// io_uring_setup; the first limit that admits the ring but not the one-page buffer probe gives
// the registered-buffers refusal. Both must name RLIMIT_MEMLOCK. If the kernel never refuses
// (capability not droppable, no accounting), the test says so and the forced path (above) is
// what checks the message.
TEST(EngineSelector, UringRegisteredBuffersAboveMemlockReal) {
  if (!TAI_WITH_URING) GTEST_SKIP() << kUringMissing;
  if (!find_info(list_engines(), "uring")->available) GTEST_SKIP() << "uring unavailable here";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string answer;  // lines: "RING <message>", "BUF <message>", "OK <pages>", "SETUP <what>"
    rlimit lim{};
    ::getrlimit(RLIMIT_MEMLOCK, &lim);
    if (!drop_ipc_lock()) answer += "SETUP cannot drop CAP_IPC_LOCK\n";
    EngineOptions options;
    options.uring_register_buffers = true;
    const rlim_t page = 4096;
    for (rlim_t pages = 0; pages <= 1024 && (lim.rlim_max == RLIM_INFINITY || pages * page <= lim.rlim_max); ++pages) {
      rlimit lower = lim;
      lower.rlim_cur = pages * page;
      if (::setrlimit(RLIMIT_MEMLOCK, &lower) != 0) {
        answer += "SETUP setrlimit failed\n";
        break;
      }
      auto made = make_engine("uring", options);
      if (made) {
        answer += "OK " + std::to_string(pages) + "\n";
        break;
      }
      const std::string& m = made.error().message;
      const bool at_buffers = m.find("io_uring_register_buffers") != std::string::npos;
      if (pages == 0 || at_buffers) answer += (at_buffers ? "BUF " : "RING ") + m + "\n";
      if (at_buffers || m.find("(ENOMEM)") == std::string::npos) break;
    }
    (void)!::write(fds[1], answer.data(), answer.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string answer;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) answer.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  std::printf("%s", answer.c_str());
  if (contains(answer, "SETUP")) GTEST_SKIP() << answer;
  std::vector<std::string> lines;
  for (std::size_t at = 0, nl; (nl = answer.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(answer.substr(at, nl - at));
  bool refused = false;
  for (const auto& line : lines) {
    if (line.rfind("RING ", 0) != 0 && line.rfind("BUF ", 0) != 0) continue;
    refused = true;
    EXPECT_TRUE(contains(line, " engine 'uring' unavailable: ")) << line;
    EXPECT_TRUE(contains(line, "(ENOMEM)")) << line;
    EXPECT_TRUE(contains(line, "RLIMIT_MEMLOCK soft = ")) << line;
  }
  if (!refused) {
    GTEST_SKIP() << "the kernel accepted a ring and registered buffers with RLIMIT_MEMLOCK = 0 and no "
                    "CAP_IPC_LOCK (" << answer << "); the message is checked by UringRegisteredBuffersAboveMemlockForced";
  }
  EXPECT_TRUE(contains(answer, "BUF ")) << "no limit admitted the ring but refused the buffers:\n" << answer;
}

TEST(EngineSelector, LibaioRefusedBySetup) {
  if (!TAI_WITH_LIBAIO) GTEST_SKIP() << kLibaioMissing;
  struct Case {
    int err;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {EPERM, {"io_setup", "(EPERM)"}},
      {ENOSYS, {"io_setup", "(ENOSYS)"}},
      {EOPNOTSUPP, {"io_setup", "(EOPNOTSUPP)"}},
      {EAGAIN, {"io_setup", "(EAGAIN)", "fs.aio-max-nr = 65536 and fs.aio-nr = 65536 reached"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.says.back());
    ProbeOverrides o;
    o.io_setup_errno = c.err;
    o.aio_max_nr = 65536;
    o.aio_nr = 65536;
    ScopedProbeOverrides scope(o);
    expect_unavailable("libaio", c.err, c.says);
  }
}

TEST(EngineSelector, AutoFallsBackToLibaioThenPosix) {
  ProbeOverrides o;
  if (TAI_WITH_URING) {
    o.io_uring_setup_errno = EPERM;
    o.io_uring_disabled = 2;
  } else {
    o.uring_not_built = true;
  }
  {
    ScopedProbeOverrides scope(o);
    const auto list = list_engines();
    const std::string uring_reason = find_info(list, "uring")->reason;
    const EngineInfo* libaio = find_info(list, "libaio");
    std::string note;
    auto picked = make_engine("auto", {}, &note);
    ASSERT_TRUE(picked.ok()) << picked.error().message;
    if (libaio->available) {
      EXPECT_EQ(picked.value()->name(), "libaio");
      EXPECT_EQ(note, "auto -> libaio (uring unavailable: " + uring_reason + ")");
    } else {
      std::printf("  libaio unavailable here (%s): only the fall back to posix is checked\n", libaio->reason.c_str());
    }
  }
  if (TAI_WITH_LIBAIO) {
    o.io_setup_errno = EAGAIN;
    // The message quotes fs.aio-nr, which other processes (tests running beside this one)
    // change at any moment: pin both sysctls so the two messages compared below agree.
    o.aio_max_nr = 65536;
    o.aio_nr = 65536;
  } else {
    o.libaio_not_built = true;
  }
  ScopedProbeOverrides scope(o);
  const std::string uring_reason = find_info(list_engines(), "uring")->reason;
  const std::string libaio_reason = find_info(list_engines(), "libaio")->reason;
  std::string note;
  auto picked = make_engine("auto", {}, &note);
  ASSERT_TRUE(picked.ok()) << picked.error().message;
  EXPECT_EQ(picked.value()->name(), "posix");
  EXPECT_EQ(note, "auto -> posix (uring unavailable: " + uring_reason + "; libaio unavailable: " + libaio_reason + ")");
  EXPECT_TRUE(contains(note, TAI_WITH_URING ? "kernel.io_uring_disabled = 2" : "not built")) << note;
  EXPECT_TRUE(contains(note, TAI_WITH_LIBAIO ? "(EAGAIN)" : "not built")) << note;
}

TEST(EngineSelector, OverridesAreRestoredAfterTheirScope) {
  const auto before = list_engines();
  {
    ProbeOverrides o;
    o.uring_not_built = o.libaio_not_built = true;
    ScopedProbeOverrides scope(o);
    EXPECT_FALSE(find_info(list_engines(), "uring")->available);
  }
  const auto after = list_engines();
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(before[i].available, after[i].available) << before[i].name;
    EXPECT_EQ(before[i].reason, after[i].reason) << before[i].name;
  }
}

}  // namespace
}  // namespace tai
