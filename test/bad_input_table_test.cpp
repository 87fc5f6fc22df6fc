// Bad input, counted: one table of the ways a program can misuse TAI through File, Controller,
// IoQueue and tai/posix.hpp, each of which must end in a clear error (the errno a program can act
// on, and a reason), never a crash and never a hang (every case runs under a deadline on a thread
// of its own). The cases are spread over the suites that test each API in depth; this table is
// the one place that says how many classes are covered, and it prints the count.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "support/controller_support.hpp"
#include "support/tally.hpp"
#include "support/test_env.hpp"
#include "tai/io_queue.hpp"
#include "tai/posix.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

// What a case saw: the errno it got (0: none) and the reason text, if the API gives one.
struct Outcome {
  int err = 0;
  std::string reason;
};

struct BadInput {
  const char* api;
  const char* what;
  int expected;  // the errno the program must get; 0: a legal edge case that must succeed (and say so)
  std::function<Outcome(const std::string& dir)> run;
};

// A receipt that must finish (bounded) as failed or rejected.
Outcome of(const Receipt& r) {
  if (!r.wait_for(std::chrono::seconds(20))) return {-1, "the receipt did not finish in 20 s"};
  if (r.ok()) return {0, "succeeded"};
  return {r.error().value(), r.message()};
}

Outcome of_errno(long rc) { return rc < 0 ? Outcome{errno, std::strerror(errno)} : Outcome{0, "succeeded"}; }

ControllerOptions quiet() { return two_quiet_workers("posix"); }

// A controller with one file opened with `mode`, for the File cases.
struct Opened {
  std::unique_ptr<Controller> ctl = std::make_unique<Controller>(quiet());
  File file;
  Opened(const std::string& path, OpenMode mode) {
    auto f = ctl->open(path, mode);
    if (f) file = std::move(f.value());
  }
};

const std::uint64_t kTwoTo63 = std::uint64_t{1} << 63;

