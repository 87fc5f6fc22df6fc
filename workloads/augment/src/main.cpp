// tai-augment: the image-augmentation workload of the TAI paper (chapter 3). See README.md.
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "image.hpp"
#include "method.hpp"
#include "record.hpp"
#include "run.hpp"

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

std::string file_name_for(const std::string& method, unsigned repeat) {
  std::string m = method;
  std::replace(m.begin(), m.end(), ':', '_');
  return fmt::format("{}.r{}.taia", m, repeat);
}

// Reads every file back; all must verify, hold `expected` records, and hold the same records.
bool verify_outputs(const std::vector<std::string>& paths, std::uint64_t expected) {
  bool ok = true;
  std::map<std::uint64_t, RecordInfo> reference;
  std::string reference_path;
  std::uint64_t records = 0;
  for (const std::string& p : paths) {
    VerifyResult v = verify_file(p, expected, true);
    if (!v.ok) {
      fmt::print("verify: FAILED: {}\n", v.error);
      ok = false;
      continue;
    }
    records += v.records.size();
    if (reference_path.empty()) {
      reference = std::move(v.records);
      reference_path = p;
      continue;
    }
    if (v.records.size() != reference.size()) {
      fmt::print("verify: FAILED: {} has {} records, {} has {}\n", p, v.records.size(), reference_path, reference.size());
      ok = false;
      continue;
    }
    for (const auto& [id, info] : v.records) {
      auto it = reference.find(id);
      if (it == reference.end() || it->second.crc32 != info.crc32 || it->second.length != info.length) {
        fmt::print("verify: FAILED: image {} of {} differs from {}\n", id, p, reference_path);
        ok = false;
        break;
      }
    }
  }
  if (ok)
    fmt::print("verify: ok: {} files, {} records, every CRC matches, every record decodes as PNG, every image once per file, the same records in every file\n",
               paths.size(), records);
  return ok;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tai-augment: the TAI paper's image-augmentation workload (decode, transform, encode PNG, write "
               "every record through each I/O method)"};
  app.set_help_all_flag("--help-all");
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
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
  unsigned tai_workers = 2;
  app.add_option("--threads", threads, "OpenMP compute threads")->check(CLI::Range(1u, 1024u))->capture_default_str();
  app.add_option("--method", method_list, "comma-separated I/O methods (--list-methods)")->capture_default_str();
  app.add_option("--images", images, "images in the built-in synthetic input set")->check(CLI::Range(std::size_t(1), std::size_t(100000000)))->capture_default_str();
  app.add_option("--sizes", sizes_text, "the synthetic images' sizes, WxH,... (image i has size i mod count)")->capture_default_str();
  app.add_option("--output", output, "directory for the output files (one per method and repeat)")->capture_default_str();
  app.add_option("--batch", batch, "images per batch; asynchronous methods wait only at batch ends")->check(CLI::Range(std::size_t(1), std::size_t(100000000)))->capture_default_str();
  app.add_option("--seed", seed, "seed of the input set and of the per-image transforms")->capture_default_str();
  app.add_option("--png-level", png_level, "zlib level of the output PNGs (0-9)")->check(CLI::Range(0, 9))->capture_default_str();
  app.add_flag("--grey", grey, "convert every output image to grey-scale");
  app.add_option("--repeat", repeat, "repeats; methods interleaved in a rotating order, medians reported")->check(CLI::Range(1u, 1000u))->capture_default_str();
  app.add_option("--tai-workers", tai_workers, "TAI controller workers (the paper's fixed load: 2)")->check(CLI::Range(1u, 256u))->capture_default_str();
  app.add_flag("--verify", verify, "read every output back: CRCs, PNG decode, every image once, the same records in every file");
  app.add_flag("--list-methods", list, "list the I/O methods and exit");
  CLI11_PARSE(app, argc, argv);

  if (list) {
    for (const MethodInfo& m : methods())
      fmt::print("  {:<10} {}{}\n", m.name, m.description, m.unavailable.empty() ? "" : " (unavailable: " + m.unavailable + ")");
    return 0;
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

  omp_set_num_threads(int(threads));
  const auto g0 = std::chrono::steady_clock::now();
  const std::vector<EncodedImage> input = synthetic_set(seed, images, sizes);
  if (input.empty()) {
    fmt::print(stderr, "tai-augment: encoding the synthetic input set failed\n");
    return 1;
  }
  std::uint64_t input_bytes = 0;
  for (const EncodedImage& e : input) input_bytes += e.data.size();
  fmt::print("input: {} synthetic images (PNG and JPEG, sizes {}), {:.1f} MB encoded, made in {:.2f} s, in memory\n",
             input.size(), sizes_text, input_bytes / 1e6,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count());
  fmt::print("run: {} compute threads, batch {}, PNG level {}, seed {}, {} repeat(s), output in {}/\n", threads, batch,
             png_level, seed, repeat, output);

  RunConfig config;
  config.threads = threads;
  config.batch = batch;
  config.seed = seed;
  config.png_level = png_level;
  config.transform.grey = grey;
  config.method.compute_threads = threads;
  config.method.tai_workers = tai_workers;

  std::map<std::string, std::vector<RunResult>> results;
  std::vector<std::string> paths;
  bool failed = false;
  for (unsigned r = 0; r < repeat; ++r) {
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const std::string& spec = specs[(k + r) % specs.size()];  // rotate the order every repeat
      if (const MethodInfo* info = find_method(spec, nullptr); !info->unavailable.empty()) {
        if (r == 0) fmt::print("{}: skipped: {}\n", spec, info->unavailable);
        continue;
      }
      const std::string path = output + "/" + file_name_for(spec, r);
      RunResult res = run_method(input, spec, path, config);
      if (!res.refused.empty()) {
        if (r == 0) fmt::print("{}: skipped: {}\n", spec, res.refused);
        continue;
      }
      if (!res.ok()) {
        fmt::print("{}: FAILED: {}\n", spec, res.error);
        failed = true;
        continue;
      }
      if (res.skipped) fmt::print("{}: {} input images did not decode and were skipped\n", spec, res.skipped);
      paths.push_back(path);
      results[spec].push_back(std::move(res));
    }
  }

  std::map<std::string, double> median_wall;
  for (auto& [spec, runs] : results) {
    std::vector<double> walls;
    for (const RunResult& x : runs) walls.push_back(x.wall_s);
    median_wall[spec] = median(walls);
  }
  fmt::print("\n{:<16} {:>9} {:>7} {:>8} {:>8} {:>7} {:>7} {:>7} {:>8} {:>8}  {}\n", "method", "images/s", "MB/s",
             "seconds", "compute", "in I/O", "user s", "sys s", "vol. cs", "vs posix", "note");
  for (const std::string& spec : specs) {
    auto it = results.find(spec);
    if (it == results.end()) continue;
    // The run with the median wall time gives the row (medians of every figure would mix runs).
    std::vector<RunResult> runs = it->second;
    std::sort(runs.begin(), runs.end(), [](const RunResult& a, const RunResult& b) { return a.wall_s < b.wall_s; });
    const RunResult& m = runs[(runs.size() - 1) / 2];
    const double wall = median_wall[spec];
    std::string ratio = "-";
    if (results.count("posix")) ratio = fmt::format("{:.2f}x", median_wall["posix"] / wall);
    fmt::print("{:<16} {:>9.1f} {:>7.1f} {:>8.3f} {:>7.0f}% {:>6.0f}% {:>7.2f} {:>7.2f} {:>8} {:>8}  {}\n", spec,
               m.images / wall, m.bytes / 1e6 / wall, wall, 100 * m.compute_s / (threads * m.wall_s),
               100 * m.io_s / (threads * m.wall_s), m.user_s, m.sys_s, m.voluntary_switches, ratio, m.note);
  }
  fmt::print("(medians of {} run(s); MB/s counts every byte written, headers included; compute = decode+transform+encode "
             "time / (threads x wall); in I/O = time the compute threads spent in the method's calls / (threads x wall); user s, sys s, vol. cs = the "
             "whole process's CPU time and voluntary context switches over the run, getrusage)\n",
             repeat);

  if (verify && !paths.empty()) {
    fmt::print("\n");
    if (!verify_outputs(paths, input.size() - results.begin()->second.front().skipped)) failed = true;
  }
  return failed ? 1 : 0;
}
