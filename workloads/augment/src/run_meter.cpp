#include "run_meter.hpp"

namespace augment {

void RunMeter::start() {
  // The RSS reset first: the counters' own reads then fall inside the measured interval, not the
  // reset's writes.
  rss_.start();
  if (cache_) misses_before_ = cache_->read();
  before_ = read_process_counters();
}

RunMeasurement RunMeter::stop() const {
  RunMeasurement m;
  m.delta = read_process_counters() - before_;
  if (cache_) m.cache_misses = cache_->read() - misses_before_;
  m.peak_rss = rss_.peak();
  return m;
}

void append_measurement_fields(Fields& run, const RunMeasurement& m) {
  const ProcessCounters& d = m.delta;
  run.emplace_back("user_s", d.user_s);
  run.emplace_back("sys_s", d.sys_s);
  run.emplace_back("voluntary_switches", d.voluntary_switches);
  run.emplace_back("involuntary_switches", d.involuntary_switches);
  run.emplace_back("minor_faults", d.minor_faults);
  run.emplace_back("major_faults", d.major_faults);
  auto io = [&](std::uint64_t v) { return d.io_available ? Value(v) : Value(); };
  run.emplace_back("device_write_bytes", io(d.write_bytes));
  run.emplace_back("cancelled_write_bytes", io(d.cancelled_write_bytes));
  run.emplace_back("device_read_bytes", io(d.read_bytes));
  run.emplace_back("wchar", io(d.wchar));
  run.emplace_back("rchar", io(d.rchar));
  run.emplace_back("peak_rss_bytes", m.peak_rss.bytes ? Value(m.peak_rss.bytes) : Value());
  run.emplace_back("peak_rss_over_run", m.peak_rss.over_run_only);
  static const char* const names[3] = {"l1_dcm", "l2_dcm", "l3_dcm"};
  for (int level = 0; level < 3; ++level)
    run.emplace_back(names[level], m.cache_misses.misses[level] ? Value(*m.cache_misses.misses[level]) : Value());
}

}  // namespace augment