std::vector<BadInput> table() {
  std::vector<BadInput> t;
  // --- File ---------------------------------------------------------------------------------
  t.push_back({"File", "write on a file opened read-only", EBADF, [](const std::string& d) {
                 ::close(::open((d + "/ro").c_str(), O_CREAT | O_WRONLY, 0644));
                 Opened o(d + "/ro", OpenMode(Open::read));
                 return of(o.file.write(0, "x", 1));
               }});
  t.push_back({"File", "read on a file opened write-only", EBADF, [](const std::string& d) {
                 Opened o(d + "/wo", OpenMode(Open::write | Open::create));
                 char b[8];
                 return of(o.file.read(0, b, sizeof b));
               }});
  t.push_back({"File", "write whose end passes 2^63 - 1", EOVERFLOW, [](const std::string& d) {
                 Opened o(d + "/big", OpenMode(Open::write | Open::create));
                 return of(o.file.write(kTwoTo63 - 1, "xy", 2));
               }});
  t.push_back({"File", "read whose end passes 2^64", EOVERFLOW, [](const std::string& d) {
                 Opened o(d + "/wrap", OpenMode(Open::read | Open::write | Open::create));
                 char b[16];
                 return of(o.file.read(~std::uint64_t{0} - 3, b, sizeof b));
               }});
  t.push_back({"File", "write from a null buffer", EFAULT, [](const std::string& d) {
                 Opened o(d + "/null", OpenMode(Open::write | Open::create));
                 return of(o.file.write(0, nullptr, 10));
               }});
  t.push_back({"File", "read into a null buffer", EFAULT, [](const std::string& d) {
                 Opened o(d + "/nullr", OpenMode(Open::read | Open::write | Open::create));
                 return of(o.file.read(0, nullptr, 10));
               }});
  t.push_back({"File", "write after close", EBADF, [](const std::string& d) {
                 Opened o(d + "/closed", OpenMode(Open::write | Open::create));
                 (void)o.file.close().wait();
                 return of(o.file.write(0, "x", 1));
               }});
  t.push_back({"File", "close twice", EBADF, [](const std::string& d) {
                 Opened o(d + "/twice", OpenMode(Open::write | Open::create));
                 (void)o.file.close().wait();
                 return of(o.file.close());
               }});
  t.push_back({"File", "fsync of a handle that names no file", EBADF, [](const std::string&) {
                 File none;
                 return of(none.fsync());
               }});
  t.push_back({"File", "hook on a closed file", EBADF, [](const std::string& d) {
                 Opened o(d + "/hook", OpenMode(Open::write | Open::create));
                 (void)o.file.close().wait();
                 return of(o.file.hook([] {}));
               }});
  t.push_back({"File", "write of zero bytes (legal: succeeds, writes nothing)", 0, [](const std::string& d) {
                 Opened o(d + "/zero", OpenMode(Open::read | Open::write | Open::create));
                 Outcome w = of(o.file.write(0, "x", 0));
                 if (w.err != 0) return w;
                 (void)o.file.close().wait();
                 struct stat st {};
                 if (::stat((d + "/zero").c_str(), &st) != 0 || st.st_size != 0) return Outcome{EIO, "bytes appeared"};
                 return Outcome{0, "a zero-byte write succeeded and the file stayed empty"};
               }});
  t.push_back({"File", "write of SIZE_MAX bytes", EOVERFLOW, [](const std::string& d) {
                 Opened o(d + "/huge", OpenMode(Open::write | Open::create));
                 static const char one = 'x';
                 return of(o.file.write(0, &one, std::numeric_limits<std::size_t>::max()));
               }});
  t.push_back({"File", "read of SIZE_MAX bytes", EOVERFLOW, [](const std::string& d) {
                 Opened o(d + "/hugeread", OpenMode(Open::read | Open::write | Open::create));
                 char b[1];
                 return of(o.file.read(0, b, std::numeric_limits<std::size_t>::max()));
               }});
  // Only where the scratch directory's file system takes O_DIRECT (not ramfs, not tmpfs before
  // Linux 6.6): elsewhere the open fails with EINVAL, which says nothing of the bounce.
  if (scratch_direct_io_unsupported_reason().empty())
    t.push_back({"File", "unaligned buffer, offset and length on an O_DIRECT file (legal: bounced)", 0,
               [](const std::string& d) {
                 Controller c(quiet());
                 auto f = c.open(d + "/direct", OpenMode(Open::read | Open::write | Open::create | Open::direct));
                 if (!f) return Outcome{f.error().code.value(), f.error().message};
                 std::vector<char> mem(8192 + 3);
                 char* odd = mem.data() + 3;  // never 512-aligned
                 for (int i = 0; i < 5000; ++i) odd[i] = static_cast<char>('a' + i % 26);
                 Outcome w = of(f.value().write(1001, odd, 5000));
                 if (w.err != 0) return w;
                 (void)f.value().fsync().wait();
                 std::vector<char> back(5000 + 1);
                 Outcome r = of(f.value().read(1001, back.data() + 1, 5000));
                 if (r.err != 0) return r;
                 if (std::memcmp(back.data() + 1, odd, 5000) != 0) return Outcome{EIO, "read back differs"};
                 return Outcome{0, "bounced through an aligned buffer and read back equal"};
               }});
  // --- Controller -----------------------------------------------------------------------------
  t.push_back({"Controller", "O_DIRECT asked of an engine that refuses it (cstdio)", EINVAL, [](const std::string& d) {
                 Controller c(quiet());
                 auto f = c.open(d + "/cdirect", OpenMode(Open::write | Open::create | Open::direct), "cstdio");
                 return f ? Outcome{0, "opened"} : Outcome{f.error().code.value(), f.error().message};
               }});
  t.push_back({"Controller", "strict quota of 0 bytes (legal: nothing is cached, data still arrives)", 0,
               [](const std::string& d) {
                 ControllerOptions opt = quiet();
                 opt.weak_quota = 0;
                 opt.strict_quota = 0;
                 Controller c(opt);
                 auto f = c.open(d + "/q0", OpenMode(Open::read | Open::write | Open::create));
                 if (!f) return Outcome{f.error().code.value(), f.error().message};
                 const std::string text(20000, 'q');
                 Outcome w = of(f.value().write(0, text.data(), text.size()));
                 if (w.err != 0) return w;
                 std::string back(text.size(), '\0');
                 Outcome r = of(f.value().read(0, back.data(), back.size()));
                 if (r.err != 0) return r;
                 if (back != text) return Outcome{EIO, "read back differs"};
                 if (c.stats().cached_bytes != 0) return Outcome{EIO, "bytes were cached under a zero quota"};
                 return Outcome{0, "uncached: written and read back through the engine"};
               }});
  t.push_back({"Controller", "weak quota above the strict one (corrected to strict / 2, said)", 0,
               [](const std::string&) {
                 ControllerOptions opt = quiet();
                 opt.weak_quota = 1 << 20;
                 opt.strict_quota = 1 << 16;
                 Controller c(opt);
                 if (c.options().weak_quota != (1u << 15)) return Outcome{EINVAL, "the weak quota was not corrected"};
                 return Outcome{0, "weak quota corrected to strict / 2"};
               }});
  t.push_back({"Controller", "shutdown() from one of its own tasks", EDEADLK, [](const std::string&) {
                 Controller c(quiet());
                 ShutdownReport inside;
                 Outcome task = of(c.submit([&] { inside = c.shutdown(); }));
                 if (task.err != 0) return task;
                 if (inside.ok()) return Outcome{0, "shutdown from a task succeeded"};
                 // The controller must still work afterwards.
                 Outcome after = of(c.submit([] {}));
                 if (after.err != 0) return after;
                 return Outcome{EDEADLK, inside.to_string()};
               }});
  t.push_back({"Controller", "destroyed from one of its own tasks (legal: shutdown moves off the worker)", 0,
               [](const std::string& d) {
                 auto* c = new Controller(quiet());
                 auto f = c->open(d + "/selfdestroy", OpenMode(Open::write | Open::create));
                 if (!f) return Outcome{f.error().code.value(), f.error().message};
                 // Handles must not outlive their controller: the task drops the File first.
                 auto file = std::make_shared<File>(std::move(f.value()));
                 (void)file->write(0, "written before", 14);
                 std::atomic<bool> ran{false};
                 (void)c->submit([c, file, &ran] {
                   *file = File();  // released before its controller goes
                   delete c;
                   ran.store(true);
                 });
                 // The receipt may belong to the freed controller: wait on the flag, not on it.
                 const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
                 while (!ran.load() && std::chrono::steady_clock::now() < deadline)
                   std::this_thread::sleep_for(std::chrono::milliseconds(1));
                 if (!ran.load()) return Outcome{ETIMEDOUT, "the task never finished"};
                 // The shutdown on its own thread writes the file back; the bytes must arrive.
                 for (int i = 0; i < 2000; ++i) {
                   struct stat st {};
                   if (::stat((d + "/selfdestroy").c_str(), &st) == 0 && st.st_size == 14)
                     return Outcome{0, "destroyed; the write-back still arrived"};
                   std::this_thread::sleep_for(std::chrono::milliseconds(10));
                 }
                 return Outcome{EIO, "the write made before the destruction never reached the file"};
               }});
  t.push_back({"Controller", "open of a missing file without Open::create", ENOENT, [](const std::string& d) {
                 Controller c(quiet());
                 auto f = c.open(d + "/missing", OpenMode(Open::read));
                 return f ? Outcome{0, "opened"} : Outcome{f.error().code.value(), f.error().message};
               }});
  t.push_back({"Controller", "open of a directory for writing", EISDIR, [](const std::string& d) {
                 Controller c(quiet());
                 auto f = c.open(d, OpenMode(Open::write));
                 return f ? Outcome{0, "opened"} : Outcome{f.error().code.value(), f.error().message};
               }});
  t.push_back({"Controller", "open with an engine name nobody registered", EINVAL, [](const std::string& d) {
                 Controller c(quiet());
                 auto f = c.open(d + "/x", OpenMode(Open::write | Open::create), "no-such-engine");
                 return f ? Outcome{0, "opened"} : Outcome{f.error().code.value(), f.error().message};
               }});
  t.push_back({"Controller", "open after shutdown", ECANCELED, [](const std::string& d) {
                 Controller c(quiet());
                 (void)c.shutdown();
                 auto f = c.open(d + "/late", OpenMode(Open::write | Open::create));
                 return f ? Outcome{0, "opened"} : Outcome{f.error().code.value(), f.error().message};
               }});
  t.push_back({"Controller", "submit after shutdown", ECANCELED, [](const std::string&) {
                 Controller c(quiet());
                 (void)c.shutdown();
                 return of(c.submit([] {}));
               }});
  t.push_back({"Controller", "a task that throws", ECANCELED, [](const std::string&) {
                 Controller c(quiet());
                 Outcome o = of(c.submit([] { throw std::runtime_error("thrown by the task"); }));
                 // The receipt must say that the function threw (a std::system_error would carry
                 // its own code; anything else is ECANCELED).
                 if (o.reason.find("threw") == std::string::npos) o.err = 0;
                 return o;
               }});
  // --- IoQueue --------------------------------------------------------------------------------
  t.push_back({"IoQueue", "create with an engine name nobody registered", EINVAL, [](const std::string&) {
                 auto q = IoQueue::create("no-such-engine");
                 return q ? Outcome{0, "created"} : Outcome{q.error().code.value(), q.error().message};
               }});
  t.push_back({"IoQueue", "pwrite whose end passes 2^64", EOVERFLOW, [](const std::string& d) {
                 auto q = IoQueue::create("posix");
                 if (!q) return Outcome{0, q.error().message};
                 auto f = q.value()->engine().open(d + "/q", OpenMode(Open::write | Open::create));
                 if (!f) return Outcome{0, f.error().message};
                 std::int64_t result = 1;
                 char b[16] = {};
                 (void)q.value()->pwrite(*f.value(), b, sizeof b, ~std::uint64_t{0} - 3,
                                         [&result](std::int64_t r) { result = r; });
                 while (q.value()->in_flight() > 0) q.value()->reap(1);
                 (void)q.value()->engine().close(*f.value());
                 return result < 0 ? Outcome{static_cast<int>(-result), "callback"} : Outcome{0, "succeeded"};
               }});
  // --- tai/posix.hpp ---------------------------------------------------------------------------
  t.push_back({"tai::posix", "write to descriptor -1", EBADF, [](const std::string&) {
                 return of_errno(tai::posix::write(-1, "x", 1));
               }});
  t.push_back({"tai::posix", "pwrite at a negative offset", EINVAL, [](const std::string& d) {
                 const int fd = tai::posix::open((d + "/neg").c_str(), O_WRONLY | O_CREAT, 0644);
                 Outcome o = of_errno(tai::posix::pwrite(fd, "x", 1, -1));
                 tai::posix::close(fd);
                 return o;
               }});
  t.push_back({"tai::posix", "lseek with an unknown whence", EINVAL, [](const std::string& d) {
                 const int fd = tai::posix::open((d + "/whence").c_str(), O_WRONLY | O_CREAT, 0644);
                 Outcome o = of_errno(tai::posix::lseek(fd, 0, 12345));
                 tai::posix::close(fd);
                 return o;
               }});
  t.push_back({"tai::posix", "write from a null buffer", EFAULT, [](const std::string& d) {
                 const int fd = tai::posix::open((d + "/pnull").c_str(), O_WRONLY | O_CREAT, 0644);
                 Outcome o = of_errno(tai::posix::write(fd, nullptr, 10));
                 tai::posix::close(fd);
                 return o;
               }});
  t.push_back({"tai::posix", "open of a directory for writing", EISDIR, [](const std::string& d) {
                 return of_errno(tai::posix::open(d.c_str(), O_WRONLY));
               }});
  t.push_back({"tai::posix", "read of a closed descriptor", EBADF, [](const std::string& d) {
                 const int fd = tai::posix::open((d + "/gone").c_str(), O_RDWR | O_CREAT, 0644);
                 tai::posix::close(fd);
                 char b[4];
                 return of_errno(tai::posix::read(fd, b, sizeof b));
               }});
  return t;
}

