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
#include <optional>
#include <sstream>
#include <thread>

#include "cache_counters.hpp"
#include "image.hpp"
#include "input_dir.hpp"
#include "page_cache_warning.hpp"
#include "report.hpp"
#include "median.hpp"
#include "overlap_ceiling.hpp"
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

// Every option of the command line as CLI11 fills it in, then (check_options) the lists parsed.
struct Options {
  unsigned hw = 1;  // hardware threads
  std::string threads_text;
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
  // The MPI mode (README.md, "Scale-out over MPI").
  bool mpi = false, shared_file = false, images_per_rank = false, allow_unsafe_shared_direct = false;
  std::uint64_t chunk_bytes = 1 << 20;
  std::string handoff = "barrier", stage2 = "same", fault_rules;
  int fault_rank = -1;
  std::string mpi_why_not;
  bool mpi_built = false;
  // The verify subcommand.
  CLI::App* verify_cmd = nullptr;
  std::vector<std::string> verify_paths;
  bool verify_no_decode = false;
  // The sweep subcommand.
  CLI::App* sweep_cmd = nullptr;
  SweepOptions sweep;
  std::string sweep_threads = "1,2,4,8", sweep_figures = "3.1,3.3,3.4,3.5,3.6", sweep_methods = "posix,cstdio,aio,tai-triv,tai-def";
  double sweep_mib = 1024;
  // Parsed by check_options.
  std::vector<unsigned> thread_counts;
  std::vector<Size> sizes;
  std::vector<std::string> specs;
};

