#include "async_loop.hpp"

#include <fmt/core.h>
#include <tai/tai.hpp>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

namespace serial {

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

LoopResult run_async_loop(const LoopSettings& settings, RecordSource& records, const AsyncSettings& async,
                          std::string* note) {
  LoopResult res;
  const unsigned amplify = settings.amplify ? settings.amplify : 1;
  const std::size_t batch = async.batch ? async.batch : 1;
  res.index.reserve(settings.images * amplify);
  tai::Open mode = tai::Open::write | tai::Open::create | tai::Open::truncate;
  if (settings.direct) mode = mode | tai::Open::direct;

  const auto t0 = Clock::now();
  auto io_t = Clock::now();
  tai::ControllerOptions options;
  options.workers = async.workers;
  options.engine = async.engine;
  // The cache-memory knobs of the drop-in layer (plain byte counts here), so that both
  // interfaces can be measured with and without them (docs/results/cache-cost.md).
  if (const char* b = std::getenv("TAI_CLEAN_BUDGET"); b && *b) options.clean_budget = std::strtoull(b, nullptr, 10);
  if (const char* h = std::getenv("TAI_HUGE_PAGES"); h && *h) options.huge_pages = h[0] == '1';
  if (const char* s = std::getenv("TAI_START_WRITEBACK"); s && *s)
    options.engine_options.start_writeback_bytes = std::strtoull(s, nullptr, 10);
  if (const char* w = std::getenv("TAI_WRITE_AROUND"); w && *w)
    options.tree_options.write_around_bytes = std::strtoull(w, nullptr, 10);
  auto controller = std::make_unique<tai::Controller>(options);
  auto opened = controller->open<tai::BTreeDefault>(settings.path, mode);
  res.io_s += seconds(Clock::now() - io_t);
  if (!opened) {
    res.error = "tai open " + settings.path + ": " + opened.error().message;
    return res;
  }
  tai::File file = std::move(opened.value());
  if (note) *note = fmt::format("TAI File API, BTreeDefault, engine {}, {} workers, waits every {} images", controller->engine_note(),
                                async.workers, batch);

  // The receipts of the current batch; a failed one fails the run at the batch's end.
  std::vector<tai::Receipt> receipts;
  receipts.reserve(batch * (amplify + 1));
  auto wait_for_batch = [&] {
    const auto w0 = Clock::now();
    for (tai::Receipt& r : receipts) {
      r.wait();
      if (res.ok() && !r.ok()) res.error = "tai: " + r.message();
    }
    receipts.clear();
    res.io_s += seconds(Clock::now() - w0);
  };

  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < settings.images && res.ok(); ++i) {
    const auto c0 = Clock::now();
    PreparedRecord rec;
    const bool made = records.make(i, rec);
    res.compute_s += seconds(Clock::now() - c0);
    io_t = Clock::now();
    if (!made) {
      ++res.skipped;
    } else {
      for (unsigned copy = 0; copy < amplify; ++copy) {
        receipts.push_back(file.write(offset, rec.data, rec.size));  // copies: rec may change after this
        ++res.writes;
        res.index.push_back({rec.id, copy, offset, rec.size, rec.crc32c});
        offset += rec.size;
      }
      ++res.images;
    }
    if (settings.fsync_every && (i + 1) % settings.fsync_every == 0 && i + 1 < settings.images) {
      receipts.push_back(file.fsync());  // started, not waited for
      ++res.fsyncs;
    }
    res.io_s += seconds(Clock::now() - io_t);
    if ((i + 1) % batch == 0) wait_for_batch();
  }
  wait_for_batch();

  const auto s0 = Clock::now();
  if (res.ok()) {
    tai::Receipt synced = file.fsync();
    synced.wait();
    if (!synced.ok()) res.error = "tai fsync " + settings.path + ": " + synced.message();
    ++res.fsyncs;
  }
  const double s = seconds(Clock::now() - s0);
  res.io_s += s, res.fsync_s += s;
  io_t = Clock::now();
  tai::Receipt closed = file.close();
  closed.wait();
  if (res.ok() && !closed.ok()) res.error = "tai close " + settings.path + ": " + closed.message();
  const tai::ShutdownReport report = controller->shutdown();
  if (res.ok() && !report.ok()) res.error = "tai shutdown: " + report.to_string();
  res.io_s += seconds(Clock::now() - io_t);
  res.wall_s = seconds(Clock::now() - t0);
  res.bytes = offset;
  return res;
}

}  // namespace serial
