// tai-augment: the image-augmentation workload of the TAI paper (chapter 3). See README.md.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <fmt/core.h>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <map>
#include <sstream>
#include <thread>

#include "cache_counters.hpp"
#include "image.hpp"
#include "input_dir.hpp"
#include "page_cache_warning.hpp"
#include "report.hpp"
#include "median.hpp"
#include "method.hpp"
#include "mpi_mode.hpp"
#include "record.hpp"
#include "run.hpp"
#include "sweep.hpp"

namespace {
using namespace augment;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string stem_for(const std::string& method, unsigned threads, unsigned repeat) {
  std::string m = method;
  std::replace(m.begin(), m.end(), ':', '_');
  return fmt::format("{}.t{}.r{}", m, threads, repeat);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// `verify PATH...`: each PATH a run manifest (.run) or a directory whose .run files are taken.
int verify_command(const std::vector<std::string>& paths, bool decode) {
  std::vector<std::string> manifests;
  for (const std::string& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      fmt::print(stderr, "tai-augment verify: {}: {}\n", p, std::strerror(errno));
      return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
      manifests.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    if (DIR* d = ::opendir(p.c_str())) {
      while (dirent* e = ::readdir(d))
        if (ends_with(e->d_name, ".run")) found.push_back(p + "/" + e->d_name);
      ::closedir(d);
    }
    std::sort(found.begin(), found.end());
    if (found.empty()) {
      fmt::print(stderr, "tai-augment verify: {} holds no run manifest (*.run)\n", p);
      return 2;
    }
    manifests.insert(manifests.end(), found.begin(), found.end());
  }
  return verify_runs(manifests, decode) ? 0 : 1;
}


// One run as report fields (docs/json_schema.md); figures of a failed or refused run are null.
Fields run_fields(const RunResult& r, unsigned repeat, const RunConfig& config) {
  const bool ok = r.ok() && r.refused.empty();
  const bool tai = r.method.rfind("tai-", 0) == 0;
  auto num = [&](double v) { return ok ? Value(v) : Value(); };
  Fields f = {{"method", r.method},
              {"engine", r.note.empty() ? Value(r.method) : Value(r.note)},
              {"repeat", repeat + 1},
              {"threads", r.threads},
              {"tai_workers", tai ? Value(config.method.tai_workers) : Value()},
              {"status", ok ? "ok" : !r.refused.empty() ? "refused" : "error"},
              {"error", ok ? Value() : Value(r.refused.empty() ? r.error : r.refused)},
              {"images", ok ? Value(r.images) : Value()},
              {"skipped", ok ? Value(r.skipped) : Value()},
              {"bytes_written", ok ? Value(r.bytes_issued) : Value()},
              {"bytes_output", ok ? Value(r.bytes) : Value()},
              {"writes", ok ? Value(r.writes) : Value()},
              {"syncs", ok ? Value(r.syncs) : Value()},
              {"wall_s", num(r.wall_s)},
              {"images_per_s", num(r.images / r.wall_s)},
              {"mib_per_s", num(r.bytes / 1048576.0 / r.wall_s)},
              {"compute_s", num(r.compute_s)},
              {"compute_utilisation", num(r.compute_s / (r.threads * r.wall_s))},
              {"io_s", num(r.io_s)},
              {"input_read_s", num(r.input_s)},
              {"input_held", ok ? Value(r.input_held) : Value()},
              {"input_streamed", ok ? Value(r.input_streamed) : Value()}};
  if (ok) {
    append_measurement_fields(f, r.measured);
  } else {
    for (const char* k : {"user_s", "sys_s", "voluntary_switches", "involuntary_switches", "minor_faults", "major_faults",
                          "device_write_bytes", "cancelled_write_bytes", "device_read_bytes", "wchar", "rchar",
                          "peak_rss_bytes", "peak_rss_over_run", "l1_dcm", "l2_dcm", "l3_dcm"})
      f.emplace_back(k, Value());
  }
  f.emplace_back("library_stats", r.library_stats.empty() ? Value() : Value(r.library_stats));
  return f;
}

std::string mb_or_na(const RunResult& r) {
  if (!r.measured.delta.io_available) return "n/a";
  return fmt::format("{:.1f}", r.measured.delta.write_bytes / 1e6);
}
}  // namespace

int main(int argc, char** argv) {
  // Line-buffered even into a pipe: a run that dies (a sanitizer report, a deadline) keeps every
  // line it printed before, which is what a log reader needs to see where it stopped.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // PAPI counts the threads created after this (PAPI_INHERIT): OpenMP's, TAI's, glibc AIO's.
  CacheCounters cache_counters;
  cache_counters.start();
  CLI::App app{"tai-augment: the TAI paper's image-augmentation workload (decode, transform, encode PNG, write "
               "every record through each I/O method)"};
  app.set_help_all_flag("--help-all");
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  std::string threads_text = std::to_string(hw);
  std::string method_list = "posix,cstdio,fstream,aio,uring,libaio,tai-triv,tai-def";
  std::size_t images = 400;
  std::string sizes_text = "256x256,320x240,512x384,640x480";
  std::string output = "augment-out";
  std::size_t batch = 1000;
  std::uint64_t seed = 1;
  int png_level = 6;
  bool grey = false;
  unsigned repeat = 1;
  bool verify = false;
  bool list = false;
  bool show_stats = false;
  unsigned tai_workers = 0;
  std::string load = "fixed";
  unsigned files = 1, amplify = 1, fsync_every = 0;
  bool overwrite = false, fdatasync = false, direct = false, direct_unpadded = false, read_input = false;
  std::string input_dir, json_path, csv_path;
  std::uint64_t input_budget = std::uint64_t(1) << 30;
  app.add_option("--threads", threads_text, "OpenMP compute threads; a list (1,2,4) runs each count")->capture_default_str();
  app.add_option("--method", method_list, "comma-separated I/O methods (--list-methods)")->capture_default_str();
  app.add_option("--synthetic,--images", images, "images in the built-in synthetic input set")->check(CLI::Range(std::size_t(1), std::size_t(100000000)))->capture_default_str();
  app.add_option("--input", input_dir, "a directory tree of .png/.jpg/.jpeg images (default: the synthetic set)");
  app.add_option("--sizes", sizes_text, "the synthetic images' sizes, WxH,... (image i has size i mod count)")->capture_default_str();
  app.add_option("--output", output, "directory for the output files (records, indexes, run manifests)")->capture_default_str();
  app.add_option("--files", files, "spread the records over this many files per run (image id mod K)")->check(CLI::Range(1u, 4096u))->capture_default_str();
  app.add_option("--amplify", amplify, "write every record this many times, at as many offsets (I/O amplification)")->check(CLI::Range(1u, 1000u))->capture_default_str();
  app.add_flag("--overwrite", overwrite, "follow every write at once by a second write of the same bytes; throughput counts them once");
  app.add_option("--fsync-every", fsync_every, "after each record, fsync with probability 1/F (seeded); 0: only the final fsync")->capture_default_str();
  app.add_flag("--fdatasync", fdatasync, "fdatasync instead of fsync (the per-record syncs and the final one)");
  app.add_flag("--direct", direct, "O_DIRECT outputs; records padded to 4096 bytes and written from aligned memory");
  app.add_flag("--direct-unpadded", direct_unpadded, "with --direct: TAI gets the records unpadded (its cache does the read-modify-write)");
  app.add_option("--batch", batch, "images per batch; asynchronous methods wait only at batch ends")->check(CLI::Range(std::size_t(1), std::size_t(100000000)))->capture_default_str();
  app.add_option("--seed", seed, "seed of the input set, the per-image transforms and the fsync draws")->capture_default_str();
  app.add_option("--png-level", png_level, "zlib level of the output PNGs (0-9)")->check(CLI::Range(0, 9))->capture_default_str();
  app.add_flag("--grey", grey, "convert every output image to grey-scale");
  app.add_flag("--read-input", read_input, "read each input image from disk inside the loop (default: in memory before the clock, up to --input-budget)");
  app.add_option("--input-budget", input_budget, "memory for the encoded input set (bytes; 512MiB, 2GB): the images beyond it are read from their files inside the loop, as --read-input reads every one")
      ->transform(CLI::AsSizeValue(true))
      ->default_str("1GiB");
  app.add_option("--repeat", repeat, "repeats; methods interleaved in a rotating order, medians reported")->check(CLI::Range(1u, 1000u))->capture_default_str();
  app.add_option("--load", load, "TAI workers: fixed = 2 beside the compute threads (the paper's fixed load), full = every hardware thread the compute threads leave idle (at least 1)")->check(CLI::IsMember({"fixed", "full"}))->capture_default_str();
  app.add_option("--tai-workers", tai_workers, "TAI controller workers (overrides --load)")->check(CLI::Range(1u, 256u));
  app.add_flag("--verify", verify, "read every output of this invocation back (as the verify subcommand)");
  app.add_option("--json", json_path, "write the configuration, the machine and every run's figures as JSON (docs/json_schema.md)");
  app.add_option("--csv", csv_path, "write every run's figures as CSV, one row per run");
  app.add_flag("--list-methods", list, "list the I/O methods and exit");
  app.add_flag("--stats", show_stats, "print each method's own counters (TAI's controller statistics) for the median run");
  // The MPI mode (README.md, "Scale-out over MPI").
  bool mpi = false, shared_file = false, images_per_rank = false;
  std::uint64_t chunk_bytes = 1 << 20;
  std::string handoff = "barrier", stage2 = "same", fault_rules;
  int fault_rank = -1;
  std::string mpi_why_not;
  const bool mpi_built = mpi_mode_built(&mpi_why_not);
  auto* mpi_group = "MPI mode (under mpirun)";
  app.add_flag("--mpi", mpi, mpi_built ? "run as one rank of an MPI job: each rank writes its shard (the ids in a fixed mixed order, dealt round-robin), the next stage checks another rank's records"
                                       : "run as an MPI rank (NOT in this build: " + mpi_why_not + ")")->group(mpi_group);
  app.add_flag("--shared-file", shared_file, "--mpi: every rank writes into one file per output, in chunks of --chunk bytes dealt round-robin (rank p owns chunks k*P+p)")->group(mpi_group);
  app.add_option("--chunk", chunk_bytes, "--mpi --shared-file: bytes per chunk; a multiple of 4096 with --direct")->capture_default_str()->group(mpi_group);
  app.add_option("--handoff", handoff, "--mpi: how a rank says its records are ready after their fsync: barrier (one per stage) or stream (a message per durable batch)")->check(CLI::IsMember({"barrier", "stream"}))->capture_default_str()->group(mpi_group);
  app.add_option("--stage2", stage2, "--mpi: who checks the records: same (rank r checks rank r-1 after producing) or separate (the upper half of the ranks only checks)")->check(CLI::IsMember({"same", "separate"}))->capture_default_str()->group(mpi_group);
  app.add_flag("--images-per-rank", images_per_rank, "--mpi: --images counts per producing rank (weak scaling); default: the whole set (strong scaling)")->group(mpi_group);
  bool allow_unsafe_shared_direct = false;
  app.add_flag("--unsafe-shared-direct", allow_unsafe_shared_direct, "--mpi --shared-file --direct: do not refuse chunks that are not a multiple of 4096 (ranks then clobber each other's bytes: only to show that the check catches it)")->group(mpi_group);
  app.add_option("--fault-rank", fault_rank, "--mpi: this rank's TAI outputs go through a fault engine with the --fault rules (failure tests)")->group(mpi_group);
  app.add_option("--fault", fault_rules, "fault engine rules for --fault-rank, e.g. write:nth=3:errno=EIO")->group(mpi_group);
  CLI::App* verify_cmd = app.add_subcommand("verify", "read run outputs back: CRCs, indexes, PNG decode, every image, the same records in every run of the same input");
  std::vector<std::string> verify_paths;
  bool verify_no_decode = false;
  verify_cmd->add_option("paths", verify_paths, "run manifests (*.run) or directories holding them")->required();
  verify_cmd->add_flag("--no-decode", verify_no_decode, "skip decoding the payloads as PNG");
  CLI::App* sweep_cmd = app.add_subcommand("sweep", "run the TAI paper's experiments (figures 3.1-3.8): methods interleaved, medians, gnuplot figures");
  sweep_cmd->fallthrough();  // the workload's options (--images, --seed, ...) may follow `sweep`
  SweepOptions sweep;
  std::string sweep_threads = "1,2,4,8", sweep_figures = "3.1,3.3,3.4,3.5,3.6", sweep_methods = "posix,cstdio,aio,tai-triv,tai-def";
  double sweep_mib = 1024;
  sweep_cmd->add_option("--out", sweep.out_dir, "directory for the tables, gnuplot scripts, figures and results.md")->capture_default_str();
  sweep_cmd->add_option("--work", sweep.work_dir, "directory the runs write to (default OUT/runs; files removed after each run)");
  sweep_cmd->add_option("--repeats", sweep.repeat, "repeats per point (medians)")->check(CLI::Range(1u, 100u))->capture_default_str();
  sweep_cmd->add_option("--mib-per-point", sweep_mib, "each run writes at least this many MiB (by amplification)")->check(CLI::Range(1.0, 1e7))->capture_default_str();
  sweep_cmd->add_option("--sweep-threads", sweep_threads, "compute thread counts of figures 3.1-3.5")->capture_default_str();
  sweep_cmd->add_option("--figures", sweep_figures, "figures to run (3.2, 3.7 and 3.8 come with 3.1)")->capture_default_str();
  sweep_cmd->add_option("--methods", sweep_methods, "methods to compare")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (verify_cmd->parsed()) return verify_command(verify_paths, !verify_no_decode);
  if (list) {
    for (const MethodInfo& m : methods())
      fmt::print("  {:<10} {}{}\n", m.name, m.description, m.unavailable.empty() ? "" : " (unavailable: " + m.unavailable + ")");
    return 0;
  }
  std::vector<unsigned> thread_counts;
  for (const std::string& t : split(threads_text, ',')) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(t.c_str(), &end, 10);
    if (*end != '\0' || v < 1 || v > 1024) {
      fmt::print(stderr, "tai-augment: --threads '{}' is not a list of counts 1..1024\n", threads_text);
      return 2;
    }
    thread_counts.push_back(unsigned(v));
  }
  if (thread_counts.empty()) {
    fmt::print(stderr, "tai-augment: --threads names no count\n");
    return 2;
  }
  if (direct_unpadded && !direct) {
    fmt::print(stderr, "tai-augment: --direct-unpadded needs --direct\n");
    return 2;
  }
  std::vector<Size> sizes;
  if (!parse_sizes(sizes_text, sizes)) {
    fmt::print(stderr, "tai-augment: --sizes '{}' is not a list of WxH (4..16384 each)\n", sizes_text);
    return 2;
  }
  const std::vector<std::string> specs = split(method_list, ',');
  if (specs.empty()) {
    fmt::print(stderr, "tai-augment: --method names no method\n");
    return 2;
  }
  for (const std::string& s : specs)
    if (std::count(specs.begin(), specs.end(), s) > 1) {
      fmt::print(stderr, "tai-augment: --method names '{}' twice\n", s);
      return 2;
    }
  for (const std::string& s : specs)
    if (!find_method(s, nullptr)) {
      fmt::print(stderr, "tai-augment: unknown method '{}' (--list-methods)\n", s);
      return 2;
    }
  if (::mkdir(output.c_str(), 0755) != 0 && errno != EEXIST) {
    fmt::print(stderr, "tai-augment: cannot create --output {}: {}\n", output, std::strerror(errno));
    return 2;
  }
  const bool mpi_options_used = shared_file || images_per_rank || allow_unsafe_shared_direct || fault_rank >= 0 || !fault_rules.empty() ||
                                app.count("--handoff") || app.count("--stage2") || app.count("--chunk");
  if (mpi_options_used && !mpi) {
    fmt::print(stderr, "tai-augment: --shared-file, --chunk, --handoff, --stage2, --images-per-rank and --fault* need --mpi\n");
    return 2;
  }
  if (mpi) {
    if (!mpi_built) {
      fmt::print(stderr, "tai-augment: --mpi: {}\n", mpi_why_not);
      return 2;
    }
    if (thread_counts.size() != 1 || repeat != 1 || verify || !json_path.empty() || !csv_path.empty() || read_input) {
      fmt::print(stderr, "tai-augment: --mpi takes one --threads count and no --repeat, --verify, --json, --csv or "
                         "--read-input (stage 2 is the verification; repeat with a loop of mpirun, as the scaling script does)\n");
      return 2;
    }
    if ((fault_rank >= 0) != !fault_rules.empty()) {
      fmt::print(stderr, "tai-augment: --fault-rank and --fault go together\n");
      return 2;
    }
    MpiSettings ms;
    ms.methods = specs;
    ms.threads = thread_counts.front();
    ms.tai_workers = tai_workers ? tai_workers : load == "fixed" ? 2u : std::max(1u, hw > ms.threads ? hw - ms.threads : 1u);
    ms.images = images;
    ms.images_per_rank = images_per_rank;
    ms.sizes = sizes;
    ms.sizes_text = sizes_text;
    ms.input_dir = input_dir;
    ms.input_budget = input_budget;
    ms.output = output;
    ms.shared_file = shared_file;
    ms.chunk_bytes = chunk_bytes;
    ms.handoff = handoff;
    ms.stage2 = stage2;
    ms.fault_rank = fault_rank;
    ms.fault_rules = fault_rules;
    ms.allow_unsafe_shared_direct = allow_unsafe_shared_direct;
    RunConfig& c = ms.config;
    c.batch = batch;
    c.seed = seed;
    c.png_level = png_level;
    c.transform.grey = grey;
    c.amplify = amplify;
    c.overwrite = overwrite;
    c.fsync_every = fsync_every;
    c.files = files;
    c.content = input_dir.empty() ? fmt::format("synthetic seed={} sizes={} png-level={} grey={}", seed, sizes_text, png_level, grey ? 1 : 0)
                                  : fmt::format("input={} png-level={} grey={}", input_dir, png_level, grey ? 1 : 0);
    c.method.direct = direct;
    c.method.direct_unpadded = direct_unpadded;
    c.method.fdatasync = fdatasync;
    return run_mpi_mode(argc, argv, ms);
  }

