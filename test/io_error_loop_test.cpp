// The I/O-error loop (src/testing/io_error_loop.hpp): every engine operation of a workload
// failed in turn (EIO, ENOSPC, short transfers; once and persistently), then every open and close
// of its file (EIO, ENOSPC, EACCES, EMFILE; EIO, ENOSPC), through the whole controller, with the program's view checked after each run: no lost error, no sync success over
// missing data, a usable controller, a clean shutdown.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "support/controller_support.hpp"
#include "support/tally.hpp"
#include "support/test_env.hpp"
#include "tai/testing/io_error_loop.hpp"

namespace tai::test {
namespace {


using engines::crash::ace_count;
using engines::crash::ace_workload;
using engines::crash::random_workload;
using engines::crash::TreeKind;
using engines::crash::Workload;
using engines::ioerr::IoErrorLoop;
using engines::ioerr::LoopConfig;
using engines::ioerr::LoopStats;

std::vector<LoopConfig> loop_configs() {
  return {{TreeKind::def, 8u << 10},   {TreeKind::def, 16u << 10},    {TreeKind::def, 0},
          {TreeKind::trivial, 0},      {TreeKind::binary, 16u << 10}, {TreeKind::binary, 0}};
}

class IoErrorLoopSuite : public ::testing::TestWithParam<LoopConfig> {};

}  // namespace
}  // namespace tai::test

namespace tai::engines::ioerr {
// GoogleTest prints a parameter with this (instead of its bytes) in test names' descriptions.
inline void PrintTo(const LoopConfig& c, std::ostream* os) { *os << c.label(); }
}  // namespace tai::engines::ioerr

namespace tai::test {
namespace {

TEST_P(IoErrorLoopSuite, EveryFaultOfEveryOperationReachesTheProgram) {
  const LoopConfig config = GetParam();
  engines::crash::CrashDir dir;  // tmpfs when there is one: each run's fsyncs then cost nothing
  // Sanitizer and debug builds: a tenth (each run starts and stops a controller, dear there).
  double scale = controller_test_scale("TAI_IOERR_SCALE");
  if (scale < 1.0 && !std::getenv("TAI_IOERR_SCALE")) scale /= thread_sanitized_build() ? 4 : 2;
  const std::uint64_t seed = 0x10E7ull;
  // Which workloads: the 169 Ace workloads of 2 operations and the 2197 of 3, each
  // configuration taking the slice congruent to its index modulo the number of configurations
  // (6), so CI runs each once (its
  // time budget); at TAI_IOERR_SCALE=2 and above (make soak) modulo 3, so each runs twice, on a
  // BTreeDefault configuration and on a Trivial or Binary one. Plus 10 random ones of 4 to 8
  // operations. Sanitizer and debug builds keep every 10th of the Ace ones.
  std::vector<Workload> workloads;
  const auto configs = loop_configs();
  std::size_t ci = 0;
  while (ci < configs.size() && configs[ci].label() != config.label()) ++ci;
  const unsigned keep_every = scale >= 1.0 ? 1 : static_cast<unsigned>(1.0 / std::max(scale, 0.01));
  const std::uint64_t stride = scale >= 2.0 ? 3 : std::max<std::uint64_t>(3, configs.size());
  for (unsigned len = 2; len <= 3; ++len)
    for (std::uint64_t i = ci % stride, k = 0; i < ace_count(len); i += stride, ++k)
      if (k % keep_every == 0) workloads.push_back(ace_workload(len, i));
  std::mt19937_64 rng(seed ^ ci);
  const unsigned randoms = std::max(1u, static_cast<unsigned>(10 * scale));
  for (unsigned i = 0; i < randoms; ++i) workloads.push_back(random_workload(rng(), 4 + static_cast<unsigned>(rng() % 5)));

  IoErrorLoop loop(config, dir.path());
  LoopStats total;
  const auto start = std::chrono::steady_clock::now();
  for (const Workload& w : workloads) total.add(loop.run_all(w, seed));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ioerr] %-18s %zu workloads, %llu runs, %llu injections, %llu reported to the program, %llu violations, %.1f s\n",
              config.label().c_str(), workloads.size(), static_cast<unsigned long long>(total.runs),
              static_cast<unsigned long long>(total.injections), static_cast<unsigned long long>(total.errors_reported),
              static_cast<unsigned long long>(total.violations), seconds);
  std::fflush(stdout);
  for (const std::string& m : total.messages) ADD_FAILURE() << m;
  EXPECT_EQ(total.violations, 0u);
  EXPECT_GT(total.injections, 0u);
  write_tally("ioerr-", config.label(), {total.injections, total.violations, total.runs, seconds, scale});
}

// The loop's total, run by ctest after every other test with the crash-state suite's summary
// (the `crashsim.summary` fixture cleanup sets TAI_CRASHSIM_SUMMARY=1); skipped when run otherwise.
TEST(IoErrorLoopSummary, Total) {
  if (!std::getenv("TAI_CRASHSIM_SUMMARY")) GTEST_SKIP() << "run as the ctest test crashsim.summary, after the suite";
  const Tally sum = sum_tallies("ioerr-");
  const std::uint64_t injections = sum.count, violations = sum.violations, runs = sum.other, configs = sum.configs;
  const double seconds = sum.seconds, scale = sum.scale;
  const std::size_t expected = loop_configs().size();
  std::printf("[ioerr] TOTAL: %llu injected faults in %llu runs over %llu configurations (of %zu), %llu violations "
              "(lost errors, sync successes over missing data, unusable controllers), %.1f s (scale %.2f)\n",
              static_cast<unsigned long long>(injections), static_cast<unsigned long long>(runs),
              static_cast<unsigned long long>(configs), expected, static_cast<unsigned long long>(violations), seconds, scale);
  std::fflush(stdout);
  write_reliability_row("I/O-error loop (fault engine)", configs, expected,
                        std::to_string(injections) + " injected faults in " + std::to_string(runs) + " runs", violations);
  EXPECT_EQ(violations, 0u);
  // At least 100,000 injections per CI run in an optimised build (sanitizer and debug builds
  // run a tenth).
  if (scale >= 1.0 && configs == expected) {
    EXPECT_GE(injections, 100000u);
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, IoErrorLoopSuite, ::testing::ValuesIn(loop_configs()),
                         [](const ::testing::TestParamInfo<LoopConfig>& info) { return info.param.label(); });

}  // namespace
}  // namespace tai::test
