// bench/tai_bench/crash.cpp - `tai-bench crash`: the crash-state suite run
// for longer than CI does. Workloads go through a controller on the crashsim engine
// (engines/crashsim/, driven by the rig of src/testing/), every crash state of each run's log is checked with TAI's oracle, and
// the run stops once --states unique states have been checked (or at the first violation).
//
//     tai-bench crash --states 10000000 --seed 7
//     tai-bench crash --states 200000 --config posix_Default_small,uring_direct_Binary_default
//
// Workloads, in rounds over the configurations: all 13 + 169 Ace workloads of 1 and 2
// operations and the 2197 of 3 operations (each once per configuration, in order), then random
// workloads of --min-ops to --max-ops operations for as long as needed. A configuration whose
// engine this machine refuses is skipped with the reason. Exit status 1 on a violation (its
// seed, workload and state are printed), 2 on bad options.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <chrono>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tai_bench/commands.hpp"

#ifdef TAI_BENCH_HAVE_CRASHSIM
#include "tai/testing/crash_workload.hpp"
#endif

namespace tai::bench {

#ifdef TAI_BENCH_HAVE_CRASHSIM
namespace {

namespace crash = ::tai::engines::crash;

struct CrashOptions {
  std::uint64_t states = 1000000;
  std::uint64_t seed = 0;
  std::string configs;  // comma-separated labels; empty: all
  std::string order = "any-subset";
  std::uint32_t sector = 0;  // 0: alternate 512 and 4096
  unsigned bound = 12;
  unsigned samples = 64;
  unsigned min_ops = 10, max_ops = 20;
};

struct Tally {
  std::uint64_t workloads = 0;
  engines::CrashStats stats;
  double seconds = 0;
  std::string skipped;
};

int run_crash(const CrashOptions& o) {
  std::vector<crash::CrashConfig> configs;
  for (const auto& c : crash::crash_configs()) {
    if (o.configs.empty() || ("," + o.configs + ",").find("," + c.label() + ",") != std::string::npos)
      configs.push_back(c);
  }
  if (configs.empty()) {
    fmt::print(stderr, "tai-bench crash: no configuration matches --config {}\n", o.configs);
    return 2;
  }
  if (o.order != "any-subset" && o.order != "sequential") {
    fmt::print(stderr, "tai-bench crash: --order must be any-subset or sequential\n");
    return 2;
  }
  if (o.min_ops == 0 || o.max_ops < o.min_ops) {
    fmt::print(stderr, "tai-bench crash: need 1 <= --min-ops <= --max-ops\n");
    return 2;
  }
  const std::uint64_t seed = o.seed ? o.seed : std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
  fmt::print("tai-bench crash: seed {}, target {} unique states, {} configurations, {} states, torn sectors {}\n", seed,
             o.states, configs.size(), o.order, o.sector ? std::to_string(o.sector) : "512/4096 alternately");
  crash::CrashDir dir;
  std::vector<std::unique_ptr<crash::CrashRig>> rigs;
  std::vector<Tally> tallies(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i) {
    tallies[i].skipped = crash::crash_config_unavailable(configs[i], dir.path());
    rigs.push_back(tallies[i].skipped.empty() ? std::make_unique<crash::CrashRig>(configs[i], dir.path()) : nullptr);
    if (rigs.back() && !rigs.back()->error().empty()) {
      tallies[i].skipped = rigs.back()->error();
      rigs.back().reset();
    }
  }
  std::mt19937_64 rng(seed);
  std::uint64_t total = 0, step = 0;
  const std::uint64_t ace_total = crash::ace_count(1) + crash::ace_count(2) + crash::ace_count(3);
  bool any_rig = false;
  for (const auto& r : rigs) any_rig |= r != nullptr;
  if (!any_rig) {
    fmt::print(stderr, "tai-bench crash: every configuration is unavailable here\n");
    for (std::size_t i = 0; i < configs.size(); ++i) fmt::print(stderr, "  {}: {}\n", configs[i].label(), tallies[i].skipped);
    return 2;
  }
  auto last_report = std::chrono::steady_clock::now();
  while (total < o.states) {
    crash::Workload w;
    if (step < ace_total) {
      std::uint64_t k = step;
      unsigned len = 1;
      while (k >= crash::ace_count(len)) k -= crash::ace_count(len++);
      w = crash::ace_workload(len, k);
    } else {
      w = crash::random_workload(rng(), o.min_ops + static_cast<unsigned>(rng() % (o.max_ops - o.min_ops + 1)));
    }
    for (std::size_t i = 0; i < configs.size() && total < o.states; ++i) {
      if (!rigs[i]) continue;
      engines::CrashStateOptions opt;
      opt.order = o.order == "sequential" ? engines::CrashStateOptions::Order::sequential
                                          : engines::CrashStateOptions::Order::any_subset;
      opt.sector_size = o.sector ? o.sector : (step % 2 ? 4096 : 512);
      opt.exhaustive_bound = o.bound;
      opt.samples = o.samples;
      opt.seed = seed + step;
      const auto t0 = std::chrono::steady_clock::now();
      crash::RunResult r = rigs[i]->run(w, seed, opt);
      tallies[i].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      tallies[i].stats += r.stats;
      ++tallies[i].workloads;
      total += r.stats.unique;
      if (!r.failures.empty()) {
        fmt::print(stderr, "tai-bench crash: VIOLATION in {} (replay: tai-bench crash --seed {} --config {})\n",
                   configs[i].label(), seed, configs[i].label());
        for (const auto& f : r.failures) fmt::print(stderr, "{}\n", f);
        return 1;
      }
    }
    ++step;
    if (std::chrono::steady_clock::now() - last_report > std::chrono::seconds(10)) {
      fmt::print("  ... {} unique states, {} workloads per configuration\n", total, step);
      std::fflush(stdout);
      last_report = std::chrono::steady_clock::now();
    }
  }
  fmt::print("{:<30} {:>9} {:>9} {:>12} {:>12} {:>10} {:>8}\n", "configuration", "workloads", "points", "built",
             "unique", "violations", "seconds");
  engines::CrashStats sum;
  double seconds = 0;
  std::uint64_t workloads = 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Tally& t = tallies[i];
    if (!t.skipped.empty()) {
      fmt::print("{:<30} skipped: {}\n", configs[i].label(), t.skipped);
      continue;
    }
    fmt::print("{:<30} {:>9} {:>9} {:>12} {:>12} {:>10} {:>8.1f}\n", configs[i].label(), t.workloads, t.stats.points,
               t.stats.generated, t.stats.unique, t.stats.violations, t.seconds);
    sum += t.stats;
    seconds += t.seconds;
    workloads += t.workloads;
  }
  fmt::print("{:<30} {:>9} {:>9} {:>12} {:>12} {:>10} {:>8.1f}\n", "TOTAL", workloads, sum.points, sum.generated, sum.unique,
             sum.violations, seconds);
  return sum.violations ? 1 : 0;
}

}  // namespace