void add_options(CLI::App& app, Options& o) {
  o.hw = std::max(1u, std::thread::hardware_concurrency());
  o.threads_text = std::to_string(o.hw);
  app.add_option("--threads", o.threads_text, "OpenMP compute threads; a list (1,2,4) runs each count")->capture_default_str();
  app.add_option("--method", o.method_list, "comma-separated I/O methods (--list-methods)")->capture_default_str();
  app.add_option("--synthetic,--images", o.images, "images in the built-in synthetic input set")->check(CLI::Range(std::size_t(1), std::size_t(100000000)))->capture_default_str();
  app.add_option("--input", o.input_dir, "a directory tree of .png/.jpg/.jpeg images (default: the synthetic set)");
  app.add_option("--sizes", o.sizes_text, "the synthetic images' sizes, WxH,... (image i has size i mod count)")->capture_default_str();
  app.add_option("--output", o.output, "directory for the output files (records, indexes, run manifests)")->capture_default_str();
  app.add_option("--files", o.files, "spread the records over this many files per run (image id mod K)")->check(CLI::Range(1u, 4096u))->capture_default_str();
  app.add_option("--amplify", o.amplify, "write every record this many times, at as many offsets (I/O amplification)")->check(CLI::Range(1u, 1000u))->capture_default_str();
  app.add_flag("--overwrite", o.overwrite, "follow every write at once by a second write of the same bytes; throughput counts them once");
  app.add_option("--fsync-every", o.fsync_every, "after each record, fsync with probability 1/F (seeded); 0: only the final fsync")->capture_default_str();
  app.add_flag("--fdatasync", o.fdatasync, "fdatasync instead of fsync (the per-record syncs and the final one)");
  app.add_flag("--direct", o.direct, "O_DIRECT outputs; records padded to 4096 bytes and written from aligned memory");
  app.add_flag("--direct-unpadded", o.direct_unpadded, "with --direct: TAI gets the records unpadded (its cache does the read-modify-write)");
  app.add_option("--batch", o.batch, "images per batch; asynchronous methods wait only at batch ends")->check(CLI::Range(std::size_t(1), std::size_t(100000000)))->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the input set, the per-image transforms and the fsync draws")->capture_default_str();
  app.add_option("--png-level", o.png_level, "zlib level of the output PNGs (0-9)")->check(CLI::Range(0, 9))->capture_default_str();
  app.add_flag("--grey", o.grey, "convert every output image to grey-scale");
  app.add_flag("--read-input", o.read_input, "read each input image from disk inside the loop (default: in memory before the clock, up to --input-budget)");
  app.add_option("--input-budget", o.input_budget, "memory for the encoded input set (bytes; 512MiB, 2GB): the images beyond it are read from their files inside the loop, as --read-input reads every one")
      ->transform(CLI::AsSizeValue(true))
      ->default_str("1GiB");
  app.add_option("--repeat", o.repeat, "repeats; methods interleaved in a rotating order, medians reported")->check(CLI::Range(1u, 1000u))->capture_default_str();
  app.add_option("--load", o.load, "TAI workers: fixed = 2 beside the compute threads (the paper's fixed load), full = every hardware thread the compute threads leave idle (at least 1)")->check(CLI::IsMember({"fixed", "full"}))->capture_default_str();
  app.add_option("--tai-workers", o.tai_workers, "TAI controller workers (overrides --load)")->check(CLI::Range(1u, 256u));
  app.add_flag("--verify", o.verify, "read every output of this invocation back (as the verify subcommand)");
  app.add_option("--json", o.json_path, "write the configuration, the machine and every run's figures as JSON (docs/json_schema.md)");
  app.add_option("--csv", o.csv_path, "write every run's figures as CSV, one row per run");
  app.add_flag("--list-methods", o.list, "list the I/O methods and exit");
  app.add_flag("--stats", o.show_stats, "print each method's own counters (TAI's controller statistics) for the median run");

  o.mpi_built = mpi_mode_built(&o.mpi_why_not);
  auto* mpi_group = "MPI mode (under mpirun)";
  app.add_flag("--mpi", o.mpi, o.mpi_built ? "run as one rank of an MPI job: each rank writes its shard (the ids in a fixed mixed order, dealt round-robin), the next stage checks another rank's records"
                                           : "run as an MPI rank (NOT in this build: " + o.mpi_why_not + ")")->group(mpi_group);
  app.add_flag("--shared-file", o.shared_file, "--mpi: every rank writes into one file per output, in chunks of --chunk bytes dealt round-robin (rank p owns chunks k*P+p)")->group(mpi_group);
  app.add_option("--chunk", o.chunk_bytes, "--mpi --shared-file: bytes per chunk; a multiple of 4096 with --direct")->capture_default_str()->group(mpi_group);
  app.add_option("--handoff", o.handoff, "--mpi: how a rank says its records are ready after their fsync: barrier (one per stage) or stream (a message per durable batch)")->check(CLI::IsMember({"barrier", "stream"}))->capture_default_str()->group(mpi_group);
  app.add_option("--stage2", o.stage2, "--mpi: who checks the records: same (rank r checks rank r-1 after producing) or separate (the upper half of the ranks only checks)")->check(CLI::IsMember({"same", "separate"}))->capture_default_str()->group(mpi_group);
  app.add_flag("--images-per-rank", o.images_per_rank, "--mpi: --images counts per producing rank (weak scaling); default: the whole set (strong scaling)")->group(mpi_group);
  app.add_flag("--unsafe-shared-direct", o.allow_unsafe_shared_direct, "--mpi --shared-file --direct: do not refuse chunks that are not a multiple of 4096 (ranks then clobber each other's bytes: only to show that the check catches it)")->group(mpi_group);
  app.add_option("--fault-rank", o.fault_rank, "--mpi: this rank's TAI outputs go through a fault engine with the --fault rules (failure tests)")->group(mpi_group);
  app.add_option("--fault", o.fault_rules, "fault engine rules for --fault-rank, e.g. write:nth=3:errno=EIO")->group(mpi_group);

  o.verify_cmd = app.add_subcommand("verify", "read run outputs back: CRCs, indexes, PNG decode, every image, the same records in every run of the same input");
  o.verify_cmd->add_option("paths", o.verify_paths, "run manifests (*.run) or directories holding them")->required();
  o.verify_cmd->add_flag("--no-decode", o.verify_no_decode, "skip decoding the payloads as PNG");

  o.sweep_cmd = app.add_subcommand("sweep", "run the TAI paper's experiments (figures 3.1-3.8): methods interleaved, medians, gnuplot figures");
  o.sweep_cmd->fallthrough();  // the workload's options (--images, --seed, ...) may follow `sweep`
  o.sweep_cmd->add_option("--out", o.sweep.out_dir, "directory for the tables, gnuplot scripts, figures and results.md")->capture_default_str();
  o.sweep_cmd->add_option("--work", o.sweep.work_dir, "directory the runs write to (default OUT/runs; files removed after each run)");
  o.sweep_cmd->add_option("--repeats", o.sweep.repeat, "repeats per point (medians)")->check(CLI::Range(1u, 100u))->capture_default_str();
  o.sweep_cmd->add_option("--mib-per-point", o.sweep_mib, "each run writes at least this many MiB (by amplification)")->check(CLI::Range(1.0, 1e7))->capture_default_str();
  o.sweep_cmd->add_option("--sweep-threads", o.sweep_threads, "compute thread counts of figures 3.1-3.5")->capture_default_str();
  o.sweep_cmd->add_option("--figures", o.sweep_figures, "figures to run (3.2, 3.7 and 3.8 come with 3.1)")->capture_default_str();
  o.sweep_cmd->add_option("--methods", o.sweep_methods, "methods to compare")->capture_default_str();
}

