// A reader that keeps a fixed number of reads in flight through the controller, without waiting
// for the oldest: each receipt posts its tag to a CompletionQueue, and the loop refills a slot as
// soon as its read finished.
//
//     queue_depth_reader <scratch-file>
//
// Writes a test file first, then reads it back at depth 16 and checks every byte.
#include <tai/tai.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {
unsigned char byte_at(std::uint64_t offset) { return static_cast<unsigned char>((offset * 131) >> 7); }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <scratch-file>\n", argv[0]);
    return 2;
  }
  constexpr std::size_t kBlock = 16 * 1024;
  constexpr std::size_t kBlocks = 256;
  constexpr std::size_t kDepth = 16;

  tai::Controller ctl;
  auto file = ctl.open<tai::BTreeTrivial>(argv[1], tai::Open::read | tai::Open::write | tai::Open::create |
                                                        tai::Open::truncate);
  if (!file) {
    std::fprintf(stderr, "open: %s\n", file.error().message.c_str());
    return 1;
  }
  std::vector<unsigned char> data(kBlock * kBlocks);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = byte_at(i);
  if (tai::Receipt w = file->write(0, data.data(), data.size()); !w.ok() || !file->fsync().ok()) {
    std::fprintf(stderr, "write: %s\n", w.message().c_str());
    return 1;
  }

  tai::CompletionQueue done(kDepth);  // must outlive every receipt attached to it
  std::array<std::vector<unsigned char>, kDepth> buffers;
  std::array<std::uint64_t, kDepth> offsets{};
  std::array<tai::Receipt, kDepth> receipts;
  std::size_t next = 0, finished = 0, bad = 0;
  auto start = [&](std::uint64_t slot) {
    buffers[slot].resize(kBlock);
    offsets[slot] = std::uint64_t(next++) * kBlock;
    receipts[slot] = file->read(offsets[slot], buffers[slot].data(), kBlock);
    receipts[slot].then(done.post(slot));
  };
  for (std::uint64_t slot = 0; slot < kDepth && next < kBlocks; ++slot) start(slot);
  std::uint64_t tags[kDepth];
  while (finished < kBlocks) {
    const std::size_t n = done.pop(tags, kDepth);  // waits for at least one
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t slot = tags[i];
      const tai::Receipt& r = receipts[slot];
      if (!r.ok() || r.bytes() != std::int64_t(kBlock)) ++bad;
      for (std::size_t k = 0; k < kBlock && r.ok(); ++k)
        if (buffers[slot][k] != byte_at(offsets[slot] + k)) {
          ++bad;
          break;
        }
      ++finished;
      if (next < kBlocks) start(slot);
    }
  }
  if (!file->close().ok()) return 1;
  std::printf("queue_depth_reader: %zu reads of %zu bytes at depth %zu, %zu bad\n", kBlocks, kBlock, kDepth, bad);
  return bad == 0 ? 0 : 1;
}