  omp_set_num_threads(int(*std::max_element(thread_counts.begin(), thread_counts.end())));
  const auto g0 = std::chrono::steady_clock::now();
  std::vector<EncodedImage> input;
  std::uint64_t input_bytes = 0;
  std::string content;
  // How the input set is held, for the input line: e.g. "in memory" or "1200 in memory (..), 294
  // read from disk inside the loop (beyond --input-budget 1.1 GB)".
  auto holding = [&](std::size_t held, std::uint64_t held_bytes) {
    if (read_input) return std::string("read from disk inside the loop");
    if (held == input.size()) return std::string("in memory");
    return fmt::format("{} in memory ({:.1f} MB), {} read from disk inside the loop (beyond --input-budget {})", held,
                       held_bytes / 1e6, input.size() - held,
                       input_budget >= 1000000 ? fmt::format("{:.1f} MB", input_budget / 1e6) : fmt::format("{} bytes", input_budget));
  };
  if (!input_dir.empty()) {
    InputSet set;
    std::string err;
    if (!load_input_dir(input_dir, set, &err, read_input ? 0 : input_budget)) {
      fmt::print(stderr, "tai-augment: {}\n", err);
      return 2;
    }
    for (const std::string& line : set.skipped) fmt::print("input: {}\n", line);
    input = std::move(set.images);
    const std::string held = holding(set.held, set.held_bytes);
    input_bytes = set.bytes;
    char resolved[PATH_MAX];
    content = fmt::format("input={} png-level={} grey={}", ::realpath(input_dir.c_str(), resolved) ? resolved : input_dir,
                          png_level, grey ? 1 : 0);
    fmt::print("input: {} images from {} ({} skipped, {} other files ignored), {:.1f} MB, checked in {:.2f} s, {}\n",
               input.size(), input_dir, set.skipped.size(), set.ignored, input_bytes / 1e6,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count(), held);
  } else {
    input = synthetic_set(seed, images, sizes);
    if (input.empty()) {
      fmt::print(stderr, "tai-augment: encoding the synthetic input set failed\n");
      return 1;
    }
    for (const EncodedImage& e : input) input_bytes += e.data.size();
    // Beyond the budget the synthetic images are written as files, as --read-input writes them
    // all, and read from there inside the loop.
    std::size_t held = 0;
    std::uint64_t held_bytes = 0;
    while (!read_input && held < input.size() && input[held].data.size() <= input_budget - held_bytes)
      held_bytes += input[held++].data.size();
    content = fmt::format("synthetic seed={} images={} sizes={} png-level={} grey={}", seed, images, sizes_text,
                          png_level, grey ? 1 : 0);
    fmt::print("input: {} synthetic images (PNG and JPEG, sizes {}), {:.1f} MB encoded, made in {:.2f} s, {}\n",
               input.size(), sizes_text, input_bytes / 1e6,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count(), holding(held, held_bytes));
    if (held < input.size()) {
      std::vector<EncodedImage> spill(std::make_move_iterator(input.begin() + long(held)), std::make_move_iterator(input.end()));
      std::string err;
      if (!write_input_files(spill, output + "/input", &err)) {
        fmt::print(stderr, "tai-augment: cannot write the input set under {}/input: {}\n", output, err);
        return 1;
      }
      for (std::size_t i = 0; i < spill.size(); ++i) {
        input[held + i].path = std::move(spill[i].path);
        Bytes().swap(input[held + i].data);
      }
    }
  }
  if (!cache_counters.available())
    fmt::print("cache misses: n/a: {}\n", cache_counters.reason());
  fmt::print("run: threads {}, batch {}, PNG level {}, seed {}, files {}, amplify {}, overwrite {}, {} every {}, "
             "{}, {} repeat(s), output in {}/\n",
             threads_text, batch, png_level, seed, files, amplify, overwrite ? "on" : "off",
             fdatasync ? "fdatasync" : "fsync", fsync_every ? std::to_string(fsync_every) : std::string("never (final only)"),
             direct ? (direct_unpadded ? "O_DIRECT (TAI unpadded)" : "O_DIRECT") : "buffered", repeat, output);