// "1,2,4" -> {1, 2, 4}; false for anything else than counts 1..1024 (an empty list included).
bool parse_thread_counts(const std::string& text, std::vector<unsigned>& out) {
  for (const std::string& t : split(text, ',')) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(t.c_str(), &end, 10);
    if (*end != '\0' || v < 1 || v > 1024) return false;
    out.push_back(unsigned(v));
  }
  return true;
}

// Parses the lists and refuses what does not go together; makes --output. Returns the exit code
// when the program is to stop (a message printed), nothing when it goes on.
std::optional<int> check_options(const CLI::App& app, Options& o) {
  if (!parse_thread_counts(o.threads_text, o.thread_counts)) {
    fmt::print(stderr, "tai-augment: --threads '{}' is not a list of counts 1..1024\n", o.threads_text);
    return 2;
  }
  if (o.thread_counts.empty()) {
    fmt::print(stderr, "tai-augment: --threads names no count\n");
    return 2;
  }
  if (o.direct_unpadded && !o.direct) {
    fmt::print(stderr, "tai-augment: --direct-unpadded needs --direct\n");
    return 2;
  }
  if (!parse_sizes(o.sizes_text, o.sizes)) {
    fmt::print(stderr, "tai-augment: --sizes '{}' is not a list of WxH (4..16384 each)\n", o.sizes_text);
    return 2;
  }
  o.specs = split(o.method_list, ',');
  if (o.specs.empty()) {
    fmt::print(stderr, "tai-augment: --method names no method\n");
    return 2;
  }
  for (const std::string& s : o.specs)
    if (std::count(o.specs.begin(), o.specs.end(), s) > 1) {
      fmt::print(stderr, "tai-augment: --method names '{}' twice\n", s);
      return 2;
    }
  for (const std::string& s : o.specs)
    if (!find_method(s, nullptr)) {
      fmt::print(stderr, "tai-augment: unknown method '{}' (--list-methods)\n", s);
      return 2;
    }
  if (::mkdir(o.output.c_str(), 0755) != 0 && errno != EEXIST) {
    fmt::print(stderr, "tai-augment: cannot create --output {}: {}\n", o.output, std::strerror(errno));
    return 2;
  }
  const bool mpi_options_used = o.shared_file || o.images_per_rank || o.allow_unsafe_shared_direct || o.fault_rank >= 0 ||
                                !o.fault_rules.empty() || app.count("--handoff") || app.count("--stage2") || app.count("--chunk");
  if (mpi_options_used && !o.mpi) {
    fmt::print(stderr, "tai-augment: --shared-file, --chunk, --handoff, --stage2, --images-per-rank and --fault* need --mpi\n");
    return 2;
  }
  return std::nullopt;
}

// TAI's controller workers beside `threads` compute threads: --tai-workers, else --load.
unsigned tai_workers_for(const Options& o, unsigned threads) {
  return o.tai_workers ? o.tai_workers : o.load == "fixed" ? 2u : std::max(1u, o.hw > threads ? o.hw - threads : 1u);
}

// What every run writes and how, the same in the MPI mode and here.
void set_workload(const Options& o, const std::string& content, RunConfig& c) {
  c.batch = o.batch;
  c.seed = o.seed;
  c.png_level = o.png_level;
  c.transform.grey = o.grey;
  c.amplify = o.amplify;
  c.overwrite = o.overwrite;
  c.fsync_every = o.fsync_every;
  c.files = o.files;
  c.content = content;
  c.method.direct = o.direct;
  c.method.direct_unpadded = o.direct_unpadded;
  c.method.fdatasync = o.fdatasync;
}

