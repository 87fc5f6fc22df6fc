// The write-copy arena (src/controller/copy_arena.hpp): pages mapped once and lent again, runs
// merged when they come back, the mapping capped, and lent buffers valid after the owner let go.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "src/controller/copy_arena.hpp"

namespace tai::test {
namespace {

using detail::AlignedBuffer;
using detail::CopyArena;
constexpr std::size_t kKiB = 1024, kMiB = kKiB * kKiB;

// The owner's reference, dropped at the end of the scope (as the controller drops it).
struct ArenaRef {
  explicit ArenaRef(std::uint64_t cap, bool huge_pages = false) : a(CopyArena::create(cap, huge_pages)) {}
  ~ArenaRef() { a->drop(); }
  CopyArena* operator->() const { return a; }
  CopyArena* a;
};

AlignedBuffer take(CopyArena* a, std::size_t n, bool* mapped = nullptr) {
  bool m = false;
  AlignedBuffer b = a->take(n, m);
  if (mapped) *mapped = m;
  return b;
}

TEST(CopyArena, APageRunComesBackToTheNextTakeOfItsSize) {
  ArenaRef a(32 * kMiB);
  bool mapped = false;
  AlignedBuffer b = take(a.a, 200 * kKiB, &mapped);
  ASSERT_FALSE(b.empty());
  EXPECT_TRUE(mapped) << "the first take maps a chunk";
  EXPECT_TRUE(b.borrowed());
  EXPECT_EQ(b.size(), 200 * kKiB) << "a multiple of the page size stays as asked";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % CopyArena::kPage, 0u);
  std::memset(b.data(), 0x5a, b.size());
  std::byte* first = b.data();
  b.reset();
  EXPECT_EQ(a->free_bytes(), a->mapped_bytes()) << "every page is back";
  AlignedBuffer again = take(a.a, 200 * kKiB, &mapped);
  EXPECT_FALSE(mapped) << "no new chunk for a size the arena has free";
  EXPECT_EQ(again.data(), first) << "best fit: the same run, cut from the same end";
  EXPECT_EQ(a->mapped_bytes(), CopyArena::kChunk);
}

// With huge pages asked for, a chunk starts on a 2 MiB boundary, so that its two halves can be
// transparent huge pages (a whole-chunk take is the chunk itself); the memory works as any other.
TEST(CopyArena, HugePageChunksAreAlignedToTheHugePage) {
  ArenaRef a(32 * kMiB, /*huge_pages=*/true);
  AlignedBuffer whole = take(a.a, CopyArena::kChunk);
  ASSERT_FALSE(whole.empty());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(whole.data()) % CopyArena::kHugePage, 0u);
  std::memset(whole.data(), 0x33, whole.size());
  AlignedBuffer piece = take(a.a, 300 * kKiB);
  ASSERT_FALSE(piece.empty());
  EXPECT_EQ((reinterpret_cast<std::uintptr_t>(piece.data()) + piece.size()) % CopyArena::kHugePage, 0u)
      << "a piece is cut from the end of a new aligned chunk";
  std::memset(piece.data(), 0x44, piece.size());
  EXPECT_EQ(a->mapped_bytes(), 2 * CopyArena::kChunk);
  whole.reset();
  piece.reset();
  EXPECT_EQ(a->free_bytes(), a->mapped_bytes());
}

TEST(CopyArena, SizesAreRoundedUpToWholePages) {
  ArenaRef a(32 * kMiB);
  AlignedBuffer b = take(a.a, 100 * kKiB + 1);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.size(), 100 * kKiB + CopyArena::kPage);
}

TEST(CopyArena, NeighboursMergeSoALargerCopyFitsWithoutANewChunk) {
  ArenaRef a(32 * kMiB);
  AlignedBuffer x = take(a.a, 1 * kMiB), y = take(a.a, 1 * kMiB), z = take(a.a, 1 * kMiB);
  ASSERT_FALSE(x.empty() || y.empty() || z.empty());
  EXPECT_EQ(a->mapped_bytes(), CopyArena::kChunk) << "three 1 MiB copies fit one 4 MiB chunk";
  // Runs are cut from a chunk's end: x is the top megabyte, then y, then z, and the chunk's
  // lowest megabyte is spare. Give back z and y: with the spare one they must merge into one run
  // of 3 MiB.
  z.reset();
  y.reset();
  bool mapped = true;
  AlignedBuffer big = take(a.a, 3 * kMiB, &mapped);
  ASSERT_FALSE(big.empty());
  EXPECT_FALSE(mapped) << "the freed runs merged: 3 MiB fit without mapping";
  EXPECT_EQ(a->mapped_bytes(), CopyArena::kChunk);
  // The merged run does not overlap the one still lent.
  const auto lo = [](const AlignedBuffer& b) { return reinterpret_cast<std::uintptr_t>(b.data()); };
  EXPECT_TRUE(lo(big) + big.size() <= lo(x) || lo(x) + x.size() <= lo(big));
}

