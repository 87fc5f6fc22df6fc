// Shared by the engine conformance suite (test/engine_conformance_test.cpp and
// test/conformance_*_test.cpp): the engine configurations every check runs over, how to build
// each one, and the helpers the checks share (running requests, patterns, raw file access).
//
// One check body runs over every configuration through value-parameterized tests:
//
//     class MyChecks : public tai::test::EngineTest {};
//     TEST_P(MyChecks, Something) { ... engine() ... }
//     TAI_INSTANTIATE_ENGINE_CONFIGS(MyChecks);
//
// A configuration whose engine this build or this kernel cannot run is skipped with the
// selector's exact reason ("engine 'uring' unavailable: not built (...)").
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engines/fault/fault_engine.hpp"
#include "support/test_env.hpp"
#include "tai/detail/aligned_buffer.hpp"
#include "tai/engine.hpp"
#include "tai/engine_selector.hpp"

namespace tai::test {

// ---------------------------------------------------------------------------------------------
// Configurations

/// One way of running an engine. `label` is the test-name suffix (letters, digits, '_').
struct EngineConfig {
  const char* label;
  const char* engine;           ///< name for tai::make_engine
  bool direct = false;          ///< open every data file with Open::direct
  bool register_files = false;  ///< EngineOptions::uring_register_files
  bool fault_wrapped = false;   ///< wrapped in the fault engine with no rules
};

/// Every configuration the suite runs; parameterized tests are instantiated in this order.
inline const std::vector<EngineConfig>& engine_configs() {
  static const std::vector<EngineConfig> configs = {
      {"posix", "posix"},
      {"posix_direct", "posix", /*direct=*/true},
      {"cstdio", "cstdio"},
      {"fstream", "fstream"},
      {"null", "null"},
      {"libaio", "libaio"},
      {"libaio_direct", "libaio", /*direct=*/true},
      {"uring", "uring"},
      {"uring_direct", "uring", /*direct=*/true},
      {"uring_registered_files", "uring", /*direct=*/false, /*register_files=*/true},
      {"fault_posix", "posix", /*direct=*/false, /*register_files=*/false, /*fault_wrapped=*/true},
  };
  return configs;
}

inline std::string config_name(const ::testing::TestParamInfo<EngineConfig>& info) {
  return info.param.label;
}

inline void PrintTo(const EngineConfig& c, std::ostream* os) { *os << c.label; }

/// The options a configuration makes its engines with, on top of `base`.
inline EngineOptions options_for(const EngineConfig& c, EngineOptions base = {}) {
  base.uring_register_files = c.register_files;
  return base;
}

/// Wraps `inner` in a fault engine with the given rules (none: it must behave exactly like
/// `inner`).
inline std::unique_ptr<Engine> wrap_in_fault(std::unique_ptr<Engine> inner,
                                             std::vector<engines::FaultRule> rules = {}) {
  return engines::make_fault(std::move(inner), std::move(rules));
}

/// Builds the engine of a configuration through the selector (and wraps it when asked).
/// Fails with the selector's message when the engine is not available here.
inline Result<std::unique_ptr<Engine>> make_config_engine(const EngineConfig& c, EngineOptions base = {}) {
  auto made = make_engine(c.engine, options_for(c, base));
  if (!made) return made;
  if (!c.fault_wrapped) return made;
  return wrap_in_fault(std::move(made.value()));
}

#define TAI_INSTANTIATE_ENGINE_CONFIGS(Suite)                                                    \
  INSTANTIATE_TEST_SUITE_P(Engines, Suite, ::testing::ValuesIn(::tai::test::engine_configs()), \
                           ::tai::test::config_name)

// ---------------------------------------------------------------------------------------------
// Memory and patterns

/// Page-aligned memory with room to hand out a deliberately misaligned pointer.
class TestBuffer {
 public:
  explicit TestBuffer(std::size_t size) : mem_(size + 2 * kPad, 4096) {}
  /// The buffer's bytes starting `misalign` bytes after a page boundary (misalign < 4096).
  std::uint8_t* at(std::size_t misalign = 0) { return reinterpret_cast<std::uint8_t*>(mem_.data()) + misalign; }
  std::size_t capacity() const { return mem_.size() - kPad; }

