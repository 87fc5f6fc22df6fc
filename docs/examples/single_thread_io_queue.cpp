// tai::IoQueue: one thread, an engine, callbacks run by reap(). The shape of the ioqueue
// benchmark: submit until the depth is reached, reap to make room, drain at the end.
//
//     single_thread_io_queue <scratch-file> [engine]
//
// The engine defaults to "auto" (uring, else libaio, else posix, which runs on a thread pool).
#include <tai/tai.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <scratch-file> [engine]\n", argv[0]);
    return 2;
  }
  const std::string engine = argc > 2 ? argv[2] : "auto";
  tai::IoQueueOptions options;
  options.depth = 8;
  auto made = tai::IoQueue::create(engine, options);
  if (!made) {
    std::fprintf(stderr, "IoQueue::create(%s): %s\n", engine.c_str(), made.error().message.c_str());
    return 1;
  }
  tai::IoQueue& q = *made.value();
  auto opened = q.engine().open(argv[1], {tai::Open::read | tai::Open::write | tai::Open::create | tai::Open::truncate});
  if (!opened) {
    std::fprintf(stderr, "open: %s\n", opened.error().message.c_str());
    return 1;
  }
  tai::EngineFile& file = *opened.value();

  constexpr std::size_t kBlock = 4096;
  constexpr std::size_t kBlocks = 64;
  std::vector<unsigned char> data(kBlock * kBlocks);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i % 251);
  std::size_t errors = 0, written = 0;
  for (std::size_t b = 0; b < kBlocks; ++b) {
    // The callback runs inside a later reap() on this thread.
    auto cb = [&](std::int64_t result) {
      if (result != std::int64_t(kBlock)) ++errors;
      ++written;
    };
    while (q.pwrite(file, data.data() + b * kBlock, kBlock, b * kBlock, cb)) q.reap(1);  // depth reached
    q.reap(0);
  }
  while (q.in_flight() != 0) q.reap(1);
  bool synced = false;
  while (q.fsync(file, [&](std::int64_t result) { synced = result == 0; })) q.reap(1);
  while (q.in_flight() != 0) q.reap(1);

  std::vector<unsigned char> back(data.size());
  std::size_t read_bad = 0;
  for (std::size_t b = 0; b < kBlocks; ++b) {
    auto cb = [&, b](std::int64_t result) {
      if (result != std::int64_t(kBlock)) ++read_bad;
      for (std::size_t k = 0; k < kBlock && result == std::int64_t(kBlock); ++k)
        if (back[b * kBlock + k] != data[b * kBlock + k]) {
          ++read_bad;
          break;
        }
    };
    while (q.pread(file, back.data() + b * kBlock, kBlock, b * kBlock, cb)) q.reap(1);
  }
  while (q.in_flight() != 0) q.reap(1);
  q.engine().close(file);
  opened.value().reset();  // files go before the queue (and its engine)
  std::printf("single_thread_io_queue: engine %s, %zu writes (%zu failed), fsync %s, %zu bad reads\n",
              std::string(q.engine().name()).c_str(), written, errors, synced ? "ok" : "failed", read_bad);
  return errors == 0 && synced && read_bad == 0 ? 0 : 1;
}
