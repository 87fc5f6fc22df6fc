// The crash-state suite: Ace-style bounded workloads and random longer
// ones, through a controller on the crashsim engine, over every tree x engine x quota; every
// crash state of each run's log is checked with TAI's oracle (durability, provenance, barriers).
//
// Plus, per configuration, a few runs of two threads at once on one file.
//
// One body over every configuration (value-parameterised; the tree is picked inside). Each
// configuration prints one line with its counts; the ctest fixture test `crashsim.summary`
// (test/CMakeLists.txt) adds them up after the suite and prints the total, and requires at least
// 100,000 unique states in an optimised build when every configuration ran (sanitizer and debug
// builds scale the workload count by controller_test_scale, so their total is smaller).
//
// Replay a failure: TAI_TEST_SEED=<seed printed> ctest -R '<config>'; the workload and the
// violating state are in the message.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "support/crash_workloads.hpp"
#include "support/tally.hpp"
#include "support/test_env.hpp"

namespace tai::test::crash {
namespace {

class CrashSimSuite : public ::testing::TestWithParam<CrashConfig> {};


TEST_P(CrashSimSuite, EveryCrashStateKeepsTheOrderAndDurabilityPromises) {
  const CrashConfig config = GetParam();
  CrashDir dir;
  if (const std::string why = crash_config_unavailable(config, dir.path()); !why.empty()) GTEST_SKIP() << why;
  Watchdog watchdog(kCheckTimeLimit);
  const std::uint64_t seed = test_seed();
  const double scale = controller_test_scale("TAI_CRASHSIM_SCALE");
  CrashRig rig(config, dir.path());
  ASSERT_EQ(rig.error(), "");

  // Which workloads: every Ace workload of 1 and 2 operations (13 + 169); of the 13^3 = 2197 of
  // 3 operations the slice congruent to this configuration's index modulo the number of
  // configurations (61 or 62 of them), so that the suite as a whole runs every one of them once; and 4
  // random ones of 10 to 20 operations (their states are 30 times dearer to check: bigger files,
  // more sources per byte). Sanitizer and debug builds keep every 5th of each kind.
  const auto configs = crash_configs();
  std::size_t config_index = 0;
  while (config_index < configs.size() && configs[config_index].label() != config.label()) ++config_index;
  std::vector<Workload> workloads;
  const unsigned keep_every = scale >= 1.0 ? 1 : static_cast<unsigned>(1.0 / std::max(scale, 0.01));
  for (unsigned len = 1; len <= 2; ++len)
    for (std::uint64_t i = 0; i < ace_count(len); ++i)
      if ((i + config_index) % keep_every == 0) workloads.push_back(ace_workload(len, i));
  for (std::uint64_t i = config_index, k = 0; i < ace_count(3); i += configs.size(), ++k)
    if (k % keep_every == 0) workloads.push_back(ace_workload(3, i));
  const unsigned randoms = std::max(1u, static_cast<unsigned>(4 * scale));
  std::mt19937_64 rng(seed ^ (config_index * 0x9E3779B97F4A7C15ull));
  for (unsigned i = 0; i < randoms; ++i) workloads.push_back(random_workload(rng(), 10 + static_cast<unsigned>(rng() % 11)));

  engines::CrashStats total;
  std::size_t failures = 0;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < workloads.size(); ++i) {
    engines::CrashStateOptions opt;
    opt.order = engines::CrashStateOptions::Order::any_subset;
    opt.sector_size = i % 2 ? 4096 : 512;  // both granularities of torn writes
    opt.exhaustive_bound = 12;
    opt.samples = scale >= 1.0 ? 64 : 16;  // sanitizers: every state costs ~10x
    opt.seed = seed + i;
    RunResult r = rig.run(workloads[i], seed, opt);
    total += r.stats;
    for (const auto& f : r.failures) {
      if (failures++ < 5) ADD_FAILURE() << f;
    }
    if (failures >= 5) break;
  }
  // Two threads at once on one handle of one file (random workloads without close/reopen): the
  // order promise across threads is the real-time order of submission.
  const unsigned concurrent = std::max(1u, static_cast<unsigned>(2 * scale));
  for (unsigned i = 0; i < concurrent && failures < 5; ++i) {
    engines::CrashStateOptions opt;
    opt.sector_size = i % 2 ? 4096 : 512;
    opt.samples = scale >= 1.0 ? 64 : 16;  // sanitizers: every state costs ~10x
    opt.seed = seed + 7777 + i;
    const std::vector<Workload> threads = {random_workload(rng(), 6 + static_cast<unsigned>(rng() % 5)),
                                           random_workload(rng(), 6 + static_cast<unsigned>(rng() % 5))};
    RunResult r = rig.run_concurrent(threads, seed, opt);
    total += r.stats;
    workloads.push_back(threads[0]);  // counted as one workload below
    for (const auto& f : r.failures) {
      if (failures++ < 5) ADD_FAILURE() << f;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[crashsim] %-28s seed %llu: %zu workloads, %llu crash points (%llu exhaustive, %llu sampled), "
              "%llu states built, %llu unique states checked, %llu violations, %.1f s\n",
              config.label().c_str(), static_cast<unsigned long long>(seed), workloads.size(),
              static_cast<unsigned long long>(total.points), static_cast<unsigned long long>(total.exhaustive_points),
              static_cast<unsigned long long>(total.sampled_points), static_cast<unsigned long long>(total.generated),
              static_cast<unsigned long long>(total.unique), static_cast<unsigned long long>(total.violations), seconds);
  std::fflush(stdout);
  EXPECT_EQ(total.violations, 0u) << "seed " << seed;
  if (config.caller_writes) {
    // Else this configuration checks nothing the others do not: its writes went to the workers.
    // At least every workload that begins with a write the tree sends around its cache (any
    // write on BTreeTrivial, else one of the write-around size or more) makes that write on the
    // program's thread: its file is fresh, its tree holds nothing and nothing is in flight.
    const std::uint64_t least = config.tree == TreeKind::trivial ? 1 : BTreeOptions{}.write_around_bytes;
    std::uint64_t first_writes_around = 0;
    for (std::size_t i = 0; i + concurrent < workloads.size(); ++i)
      if (!workloads[i].ops.empty() && workloads[i].ops[0].kind == WOp::Kind::write &&
          workloads[i].ops[0].length >= least)
        ++first_writes_around;
    const std::uint64_t made = rig.controller().stats().caller_writes;
    std::printf("[crashsim] %-28s %llu writes made by the program's thread (%llu workloads begin with one)\n",
                config.label().c_str(), static_cast<unsigned long long>(made),
                static_cast<unsigned long long>(first_writes_around));
    EXPECT_GT(first_writes_around, 0u);
    EXPECT_GE(made, first_writes_around);
  }
  EXPECT_GT(total.unique, workloads.size()) << "every workload has more than one crash state";
  write_tally("", config.label(), {total.unique, total.violations, workloads.size(), seconds, scale});
}

INSTANTIATE_TEST_SUITE_P(Configs, CrashSimSuite, ::testing::ValuesIn(crash_configs()),
                         [](const ::testing::TestParamInfo<CrashConfig>& info) { return info.param.label(); });

// The suite's total, run by ctest after every other test (the `crashsim.summary` fixture
// cleanup in test/CMakeLists.txt sets TAI_CRASHSIM_SUMMARY=1); skipped when run otherwise.
TEST(CrashSimSummary, Total) {
  if (!std::getenv("TAI_CRASHSIM_SUMMARY")) GTEST_SKIP() << "run as the ctest test crashsim.summary, after the suite";
  const Tally sum = sum_tallies("", "ioerr-");  // the I/O-error loop's files start with ioerr-
  const std::uint64_t unique = sum.count, violations = sum.violations, workloads = sum.other, configs = sum.configs;
  const double seconds = sum.seconds, scale = sum.scale;
  const std::size_t expected = crash_configs().size();
  std::printf("[crashsim] TOTAL: %llu unique crash states checked in %llu configurations (of %zu; the others were "
              "skipped or not run), %llu workloads, %llu violations, %.1f s of checking (scale %.2f)\n",
              static_cast<unsigned long long>(unique), static_cast<unsigned long long>(configs), expected,
              static_cast<unsigned long long>(workloads), static_cast<unsigned long long>(violations), seconds, scale);
  std::fflush(stdout);
  write_reliability_row("crash states (crashsim)", configs, expected,
                        std::to_string(unique) + " unique crash states of " + std::to_string(workloads) + " workloads",
                        violations);
  EXPECT_EQ(violations, 0u);
  // The promise of the suite: at least 100,000 unique states per CI run in an optimised build
  // (the sanitizer and debug builds run a fifth of the workloads).
  if (scale >= 1.0 && configs == expected) {
    EXPECT_GE(unique, 100000u);
  }
}

}  // namespace
}  // namespace tai::test::crash