TEST(CopyArena, TheCapBoundsTheMappingAndRefusesWhatDoesNotFit) {
  ArenaRef a(6 * kMiB);
  AlignedBuffer first = take(a.a, 3 * kMiB);
  ASSERT_FALSE(first.empty());
  AlignedBuffer second = take(a.a, 1 * kMiB);  // from the first chunk's spare megabyte
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(a->mapped_bytes(), CopyArena::kChunk);
  AlignedBuffer third = take(a.a, 2 * kMiB);  // a chunk of 4 MiB would pass the cap: mapped to size
  ASSERT_FALSE(third.empty());
  EXPECT_EQ(a->mapped_bytes(), CopyArena::kChunk + 2 * kMiB);
  EXPECT_TRUE(take(a.a, 1 * kMiB).empty()) << "no run fits and the cap is reached";
  EXPECT_TRUE(take(a.a, 7 * kMiB).empty()) << "larger than the cap";
  EXPECT_LE(a->mapped_bytes(), 6 * kMiB);
}

TEST(CopyArena, ALentBufferOutlivesItsOwner) {
  AlignedBuffer kept;
  {
    ArenaRef a(8 * kMiB);
    kept = take(a.a, 64 * kKiB);
    ASSERT_FALSE(kept.empty());
  }  // the owner's reference is gone: the arena stays until the buffer comes back
  std::memset(kept.data(), 0x11, kept.size());
  EXPECT_EQ(std::to_integer<int>(kept.data()[kept.size() - 1]), 0x11);
  kept.reset();  // the last reference: unmapped now (ASan and the tools see any later use)
}

TEST(CopyArena, ASteadyStreamOfVaryingSizesStopsMapping) {
  ArenaRef a(32 * kMiB);
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> size(17 * kKiB, 900 * kKiB);
  std::vector<AlignedBuffer> window;
  std::uint64_t maps_late = 0;
  for (int i = 0; i < 4000; ++i) {
    bool mapped = false;
    window.push_back(take(a.a, size(rng), &mapped));
    ASSERT_FALSE(window.back().empty()) << "write " << i;
    if (i >= 200 && mapped) ++maps_late;
    if (window.size() > 8) window.erase(window.begin());
  }
  EXPECT_EQ(maps_late, 0u) << "after the warm-up, every copy found free pages";
  EXPECT_LE(a->mapped_bytes(), 32 * kMiB);
  window.clear();
  EXPECT_EQ(a->free_bytes(), a->mapped_bytes());
}

// Threads take and give back at once: no two lent runs overlap (each thread fills its buffer
// with its own byte and checks it before giving it back), and every page is free at the end.
TEST(CopyArena, ThreadsTakeAndGiveBackConcurrently) {
  ArenaRef a(64 * kMiB);
  const int threads = 4, rounds = 400;
  std::vector<std::thread> ts;
  std::vector<int> bad(threads, 0);
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      std::uniform_int_distribution<std::size_t> size(20 * kKiB, 2 * kMiB);
      std::vector<AlignedBuffer> held;
      for (int i = 0; i < rounds; ++i) {
        bool mapped = false;
        AlignedBuffer b = a->take(size(rng), mapped);
        if (b.empty()) continue;  // the cap: the caller would use the allocator
        std::memset(b.data(), t + 1, b.size());
        held.push_back(std::move(b));
        if (held.size() > 3) {
          const AlignedBuffer& old = held.front();
          for (std::size_t k = 0; k < old.size(); k += 997)
            if (std::to_integer<int>(old.data()[k]) != t + 1) ++bad[static_cast<std::size_t>(t)];
          held.erase(held.begin());
        }
      }
    });
  for (auto& th : ts) th.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(bad[static_cast<std::size_t>(t)], 0) << "thread " << t << " saw another's bytes";
  EXPECT_EQ(a->free_bytes(), a->mapped_bytes());
  EXPECT_LE(a->mapped_bytes(), 64 * kMiB);
}

}  // namespace
}  // namespace tai::test
