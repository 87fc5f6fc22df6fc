// The quota's huge-page chunks: blocks of 4 KiB to 1 MiB carved from 2 MiB-aligned chunks,
// reused through the chunk they came from, and every byte (in use, kept, not yet carved) still
// bounded by the strict limit.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "tai/quota.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kChunk = Quota::kChunkBytes;

std::uintptr_t chunk_base(const std::byte* p) { return reinterpret_cast<std::uintptr_t>(p) & ~(kChunk - 1); }

TEST(QuotaHugeChunks, SmallBlocksComeFromOneAlignedChunkAndGoBackToIt) {
  Quota q(64 * kMiB, 128 * kMiB, 1u << 10, Quota::kDefaultPoolLimit, Quota::kUnlimited, /*huge_pages=*/true);
  std::vector<std::byte*> blocks;
  for (int i = 0; i < 10; ++i) {
    std::byte* p = q.allocate(4096, 4096);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 4096, 0u);
    std::memset(p, i, 4096);  // the memory is usable
    blocks.push_back(p);
  }
  std::set<std::uintptr_t> bases;
  for (std::byte* p : blocks) bases.insert(chunk_base(p));
  EXPECT_EQ(bases.size(), 1u) << "ten 4 KiB blocks fit one chunk";
  EXPECT_EQ(q.chunks_mapped(), 1u);
  EXPECT_EQ(q.chunk_bytes(), kChunk);
  EXPECT_EQ(q.used(), 10u * 4096);
  EXPECT_EQ(q.pooled(), kChunk - 10 * 4096) << "the chunk's unhanded bytes count as kept";
  for (std::byte* p : blocks) q.release(p, 4096);
  EXPECT_EQ(q.used(), 0u);
  EXPECT_EQ(q.pooled(), kChunk);
  // The next blocks reuse the same chunk: no second mapping.
  std::byte* again = q.allocate(4096, 4096);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(chunk_base(again), *bases.begin());
  EXPECT_EQ(q.chunks_mapped(), 1u);
  // A block of another size gets a chunk of its own.
  std::byte* big = q.allocate(64 * 1024, 4096);
  ASSERT_NE(big, nullptr);
  EXPECT_NE(chunk_base(big), *bases.begin());
  EXPECT_EQ(q.chunks_mapped(), 2u);
  q.release(again, 4096);
  q.release(big, 64 * 1024);
  q.trim();
  EXPECT_EQ(q.chunk_bytes(), 0u);
  EXPECT_EQ(q.pooled(), 0u);
}

TEST(QuotaHugeChunks, TheStrictLimitBoundsChunksAndBlocksTogether) {
  // 5 MiB strict: two chunks fit (4 MiB), a third would not, so the last MiB comes from the
  // allocator block by block, and then the quota refuses.
  Quota q(4 * kMiB, 5 * kMiB, 1u << 10, Quota::kDefaultPoolLimit, Quota::kUnlimited, true);
  std::vector<std::byte*> blocks;
  for (;;) {
    std::byte* p = q.allocate(4096, 4096);
    if (p == nullptr) break;
    blocks.push_back(p);
    ASSERT_LE(q.used() + q.pooled(), q.strict()) << "after " << blocks.size() << " blocks";
  }
  EXPECT_EQ(blocks.size(), 5 * kMiB / 4096);
  EXPECT_EQ(q.chunks_mapped(), 2u);
  EXPECT_EQ(q.used(), 5 * kMiB);
  for (std::byte* p : blocks) q.release(p, 4096);
  EXPECT_EQ(q.used(), 0u);
  EXPECT_LE(q.pooled(), q.strict());
}

TEST(QuotaHugeChunks, KeptBytesInUsedChunksRefuseABlockRatherThanPassTheLimit) {
  Quota q(4 * kMiB, 4 * kMiB, 1u << 10, Quota::kDefaultPoolLimit, Quota::kUnlimited, true);
  std::vector<std::byte*> blocks;
  for (std::uint64_t i = 0; i < 4 * kMiB / 4096; ++i) {
    std::byte* p = q.allocate(4096, 4096);
    ASSERT_NE(p, nullptr);
    blocks.push_back(p);
  }
  ASSERT_EQ(q.chunks_mapped(), 2u);
  // Keep one block in use in each chunk; the rest is kept by the chunks.
  std::byte* keep[2] = {nullptr, nullptr};
  for (std::byte* p : blocks) {
    const int which = chunk_base(p) == chunk_base(blocks.front()) ? 0 : 1;
    if (keep[which] == nullptr)
      keep[which] = p;
    else
      q.release(p, 4096);
  }
  ASSERT_NE(keep[1], nullptr);
  EXPECT_EQ(q.used(), 8192u);
  EXPECT_EQ(q.used() + q.pooled(), 4 * kMiB);
  // An 8 KiB block fits the charge but not the memory: the chunks cannot give their bytes back.
  const std::uint64_t denials = q.denials();
  EXPECT_EQ(q.allocate(8192, 4096), nullptr);
  EXPECT_EQ(q.denials(), denials + 1);
  EXPECT_EQ(q.used(), 8192u);
  // A 4 KiB block comes from the kept bytes.
  std::byte* p = q.allocate(4096, 4096);
  ASSERT_NE(p, nullptr);
  q.release(p, 4096);
  // A chunk with nothing in use goes back to the kernel to make room.
  q.release(keep[0], 4096);
  std::byte* eight = q.allocate(8192, 4096);
  ASSERT_NE(eight, nullptr);
  EXPECT_LE(q.used() + q.pooled(), q.strict());
  q.release(eight, 8192);
  q.release(keep[1], 4096);
}

TEST(QuotaHugeChunks, ATinyQuotaMapsNoChunk) {
  Quota q(1 * kMiB, 2 * kMiB, 1u << 10, Quota::kDefaultPoolLimit, Quota::kUnlimited, true);
  std::byte* p = q.allocate(4096, 4096);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(q.chunks_mapped(), 0u);
  q.release(p, 4096);
}

TEST(QuotaHugeChunks, AnAlignmentAboveTheBlockSizeIsHonoured) {
  Quota q(64 * kMiB, 128 * kMiB, 1u << 10, Quota::kDefaultPoolLimit, Quota::kUnlimited, true);
  std::byte* a = q.allocate(4096, 4096);
  std::byte* b = q.allocate(4096, 65536);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 65536, 0u);
  q.release(a, 4096);
  q.release(b, 4096);
}

TEST(QuotaHugeChunks, ConcurrentAllocateAndReleaseStayUnderTheStrictLimit) {
  const std::uint64_t strict = 16 * kMiB;
  Quota q(8 * kMiB, strict, 1u << 10, Quota::kDefaultPoolLimit, Quota::kUnlimited, true);
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::pair<std::byte*, std::uint64_t>> held;
      for (int i = 0; i < 3000; ++i) {
        const std::uint64_t size = std::uint64_t{4096} << ((i + t) % 5);
        if (std::byte* p = q.allocate(size, 4096)) {
          p[0] = std::byte{1};
          p[size - 1] = std::byte{2};
          held.emplace_back(p, size);
        }
        if (held.size() > 64 || (i % 3 == 0 && !held.empty())) {
          q.release(held.back().first, held.back().second);
          held.pop_back();
        }
        if (q.chunk_bytes() > strict) over.store(true);
      }
      for (auto& [p, size] : held) q.release(p, size);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(over.load());
  EXPECT_EQ(q.used(), 0u);
  EXPECT_LE(q.pooled(), strict);
  EXPECT_LE(q.peak(), strict);
}

}  // namespace
}  // namespace tai::test