 private:
  static constexpr std::size_t kPad = 4096;
  detail::AlignedBuffer mem_;
};

inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The byte a pattern puts at `file_offset`: it depends on the offset, so a byte written to
/// the wrong place, or a neighbour overwritten, shows up.
inline std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t file_offset) {
  return static_cast<std::uint8_t>(mix64(seed ^ (file_offset >> 3) * 0xD6E8FEB86659FD93ull) >> (8 * (file_offset & 7)));
}

/// Fills dst[0, n) with the pattern of `seed` for the file range starting at `file_offset`.
inline void fill_pattern(std::uint8_t* dst, std::uint64_t file_offset, std::size_t n, std::uint64_t seed) {
  std::size_t i = 0;
  for (; i < n && ((file_offset + i) & 7) != 0; ++i) dst[i] = pattern_byte(seed, file_offset + i);
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t w = mix64(seed ^ ((file_offset + i) >> 3) * 0xD6E8FEB86659FD93ull);
    std::memcpy(dst + i, &w, 8);  // little-endian: byte k of the word is pattern_byte(.., +k)
  }
  for (; i < n; ++i) dst[i] = pattern_byte(seed, file_offset + i);
}

inline std::vector<std::uint8_t> pattern(std::uint64_t file_offset, std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(n);
  fill_pattern(v.data(), file_offset, n, seed);
  return v;
}

/// "" when got == want, else where they first differ ("first difference at file offset X ...").
inline std::string mismatch(const std::uint8_t* got, const std::uint8_t* want, std::size_t n,
                            std::uint64_t file_offset = 0) {
  if (n == 0 || std::memcmp(got, want, n) == 0) return "";
  std::size_t i = 0;
  while (got[i] == want[i]) ++i;
  std::size_t differing = 0;
  for (std::size_t k = i; k < n; ++k) differing += got[k] != want[k];
  char text[200];
  std::snprintf(text, sizeof text,
                "first difference at file offset %llu (byte %zu of %zu): got 0x%02x, expected 0x%02x; "
                "%zu bytes differ",
                static_cast<unsigned long long>(file_offset + i), i, n, got[i], want[i], differing);
  return text;
}

// ---------------------------------------------------------------------------------------------
// The file as the kernel sees it (plain POSIX calls, independent of every engine)

/// stat(2) size, or -1 when the file does not exist.
inline std::int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return st.st_size;
}

/// The whole file; an empty vector (and a test failure) when it cannot be read.
inline std::vector<std::uint8_t> read_file(const std::string& path) {
  std::vector<std::uint8_t> out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    ADD_FAILURE() << "cannot open " << path << ": " << std::strerror(errno);
    return out;
  }
  struct stat st {};
  ::fstat(fd, &st);
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < out.size()) {
    ssize_t got = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (got <= 0) {
      ADD_FAILURE() << "pread " << path << " at " << done << ": " << (got < 0 ? std::strerror(errno) : "EOF");
      out.resize(done);
      break;
    }
    done += static_cast<std::size_t>(got);
  }
  ::close(fd);
  return out;
}

/// Creates or replaces `path` with `bytes`.
inline void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << "cannot create " << path << ": " << std::strerror(errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t put = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    ASSERT_GT(put, 0) << "pwrite " << path << ": " << std::strerror(errno);
    done += static_cast<std::size_t>(put);
  }
  ::close(fd);
}

/// Applies a write to an in-memory model of a file (growing it, zero-filling any hole).
inline void model_write(std::vector<std::uint8_t>& model, std::uint64_t offset, const std::uint8_t* data,
                        std::size_t n) {
  if (n == 0) return;
  if (model.size() < offset + n) model.resize(offset + n, 0);
  std::memcpy(model.data() + offset, data, n);
}

/// What a read of [offset, offset + n) returns according to the model (short at its end).
inline std::vector<std::uint8_t> model_read(const std::vector<std::uint8_t>& model, std::uint64_t offset,
                                            std::size_t n) {
  if (offset >= model.size()) return {};
  std::size_t k = std::min<std::size_t>(n, model.size() - offset);
  return std::vector<std::uint8_t>(model.begin() + static_cast<std::ptrdiff_t>(offset),
                                   model.begin() + static_cast<std::ptrdiff_t>(offset + k));
}

/// Expects the file at `path` to equal `model`, size and bytes.
inline void expect_file_equals(const std::string& path, const std::vector<std::uint8_t>& model,
                               const std::string& context = "") {
  std::vector<std::uint8_t> on_disk = read_file(path);
  EXPECT_EQ(on_disk.size(), model.size()) << context << "file size of " << path;
  std::size_t n = std::min(on_disk.size(), model.size());
  std::string diff = mismatch(on_disk.data(), model.data(), n);
  EXPECT_EQ(diff, "") << context << "contents of " << path;
}

