// bench/tai_bench/demo.cpp - `tai-bench demo` (what `make demo` runs until the image workload
// exists): the randread benchmark on a generated 1 GiB file with every kernel-queue engine this
// machine allows plus the thread pool, at 4 KiB and 64 KiB, depth 32, beside fio when it is
// installed. About a second per run, three interleaved runs per row: well under two minutes.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "tai/engine_selector.hpp"
#include "tai_bench/bench_util.hpp"
#include "tai_bench/commands.hpp"
#include "tai_bench/randread.hpp"

namespace tai::bench {

void add_demo_command(CLI::App& app) {
  struct Options {
    std::string file = "/var/tmp/tai-demo.dat";
    std::string size = "1G";
    double seconds = 1.0;
    bool no_fio = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "demo", "randread on a generated 1 GiB file: uring, libaio, threads at 4k and 64k, depth 32, beside fio");
  sub->add_option("--file", opt->file, "data file (created once)")->capture_default_str();
  sub->add_option("--size", opt->size, "file size")->capture_default_str();
  sub->add_option("--seconds", opt->seconds, "target time per run")->capture_default_str();
  sub->add_flag("--no-fio", opt->no_fio, "do not run fio even when it is installed");
  sub->callback([opt] {
    RandreadConfig cfg;
    cfg.title = "tai-bench demo (randread)";
    cfg.file = opt->file;
    try {
      cfg.size = parse_size(opt->size);
    } catch (const std::invalid_argument& e) {
      fmt::print(stderr, "demo: {}\n", e.what());
      throw CLI::RuntimeError(2);
    }
    cfg.block_sizes = {4096, 65536};
    cfg.depth = 32;
    cfg.seconds = opt->seconds;
    // The engines this kernel allows, best first, then the thread pool; say why others are left out.
    cfg.engines.clear();
    for (const auto& e : list_engines()) {
      if (e.name != "uring" && e.name != "libaio") continue;
      if (e.available)
        cfg.engines.push_back(e.name);
      else
        fmt::print("demo: leaving out {}: {}\n", e.name, e.reason);
    }
    cfg.engines.push_back("threads");
    cfg.fio = !opt->no_fio && find_program("fio").has_value();
    if (!opt->no_fio && !cfg.fio) fmt::print("demo: fio is not installed (make deps installs it): TAI only\n");
    cfg.repeat = cfg.fio ? 3 : 1;
    const std::int64_t t0 = now_ns();
    const int rc = run_randread(cfg);
    fmt::print("\ndemo finished in {:.0f} s\n", static_cast<double>(now_ns() - t0) / 1e9);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tai::bench