// --mpi: this process is one rank of the job.
int mpi_command(int argc, char** argv, const Options& o) {
  if (!o.mpi_built) {
    fmt::print(stderr, "tai-augment: --mpi: {}\n", o.mpi_why_not);
    return 2;
  }
  if (o.thread_counts.size() != 1 || o.repeat != 1 || o.verify || !o.json_path.empty() || !o.csv_path.empty() || o.read_input) {
    fmt::print(stderr, "tai-augment: --mpi takes one --threads count and no --repeat, --verify, --json, --csv or "
                       "--read-input (stage 2 is the verification; repeat with a loop of mpirun, as the scaling script does)\n");
    return 2;
  }
  if ((o.fault_rank >= 0) != !o.fault_rules.empty()) {
    fmt::print(stderr, "tai-augment: --fault-rank and --fault go together\n");
    return 2;
  }
  MpiSettings ms;
  ms.methods = o.specs;
  ms.threads = o.thread_counts.front();
  ms.tai_workers = tai_workers_for(o, ms.threads);
  ms.images = o.images;
  ms.images_per_rank = o.images_per_rank;
  ms.sizes = o.sizes;
  ms.sizes_text = o.sizes_text;
  ms.input_dir = o.input_dir;
  ms.input_budget = o.input_budget;
  ms.output = o.output;
  ms.shared_file = o.shared_file;
  ms.chunk_bytes = o.chunk_bytes;
  ms.handoff = o.handoff;
  ms.stage2 = o.stage2;
  ms.fault_rank = o.fault_rank;
  ms.fault_rules = o.fault_rules;
  ms.allow_unsafe_shared_direct = o.allow_unsafe_shared_direct;
  const std::string content =
      o.input_dir.empty()
          ? fmt::format("synthetic seed={} sizes={} png-level={} grey={}", o.seed, o.sizes_text, o.png_level, o.grey ? 1 : 0)
          : fmt::format("input={} png-level={} grey={}", o.input_dir, o.png_level, o.grey ? 1 : 0);
  set_workload(o, content, ms.config);
  return run_mpi_mode(argc, argv, ms);
}

// The input set, encoded, and the run manifests' description of it.
struct Input {
  std::vector<EncodedImage> images;
  std::string content;
};

// How the input set is held, for the input line: e.g. "in memory" or "1200 in memory (..), 294
// read from disk inside the loop (beyond --input-budget 1.1 GB)".
std::string holding_text(const Options& o, std::size_t total, std::size_t held, std::uint64_t held_bytes) {
  if (o.read_input) return std::string("read from disk inside the loop");
  if (held == total) return std::string("in memory");
  return fmt::format("{} in memory ({:.1f} MB), {} read from disk inside the loop (beyond --input-budget {})", held,
                     held_bytes / 1e6, total - held,
                     o.input_budget >= 1000000 ? fmt::format("{:.1f} MB", o.input_budget / 1e6) : fmt::format("{} bytes", o.input_budget));
}

// --input: the images of the directory tree, up to --input-budget in memory.
std::optional<int> load_input(const Options& o, Input& in) {
  const auto g0 = std::chrono::steady_clock::now();
  InputSet set;
  std::string err;
  if (!load_input_dir(o.input_dir, set, &err, o.read_input ? 0 : o.input_budget)) {
    fmt::print(stderr, "tai-augment: {}\n", err);
    return 2;
  }
  for (const std::string& line : set.skipped) fmt::print("input: {}\n", line);
  in.images = std::move(set.images);
  const std::string held = holding_text(o, in.images.size(), set.held, set.held_bytes);
  char resolved[PATH_MAX];
  in.content = fmt::format("input={} png-level={} grey={}", ::realpath(o.input_dir.c_str(), resolved) ? resolved : o.input_dir,
                           o.png_level, o.grey ? 1 : 0);
  fmt::print("input: {} images from {} ({} skipped, {} other files ignored), {:.1f} MB, checked in {:.2f} s, {}\n",
             in.images.size(), o.input_dir, set.skipped.size(), set.ignored, set.bytes / 1e6,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count(), held);
  return std::nullopt;
}

