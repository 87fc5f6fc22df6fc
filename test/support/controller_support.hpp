// Shared by the controller tests (test/controller_*_test.cpp): engine availability, raw file
// access that bypasses TAI (plain open/pread/pwrite), patterns, and the scale of randomized
// tests under sanitizers and in debug builds.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "support/test_env.hpp"
#include "tai/config.hpp"
#include "tai/engine_selector.hpp"
#include "tai/controller.hpp"
#include "tai/receipt.hpp"
#include "tai/testing/byte_pattern.hpp"

namespace tai::test {

/// Opens `path` under Tree on `engine`; a failure is a test failure and gives an empty handle.
template <class Tree>
File open_or_fail(Controller& ctl, const std::string& path, Open flags = Open::read | Open::write | Open::create,
                  std::string_view engine = "posix") {
  auto f = ctl.open<Tree>(path, flags, engine);
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
  return f.ok() ? std::move(f.value()) : File();
}

/// Waits until `pred` holds, at most `limit`, polling every millisecond.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

/// A gate a task or hook waits at (bounded, so that a broken test cannot hang a worker forever):
/// pass() holds its thread until open_it(), polling every millisecond, so that a held thread
/// costs next to no CPU (tests that measure CPU time hold threads here).
struct Gate {
  std::atomic<bool> open{false};     // release store by open_it(), acquire load by pass()
  std::atomic<bool> reached{false};  // release store by pass(), acquire load by the test
  void pass() {
    reached.store(true, std::memory_order_release);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!open.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void open_it() { open.store(true, std::memory_order_release); }
};

/// Names of the predefined trees for typed test suites (TYPED_TEST_SUITE's third argument).
struct TreeNames {
  template <class T>
  static std::string GetName(int) {
    if (std::is_same_v<T, BTreeDefault>) return "BTreeDefault";
    if (std::is_same_v<T, BTreeTrivial>) return "BTreeTrivial";
    return "other";
  }
};

/// One test body over every engine x {BTreeDefault, BTreeTrivial}: the parameter of such suites,
/// its test-name suffix ("posix_Default"), and the open that picks the tree.
using EngineAndTree = std::tuple<const char* /*engine*/, bool /*BTreeDefault (else BTreeTrivial)*/>;
inline std::string engine_and_tree_name(const testing::TestParamInfo<EngineAndTree>& info) {
  return std::string(std::get<0>(info.param)) + (std::get<1>(info.param) ? "_Default" : "_Trivial");
}
inline Result<File> open_engine_and_tree(Controller& ctl, const EngineAndTree& p, const std::string& path, Open flags) {
  return std::get<1>(p) ? ctl.open<BTreeDefault>(path, flags, std::get<0>(p)) : ctl.open<BTreeTrivial>(path, flags, std::get<0>(p));
}
/// Options for tests of one behaviour: 2 workers, no idle flush rounds (write-back happens only
/// where the test asks for it), every write cached (write-around off: a test's writes of a page
/// or more reach the cache it examines; the rule's own tests turn it on), on `engine` (empty:
/// the default).
inline ControllerOptions two_quiet_workers(const std::string& engine = {}) {
  ControllerOptions o;
  o.workers = 2;
  o.flush_idle_ns = -1;
  o.tree_options.write_around_bytes = 0;
  if (!engine.empty()) o.engine = engine;
  return o;
}

/// Waits for `r` (a test failure if it has not finished after `hang`) and expects success.
inline bool wait_ok(const Receipt& r, std::chrono::seconds hang = std::chrono::seconds(60)) {
  if (!r.wait_for(hang)) {
    ADD_FAILURE() << "a receipt did not finish within " << hang.count() << " s (state " << to_string(r.state()) << ")";
    return false;
  }
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok();
}

/// Why `engine` cannot run in this build or on this kernel ("" when it can): the selector's
/// exact reason, for GTEST_SKIP().
inline std::string engine_unavailable_reason(const std::string& engine) {
  for (const EngineInfo& e : list_engines()) {
    if (e.name == engine) return e.available ? std::string() : "engine '" + engine + "' unavailable: " + e.reason;
  }
  return "engine '" + engine + "' is not known to this build";
}

/// Skips the current test (from the test body or SetUp) when `engine` cannot run here, with
/// engine_unavailable_reason's text.
#define TAI_SKIP_UNLESS_ENGINE_AVAILABLE(engine)                                                   \
  do {                                                                                            \
    if (const std::string why_ = ::tai::test::engine_unavailable_reason(engine); !why_.empty())     \
      GTEST_SKIP() << why_;                                                                       \
  } while (0)

/// "" when `r` finished successfully by `deadline`, else what went wrong. Never waits past the
/// deadline (Receipt::message() and ok() would wait for an unfinished receipt forever), so a
/// controller that hangs fails the test instead of stalling it.
inline std::string receipt_outcome(const Receipt& r, std::chrono::steady_clock::time_point deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (!r.wait_for(left > std::chrono::nanoseconds(0) ? left : std::chrono::nanoseconds(0)))
    return std::string("did not finish in time (state ") + to_string(r.state()) + ")";
  return r.ok() ? std::string() : r.message();
}

/// True in a build with AddressSanitizer or ThreadSanitizer (TAI_SANITIZE is not empty).
inline bool sanitized_build() { return std::string(TAI_SANITIZE).size() > 0; }
/// True under ThreadSanitizer, which runs these tests 2-3x slower than AddressSanitizer: the
/// heaviest randomized suites halve their counts there again to keep `make test` within CI's budget.
inline bool thread_sanitized_build() { return std::string(TAI_SANITIZE) == "thread"; }

/// The factor randomized controller tests scale their operation counts by: 1 in an optimised
/// build, 0.2 in a debug build or under a sanitizer (measured on the 2-core development VM:
/// the order test's 640,000 operations take ~4 s in a debug build and ~15 s under TSan), times
/// test_depth_factor(). `env` (a factor) overrides both.
inline double controller_test_scale(const char* env) {
  if (const char* s = std::getenv(env)) return std::strtod(s, nullptr);
  if (sanitized_build()) return 0.2 * test_depth_factor();
#ifndef NDEBUG
  return 0.2 * test_depth_factor();
#else
  return 1.0 * test_depth_factor();
#endif
}

/// The whole file at `path` read with plain pread (no TAI, no engine): what the kernel has.
/// Empty when the file cannot be opened.
inline std::vector<unsigned char> read_with_pread(const std::string& path) {
  std::vector<unsigned char> out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    out.resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    out.resize(done);
  }
  ::close(fd);
  return out;
}

/// Writes `data` at `offset` of the existing file at `path` with plain pwrite (no TAI): a change
/// behind the controller's back. True when all of it was written.
inline bool write_with_pwrite(const std::string& path, std::uint64_t offset, const std::vector<unsigned char>& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset));
  ::close(fd);
  return n == static_cast<ssize_t>(data.size());
}

/// Creates (or truncates) `path` as `size` zero bytes.
inline bool make_zero_file(const std::string& path, std::uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = ::ftruncate(fd, static_cast<off_t>(size)) == 0;
  ::close(fd);
  return ok;
}

/// `n` bytes of a pattern that depends on `seed` and on the position, so that a misplaced or
/// stale byte shows (the crash-state suite's pattern).
inline std::vector<unsigned char> pattern(std::size_t n, std::uint64_t seed) { return engines::byte_pattern(n, seed); }

}  // namespace tai::test
