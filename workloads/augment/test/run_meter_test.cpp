// The run meter: the figures of a run land in the report under the schema's names, with null for
// what this machine does not measure.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "run_meter.hpp"

using namespace augment;

namespace {
const Value* field(const Fields& f, const std::string& key) {
  for (const auto& kv : f)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
}  // namespace

TEST(AugmentRunMeter, MeasuresAWriteAndReportsEveryField) {
  CacheCounters cache;  // unavailable here (no PMU): its three fields must be null
  cache.start();
  RunMeter meter(&cache);
  meter.start();
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/tai_augment_meter." + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  std::vector<char> data(1 << 20, 'm');
  ASSERT_EQ(::write(fd, data.data(), data.size()), ssize_t(data.size()));
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
  ::unlink(path.c_str());
  const RunMeasurement m = meter.stop();
  if (m.delta.io_available) {
    EXPECT_GE(m.delta.wchar, data.size());
  }
  EXPECT_GT(m.peak_rss.bytes, data.size());

  Fields run = {{"method", "posix"}};
  append_measurement_fields(run, m);
  for (const char* key : {"user_s", "sys_s", "voluntary_switches", "involuntary_switches", "minor_faults",
                          "major_faults", "device_write_bytes", "cancelled_write_bytes", "device_read_bytes", "wchar",
                          "rchar", "peak_rss_bytes", "peak_rss_over_run", "l1_dcm", "l2_dcm", "l3_dcm"})
    EXPECT_NE(field(run, key), nullptr) << key;
  EXPECT_EQ(field(run, "device_write_bytes")->is_null(), !m.delta.io_available);
  EXPECT_FALSE(field(run, "peak_rss_bytes")->is_null());
  for (int level = 0; level < 3; ++level)
    EXPECT_EQ(field(run, std::string("l") + char('1' + level) + "_dcm")->is_null(),
              !m.cache_misses.misses[std::size_t(level)].has_value());
  if (!cache.available()) {
    EXPECT_TRUE(field(run, "l1_dcm")->is_null());
  }
}
