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

namespace {
// How the images of one run become operations: fixed once the method is open.
struct RunShape {
  unsigned n_files = 1;
  unsigned amplify = 1;
  std::size_t writes_per_copy = 1;  // 2 with --overwrite
  std::size_t sync_slots = 0;       // a slot per copy for its fsync, with --fsync-every
  std::size_t ops_per_image = 1;
  std::size_t alignment = 1;        // the method's record alignment
};

RunShape run_shape(const RunConfig& config, const Method& method) {
  RunShape s;
  s.n_files = std::max(1u, config.files);
  s.amplify = std::max(1u, config.amplify);
  s.writes_per_copy = config.overwrite ? 2 : 1;
  s.sync_slots = config.fsync_every ? 1 : 0;
  s.ops_per_image = s.amplify * (s.writes_per_copy + s.sync_slots);
  s.alignment = method.record_alignment();
  return s;
}

// The images of one run written by the loop's threads: what they share, and the work of one image.
class ImageWriter {
 public:
  ImageWriter(const std::vector<EncodedImage>& input, const RunConfig& config, const RunShape& shape, Method& method,
              Progress& progress)
      : input_(input),
        config_(config),
        shape_(shape),
        method_(method),
        progress_(progress),
        next_offset_(shape.n_files),
        index_(input.size() * shape.amplify),
        written_(input.size(), 0) {
    for (auto& o : next_offset_) o.store(0);
  }

  // Image `pos` of the input, the `k`th of its batch: read (when not in memory), transform,
  // encode, write its copies. Called by any loop thread; the times go to the thread's sums.
  void write_image(std::size_t pos, std::size_t k, double& compute_s, double& io_s, double& input_s) {
    thread_local Bytes record;
    thread_local AlignedBuffer aligned;
    thread_local EncodedImage from_disk;
    const EncodedImage* in = &input_[pos];
    // An image without its bytes in memory (beyond the input budget, or --read-input) is read
    // from its file here, and that time is the run's input time.
    if ((config_.read_input || in->data.empty()) && !in->path.empty()) {
      const auto r0 = std::chrono::steady_clock::now();
      from_disk.id = in->id;
      from_disk.format = in->format;
      const bool read = read_whole_file(in->path, from_disk.data);
      input_s += seconds_since(r0);
      if (!read) return skip();
      in = &from_disk;
    }
    const auto c0 = std::chrono::steady_clock::now();
    const bool made = make_output_record(*in, config_, record, nullptr, shape_.alignment);
    const std::uint32_t crc = made ? crc32c_of(record.data(), record.size()) : 0;
    const void* data = record.data();
    if (made && shape_.alignment > 1) {
      aligned.assign(record.data(), record.size());
      data = aligned.data();
    }
    compute_s += seconds_since(c0);
    if (!made) return skip();
    written_[pos] = 1;
    const auto w0 = std::chrono::steady_clock::now();
    if (!write_copies(pos, k * shape_.ops_per_image, in->id, data, record.size(), crc)) written_[pos] = 0;
    io_s += seconds_since(w0);
    note_last_write();
    progress_.advance(1);
  }

  // The streaming hand-off: the batch's records are handed on only once an fsync that covers
  // them has completed. Returns the time it took the method.
  double hand_on_durable_batch(std::size_t start, std::size_t n) {
    if (!config_.on_batch_durable || method_.failed()) return 0;
    const auto e0 = std::chrono::steady_clock::now();
    method_.begin_batch(shape_.n_files);
    for (unsigned j = 0; j < shape_.n_files; ++j) method_.sync(j, j);
    method_.end_batch();
    const double io_s = seconds_since(e0);
    if (method_.failed()) return io_s;
    std::vector<std::pair<unsigned, IndexEntry>> durable;
    for (std::size_t k = 0; k < n; ++k)
      if (written_[start + k])
        for (unsigned copy = 0; copy < shape_.amplify; ++copy)
          durable.emplace_back(file_of(input_[start + k].id), index_[(start + k) * shape_.amplify + copy]);
    config_.on_batch_durable(durable);
    return io_s;
  }