void add_crash_command(CLI::App& app) {
  auto opt = std::make_shared<CrashOptions>();
  CLI::App* cmd = app.add_subcommand("crash", "crash-state suite: workloads through the crashsim engine, every crash state checked");
  cmd->add_option("--states", opt->states, "stop after this many unique crash states")->capture_default_str();
  cmd->add_option("--seed", opt->seed, "seed of the random workloads and of the sampling (0: random)");
  cmd->add_option("--config", opt->configs, "comma-separated configurations (e.g. posix_Default_small); default: all");
  cmd->add_option("--order", opt->order, "any-subset or sequential")->capture_default_str();
  cmd->add_option("--sector", opt->sector, "torn-write sector size (0: 512 and 4096 alternately)")->capture_default_str();
  cmd->add_option("--bound", opt->bound, "exhaustive up to this many units per crash point")->capture_default_str();
  cmd->add_option("--samples", opt->samples, "states drawn per crash point above the bound")->capture_default_str();
  cmd->add_option("--min-ops", opt->min_ops, "fewest operations of a random workload")->capture_default_str();
  cmd->add_option("--max-ops", opt->max_ops, "most operations of a random workload")->capture_default_str();
  cmd->callback([opt] {
    const int rc = run_crash(*opt);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

#else

void add_crash_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("crash", "crash-state suite (not built: needs TAI_BUILD_TESTING_ENGINES=ON)");
  cmd->callback([] {
    fmt::print(stderr, "tai-bench crash: this tai-bench was built without tai::testing (TAI_BUILD_TESTING_ENGINES=OFF)\n");
    throw CLI::RuntimeError(2);
  });
}

#endif

}  // namespace tai::bench
