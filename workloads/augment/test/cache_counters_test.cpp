// The PAPI cache-miss counters: on a machine without counters (this project's VM) they must say
// "n/a" with one line of reason and never a number; where counters exist, misses must grow,
// including those of a thread created after start().
#include <gtest/gtest.h>

#include <iostream>
#include <thread>
#include <vector>

#include "cache_counters.hpp"

using namespace augment;

namespace {
// Walks a buffer larger than any L2 with a cache-line stride: misses on every level.
std::uint64_t touch(std::size_t bytes) {
  std::vector<unsigned char> buf(bytes, 1);
  std::uint64_t sum = 0;
  for (int pass = 0; pass < 4; ++pass)
    for (std::size_t i = 0; i < buf.size(); i += 64) sum += buf[i]++;
  return sum;
}
}  // namespace

TEST(AugmentCacheCounters, CountOrSayWhyNot) {
  CacheCounters counters;
  const bool started = counters.start();
  EXPECT_EQ(started, counters.available());
  if (!started) {
    ASSERT_FALSE(counters.reason().empty());
    EXPECT_EQ(counters.reason().find('\n'), std::string::npos);
    EXPECT_EQ(counters.reason().rfind("PAPI", 0), 0u) << counters.reason();
    EXPECT_FALSE(counters.read().any());
    std::cout << "cache counters n/a: " << counters.reason() << "\n";
    return;
  }
  const CacheMisses before = counters.read();
  ASSERT_TRUE(before.any());
  std::uint64_t sum = 0;
  std::thread worker([&sum] { sum = touch(64u << 20); });  // created after start(): inherited
  worker.join();
  const CacheMisses d = counters.read() - before;
  EXPECT_GT(sum, 0u);
  ASSERT_TRUE(d.misses[0].has_value()) << counters.reason();
  // 4 passes over 64 MiB at one line each: about 4M lines; some misses are certain on any cache.
  EXPECT_GT(*d.misses[0], 100000u);
  counters.stop();
  EXPECT_FALSE(counters.available());
}

TEST(AugmentCacheCounters, DifferenceKeepsUnavailableLevelsEmpty) {
  CacheMisses a, b;
  a.misses = {100u, 50u, std::nullopt};
  b.misses = {40u, std::nullopt, std::nullopt};
  const CacheMisses d = a - b;
  ASSERT_TRUE(d.misses[0].has_value());
  EXPECT_EQ(*d.misses[0], 60u);
  EXPECT_FALSE(d.misses[1].has_value());
  EXPECT_FALSE(d.misses[2].has_value());
  EXPECT_STREQ(CacheCounters::event_name(2), "PAPI_L3_DCM");
}
