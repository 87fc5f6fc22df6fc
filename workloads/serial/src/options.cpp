#include "options.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace serial {

namespace {
struct ModeName {
  Mode mode;
  const char* name;
};
constexpr ModeName kModeNames[] = {{Mode::posix, "posix"},       {Mode::drop_in, "drop-in"},
                                   {Mode::preload, "preload"},   {Mode::async, "async"},
                                   {Mode::compute_only, "compute-only"}, {Mode::io_only, "io-only"}};

std::string mode_list() {
  std::string s;
  for (const ModeName& m : kModeNames) s += (s.empty() ? "" : ", ") + std::string(m.name);
  return s;
}
}  // namespace

const char* mode_name(Mode mode) {
  for (const ModeName& m : kModeNames)
    if (m.mode == mode) return m.name;
  return "?";
}

std::optional<Mode> parse_mode(const std::string& name) {
  for (const ModeName& m : kModeNames)
    if (name == m.name) return m.mode;
  return std::nullopt;
}

const std::vector<Mode>& all_modes() {
  static const std::vector<Mode> modes = {Mode::posix, Mode::drop_in, Mode::preload,
                                          Mode::async, Mode::compute_only, Mode::io_only};
  return modes;
}

bool parse_unsigned_list(const std::string& text, std::vector<unsigned>& out) {
  std::vector<unsigned> values;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 7) return false;
    const unsigned long v = std::strtoul(item.c_str(), nullptr, 10);
    if (v > 1000000) return false;
    values.push_back(unsigned(v));
  }
  if (values.empty() || text.back() == ',') return false;
  out = std::move(values);
  return true;
}

std::vector<Mode> interleaved_order(const std::vector<Mode>& modes, unsigned repeat) {
  std::vector<Mode> order;
  for (std::size_t k = 0; k < modes.size(); ++k) order.push_back(modes[(k + repeat) % modes.size()]);
  return order;
}

std::optional<int> parse_command_line(int argc, const char* const* argv, CommandLine& out) {
  CLI::App app{"tai-serial: the augmentation pipeline as a naive single-threaded program (one loop: make a record, "
               "pwrite it, fsync every F images), run with libc, TAI's drop-in header, the preload library and TAI's "
               "File API, against the compute-only and io-only bounds"};
  app.set_help_all_flag("--help-all");
  RunOptions& r = out.run;
  std::string mode = mode_name(r.mode);
  std::string mode_help = "what to run: " + mode_list();
  app.add_option("--mode", mode, mode_help)->capture_default_str();
  // The workload's options: shared by a single run and the bench (fallthrough), so they may come
  // before or after `bench`.
  app.add_option("--images", r.images, "images in the synthetic input set")
      ->check(CLI::Range(std::size_t(1), std::size_t(10000000)))->capture_default_str();
  app.add_option("--sizes", r.sizes, "the images' sizes, WxH,... (image i has size i mod count)")->capture_default_str();
  app.add_option("--output", r.output, "directory for the output file, its index and its run manifest")->capture_default_str();
  app.add_option("--amplify", r.amplify, "write every record this many times (0: enough that a run writes --min-mib)")
      ->check(CLI::Range(0u, 100000u))->capture_default_str();
  app.add_option("--min-mib", r.min_mib, "with --amplify 0: each run writes at least this many MiB")
      ->check(CLI::Range(0.001, 1e7))->capture_default_str();
  app.add_option("--seed", r.seed, "seed of the input set and the per-image transforms")->capture_default_str();
  app.add_option("--png-level", r.png_level, "zlib level of the output PNGs (0-9)")->check(CLI::Range(0, 9))->capture_default_str();
  app.add_flag("--direct", r.direct, "O_DIRECT output, records padded to 4096 bytes and written from aligned memory");
  app.add_flag("--verify", r.verify, "read every output back after the run: CRCs, index, PNG decode, every image");
  app.add_option("--tai-workers", r.tai_workers, "async: TAI controller workers (drop-in/preload read TAI_WORKERS)")
      ->check(CLI::Range(1u, 256u))->capture_default_str();
  app.add_option("--engine", r.engine, "async: TAI engine (drop-in/preload read TAI_ENGINE)")->capture_default_str();
  app.add_option("--batch", r.batch, "async: images between waits for every receipt")
      ->check(CLI::Range(std::size_t(1), std::size_t(100000000)))->capture_default_str();
  app.add_option("--preload-lib", r.preload_lib, "preload: the preload library (default: the one this build made)");
  app.add_option("--result-file", r.result_file, "write one machine-readable result line here (the bench's child runs)")
      ->group("");
  app.add_option("--run-name", r.run_name, "the output file's stem (default: the mode)")->group("");
  std::string fsync_text = std::to_string(r.fsync_every);
  app.add_option("--fsync-every", fsync_text,
                 "fsync after every F images (0: only the final fsync); the bench takes a list, e.g. 1,30,300")
      ->capture_default_str();

  CLI::App* bench = app.add_subcommand("bench", "run every mode interleaved, repeated, and print the medians as a table");
  bench->fallthrough();
  BenchOptions& b = out.bench_options;
  std::string modes_text;
  for (Mode m : b.modes) modes_text += (modes_text.empty() ? "" : ",") + std::string(mode_name(m));
  bench->add_option("--repeats", b.repeats, "runs per mode and fsync frequency (medians; at least 3 for a figure)")
      ->check(CLI::Range(1u, 1000u))->capture_default_str();
  bench->add_option("--modes", modes_text, "the modes to compare")->capture_default_str();
  bench->add_option("--csv", b.csv, "write the table as CSV too");
  bench->add_flag("--keep", b.keep, "keep every run's output (default: removed once checked)");
  bool fsync_given = false;
  try {
    app.parse(argc, argv);
    fsync_given = app.get_option("--fsync-every")->count() > 0;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  out.bench = bench->parsed();
  const std::optional<Mode> m = parse_mode(mode);
  if (!m) return app.exit(CLI::ValidationError("--mode", "'" + mode + "' is not one of " + mode_list()));
  r.mode = *m;
  std::vector<unsigned> fsyncs;
  if (!parse_unsigned_list(fsync_text, fsyncs))
    return app.exit(CLI::ValidationError("--fsync-every", "'" + fsync_text + "' is not a count or a list of counts"));
  if (out.bench) {
    if (fsync_given) b.fsync_list = fsyncs;
    r.fsync_every = b.fsync_list.front();
    std::vector<Mode> modes;
    std::stringstream ss(modes_text);
    std::string item;
    while (std::getline(ss, item, ',')) {
      const std::optional<Mode> bm = parse_mode(item);
      if (!bm) return app.exit(CLI::ValidationError("--modes", "'" + item + "' is not one of " + mode_list()));
      if (std::find(modes.begin(), modes.end(), *bm) == modes.end()) modes.push_back(*bm);
    }
    if (modes.empty()) return app.exit(CLI::ValidationError("--modes", "names no mode"));
    b.modes = modes;
  } else {
    if (fsyncs.size() != 1)
      return app.exit(CLI::ValidationError("--fsync-every", "a single run takes one count; lists are for `bench`"));
    r.fsync_every = fsyncs.front();
  }
  return std::nullopt;
}

}  // namespace serial