  RunConfig config;
  config.threads = thread_counts.front();
  config.method.tai_workers = 2;
  config.batch = batch;
  config.seed = seed;
  config.png_level = png_level;
  config.transform.grey = grey;
  config.amplify = amplify;
  config.overwrite = overwrite;
  config.fsync_every = fsync_every;
  config.files = files;
  config.read_input = read_input;
  config.content = content;
  config.cache_counters = &cache_counters;
  config.method.direct = direct;
  config.method.direct_unpadded = direct_unpadded;
  config.method.fdatasync = fdatasync;

  if (sweep_cmd->parsed()) {
    sweep.threads.clear();
    for (const std::string& t : split(sweep_threads, ',')) {
      char* end = nullptr;
      const unsigned long v = std::strtoul(t.c_str(), &end, 10);
      if (*end != '\0' || v < 1 || v > 1024) {
        fmt::print(stderr, "tai-augment sweep: --sweep-threads '{}' is not a list of counts 1..1024\n", sweep_threads);
        return 2;
      }
      sweep.threads.push_back(unsigned(v));
    }
    sweep.figures = split(sweep_figures, ',');
    sweep.methods = split(sweep_methods, ',');
    sweep.bytes_per_point = std::uint64_t(sweep_mib * 1048576.0);
    for (int i = 0; i < argc; ++i) sweep.command += (i ? " " : "") + std::string(argv[i]);
    return run_sweep(input, config, sweep);
  }

