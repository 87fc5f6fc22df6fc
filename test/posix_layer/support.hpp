// Shared by the tests of tai/posix.hpp: a fixture that gives each test a fresh layer (a new
// process-wide controller with known settings) and a scratch directory, and helpers that look
// at files with plain libc (what the kernel has, not what the layer says).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "engines/fault/fault_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "src/posix/layer.hpp"
#include "support/test_env.hpp"
#include "tai/posix.hpp"

namespace tai::test {

/// Settings for a test's controller: 2 workers, the posix engine, no idle flush unless asked.
inline posix::detail::Settings layer_settings(bool trivial = false) {
  posix::detail::Settings s;
  s.options.workers = 2;
  s.options.engine = "posix";
  s.trivial_tree = trivial;
  // Write-through off: these tests look at the cache, and a file synced after a few bytes would
  // leave it (through_test.cpp tests write-through).
  s.sync_through_bytes = 0;
  // Write-around off (the layer's settings from the environment turn it on): these tests look
  // at what the cache holds; write-around has its own cases.
  s.options.tree_options.write_around_bytes = 0;
  return s;
}

/// The same, over the fault engine (registered as "fault") with `rules`.
inline posix::detail::Settings fault_settings(const std::string& rules, bool trivial = false) {
  posix::detail::Settings s = layer_settings(trivial);
  s.options.engine = "fault";
  s.options.flush_idle_ns = -1;  // write-back only at fsync/close: the fault hits there
  s.write_behind_ms = 0;         // and not at the write-behind deadline either
  s.setup = [rules](Controller& c) {
    auto fault = engines::make_fault(engines::make_posix({}));
    auto added = fault->add_rules(rules);
    if (!added.ok()) throw std::runtime_error(added.error().message);
    c.add_engine("fault", std::move(fault));
  };
  return s;
}

class LayerTest : public ::testing::Test {
 protected:
  void SetUp() override { restart(layer_settings()); }
  void TearDown() override {
    const ShutdownReport r = posix::detail::restart_for_testing(layer_settings());
    EXPECT_TRUE(r.ok()) << r.to_string();
  }
  void restart(const posix::detail::Settings& s) {
    const ShutdownReport r = posix::detail::restart_for_testing(s);
    EXPECT_TRUE(r.ok()) << r.to_string();
  }
  std::string file(const std::string& name) const { return dir_.file(name); }

 private:
  ScratchDir dir_;
};

/// What the kernel has in `path` (a fresh ::open, ::pread): the bytes other processes see.
inline std::string kernel_contents(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "<open failed: " + std::string(std::strerror(errno)) + ">";
  std::string out;
  char buf[65536];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  ::close(fd);
  return out;
}

/// A pattern of n bytes that differs per `seed` and per position.
inline std::string pattern(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('A' + (i * 7 + seed * 13 + i / 251) % 26);
  return s;
}

inline ssize_t write_all(int fd, const std::string& s) { return posix::write(fd, s.data(), s.size()); }

/// The descriptors this process has open (entries of /proc/self/fd, its own listing's included);
/// 0 when /proc/self/fd cannot be read (the caller skips).
inline std::size_t open_descriptor_count() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

}  // namespace tai::test