// The synthetic set; beyond --input-budget (or every image with --read-input) written as files
// under OUTPUT/input and read from there inside the loop.
std::optional<int> make_synthetic_input(const Options& o, Input& in) {
  const auto g0 = std::chrono::steady_clock::now();
  std::vector<EncodedImage>& input = in.images;
  input = synthetic_set(o.seed, o.images, o.sizes);
  if (input.empty()) {
    fmt::print(stderr, "tai-augment: encoding the synthetic input set failed\n");
    return 1;
  }
  std::uint64_t input_bytes = 0;
  for (const EncodedImage& e : input) input_bytes += e.data.size();
  std::size_t held = 0;
  std::uint64_t held_bytes = 0;
  while (!o.read_input && held < input.size() && input[held].data.size() <= o.input_budget - held_bytes)
    held_bytes += input[held++].data.size();
  in.content = fmt::format("synthetic seed={} images={} sizes={} png-level={} grey={}", o.seed, o.images, o.sizes_text,
                           o.png_level, o.grey ? 1 : 0);
  fmt::print("input: {} synthetic images (PNG and JPEG, sizes {}), {:.1f} MB encoded, made in {:.2f} s, {}\n",
             input.size(), o.sizes_text, input_bytes / 1e6,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count(),
             holding_text(o, input.size(), held, held_bytes));
  if (held < input.size()) {
    std::vector<EncodedImage> spill(std::make_move_iterator(input.begin() + long(held)), std::make_move_iterator(input.end()));
    std::string err;
    if (!write_input_files(spill, o.output + "/input", &err)) {
      fmt::print(stderr, "tai-augment: cannot write the input set under {}/input: {}\n", o.output, err);
      return 1;
    }
    for (std::size_t i = 0; i < spill.size(); ++i) {
      input[held + i].path = std::move(spill[i].path);
      Bytes().swap(input[held + i].data);
    }
  }
  return std::nullopt;
}

// `sweep`: the TAI paper's experiments over `input`, with `config` as every run's base.
int sweep_command(int argc, char** argv, Options& o, const std::vector<EncodedImage>& input, const RunConfig& config) {
  o.sweep.threads.clear();
  if (!parse_thread_counts(o.sweep_threads, o.sweep.threads)) {
    fmt::print(stderr, "tai-augment sweep: --sweep-threads '{}' is not a list of counts 1..1024\n", o.sweep_threads);
    return 2;
  }
  o.sweep.figures = split(o.sweep_figures, ',');
  o.sweep.methods = split(o.sweep_methods, ',');
  o.sweep.bytes_per_point = std::uint64_t(o.sweep_mib * 1048576.0);
  for (int i = 0; i < argc; ++i) o.sweep.command += (i ? " " : "") + std::string(argv[i]);
  return run_sweep(input, config, o.sweep);
}

using RunKey = std::pair<unsigned, std::string>;  // (threads, method)

// What the runs of every method gave.
struct Runs {
  std::map<RunKey, std::vector<RunResult>> results;  // the successful ones
  std::vector<std::string> manifests;
  std::vector<Fields> report;  // every run, failed and refused ones included
  bool failed = false;
};

// The inputs the loop reads from their files: dropped from the page cache before every run, so
// that each method reads them from the device alike, not from what the previous run cached.
std::vector<EncodedImage> streamed_inputs(const std::vector<EncodedImage>& input, bool read_input) {
  std::vector<EncodedImage> streamed;
  for (const EncodedImage& e : input)
    if (!e.path.empty() && (read_input || e.data.empty())) {
      EncodedImage s;
      s.id = e.id;
      s.path = e.path;
      streamed.push_back(std::move(s));
    }
  return streamed;
}

// Every method at every thread count, --repeat times, the methods' order rotated every repeat.
Runs run_methods(const Options& o, const std::vector<EncodedImage>& input, RunConfig& config) {
  Runs runs;
  std::map<std::string, std::string> skipped_methods;
  bool warned_page_cache = false;
  const std::vector<EncodedImage> streamed = streamed_inputs(input, o.read_input);
  for (unsigned r = 0; r < o.repeat; ++r) {
    for (unsigned threads : o.thread_counts) {
      config.threads = threads;
      config.method.compute_threads = threads;
      config.method.tai_workers = tai_workers_for(o, threads);
      for (std::size_t k = 0; k < o.specs.size(); ++k) {
        const std::string& spec = o.specs[(k + r) % o.specs.size()];  // rotate the order every repeat
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
        RunResult res = run_method(input, spec, o.output + "/" + stem_for(spec, threads, r), config);
        if (!res.refused.empty()) {
          skipped_methods[spec] = res.refused;
          fmt::print("{}: skipped: {}\n", spec, res.refused);
          runs.report.push_back(run_fields(res, r, config));
          continue;
        }
        if (!res.ok()) {
          fmt::print("{} ({} threads): FAILED: {}\n", spec, threads, res.error);
          runs.report.push_back(run_fields(res, r, config));
          runs.failed = true;
          continue;
        }
        if (res.skipped) fmt::print("{}: {} input images did not decode and were skipped\n", spec, res.skipped);
        if (!warned_page_cache) {
          const std::string w = page_cache_warning(res.bytes, o.fsync_every > 0, o.direct);
          if (!w.empty()) fmt::print("{}\n", w);
          warned_page_cache = true;
        }
        runs.report.push_back(run_fields(res, r, config));
        runs.manifests.push_back(res.manifest);
        runs.results[{threads, spec}].push_back(std::move(res));
      }
    }
  }
  return runs;
}

