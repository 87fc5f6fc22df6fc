// test/support/bench_runner.hpp - runs the built tai-bench binary for the bench tests.
//
// TAI_BENCH_PATH (set by test/CMakeLists.txt when the benchmarks are built) names the binary.
// Without it, run_bench() returns a status of -1 and SKIP_WITHOUT_BENCH() skips the test with
// the reason.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace tai::test {

struct BenchOutcome {
  int status = -1;     // exit status, -1 when killed or not started
  std::string output;  // standard output and standard error together
};

/// Runs `tai-bench <args>` through the shell and collects its output.
inline BenchOutcome run_bench(const std::string& args) {
  BenchOutcome out;
#ifdef TAI_BENCH_PATH
  const std::string command = std::string(TAI_BENCH_PATH) + " " + args + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.output.append(buf, n);
  const int ws = ::pclose(pipe);
  out.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
#else
  (void)args;
#endif
  return out;
}

}  // namespace tai::test

#ifdef TAI_BENCH_PATH
#define SKIP_WITHOUT_BENCH() (void)0
#else
#define SKIP_WITHOUT_BENCH() GTEST_SKIP() << "tai-bench is not built (TAI_BUILD_BENCH=OFF)"
#endif
