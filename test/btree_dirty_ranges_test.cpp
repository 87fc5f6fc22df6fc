// tai::detail::DirtyRanges: coalescing, bridging the smallest gap, clean gaps for fills.
#include <gtest/gtest.h>

#include "src/btree/dirty.hpp"

namespace tai::detail {
namespace {

TEST(BTreeDirtyRanges, OverlappingAndTouchingRangesCoalesce) {
  DirtyRanges d;
  EXPECT_EQ(d.add(10, 20).joined, 0);
  EXPECT_EQ(d.add(20, 30).joined, 1);  // touching
  ASSERT_EQ(d.count(), 1);
  EXPECT_EQ(d[0].begin, 10u);
  EXPECT_EQ(d[0].end, 30u);
  EXPECT_EQ(d.add(50, 60).joined, 0);
  EXPECT_EQ(d.add(25, 55).joined, 2);  // swallows both
  ASSERT_EQ(d.count(), 1);
  EXPECT_EQ(d[0].begin, 10u);
  EXPECT_EQ(d[0].end, 60u);
  EXPECT_EQ(d.bytes(), 50u);
  EXPECT_TRUE(d.covers(10, 60));
  EXPECT_FALSE(d.covers(5, 15));
  EXPECT_EQ(d.overlap(0, 15), 5u);
}

TEST(BTreeDirtyRanges, AFifthRangeBridgesTheSmallestGap) {
  DirtyRanges d;
  d.add(0, 10);
  d.add(100, 110);
  d.add(1000, 1010);
  d.add(1015, 1020);  // gap of 5
  ASSERT_EQ(d.count(), 4);
  EXPECT_EQ(d.count_after(5000, 5001), 5);
  EXPECT_EQ(d.smallest_gap_after(5000, 5001), 5u);
  const DirtyRanges::AddResult r = d.add(5000, 5001);
  EXPECT_EQ(r.bridged, 5u);
  ASSERT_EQ(d.count(), 4);
  EXPECT_EQ(d[2].begin, 1000u);
  EXPECT_EQ(d[2].end, 1020u);
  EXPECT_TRUE(d.well_formed(8192));
}

TEST(BTreeDirtyRanges, CleanGapsListTheBytesAFillMustRead) {
  DirtyRanges d;
  d.add(100, 200);
  d.add(300, 400);
  std::uint64_t b = 0, e = 0;
  ASSERT_TRUE(d.next_clean(0, 1000, b, e));
  EXPECT_EQ(b, 0u);
  EXPECT_EQ(e, 100u);
  ASSERT_TRUE(d.next_clean(e, 1000, b, e));
  EXPECT_EQ(b, 200u);
  EXPECT_EQ(e, 300u);
  ASSERT_TRUE(d.next_clean(e, 1000, b, e));
  EXPECT_EQ(b, 400u);
  EXPECT_EQ(e, 1000u);
  EXPECT_FALSE(d.next_clean(e, 1000, b, e));
  EXPECT_FALSE(d.next_clean(0, 100, b, e) && b != 0);
  ASSERT_TRUE(d.next_clean(0, 350, b, e));
  d.erase_front(1);
  EXPECT_EQ(d.count(), 1);
  EXPECT_EQ(d[0].begin, 300u);
  d.assign_all(4096);
  EXPECT_EQ(d.bytes(), 4096u);
  EXPECT_FALSE(d.next_clean(0, 4096, b, e));
}

}  // namespace
}  // namespace tai::detail