  // The written copies, one index per file in offset order.
  std::vector<std::vector<IndexEntry>> index_per_file() const {
    std::vector<std::vector<IndexEntry>> per_file(shape_.n_files);
    for (std::size_t i = 0; i < input_.size(); ++i)
      if (written_[i])
        for (unsigned copy = 0; copy < shape_.amplify; ++copy)
          per_file[file_of(input_[i].id)].push_back(index_[i * shape_.amplify + copy]);
    for (auto& entries : per_file)
      std::sort(entries.begin(), entries.end(), [](const IndexEntry& a, const IndexEntry& b) { return a.offset < b.offset; });
    return per_file;
  }

  std::size_t skipped() const { return skipped_.load(); }
  std::uint64_t syncs() const { return syncs_.load(); }
  std::uint64_t bytes() const { return bytes_total_.load(); }
  double last_write_epoch() const { return last_write_epoch_.load(); }
  // The first refused reservation; empty when every offset was reserved.
  std::string reserve_error() {
    std::lock_guard<std::mutex> lock(reserve_mutex_);
    return reserve_error_;
  }

 private:
  unsigned file_of(std::uint64_t id) const { return unsigned(id % shape_.n_files); }

  void skip() {
    skipped_.fetch_add(1, std::memory_order_relaxed);
    progress_.advance(1);
  }

  // Writes the `amplify` copies of image `pos`'s record from operation slot `slot` on; false when
  // an offset could not be reserved (the copies after it are not written).
  bool write_copies(std::size_t pos, std::size_t slot, std::uint64_t id, const void* data, std::size_t size,
                    std::uint32_t crc) {
    const unsigned file = file_of(id);
    for (unsigned copy = 0; copy < shape_.amplify; ++copy) {
      std::uint64_t offset = 0;
      if (config_.reserve_offset) {
        offset = config_.reserve_offset(file, size);
        if (offset == kNoOffset) {
          refuse_reservation(id, size);
          return false;
        }
      } else {
        offset = next_offset_[file].fetch_add(size, std::memory_order_relaxed);
      }
      bytes_total_.fetch_add(size, std::memory_order_relaxed);
      index_[pos * shape_.amplify + copy] = {id, copy, offset, size, crc};
      for (std::size_t w = 0; w < shape_.writes_per_copy; ++w) method_.write(slot++, file, offset, data, size);
      if (sync_after(config_.seed, id, copy, config_.fsync_every)) {
        method_.sync(slot, file);
        syncs_.fetch_add(1, std::memory_order_relaxed);
      }
      slot += shape_.sync_slots;
    }
    return true;
  }

  void refuse_reservation(std::uint64_t id, std::size_t size) {
    std::lock_guard<std::mutex> lock(reserve_mutex_);
    if (reserve_error_.empty())
      reserve_error_ = "no offset could be reserved for the " + std::to_string(size) + "-byte record of image " +
                       std::to_string(id) + (config_.reserve_refusal.empty() ? "" : ": " + config_.reserve_refusal);
  }

  void note_last_write() {
    for (double now = epoch_seconds(), seen = last_write_epoch_.load(std::memory_order_relaxed);
         now > seen && !last_write_epoch_.compare_exchange_weak(seen, now, std::memory_order_relaxed);) {
    }
  }

