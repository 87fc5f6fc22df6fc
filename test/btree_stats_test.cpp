// BTreeStats::operator+= adds every field, and ControllerStats prints every tree counter. The
// fields are set by name here (not through kBTreeStatsFields) so that a field the list forgot
// would show up as a wrong sum, independently of the list.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

#include "tai/btree.hpp"
#include "tai/controller_stats.hpp"

namespace tai::test {
namespace {

// Distinct values per field: field i gets base + i.
BTreeStats numbered(std::uint64_t base) {
  BTreeStats s;
  std::uint64_t i = base;
  s.cached_bytes = i++;
  s.dirty_bytes = i++;
  s.blocks = i++;
  s.dirty_blocks = i++;
  s.nodes = i++;
  s.reroutes = i++;
  s.uncached = i++;
  s.merges = i++;
  s.merged_bytes = i++;
  s.write_throughs = i++;
  s.cache_hits = i++;
  s.fills = i++;
  s.restructures = i++;
  s.quiesces = i++;
  s.engine_reads = i++;
  s.engine_writes = i++;
  s.bytes_from_engine = i++;
  s.bytes_to_engine = i++;
  s.write_back_errors = i++;
  s.inline_ops = i++;
  s.size_refreshes = i++;
  s.node_bytes = i++;
  s.collects = i++;
  s.gathered_blocks = i++;
  s.write_arounds = i++;
  return s;
}

TEST(BTreeStats, SumAddsEveryField) {
  BTreeStats sum = numbered(1);
  sum += numbered(1000);
  const BTreeStats want = numbered(1001);  // (1 + i) + (1000 + i) = 1001 + 2i
  std::uint64_t i = 0;
  for (std::uint64_t BTreeStats::*field : kBTreeStatsFields) {
    EXPECT_EQ(sum.*field, want.*field + i) << "field " << i;
    ++i;
  }
  // The same by name, in case the list itself misses a field.
  EXPECT_EQ(sum.cached_bytes, 1001u);
  EXPECT_EQ(sum.collects, 1001u + 2 * 22);
  EXPECT_EQ(sum.write_arounds, 1001u + 2 * 24);
  EXPECT_EQ(sum.write_back_errors, 1001u + 2 * 18);
  EXPECT_EQ(sum.size_refreshes, 1001u + 2 * 20);
  EXPECT_EQ(sum.node_bytes, 1001u + 2 * 21);
  EXPECT_EQ(sum.gathered_blocks, 1001u + 2 * 23);
}

TEST(BTreeStats, FieldListNamesEachFieldOnce) {
  // With the static_assert on the size, distinct entries mean every field is listed.
  const BTreeStats s = numbered(1);
  std::set<std::uint64_t> seen;
  for (std::uint64_t BTreeStats::*field : kBTreeStatsFields) EXPECT_TRUE(seen.insert(s.*field).second);
  EXPECT_EQ(seen.size(), std::size(kBTreeStatsFields));
}

TEST(BTreeStats, ControllerStatsTablePrintsTreeCounters) {
  const std::string table = ControllerStats{}.table();
  for (const char* row : {"uncached", "restructures", "quiesces", "write-back errors", "inline ops",
                          "size refreshes", "collects", "blocks", "dirty blocks", "nodes", "node bytes"})
    EXPECT_NE(table.find(row), std::string::npos) << "no row '" << row << "':\n" << table;
}

}  // namespace
}  // namespace tai::test