// ---------------------------------------------------------------------------------------------
// Running requests

/// How long a check waits for one completion before it calls the engine hung.
inline constexpr std::chrono::seconds kCompletionTimeout{60};

/// A completion result no engine returns: marks a request that never completed.
inline constexpr std::int64_t kNeverCompleted = INT64_MIN;

inline Request make_request(Op op, EngineFile* file, void* buffer, std::uint64_t offset, std::uint64_t length,
                            std::uint64_t user_data) {
  Request r;
  r.op = op;
  r.file = file;
  r.buffer = buffer;
  r.offset = offset;
  r.length = length;
  r.user_data = user_data;
  return r;
}

/// Submits every request (waiting for completions when the engine's depth is reached) and
/// returns their completions in the order of `requests`, matched by user_data, which must be
/// unique among them. A completion whose user_data matches no request, or a second completion
/// for one, fails the test; a request that never completes gets kNeverCompleted.
inline std::vector<Completion> run_requests(Engine& engine, const std::vector<Request>& requests) {
  std::vector<Completion> results(requests.size(), Completion{0, kNeverCompleted});
  std::unordered_map<std::uint64_t, std::size_t> index;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    results[i].user_data = requests[i].user_data;
    if (!index.emplace(requests[i].user_data, i).second)
      ADD_FAILURE() << "test bug: user_data " << requests[i].user_data << " used twice in one batch";
  }
  std::size_t submitted = 0, completed = 0;
  std::vector<Completion> got(std::max<std::size_t>(requests.size(), 1));
  while (completed < requests.size()) {
    if (submitted < requests.size()) {
      std::size_t took = engine.submit(requests.data() + submitted, requests.size() - submitted);
      submitted += took;
      if (took == 0 && engine.in_flight() == 0) {
        ADD_FAILURE() << "engine '" << engine.name() << "' took none of " << requests.size() - submitted
                      << " requests with nothing in flight";
        return results;
      }
    }
    std::size_t n = engine.reap(got.data(), got.size(), 1, kCompletionTimeout);
    if (n == 0) {
      ADD_FAILURE() << "engine '" << engine.name() << "': no completion within " << kCompletionTimeout.count()
                    << " s (in_flight() = " << engine.in_flight() << ", " << requests.size() - completed
                    << " requests outstanding)";
      return results;
    }
    for (std::size_t k = 0; k < n; ++k) {
      auto it = index.find(got[k].user_data);
      if (it == index.end()) {
        ADD_FAILURE() << "completion with unknown user_data " << got[k].user_data << " (result " << got[k].result
                      << ")";
        continue;
      }
      Completion& slot = results[it->second];
      if (slot.result != kNeverCompleted)
        ADD_FAILURE() << "second completion for user_data " << got[k].user_data << " (results " << slot.result
                      << " and " << got[k].result << ")";
      slot = got[k];
      ++completed;
    }
  }
  return results;
}

/// Runs one request and returns its completion.
inline Completion run_one(Engine& engine, const Request& request) {
  return run_requests(engine, {request}).front();
}

/// Runs one request made of its fields and returns its completion.
inline Completion run_one_request(Engine& engine, Op op, EngineFile* file, void* buffer, std::uint64_t offset,
                                  std::uint64_t length) {
  return run_one(engine, make_request(op, file, buffer, offset, length, 77));
}

inline std::string describe(const Request& r) {
  std::ostringstream s;
  s << to_string(r.op) << " offset=" << r.offset << " length=" << r.length << " buffer%4096="
    << (reinterpret_cast<std::uintptr_t>(r.buffer) % 4096) << " user_data=" << r.user_data;
  return s.str();
}

/// A completion's result for a failure message: the byte count, "never completed", or the negative
/// errno with its text.
inline std::string result_text(std::int64_t result) {
  if (result >= 0) return std::to_string(result);
  if (result == kNeverCompleted) return "never completed";
  return std::to_string(result) + " (" + std::strerror(static_cast<int>(-result)) + ")";
}

// ---------------------------------------------------------------------------------------------
// The fixture