// The run with the median wall time (the lower middle one for an even count): a table row shows
// one run's figures, since medians of every figure would mix runs. `runs` must not be empty.
const RunResult& median_run(const std::vector<RunResult>& runs) {
  std::vector<const RunResult*> by_wall;
  for (const RunResult& r : runs) by_wall.push_back(&r);
  std::sort(by_wall.begin(), by_wall.end(), [](const RunResult* a, const RunResult* b) { return a->wall_s < b->wall_s; });
  return *by_wall[(by_wall.size() - 1) / 2];
}

// One row per thread count and method: the run with the median wall time.
void print_table(const Options& o, const std::map<RunKey, std::vector<RunResult>>& results) {
  fmt::print("\n{:>3} {:<16} {:>8} {:>7} {:>7} {:>7} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>11} {:>8}  {}\n",
             "thr", "method", "images/s", "MB/s", "seconds", "compute", "in I/O", "syncs", "user s", "sys s", "vol. cs",
             "inv. cs", "min. flt", "dev. MB", "RSS MB", "L1/2/3", "mem/stream", "vs posix", "note");
  for (unsigned threads : o.thread_counts) {
    auto posix = results.find({threads, "posix"});
    double posix_wall = 0;
    if (posix != results.end()) {
      std::vector<double> w;
      for (const RunResult& x : posix->second) w.push_back(x.wall_s);
      posix_wall = median(w);
    }
    for (const std::string& spec : o.specs) {
      auto it = results.find({threads, spec});
      if (it == results.end()) continue;
      std::vector<double> walls;
      for (const RunResult& x : it->second) walls.push_back(x.wall_s);
      const double wall = median(walls);
      const RunResult& m = median_run(it->second);
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
      if (o.show_stats && !m.library_stats.empty()) fmt::print("{:>3} {:<16} {}\n", "", "", m.library_stats);
    }
    // What any method could gain here: posix's time in I/O is all there is to hide. A row far
    // under its ceiling left time on the table; a ceiling near 1.00x says this storage had
    // little to hide (a fast disk, few syncs), whatever the method.
    if (posix != results.end() && !posix->second.empty()) {
      const RunResult& p = median_run(posix->second);
      const double share = p.wall_s > 0 ? std::min(1.0, p.io_s / (threads * p.wall_s)) : 0;
      const double ceiling = overlap_ceiling(p.wall_s * (1 - share), p.wall_s);
      if (ceiling > 0)
        fmt::print("{:>3} {:<16} posix spent {:.0f}% of its time in I/O, what a method can hide: about {:.2f}x at "
                   "best (P / max(C, P - C))\n",
                   threads, "ceiling", 100 * share, ceiling);
    }
  }
  fmt::print("(the run with the median wall time of {} repeat(s) per row; MB/s counts every record once (headers and "
             "padding included, overwrites not); compute = decode+transform+encode time / (threads x wall); in I/O = time "
             "the compute threads spent in the method's calls / (threads x wall); syncs = fsyncs asked by the seeded "
             "draw, the final one per file not counted; user s, sys s, vol./inv. cs, min. flt = the whole process, "
             "getrusage; dev. MB = /proc/self/io write_bytes, bytes sent toward the device; RSS MB = peak resident set "
             "over the run; L1/2/3 = PAPI data-cache misses; mem/stream = input images held in memory before the clock / read "
             "from their files inside the loop, beyond --input-budget or with --read-input)\n",
             o.repeat);
}

