// The HPC use: a compute loop that writes its results through TAI and keeps computing while the
// controller's workers do the I/O. One fsync at the end says when everything is durable.
//
//     hpc_include <output-file>
//
// Prints one line; exits 0 when every byte read back matches what was written.
#include <tai/tai.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output-file>\n", argv[0]);
    return 2;
  }
  tai::ControllerOptions opts;  // defaults; set only what differs
  opts.workers = 2;
  tai::Controller ctl(opts);
  auto file = ctl.open<tai::BTreeDefault>(argv[1], tai::Open::read | tai::Open::write | tai::Open::create |
                                                        tai::Open::truncate);
  if (!file) {
    std::fprintf(stderr, "open: %s\n", file.error().message.c_str());
    return 1;
  }

  constexpr std::size_t kChunk = 64 * 1024;
  constexpr int kSteps = 64;
  std::vector<double> field(kChunk / sizeof(double), 1.0);
  std::vector<tai::Receipt> writes;
  for (int step = 0; step < kSteps; ++step) {
    for (double& x : field) x = x * 0.5 + step;  // the "computation"
    // write() copies the bytes and returns at once: the next step may overwrite `field`.
    writes.push_back(file->write(std::uint64_t(step) * kChunk, field.data(), kChunk));
  }
  tai::Receipt synced = file->fsync();  // covers every write submitted before it
  if (!synced.ok()) {
    std::fprintf(stderr, "fsync: %s\n", synced.message().c_str());
    return 1;
  }
  for (const tai::Receipt& w : writes)
    if (!w.ok()) {
      std::fprintf(stderr, "write: %s\n", w.message().c_str());
      return 1;
    }

  // Read the last step back and compare it with what is still in memory.
  std::vector<double> back(field.size());
  tai::Receipt r = file->read(std::uint64_t(kSteps - 1) * kChunk, back.data(), kChunk);
  if (!r.ok() || r.bytes() != std::int64_t(kChunk) || std::memcmp(back.data(), field.data(), kChunk) != 0) {
    std::fprintf(stderr, "read back: %s\n", r.ok() ? "different bytes" : r.message().c_str());
    return 1;
  }
  if (!file->close().ok()) return 1;
  std::printf("hpc_include: wrote %d chunks of %zu bytes on engine %s, synced, read back: ok\n", kSteps, kChunk,
              ctl.engine_note().c_str());
  return 0;
}
