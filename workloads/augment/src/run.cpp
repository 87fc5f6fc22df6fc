#include "run.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>

#include "input_dir.hpp"
#include "progress.hpp"
#include "record.hpp"

namespace augment {

namespace {
double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool read_whole_file(const std::string& path, Bytes& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const std::streamoff n = in.tellg();
  if (n < 0) return false;
  out.resize(std::size_t(n));
  in.seekg(0);
  return bool(in.read(reinterpret_cast<char*>(out.data()), n));
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

bool sync_after(std::uint64_t seed, std::uint64_t id, unsigned copy, unsigned every) {
  if (every == 0) return false;
  Rng r(image_seed(seed, id, 1000 + copy));
  return r.next() % every == 0;
}

RunResult run_method(const std::vector<EncodedImage>& input, const std::string& spec, const std::string& stem,
                     const RunConfig& config) {
  RunResult res;
  res.method = spec;
  res.threads = config.threads;
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
  const unsigned n_files = std::max(1u, config.files);
  for (unsigned j = 0; j < n_files; ++j)
    res.files.push_back(n_files == 1 ? stem + ".taia" : stem + ".f" + std::to_string(j) + ".taia");
  res.manifest = stem + ".run";
  std::unique_ptr<Method> method = info->make(suffix, config.method);
  if (!method->open(res.files)) {
    res.refused = method->refused();
    res.error = res.refused.empty() ? method->error() : "refused: " + res.refused;
    return res;
  }
  const std::size_t alignment = method->record_alignment();
  const unsigned amplify = std::max(1u, config.amplify);
  const std::size_t writes_per_copy = config.overwrite ? 2 : 1;
  const std::size_t sync_slots = config.fsync_every ? 1 : 0;
  const std::size_t ops_per_image = amplify * (writes_per_copy + sync_slots);
  const std::size_t batch = std::max<std::size_t>(1, config.batch);
  const int n_threads = int(std::max(1u, config.threads));
  std::vector<std::atomic<std::uint64_t>> next_offset(n_files);
  for (auto& o : next_offset) o.store(0);
  // Entry (image position * amplify + copy): each filled by the one thread that wrote that copy.
  std::vector<IndexEntry> index(input.size() * amplify);
  std::vector<char> written(input.size(), 0);
  std::atomic<std::size_t> skipped{0};
  std::atomic<std::uint64_t> syncs{0};
  std::atomic<std::uint64_t> bytes_total{0};
  std::atomic<double> last_write_epoch{0};
  std::mutex reserve_mutex;
  std::string reserve_error;  // the first refused reservation (under reserve_mutex)
  double compute_s = 0, io_s = 0, input_s = 0;
  if (config.after_open) config.after_open();

  ProgressOptions progress_options;
  if (config.progress_label.empty()) progress_options.fd = -1;  // no line at all
  Progress progress(input.size(), config.progress_label, progress_options);
  RunMeter meter(config.cache_counters);
  meter.start();
  const auto t0 = std::chrono::steady_clock::now();
  res.start_epoch_s = epoch_seconds();
  for (std::size_t start = 0; start < input.size(); start += batch) {
    const std::size_t n = std::min(batch, input.size() - start);
    method->begin_batch(n * ops_per_image);
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1) reduction(+ : compute_s, io_s, input_s)
    for (std::size_t k = 0; k < n; ++k) {
      thread_local Bytes record, file_bytes;
      thread_local AlignedBuffer aligned;
      const EncodedImage* in = &input[start + k];
      thread_local EncodedImage from_disk;
      // An image without its bytes in memory (beyond the input budget, or --read-input) is read
      // from its file here, and that time is the run's input time.
      if ((config.read_input || in->data.empty()) && !in->path.empty()) {
        const auto r0 = std::chrono::steady_clock::now();
        from_disk.id = in->id;
        from_disk.format = in->format;
        const bool read = read_whole_file(in->path, from_disk.data);
        input_s += seconds_since(r0);
        if (!read) {
          skipped.fetch_add(1, std::memory_order_relaxed);
          progress.advance(1);
          continue;
        }
        in = &from_disk;
      }
      const auto c0 = std::chrono::steady_clock::now();
      const bool made = make_output_record(*in, config, record, nullptr, alignment);
      const std::uint32_t crc = made ? crc32c_of(record.data(), record.size()) : 0;
      const void* data = record.data();
      if (made && alignment > 1) {
        aligned.assign(record.data(), record.size());
        data = aligned.data();
      }
      compute_s += seconds_since(c0);
      if (!made) {
        skipped.fetch_add(1, std::memory_order_relaxed);
        progress.advance(1);
        continue;
      }
      written[start + k] = 1;
      const unsigned file = unsigned(in->id % n_files);
      std::size_t slot = k * ops_per_image;
      const auto w0 = std::chrono::steady_clock::now();
      bool reserved = true;
      for (unsigned copy = 0; copy < amplify && reserved; ++copy) {
        std::uint64_t offset = 0;
        if (config.reserve_offset) {
          offset = config.reserve_offset(file, record.size());
          if (offset == kNoOffset) {
            std::lock_guard<std::mutex> lock(reserve_mutex);
            if (reserve_error.empty())
              reserve_error = "no offset could be reserved for the " + std::to_string(record.size()) +
                              "-byte record of image " + std::to_string(in->id) +
                              (config.reserve_refusal.empty() ? "" : ": " + config.reserve_refusal);
            reserved = false;
            break;
          }
        } else {
          offset = next_offset[file].fetch_add(record.size(), std::memory_order_relaxed);
        }
        bytes_total.fetch_add(record.size(), std::memory_order_relaxed);
        index[(start + k) * amplify + copy] = {in->id, copy, offset, record.size(), crc};
        for (std::size_t w = 0; w < writes_per_copy; ++w) method->write(slot++, file, offset, data, record.size());
        if (sync_after(config.seed, in->id, copy, config.fsync_every)) {
          method->sync(slot, file);
          syncs.fetch_add(1, std::memory_order_relaxed);
        }
        slot += sync_slots;
      }
      io_s += seconds_since(w0);
      if (!reserved) written[start + k] = 0;
      for (double now = epoch_seconds(), seen = last_write_epoch.load(std::memory_order_relaxed);
           now > seen && !last_write_epoch.compare_exchange_weak(seen, now, std::memory_order_relaxed);) {
      }
      progress.advance(1);
    }
    const auto e0 = std::chrono::steady_clock::now();
    method->end_batch();
    if (config.on_batch_durable && !method->failed()) {
      // The streaming hand-off: the batch's records are handed on only once an fsync that
      // covers them has completed.
      method->begin_batch(n_files);
      for (unsigned j = 0; j < n_files; ++j) method->sync(j, j);
      method->end_batch();
    }
    io_s += seconds_since(e0);
    if (config.on_batch_durable && !method->failed()) {
      std::vector<std::pair<unsigned, IndexEntry>> durable;
      for (std::size_t k = 0; k < n; ++k)
        if (written[start + k])
          for (unsigned copy = 0; copy < amplify; ++copy)
            durable.emplace_back(unsigned(input[start + k].id % n_files), index[(start + k) * amplify + copy]);
      config.on_batch_durable(durable);
    }
  }
  const auto f0 = std::chrono::steady_clock::now();
  method->finish();
  io_s += seconds_since(f0);
  res.wall_s = seconds_since(t0);
  res.end_epoch_s = epoch_seconds();
  res.last_write_epoch_s = last_write_epoch.load();
  res.measured = meter.stop();
  progress.finish();
  res.user_s = res.measured.delta.user_s;
  res.sys_s = res.measured.delta.sys_s;
  res.voluntary_switches = res.measured.delta.voluntary_switches;
  res.involuntary_switches = res.measured.delta.involuntary_switches;
  res.minor_faults = res.measured.delta.minor_faults;

  res.compute_s = compute_s;
  res.io_s = io_s;
  res.input_s = input_s;
  res.input_streamed = config.read_input ? std::size_t(std::count_if(input.begin(), input.end(), [](const EncodedImage& e) {
                                             return !e.path.empty();
                                           }))
                                         : streamed_count(input);
  res.input_held = input.size() - res.input_streamed;
  res.skipped = skipped.load();
  res.images = input.size() - res.skipped;
  res.bytes = bytes_total.load();
  res.bytes_issued = res.bytes * writes_per_copy;
  res.writes = std::uint64_t(res.images) * amplify * writes_per_copy;
  res.syncs = syncs.load();
  res.note = method->note();
  res.library_stats = method->stats();
  res.error = method->error();
  if (res.error.empty()) res.error = reserve_error;
  method.reset();
  if (!res.ok()) return res;

  // The artifact for a next stage, after the clock: one index per file, the run's manifest.
  std::vector<std::vector<IndexEntry>> per_file(n_files);
  for (std::size_t i = 0; i < input.size(); ++i)
    if (written[i])
      for (unsigned copy = 0; copy < amplify; ++copy) {
        const IndexEntry& e = index[i * amplify + copy];
        per_file[input[i].id % n_files].push_back(e);
      }
  for (auto& entries : per_file)
    std::sort(entries.begin(), entries.end(), [](const IndexEntry& a, const IndexEntry& b) { return a.offset < b.offset; });
  res.index = per_file;
  if (!config.write_artifacts) return res;
  RunManifest m;
  m.method = spec;
  m.note = res.note;
  m.content = config.content;
  m.inputs = input.empty() ? 0 : std::max_element(input.begin(), input.end(), [](const auto& a, const auto& b) {
                                   return a.id < b.id;
                                 })->id + 1;
  m.images = res.images;
  m.amplify = amplify;
  for (unsigned j = 0; j < n_files; ++j) {
    m.files.push_back(base_name(res.files[j]));
    if (!write_index(res.files[j], std::move(per_file[j]), &res.error)) return res;
  }
  if (!config.write_manifest) {
    res.manifest.clear();
    return res;
  }
  write_manifest(res.manifest, m, &res.error);
  return res;
}

}  // namespace augment