TEST(BadInputTable, EveryClassGetsAClearErrorUnderADeadline) {
  ScratchDir dir;
  const std::vector<BadInput> cases = table();
  int passed = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const BadInput& c = cases[i];
    const std::string sub = dir.file("case" + std::to_string(i));
    ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
    // A thread of its own, so that a hang fails this case instead of the whole binary's timeout.
    auto done = std::make_shared<std::promise<Outcome>>();
    std::future<Outcome> result = done->get_future();
    std::thread([done, run = c.run, sub] { done->set_value(run(sub)); }).detach();
    if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      ADD_FAILURE() << c.api << ": " << c.what << ": no answer within 30 s";
      continue;
    }
    const Outcome o = result.get();
    const bool ok = o.err == c.expected && !o.reason.empty();
    EXPECT_TRUE(ok) << c.api << ": " << c.what << ": expected " << std::strerror(c.expected) << ", got "
                    << (o.err ? std::strerror(o.err) : "no error") << " (" << o.reason << ")";
    if (ok) ++passed;
  }
  std::printf("[bad input] %d of %zu classes of bad input got their clear error (File, Controller, IoQueue, "
              "tai::posix), each under a 30 s deadline\n",
              passed, cases.size());
  if (!scratch_direct_io_unsupported_reason().empty())
    std::printf("[bad input] not run: the unaligned request on an O_DIRECT file: %s\n",
                scratch_direct_io_unsupported_reason().c_str());
  write_reliability_row("bad input (one table)", 1, 1,
                        std::to_string(cases.size()) + " classes through File, Controller, IoQueue, tai::posix",
                        cases.size() - static_cast<std::size_t>(passed));
  EXPECT_GE(cases.size(), 20u);
}

}  // namespace
}  // namespace tai::test