  const std::vector<EncodedImage>& input_;
  const RunConfig& config_;
  const RunShape& shape_;
  Method& method_;
  Progress& progress_;
  std::vector<std::atomic<std::uint64_t>> next_offset_;
  // Entry (image position * amplify + copy): each filled by the one thread that wrote that copy.
  std::vector<IndexEntry> index_;
  std::vector<char> written_;
  std::atomic<std::size_t> skipped_{0};
  std::atomic<std::uint64_t> syncs_{0};
  std::atomic<std::uint64_t> bytes_total_{0};
  std::atomic<double> last_write_epoch_{0};
  std::mutex reserve_mutex_;
  std::string reserve_error_;  // the first refused reservation
};

// The run's output files and manifest path for `stem`.
void name_outputs(const std::string& stem, unsigned n_files, RunResult& res) {
  for (unsigned j = 0; j < n_files; ++j)
    res.files.push_back(n_files == 1 ? stem + ".taia" : stem + ".f" + std::to_string(j) + ".taia");
  res.manifest = stem + ".run";
}

void take_measured(const RunMeasurement& measured, RunResult& res) {
  res.measured = measured;
  res.user_s = measured.delta.user_s;
  res.sys_s = measured.delta.sys_s;
  res.voluntary_switches = measured.delta.voluntary_switches;
  res.involuntary_switches = measured.delta.involuntary_switches;
  res.minor_faults = measured.delta.minor_faults;
}

// How many images the run read from their files rather than from memory.
std::size_t streamed_inputs(const std::vector<EncodedImage>& input, const RunConfig& config) {
  if (!config.read_input) return streamed_count(input);
  return std::size_t(std::count_if(input.begin(), input.end(), [](const EncodedImage& e) { return !e.path.empty(); }));
}

// The artifact for a next stage, after the clock: one index per file, the run's manifest.
void write_artifacts(const std::vector<EncodedImage>& input, const std::string& spec, const RunConfig& config,
                     unsigned amplify, std::vector<std::vector<IndexEntry>> per_file, RunResult& res) {
  RunManifest m;
  m.method = spec;
  m.note = res.note;
  m.content = config.content;
  m.inputs = input.empty() ? 0 : std::max_element(input.begin(), input.end(), [](const auto& a, const auto& b) {
                                   return a.id < b.id;
                                 })->id + 1;
  m.images = res.images;
  m.amplify = amplify;
  for (std::size_t j = 0; j < per_file.size(); ++j) {
    m.files.push_back(base_name(res.files[j]));
    if (!write_index(res.files[j], std::move(per_file[j]), &res.error)) return;
  }
  if (!config.write_manifest) {
    res.manifest.clear();
    return;
  }
  write_manifest(res.manifest, m, &res.error);
}
}  // namespace

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
  name_outputs(stem, std::max(1u, config.files), res);
  std::unique_ptr<Method> method = info->make(suffix, config.method);
  if (!method->open(res.files)) {
    res.refused = method->refused();
    res.error = res.refused.empty() ? method->error() : "refused: " + res.refused;
    return res;
  }
  const RunShape shape = run_shape(config, *method);
  const std::size_t batch = std::max<std::size_t>(1, config.batch);
  const int n_threads = int(std::max(1u, config.threads));
  double compute_s = 0, io_s = 0, input_s = 0;
  if (config.after_open) config.after_open();

  ProgressOptions progress_options;
  if (config.progress_label.empty()) progress_options.fd = -1;  // no line at all
  Progress progress(input.size(), config.progress_label, progress_options);
  ImageWriter writer(input, config, shape, *method, progress);
  RunMeter meter(config.cache_counters);
  meter.start();
  const auto t0 = std::chrono::steady_clock::now();
  res.start_epoch_s = epoch_seconds();
  for (std::size_t start = 0; start < input.size(); start += batch) {
    const std::size_t n = std::min(batch, input.size() - start);
    method->begin_batch(n * shape.ops_per_image);
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1) reduction(+ : compute_s, io_s, input_s)
    for (std::size_t k = 0; k < n; ++k) writer.write_image(start + k, k, compute_s, io_s, input_s);
    const auto e0 = std::chrono::steady_clock::now();
    method->end_batch();
    io_s += seconds_since(e0);
    io_s += writer.hand_on_durable_batch(start, n);
  }
  const auto f0 = std::chrono::steady_clock::now();
  method->finish();
  io_s += seconds_since(f0);
  res.wall_s = seconds_since(t0);
  res.end_epoch_s = epoch_seconds();
  res.last_write_epoch_s = writer.last_write_epoch();
  take_measured(meter.stop(), res);
  progress.finish();

  res.compute_s = compute_s;
  res.io_s = io_s;
  res.input_s = input_s;
  res.input_streamed = streamed_inputs(input, config);
  res.input_held = input.size() - res.input_streamed;
  res.skipped = writer.skipped();
  res.images = input.size() - res.skipped;
  res.bytes = writer.bytes();
  res.bytes_issued = res.bytes * shape.writes_per_copy;
  res.writes = std::uint64_t(res.images) * shape.amplify * shape.writes_per_copy;
  res.syncs = writer.syncs();
  res.note = method->note();
  res.library_stats = method->stats();
  res.error = method->error();
  if (res.error.empty()) res.error = writer.reserve_error();
  method.reset();
  if (!res.ok()) return res;

  res.index = writer.index_per_file();
  if (config.write_artifacts) write_artifacts(input, spec, config, shape.amplify, res.index, res);
  return res;
}

}  // namespace augment
