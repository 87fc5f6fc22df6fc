#include "run.hpp"

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>

#include "record.hpp"

namespace augment {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

bool make_output_record(const EncodedImage& in, const RunConfig& config, Bytes& record, std::string* err,
                        std::size_t alignment) {
  Image img;
  if (!decode(in, img, err)) return false;
  const Image out = transform(img, config.seed, in.id, config.transform);
  Bytes png;
  if (!encode_png(out, config.png_level, png, err)) return false;
  make_record(in.id, png, record, alignment);
  return true;
}

RunResult run_method(const std::vector<EncodedImage>& input, const std::string& spec, const std::string& path,
                     const RunConfig& config) {
  RunResult res;
  res.method = spec;
  res.path = path;
  std::string suffix;
  const MethodInfo* info = find_method(spec, &suffix);
  if (!info) {
    res.error = "unknown method '" + spec + "'";
    return res;
  }
  if (!info->unavailable.empty()) {
    res.error = info->unavailable;
    return res;
  }
  std::unique_ptr<Method> method = info->make(suffix, config.method);
  if (!method->open(path)) {
    res.refused = method->refused();
    res.error = res.refused.empty() ? method->error() : "refused: " + res.refused;
    return res;
  }
  const std::size_t alignment = method->record_alignment();
  res.note = method->note();
  const std::size_t batch = std::max<std::size_t>(1, config.batch);
  const int n_threads = int(std::max(1u, config.threads));
  std::atomic<std::uint64_t> next_offset{0};
  std::atomic<std::size_t> skipped{0};
  double compute_s = 0, io_s = 0;

  rusage u0{}, u1{};
  ::getrusage(RUSAGE_SELF, &u0);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t start = 0; start < input.size(); start += batch) {
    const std::size_t n = std::min(batch, input.size() - start);
    method->begin_batch(n);
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1) reduction(+ : compute_s, io_s)
    for (std::size_t k = 0; k < n; ++k) {
      thread_local Bytes record;
      const auto c0 = std::chrono::steady_clock::now();
      const bool made = make_output_record(input[start + k], config, record, nullptr, alignment);
      compute_s += seconds_since(c0);
      if (!made) {
        skipped.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const std::uint64_t offset = next_offset.fetch_add(record.size(), std::memory_order_relaxed);
      const auto w0 = std::chrono::steady_clock::now();
      method->write(k, offset, record.data(), record.size());
      io_s += seconds_since(w0);
    }
    const auto e0 = std::chrono::steady_clock::now();
    method->end_batch();
    io_s += seconds_since(e0);
  }
  const auto f0 = std::chrono::steady_clock::now();
  method->finish();
  io_s += seconds_since(f0);
  res.wall_s = seconds_since(t0);
  ::getrusage(RUSAGE_SELF, &u1);
  auto tv = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  res.user_s = tv(u1.ru_utime) - tv(u0.ru_utime);
  res.sys_s = tv(u1.ru_stime) - tv(u0.ru_stime);
  res.voluntary_switches = u1.ru_nvcsw - u0.ru_nvcsw;
  res.involuntary_switches = u1.ru_nivcsw - u0.ru_nivcsw;
  res.minor_faults = u1.ru_minflt - u0.ru_minflt;

  res.compute_s = compute_s;
  res.io_s = io_s;
  res.skipped = skipped.load();
  res.images = input.size() - res.skipped;
  res.bytes = next_offset.load();
  res.error = method->error();
  return res;
}

}  // namespace augment
