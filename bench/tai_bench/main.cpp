// tai-bench: TAI's benchmark driver. One subcommand per benchmark or report; each lives in its
// own file and registers itself through commands.hpp (see there for how to add one).
#include <CLI/CLI.hpp>

#include "tai_bench/commands.hpp"

namespace {

void register_commands(CLI::App& app) {
  tai::bench::add_engines_command(app);
  tai::bench::add_randread_command(app);
  tai::bench::add_demo_command(app);
  tai::bench::add_latency_command(app);
  tai::bench::add_write_command(app);
  tai::bench::add_fadvise_command(app);
  tai::bench::add_overhead_command(app);
  tai::bench::add_idle_command(app);
  tai::bench::add_memory_command(app);
  tai::bench::add_crash_command(app);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tai-bench: benchmarks and reports of the TAI asynchronous file I/O library"};
  app.require_subcommand(1);
  register_commands(app);
  // Subcommand callbacks run inside parse(); a failing one throws CLI::RuntimeError(code),
  // which CLI11_PARSE turns into the exit status without printing anything more.
  CLI11_PARSE(app, argc, argv);
  return 0;
}
