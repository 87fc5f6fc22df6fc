// Every whole-process figure of one run in two calls: start() just before the clock starts,
// stop() just after it stops. Bundles the process counters, the peak RSS and the cache misses, and
// lays them out as report fields under the schema's names (docs/json_schema.md).
#pragma once

#include "cache_counters.hpp"
#include "process_counters.hpp"
#include "report.hpp"

namespace augment {

struct RunMeasurement {
  ProcessCounters delta;  // over the run
  PeakRss peak_rss;
  CacheMisses cache_misses;  // all empty when cache_counters is null or unavailable
};

class RunMeter {
 public:
  // cache_counters: the process's counters, started at the top of main (see cache_counters.hpp),
  // or null; it must outlive the meter.
  explicit RunMeter(const CacheCounters* cache_counters = nullptr) : cache_(cache_counters) {}
  void start();
  RunMeasurement stop() const;

 private:
  const CacheCounters* cache_;
  ProcessCounters before_;
  CacheMisses misses_before_;
  PeakRssMeter rss_;
};

// Appends user_s, sys_s, voluntary_switches, involuntary_switches, minor_faults, major_faults,
// device_write_bytes, cancelled_write_bytes, device_read_bytes, wchar, rchar, peak_rss_bytes,
// peak_rss_over_run, l1_dcm, l2_dcm, l3_dcm; what was not measured is null.
void append_measurement_fields(Fields& run, const RunMeasurement& m);

}  // namespace augment