// --json and --csv. Returns false when a file could not be written (the reason printed).
bool write_reports(const Options& o, const std::vector<Fields>& report_runs, const CacheCounters& cache_counters) {
  RunSet set;
  set.config = {{"threads", o.threads_text}, {"method", o.method_list}, {"input", o.input_dir.empty() ? Value() : Value(o.input_dir)},
                {"synthetic", o.input_dir.empty() ? Value(o.images) : Value()}, {"read_input", o.read_input},
                {"input_budget", o.input_budget},
                {"sizes", o.sizes_text}, {"seed", o.seed}, {"batch", o.batch}, {"repeat", o.repeat}, {"png_level", o.png_level},
                {"grey", o.grey}, {"output", o.output}, {"files", o.files}, {"amplify", o.amplify}, {"overwrite", o.overwrite},
                {"fsync_every", o.fsync_every}, {"fdatasync", o.fdatasync}, {"direct", o.direct},
                {"direct_unpadded", o.direct_unpadded}, {"load", o.load},
                {"tai_workers", o.tai_workers ? Value(o.tai_workers) : Value()}, {"verify", o.verify},
                {"json", o.json_path.empty() ? Value() : Value(o.json_path)},
                {"csv", o.csv_path.empty() ? Value() : Value(o.csv_path)}};
  set.machine = describe_machine(o.output);
  ProcessCounters probe = read_process_counters();
  PeakRssMeter rss_probe;
  set.machine.emplace_back("cache_counters", cache_counters.available() && cache_counters.reason().empty() ? "ok" : cache_counters.reason());
  set.machine.emplace_back("io_accounting", probe.io_available ? "ok" : probe.io_unavailable_reason);
  set.machine.emplace_back("peak_rss_reset", rss_probe.start() ? "ok" : rss_probe.peak().note);
  set.runs = report_runs;
  bool ok = true;
  std::string err;
  if (!o.json_path.empty() && !write_text_file(o.json_path, to_json(set), &err)) {
    fmt::print(stderr, "tai-augment: --json {}: {}\n", o.json_path, err);
    ok = false;
  }
  if (!o.csv_path.empty() && !write_text_file(o.csv_path, to_csv(report_runs), &err)) {
    fmt::print(stderr, "tai-augment: --csv {}: {}\n", o.csv_path, err);
    ok = false;
  }
  return ok;
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
  Options o;
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);

  if (o.verify_cmd->parsed()) return verify_command(o.verify_paths, !o.verify_no_decode);
  if (o.list) {
    for (const MethodInfo& m : methods())
      fmt::print("  {:<10} {}{}\n", m.name, m.description, m.unavailable.empty() ? "" : " (unavailable: " + m.unavailable + ")");
    return 0;
  }
  if (std::optional<int> stop = check_options(app, o)) return *stop;
  if (o.mpi) return mpi_command(argc, argv, o);

  omp_set_num_threads(int(*std::max_element(o.thread_counts.begin(), o.thread_counts.end())));
  Input input;
  if (std::optional<int> stop = o.input_dir.empty() ? make_synthetic_input(o, input) : load_input(o, input)) return *stop;
  if (!cache_counters.available())
    fmt::print("cache misses: n/a: {}\n", cache_counters.reason());
  fmt::print("run: threads {}, batch {}, PNG level {}, seed {}, files {}, amplify {}, overwrite {}, {} every {}, "
             "{}, {} repeat(s), output in {}/\n",
             o.threads_text, o.batch, o.png_level, o.seed, o.files, o.amplify, o.overwrite ? "on" : "off",
             o.fdatasync ? "fdatasync" : "fsync", o.fsync_every ? std::to_string(o.fsync_every) : std::string("never (final only)"),
             o.direct ? (o.direct_unpadded ? "O_DIRECT (TAI unpadded)" : "O_DIRECT") : "buffered", o.repeat, o.output);

  RunConfig config;
  config.threads = o.thread_counts.front();
  config.method.tai_workers = 2;
  set_workload(o, input.content, config);
  config.read_input = o.read_input;
  config.cache_counters = &cache_counters;
  if (o.sweep_cmd->parsed()) return sweep_command(argc, argv, o, input.images, config);

  Runs runs = run_methods(o, input.images, config);
  print_table(o, runs.results);
  if (o.verify && !runs.manifests.empty()) {
    fmt::print("\n");
    if (!verify_runs(runs.manifests, true)) runs.failed = true;
  }
  if ((!o.json_path.empty() || !o.csv_path.empty()) && !write_reports(o, runs.report, cache_counters)) runs.failed = true;
  return runs.failed ? 1 : 0;
}