  using Key = std::pair<unsigned, std::string>;  // (threads, method)
  std::map<Key, std::vector<RunResult>> results;
  std::map<std::string, std::string> skipped_methods;
  std::vector<std::string> manifests;
  std::vector<Fields> report_runs;
  bool warned_page_cache = false;
  bool failed = false;
  // The inputs the loop reads from their files: dropped from the page cache before every run, so
  // that each method reads them from the device alike, not from what the previous run cached.
  std::vector<EncodedImage> streamed;
  for (const EncodedImage& e : input)
    if (!e.path.empty() && (read_input || e.data.empty())) {
      EncodedImage s;
      s.id = e.id;
      s.path = e.path;
      streamed.push_back(std::move(s));
    }
  for (unsigned r = 0; r < repeat; ++r) {
    for (unsigned threads : thread_counts) {
      config.threads = threads;
      config.method.compute_threads = threads;
      config.method.tai_workers =
          tai_workers ? tai_workers : load == "fixed" ? 2u : std::max(1u, hw > threads ? hw - threads : 1u);
      for (std::size_t k = 0; k < specs.size(); ++k) {
        const std::string& spec = specs[(k + r) % specs.size()];  // rotate the order every repeat
        if (skipped_methods.count(spec)) continue;
        if (const MethodInfo* info = find_method(spec, nullptr); !info->unavailable.empty()) {
          skipped_methods[spec] = info->unavailable;
          fmt::print("{}: skipped: {}\n", spec, info->unavailable);
          continue;
        }
        if (!streamed.empty()) {
          std::string err;
          if (!evict_from_page_cache(streamed, &err)) fmt::print("input: could not drop the input from the page cache: {}\n", err);
        }
        config.progress_label = fmt::format("{} t{} r{}", spec, threads, r + 1);
        RunResult res = run_method(input, spec, output + "/" + stem_for(spec, threads, r), config);
        if (!res.refused.empty()) {
          skipped_methods[spec] = res.refused;
          fmt::print("{}: skipped: {}\n", spec, res.refused);
          report_runs.push_back(run_fields(res, r, config));
          continue;
        }
        if (!res.ok()) {
          fmt::print("{} ({} threads): FAILED: {}\n", spec, threads, res.error);
          report_runs.push_back(run_fields(res, r, config));
          failed = true;
          continue;
        }
        if (res.skipped) fmt::print("{}: {} input images did not decode and were skipped\n", spec, res.skipped);
        if (!warned_page_cache) {
          const std::string w = page_cache_warning(res.bytes, fsync_every > 0, direct);
          if (!w.empty()) fmt::print("{}\n", w);
          warned_page_cache = true;
        }
        report_runs.push_back(run_fields(res, r, config));
        manifests.push_back(res.manifest);
        results[{threads, spec}].push_back(std::move(res));
      }
    }
  }