/// Aborts the process with the test's name when a check runs longer than `limit`: an engine
/// call that never returns (a deadlock) then fails at once, with a message, instead of at the
/// ctest timeout. Thread-safe; one per check.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    name_ = info ? std::string(info->test_suite_name()) + "." + info->name() : "?";
    thread_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
        std::fprintf(stderr, "\n%s: still running after %lld s: an engine call is hung (deadlock?); aborting\n",
                     name_.c_str(), static_cast<long long>(limit.count()));
        std::fflush(stderr);
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mutex_
  std::thread thread_;
};

/// Longest a single check may run (sanitizer builds on 2 shared cores included).
inline constexpr std::chrono::seconds kCheckTimeLimit{240};

/// Builds the configuration's engine before each check (skipping with the reason when it is
/// unavailable, or when the configuration is direct and the scratch directory's file system
/// refuses O_DIRECT) and gives each check a scratch directory.
class EngineTest : public ::testing::TestWithParam<EngineConfig> {
 protected:
  void SetUp() override {
    watchdog_ = std::make_unique<Watchdog>(kCheckTimeLimit);
    auto made = make_config_engine(config());
    if (!made) GTEST_SKIP() << config().label << ": " << made.error().message;
    // The direct configurations depend on the file system the scratch directories are on.
    if (config().direct && needs_direct_scratch_ && !scratch_direct_io_unsupported_reason().empty())
      GTEST_SKIP() << config().label << ": " << scratch_direct_io_unsupported_reason();
    engine_ = std::move(made.value());
  }

  /// Whether SetUp skips a direct configuration where the scratch directory refuses O_DIRECT:
  /// false in fixtures whose checks open their direct files elsewhere (set in the constructor).
  bool needs_direct_scratch_ = true;

  const EngineConfig& config() const { return GetParam(); }
  Engine& engine() { return *engine_; }
  bool stores_data() const { return engine_->capabilities().stores_data; }
  bool asynchronous() const { return engine_->capabilities().asynchronous; }

  /// `flags`, plus Open::direct in the direct configurations.
  Open with_config(Open flags) const { return config().direct ? flags | Open::direct : flags; }

  /// Opens through `engine` (the fixture's by default) with the configuration's flags added;
  /// null and a test failure when it cannot.
  std::unique_ptr<EngineFile> open_file(const std::string& path, Open flags, Engine* engine = nullptr) {
    Engine& e = engine ? *engine : *engine_;
    auto opened = e.open(path, with_config(flags));
    if (!opened) {
      ADD_FAILURE() << "open " << path << " with engine '" << e.name() << "': " << opened.error().message;
      return nullptr;
    }
    std::unique_ptr<EngineFile> f = std::move(opened.value());
    EXPECT_EQ(f->capabilities().direct, config().direct) << "FileCapabilities::direct of " << path;
    return f;
  }

  /// A read-write file created empty.
  std::unique_ptr<EngineFile> create_file(const std::string& path, Engine* engine = nullptr) {
    return open_file(path, Open::read | Open::write | Open::create | Open::truncate, engine);
  }

  /// Makes the completed writes on `file` visible to other descriptors before a check reads the
  /// file with plain pread. cstdio and fstream document that a completed write may still sit in
  /// the stream's buffer until fsync/fdatasync (or close); every other engine must need nothing.
  void publish(EngineFile* file) {
    const std::string name = config().engine;
    if (name != "cstdio" && name != "fstream") return;
    Request sync = make_request(Op::fdatasync, file, nullptr, 0, 0, 0xFDA7A);
    expect_result(sync, run(sync), 0);
  }

  Completion run(const Request& r) { return run_one(*engine_, r); }
  std::vector<Completion> run(const std::vector<Request>& rs) { return run_requests(*engine_, rs); }

  /// Fails the test when `c` is not the expected result of `r`.
  void expect_result(const Request& r, const Completion& c, std::int64_t want) {
    EXPECT_EQ(c.user_data, r.user_data) << describe(r);
    EXPECT_EQ(c.result, want) << describe(r) << ": result " << result_text(c.result) << ", expected "
                              << result_text(want);
  }

  std::unique_ptr<Watchdog> watchdog_;  // destroyed last: covers the engine's destruction too
  ScratchDir scratch_;
  std::unique_ptr<Engine> engine_;
};

/// The reason checks of file contents are skipped on the null engine.
inline constexpr const char* kNoData = "null engine stores no data";

}  // namespace tai::test
