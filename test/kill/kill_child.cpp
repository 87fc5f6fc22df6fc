// tai_kill_child: the process the kill suite (kill_test.cpp) SIGKILLs. It writes a workload
// derived from --seed through a tai::Controller and narrates it on descriptor 3 (kill_protocol.hpp)
// so that the parent can pick the moment of the kill from the operations themselves and check
// the files afterwards.
//
//     tai_kill_child --dir D --seed S --engine posix|uring --tree default|trivial
//
// Everything else (files, operation mix, window, quota, workers) follows from the seed, so a
// failing seed replays the same operations (not the same timing: the kill is the parent's).
// A separate binary rather than a fork of the test process: the test runner may hold locks in
// other threads, and ThreadSanitizer does not support a forked child that starts threads.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tai/controller.hpp"
#include "test/kill/kill_protocol.hpp"

namespace {

using tai::test::kill::Event;
using tai::test::kill::EventKind;
using tai::test::kill::kEventFd;

void emit(EventKind kind, std::uint32_t file, std::uint64_t op, std::uint64_t offset = 0,
          std::uint64_t length = 0, std::uint64_t detail = 0) {
  const Event e{kind, file, op, offset, length, detail};
  for (;;) {
    const ssize_t n = ::write(kEventFd, &e, sizeof e);
    if (n == static_cast<ssize_t>(sizeof e)) return;
    if (n < 0 && errno == EINTR) continue;
    // The parent is gone (or the pipe broke): nobody is left to check anything.
    std::_Exit(3);
  }
}

struct Args {
  std::string dir, engine = "posix", tree = "default";
  std::uint64_t seed = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--dir") a.dir = value;
    else if (key == "--seed") a.seed = std::strtoull(value.c_str(), nullptr, 0);
    else if (key == "--engine") a.engine = value;
    else if (key == "--tree") a.tree = value;
    else {
      std::fprintf(stderr, "tai_kill_child: unknown option %s\n", key.c_str());
      std::exit(2);
    }
  }
  if (a.dir.empty()) {
    std::fprintf(stderr, "tai_kill_child: --dir is required\n");
    std::exit(2);
  }
  return a;
}

// One operation the child keeps in flight, with what the parent must hear when it finishes.
struct InFlight {
  std::uint64_t op;
  std::uint32_t file;
};