  fmt::print("\n{:>3} {:<16} {:>8} {:>7} {:>7} {:>7} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>11} {:>8}  {}\n",
             "thr", "method", "images/s", "MB/s", "seconds", "compute", "in I/O", "syncs", "user s", "sys s", "vol. cs",
             "inv. cs", "min. flt", "dev. MB", "RSS MB", "L1/2/3", "mem/stream", "vs posix", "note");
  for (unsigned threads : thread_counts) {
    auto posix = results.find({threads, "posix"});
    double posix_wall = 0;
    if (posix != results.end()) {
      std::vector<double> w;
      for (const RunResult& x : posix->second) w.push_back(x.wall_s);
      posix_wall = median(w);
    }
    for (const std::string& spec : specs) {
      auto it = results.find({threads, spec});
      if (it == results.end()) continue;
      // The run with the median wall time gives the row (medians of every figure would mix runs).
      std::vector<RunResult> runs = it->second;
      std::sort(runs.begin(), runs.end(), [](const RunResult& a, const RunResult& b) { return a.wall_s < b.wall_s; });
      std::vector<double> walls;
      for (const RunResult& x : runs) walls.push_back(x.wall_s);
      const double wall = median(walls);
      const RunResult& m = runs[(runs.size() - 1) / 2];
      const std::string ratio = posix_wall > 0 ? fmt::format("{:.2f}x", posix_wall / wall) : "-";
      const auto& cm = m.measured.cache_misses.misses;
      const std::string misses = m.measured.cache_misses.any()
                                     ? fmt::format("{:.0f}/{:.0f}/{:.0f}M", cm[0] ? *cm[0] / 1e6 : -1.0,
                                                   cm[1] ? *cm[1] / 1e6 : -1.0, cm[2] ? *cm[2] / 1e6 : -1.0)
                                     : "n/a";
      fmt::print("{:>3} {:<16} {:>8.1f} {:>7.1f} {:>7.2f} {:>6.0f}% {:>5.0f}% {:>6} {:>6.2f} {:>6.2f} {:>7} {:>7} {:>7} {:>7} "
                 "{:>7.0f} {:>6} {:>11} {:>8}  {}\n",
                 threads, spec, m.images / wall, m.bytes / 1e6 / wall, wall, 100 * m.compute_s / (threads * m.wall_s),
                 100 * m.io_s / (threads * m.wall_s), m.syncs, m.user_s, m.sys_s, m.voluntary_switches,
                 m.involuntary_switches, m.minor_faults, mb_or_na(m), m.measured.peak_rss.bytes / 1e6, misses,
                 fmt::format("{}/{}", m.input_held, m.input_streamed), ratio, m.note);
      if (show_stats && !m.library_stats.empty()) fmt::print("{:>3} {:<16} {}\n", "", "", m.library_stats);
    }
  }
  fmt::print("(the run with the median wall time of {} repeat(s) per row; MB/s counts every record once (headers and "
             "padding included, overwrites not); compute = decode+transform+encode time / (threads x wall); in I/O = time "
             "the compute threads spent in the method's calls / (threads x wall); syncs = fsyncs asked by the seeded "
             "draw, the final one per file not counted; user s, sys s, vol./inv. cs, min. flt = the whole process, "
             "getrusage; dev. MB = /proc/self/io write_bytes, bytes sent toward the device; RSS MB = peak resident set "
             "over the run; L1/2/3 = PAPI data-cache misses; mem/stream = input images held in memory before the clock / read "
             "from their files inside the loop, beyond --input-budget or with --read-input)\n",
             repeat);