template <class Tree>
int run(const Args& args) {
  std::mt19937_64 rng(args.seed);
  auto pick = [&](std::uint64_t n) { return n == 0 ? 0 : rng() % n; };

  // The shape of this run. Tiny files and a few hundred operations: a run takes a few ms, so
  // that a CI run affords a thousand kills.
  const unsigned files = 1 + static_cast<unsigned>(pick(3));
  const std::uint64_t span = std::uint64_t{16} << 10 << pick(3);  // 16, 32 or 64 KiB per file
  const unsigned ops = 40 + static_cast<unsigned>(pick(160));
  const unsigned window = 1 + static_cast<unsigned>(pick(12));
  const unsigned sync_percent = 5 + static_cast<unsigned>(pick(15));

  tai::ControllerOptions opts;
  opts.workers = 1 + static_cast<unsigned>(pick(2));
  opts.engine_options.depth = 32;
  opts.write_copy_budget = std::uint64_t{4} << 20;
  switch (pick(3)) {
    case 0:  // a quota smaller than the data: recycle rounds write back and evict all the time
      opts.strict_quota = std::uint64_t{32} << 10;
      opts.weak_quota = std::uint64_t{16} << 10;
      break;
    case 1:  // no idle flush: only syncs, recycling and shutdown write back
      opts.flush_idle_ns = -1;
      break;
    default:  // an eager idle flush
      opts.flush_idle_ns = 100'000;
      break;
  }
  tai::Controller ctl(opts);

  std::vector<tai::File> handles;
  for (unsigned f = 0; f < files; ++f) {
    const std::string path = args.dir + "/file" + std::to_string(f);
    auto opened = ctl.open<Tree>(path, tai::Open::write | tai::Open::create | tai::Open::truncate, args.engine);
    if (!opened) {
      std::fprintf(stderr, "tai_kill_child: open %s: %s\n", path.c_str(), opened.error().message.c_str());
      return 2;
    }
    handles.push_back(std::move(*opened));
  }
  std::vector<std::uint64_t> logical_size(files, 0);
  // The last few writes of each file, for exact overwrites of a range written before.
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> recent(files);
  emit(EventKind::started, files, 0, span, ops);

  std::vector<tai::Receipt> receipts;
  std::vector<InFlight> meta;
  // Reports every finished receipt (in the order they sit, not the order they finished: the
  // parent does not care) and forgets it; with `block`, first waits until one has finished.
  auto reap = [&](bool block) {
    if (block && !receipts.empty()) tai::Receipt::wait_any(receipts.data(), receipts.size());
    for (std::size_t i = 0; i < receipts.size();) {
      if (!receipts[i].finished()) {
        ++i;
        continue;
      }
      emit(EventKind::op_completed, meta[i].file, meta[i].op, 0, 0, receipts[i].ok() ? 1 : 0);
      receipts.erase(receipts.begin() + static_cast<std::ptrdiff_t>(i));
      meta.erase(meta.begin() + static_cast<std::ptrdiff_t>(i));
    }
  };

  std::vector<unsigned char> buffer;
  for (std::uint64_t op = 0; op < ops; ++op) {
    while (receipts.size() >= window) reap(true);
    const auto file = static_cast<std::uint32_t>(pick(files));
    tai::File& f = handles[file];
    const unsigned roll = static_cast<unsigned>(pick(100));
    if (roll < sync_percent) {
      const bool data_only = pick(4) == 0;
      emit(EventKind::sync_submitted, file, op, 0, 0, data_only ? 1 : 0);
      receipts.push_back(data_only ? f.fdatasync() : f.fsync());
      meta.push_back({op, file});
    } else {
      std::uint64_t offset, length;
      if (roll < sync_percent + 20 && !recent[file].empty()) {  // overwrite an earlier range
        const auto& r = recent[file][pick(recent[file].size())];
        offset = r.first;
        length = r.second;
      } else if (roll < sync_percent + 45 && logical_size[file] < span) {  // append
        offset = logical_size[file];
        length = 1 + pick(4096);
      } else {  // anywhere in the span, sometimes whole aligned blocks
        if (pick(3) == 0) {
          offset = pick(span / 4096) * 4096;
          length = 4096 * (1 + pick(2));
        } else {
          offset = pick(span);
          length = 1 + pick(6000);
        }
      }
      buffer.resize(length);
      tai::test::kill::fill_content(buffer.data(), args.seed, file, op, offset, length);
      emit(EventKind::write_submitted, file, op, offset, length);
      receipts.push_back(f.write(offset, buffer.data(), length));
      meta.push_back({op, file});
      logical_size[file] = std::max(logical_size[file], offset + length);
      if (recent[file].size() < 8) recent[file].push_back({offset, length});
      else recent[file][pick(8)] = {offset, length};
    }
    reap(false);
  }
  while (!receipts.empty()) reap(true);
  // A clean end: every file closed (its data written back to the kernel), then the controller
  // shut down. Once the parent hears shutdown_done ok, every write must be in the files.
  bool clean = true;
  for (tai::File& f : handles) {
    const tai::Receipt closed = f.close();
    if (!closed.ok()) {
      std::fprintf(stderr, "tai_kill_child: close: %s\n", closed.message().c_str());
      clean = false;
    }
  }
  const tai::ShutdownReport report = ctl.shutdown();
  if (!report.ok()) std::fprintf(stderr, "tai_kill_child: shutdown: %s\n", report.to_string().c_str());
  emit(EventKind::shutdown_done, 0, ops, 0, 0, clean && report.ok() ? 1 : 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const int rc = args.tree == "trivial" ? run<tai::BTreeTrivial>(args) : run<tai::BTreeDefault>(args);
  if (rc != 0) return rc;
  // Done before the parent's chosen moment: wait for the kill all the same, so that every run
  // ends the same way and the parent decides when the files are checked.
  for (;;) ::pause();
}