  if (verify && !manifests.empty()) {
    fmt::print("\n");
    if (!verify_runs(manifests, true)) failed = true;
  }
  if (!json_path.empty() || !csv_path.empty()) {
    RunSet set;
    set.config = {{"threads", threads_text}, {"method", method_list}, {"input", input_dir.empty() ? Value() : Value(input_dir)},
                  {"synthetic", input_dir.empty() ? Value(images) : Value()}, {"read_input", read_input},
                  {"input_budget", input_budget},
                  {"sizes", sizes_text}, {"seed", seed}, {"batch", batch}, {"repeat", repeat}, {"png_level", png_level},
                  {"grey", grey}, {"output", output}, {"files", files}, {"amplify", amplify}, {"overwrite", overwrite},
                  {"fsync_every", fsync_every}, {"fdatasync", fdatasync}, {"direct", direct},
                  {"direct_unpadded", direct_unpadded}, {"load", load},
                  {"tai_workers", tai_workers ? Value(tai_workers) : Value()}, {"verify", verify},
                  {"json", json_path.empty() ? Value() : Value(json_path)},
                  {"csv", csv_path.empty() ? Value() : Value(csv_path)}};
    set.machine = describe_machine(output);
    ProcessCounters probe = read_process_counters();
    PeakRssMeter rss_probe;
    set.machine.emplace_back("cache_counters", cache_counters.available() && cache_counters.reason().empty() ? "ok" : cache_counters.reason());
    set.machine.emplace_back("io_accounting", probe.io_available ? "ok" : probe.io_unavailable_reason);
    set.machine.emplace_back("peak_rss_reset", rss_probe.start() ? "ok" : rss_probe.peak().note);
    set.runs = report_runs;
    std::string err;
    if (!json_path.empty() && !write_text_file(json_path, to_json(set), &err)) {
      fmt::print(stderr, "tai-augment: --json {}: {}\n", json_path, err);
      failed = true;
    }
    if (!csv_path.empty() && !write_text_file(csv_path, to_csv(report_runs), &err)) {
      fmt::print(stderr, "tai-augment: --csv {}: {}\n", csv_path, err);
      failed = true;
    }
  }
  return failed ? 1 : 0;
}
