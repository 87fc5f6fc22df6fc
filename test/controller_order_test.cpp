// Order (DESIGN section 2, "Order"): 8 threads share 4 files of one controller and submit random
// operations without waiting for each one. Each thread keeps a model of its own writes and
// checks every read it makes against it:
//  * its own region of each file (no other thread writes there): a read returns exactly the
//    model's bytes at the time the read was submitted; at the end the file (read with plain
//    pread after close) holds exactly the model;
//  * the shared region of each file (every thread writes there): every byte a thread writes
//    carries the writer's id in its top 3 bits and a sequence number in the low 5 (never 0), so
//    a read may see another thread's value or the reader's own latest value for that byte, but
//    never 0 after the reader wrote it and never an older value of the reader's own; at the end
//    each byte equals the last value some thread wrote to it.
// Hooks check that every earlier operation of their thread on their file has finished. fsync,
// fdatasync and barriers are mixed in. Over BTreeDefault and BTreeTrivial, the posix and uring
// engines, and a small quota (recycling and rerouting) with BTreeDefault.
//
// Operations: 50,000 per thread per file (1.6 million per case) in an optimised build, 1/5 in
// a debug build or under a sanitizer; TAI_CONTROLLER_ORDER_SCALE (a factor) overrides (`make
// soak` runs the suite at 2, the 100,000 it ran in CI before its six cases took 150 s of the
// release run's test time). The
// seed is printed with every failure; TAI_TEST_SEED=<seed> replays the same operation sequences
// (the interleaving of the threads differs from run to run).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr unsigned kThreads = 8;
constexpr unsigned kFiles = 4;
constexpr std::uint64_t kOwnBytes = 64 << 10;     // each thread's region in each file
constexpr std::uint64_t kSharedBytes = 32 << 10;  // the region every thread writes
constexpr std::uint64_t kSharedBase = kThreads * kOwnBytes;
constexpr std::uint64_t kFileBytes = kSharedBase + kSharedBytes;
constexpr std::size_t kMaxLength = 8192;
constexpr std::size_t kWindow = 32;  // requests one thread keeps in flight
// A receipt that has not finished after this long means a hang: the test aborts with the seed
// rather than run into ctest's timeout without saying anything.
constexpr auto kHang = std::chrono::seconds(120);

enum class TreeKind { default_tree, trivial };

struct OrderCase {
  const char* label;
  TreeKind tree;
  const char* engine;
  bool small_quota;
};

void PrintTo(const OrderCase& c, std::ostream* os) { *os << c.label; }

std::uint64_t ops_per_thread_and_file() {
  const double tsan = thread_sanitized_build() && !std::getenv("TAI_CONTROLLER_ORDER_SCALE") ? 0.5 : 1.0;
  const double v = 50000.0 * controller_test_scale("TAI_CONTROLLER_ORDER_SCALE") * tsan;
  return v < 500 ? 500 : static_cast<std::uint64_t>(v);
}

/// A shared-region byte value: writer id in the top 3 bits, 1..31 in the low 5 (never 0).
unsigned char shared_value(unsigned thread, std::uint64_t sequence) {
  return static_cast<unsigned char>((thread << 5) | (1 + sequence % 31));
}

struct FileModel {
  std::vector<unsigned char> own = std::vector<unsigned char>(kOwnBytes, 0);
  // The last value this thread wrote to each shared byte (0: it never wrote that byte).
  std::vector<unsigned char> shared_last = std::vector<unsigned char>(kSharedBytes, 0);
  Receipt last;  // this thread's latest operation on the file (hooks check it has finished)
};

struct InFlight {
  enum class Kind { none, write, read_own_into, read_own_buffer, read_shared_into, sync, hook };
  Kind kind = Kind::none;
  Receipt receipt;
  unsigned file = 0;
  std::uint64_t offset = 0;
  std::size_t length = 0;
  const char* what = "";
  std::vector<unsigned char> expected;                   // model bytes when the read was submitted
  std::vector<unsigned char> dst = std::vector<unsigned char>(kMaxLength);  // borrowed by read_*_into
};

/// One submitting thread: its models, its window of requests in flight, its failures.
class Submitter {
 public:
  Submitter(unsigned id, std::uint64_t seed, std::vector<File>& files, std::atomic<std::uint64_t>& hook_violations)
      : id_(id), seed_(seed), rng_(seed ^ (0xA5A5A5A5ull * (id + 1))), files_(files), hook_violations_(hook_violations),
        models_(files.size()), window_(kWindow), scratch_(kMaxLength) {}

  void run(std::uint64_t operations) {
    for (std::uint64_t i = 0; i < operations && failures_.size() < kMaxFailures; ++i) {
      InFlight& slot = window_[next_slot_];
      next_slot_ = (next_slot_ + 1) % kWindow;
      if (slot.kind != InFlight::Kind::none) check(slot);
      submit_one(slot);
    }
    for (std::size_t k = 0; k < kWindow; ++k) {
      InFlight& slot = window_[(next_slot_ + k) % kWindow];
      if (slot.kind != InFlight::Kind::none) check(slot);
    }
  }

  const std::vector<std::string>& failures() const { return failures_; }
  const FileModel& model(unsigned file) const { return models_[file]; }

 private:
  static constexpr std::size_t kMaxFailures = 10;

  std::size_t pick_length(std::size_t cap) {
    const unsigned r = static_cast<unsigned>(rng_() % 100);
    std::size_t n;
    if (r < 50) {
      n = 1 + rng_() % 64;
    } else if (r < 85) {
      n = 65 + rng_() % 960;
    } else {
      n = 1025 + rng_() % (kMaxLength - 1024);
    }
    return std::min(n, cap);
  }

  std::uint64_t own_base() const { return static_cast<std::uint64_t>(id_) * kOwnBytes; }

  void submit_one(InFlight& slot) {
    const unsigned f = static_cast<unsigned>(rng_() % files_.size());
    File& file = files_[f];
    FileModel& m = models_[f];
    slot.file = f;
    const unsigned r = static_cast<unsigned>(rng_() % 10000);
    if (r < 3800 || (r >= 9000 && r < 9990)) {
      // Own region write: a copied span (the source is scribbled over at once) or a moved Buffer.
      const std::size_t n = pick_length(kOwnBytes);
      const std::uint64_t at = rng_() % (kOwnBytes - n + 1);
      const unsigned char fill_seed = static_cast<unsigned char>(rng_());
      for (std::size_t i = 0; i < n; ++i) scratch_[i] = static_cast<unsigned char>(fill_seed + i * 7);
      std::memcpy(m.own.data() + at, scratch_.data(), n);
      slot.kind = InFlight::Kind::write;
      slot.offset = own_base() + at;
      slot.length = n;
      if (r < 3000 || r >= 9000) {
        slot.what = "write(span) own";
        slot.receipt = file.write(slot.offset, scratch_.data(), n);
        std::memset(scratch_.data(), 0xEE, n);  // write() copied: this must not show anywhere
      } else {
        slot.what = "write(Buffer) own";
        slot.receipt = file.write(slot.offset, Buffer::copy_of(scratch_.data(), n));
      }
    } else if (r < 6200) {
      const std::size_t n = pick_length(kOwnBytes);
      const std::uint64_t at = rng_() % (kOwnBytes - n + 1);
      slot.offset = own_base() + at;
      slot.length = n;
      slot.expected.assign(m.own.begin() + static_cast<std::ptrdiff_t>(at),
                           m.own.begin() + static_cast<std::ptrdiff_t>(at + n));
      if (r < 5600) {
        slot.kind = InFlight::Kind::read_own_into;
        slot.what = "read(into) own";
        std::memset(slot.dst.data(), 0xCC, n);
        slot.receipt = file.read(slot.offset, slot.dst.data(), n);
      } else {
        slot.kind = InFlight::Kind::read_own_buffer;
        slot.what = "read(Buffer) own";
        slot.receipt = file.read(slot.offset, n);
      }
    } else if (r < 8200) {
      const std::size_t n = pick_length(kSharedBytes);
      const std::uint64_t at = rng_() % (kSharedBytes - n + 1);
      const unsigned char v = shared_value(id_, shared_sequence_++);
      std::memset(scratch_.data(), v, n);
      std::memset(m.shared_last.data() + at, v, n);
      slot.kind = InFlight::Kind::write;
      slot.what = "write(span) shared";
      slot.offset = kSharedBase + at;
      slot.length = n;
      slot.receipt = file.write(slot.offset, scratch_.data(), n);
      std::memset(scratch_.data(), 0xEE, n);
    } else if (r < 9000) {
      const std::size_t n = pick_length(kSharedBytes);
      const std::uint64_t at = rng_() % (kSharedBytes - n + 1);
      slot.kind = InFlight::Kind::read_shared_into;
      slot.what = "read(into) shared";
      slot.offset = kSharedBase + at;
      slot.length = n;
      slot.expected.assign(m.shared_last.begin() + static_cast<std::ptrdiff_t>(at),
                           m.shared_last.begin() + static_cast<std::ptrdiff_t>(at + n));
      slot.receipt = file.read(slot.offset, slot.dst.data(), n);
    } else if (r < 9994) {
      slot.kind = InFlight::Kind::hook;
      slot.what = "hook";
      slot.length = 0;
      // Runs after every earlier operation of the file: this thread's latest one has finished.
      slot.receipt = file.hook([prev = m.last, violations = &hook_violations_] {
        if (!prev.finished()) violations->fetch_add(1, std::memory_order_relaxed);
      });
    } else {
      slot.kind = InFlight::Kind::sync;
      slot.length = 0;
      if (r < 9996) {
        slot.what = "fsync";
        slot.receipt = file.fsync();
      } else if (r < 9998) {
        slot.what = "fdatasync";
        slot.receipt = file.fdatasync();
      } else {
        slot.what = "barrier";
        slot.receipt = file.barrier();
      }
    }
    m.last = slot.receipt;
  }

  void fail(const InFlight& slot, const std::string& why) {
    if (failures_.size() >= kMaxFailures) return;
    std::ostringstream s;
    s << "thread " << id_ << ", file " << slot.file << ", " << slot.what << " at " << slot.offset << " +"
      << slot.length << ": " << why;
    failures_.push_back(s.str());
  }

  void check(InFlight& slot) {
    if (!slot.receipt.wait_for(kHang)) {
      std::fprintf(stderr,
                   "controller_order_test: thread %u, file %u, %s at %" PRIu64 " +%zu has not finished after %lld s "
                   "(seed %" PRIu64 ", rerun with TAI_TEST_SEED=%" PRIu64 ")\n",
                   id_, slot.file, slot.what, slot.offset, slot.length,
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(kHang).count()), seed_, seed_);
      std::abort();  // the read's destination is still borrowed: no safe way to go on
    }
    const InFlight::Kind kind = slot.kind;
    slot.kind = InFlight::Kind::none;
    if (!slot.receipt.ok()) {
      fail(slot, "failed: " + slot.receipt.message());
      return;
    }
    switch (kind) {
      case InFlight::Kind::write:
        if (slot.receipt.bytes() != static_cast<std::int64_t>(slot.length))
          fail(slot, "bytes() = " + std::to_string(slot.receipt.bytes()));
        break;
      case InFlight::Kind::read_own_into:
      case InFlight::Kind::read_own_buffer: {
        if (slot.receipt.bytes() != static_cast<std::int64_t>(slot.length)) {
          fail(slot, "bytes() = " + std::to_string(slot.receipt.bytes()));
          break;
        }
        const unsigned char* got = slot.dst.data();
        Buffer buffer;
        if (kind == InFlight::Kind::read_own_buffer) {
          buffer = slot.receipt.take_buffer();
          if (buffer.size() != slot.length) {
            fail(slot, "take_buffer().size() = " + std::to_string(buffer.size()));
            break;
          }
          got = reinterpret_cast<const unsigned char*>(buffer.data());
        }
        if (std::memcmp(got, slot.expected.data(), slot.length) != 0) {
          std::size_t i = 0;
          while (got[i] == slot.expected[i]) ++i;
          fail(slot, "byte " + std::to_string(i) + " is " + std::to_string(got[i]) + ", this thread wrote " +
                         std::to_string(slot.expected[i]) + " there last (a read must see every earlier write of its thread)");
        }
        break;
      }
      case InFlight::Kind::read_shared_into: {
        if (slot.receipt.bytes() != static_cast<std::int64_t>(slot.length)) {
          fail(slot, "bytes() = " + std::to_string(slot.receipt.bytes()));
          break;
        }
        for (std::size_t i = 0; i < slot.length; ++i) {
          const unsigned char got = slot.dst[i];
          const unsigned char mine = slot.expected[i];
          const bool stale_own = got != 0 && (got >> 5) == id_ && got != mine;
          const bool lost = got == 0 && mine != 0;
          if (stale_own || lost) {
            fail(slot, "byte " + std::to_string(i) + " is " + std::to_string(got) + " but this thread's last write there was " +
                           std::to_string(mine) + (lost ? " (the write was lost)" : " (an older or foreign write of this thread)"));
            break;
          }
        }
        break;
      }
      case InFlight::Kind::sync:
      case InFlight::Kind::hook:
      case InFlight::Kind::none:
        break;
    }
  }

  unsigned id_;
  std::uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<File>& files_;
  std::atomic<std::uint64_t>& hook_violations_;
  std::vector<FileModel> models_;
  std::vector<InFlight> window_;
  std::size_t next_slot_ = 0;
  std::vector<unsigned char> scratch_;
  std::uint64_t shared_sequence_ = 0;
  std::vector<std::string> failures_;
};

template <class Tree>
void run_order_case(const OrderCase& c) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TAI_TEST_SEED=" + std::to_string(seed) + ")");
  ScratchDir dir;
  ControllerOptions options;
  options.workers = 3;
  options.engine = c.engine;
  if (c.small_quota) {
    // Each file's data is 544 KiB: a strict quota of 64 KiB refuses most blocks (rerouting)
    // and a weak one of 16 KiB keeps recycle rounds busy.
    options.weak_quota = 16 << 10;
    options.strict_quota = 64 << 10;
  }
  Controller ctl(options);
  std::vector<std::string> paths;
  std::vector<File> files;
  for (unsigned f = 0; f < kFiles; ++f) {
    paths.push_back(dir.file("order" + std::to_string(f)));
    ASSERT_TRUE(make_zero_file(paths.back(), kFileBytes));
    auto opened = ctl.open<Tree>(paths.back(), Open::read | Open::write, c.engine);
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    files.push_back(std::move(opened.value()));
  }

  const std::uint64_t operations = ops_per_thread_and_file() * kFiles;
  std::atomic<std::uint64_t> hook_violations{0};  // relaxed: read after the threads are joined
  std::vector<std::unique_ptr<Submitter>> submitters;
  for (unsigned t = 0; t < kThreads; ++t)
    submitters.push_back(std::make_unique<Submitter>(t, seed, files, hook_violations));
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (auto& s : submitters) threads.emplace_back([&s, operations] { s->run(operations); });
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ order    ] %s: %" PRIu64 " operations by %u threads in %.2f s, seed %" PRIu64 "\n", c.label,
              operations * kThreads, kThreads, seconds, seed);

  for (auto& s : submitters)
    for (const std::string& f : s->failures()) ADD_FAILURE() << f;
  EXPECT_EQ(hook_violations.load(std::memory_order_relaxed), 0u)
      << "hooks that ran before an earlier operation of their thread on their file had finished";

  const ControllerStats stats = ctl.stats();
  if (c.small_quota) {
    EXPECT_GT(stats.reroutes + stats.quota_denials, 0u) << "the small strict quota never refused a block\n" << stats;
    EXPECT_GT(stats.rounds_recycle + stats.evictions, 0u) << "the small weak quota never caused recycling\n" << stats;
    EXPECT_LE(stats.quota_peak, options.strict_quota) << "the strict quota was exceeded\n" << stats;
  }

  for (unsigned f = 0; f < kFiles; ++f) {
    Receipt closed = files[f].close();
    ASSERT_TRUE(closed.wait_for(kHang)) << "close of " << paths[f] << " did not finish";
    EXPECT_TRUE(closed.ok()) << closed.message();
  }

  for (unsigned f = 0; f < kFiles; ++f) {
    const std::vector<unsigned char> disk = read_with_pread(paths[f]);
    ASSERT_EQ(disk.size(), kFileBytes) << paths[f];
    for (unsigned t = 0; t < kThreads; ++t) {
      const std::vector<unsigned char>& own = submitters[t]->model(f).own;
      const unsigned char* got = disk.data() + t * kOwnBytes;
      if (std::memcmp(got, own.data(), kOwnBytes) != 0) {
        std::size_t i = 0;
        while (got[i] == own[i]) ++i;
        ADD_FAILURE() << "file " << f << ", thread " << t << "'s region: byte " << i << " is " << int(got[i])
                      << " on disk, the thread's last write there was " << int(own[i]);
      }
    }
    std::size_t bad_shared = 0;
    for (std::uint64_t i = 0; i < kSharedBytes; ++i) {
      const unsigned char got = disk[kSharedBase + i];
      bool anyone_wrote = false;
      for (unsigned t = 0; t < kThreads; ++t) anyone_wrote |= submitters[t]->model(f).shared_last[i] != 0;
      // 0: nobody may have written it; else the writer's (top 3 bits) last value for this byte.
      const bool consistent = got == 0 ? !anyone_wrote : submitters[got >> 5]->model(f).shared_last[i] == got;
      if (!consistent && bad_shared++ < 5) {
        ADD_FAILURE() << "file " << f << ", shared byte " << i << " is " << int(got)
                      << " on disk: not the last value any thread wrote there (thread " << (got >> 5)
                      << "'s last was " << int(submitters[got >> 5]->model(f).shared_last[i]) << ")";
      }
    }
    EXPECT_EQ(bad_shared, 0u) << "file " << f << ": shared bytes whose final value is not some thread's last write";
  }
}

class ControllerOrder : public testing::TestWithParam<OrderCase> {};

TEST_P(ControllerOrder, EachThreadSeesItsOwnOrder) {
  const OrderCase& c = GetParam();
  TAI_SKIP_UNLESS_ENGINE_AVAILABLE(c.engine);
  if (c.tree == TreeKind::default_tree) {
    run_order_case<BTreeDefault>(c);
  } else {
    run_order_case<BTreeTrivial>(c);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Controller, ControllerOrder,
    testing::Values(OrderCase{"Default_posix", TreeKind::default_tree, "posix", false},
                    OrderCase{"Default_uring", TreeKind::default_tree, "uring", false},
                    OrderCase{"Trivial_posix", TreeKind::trivial, "posix", false},
                    OrderCase{"Trivial_uring", TreeKind::trivial, "uring", false},
                    OrderCase{"Default_posix_small_quota", TreeKind::default_tree, "posix", true},
                    OrderCase{"Default_uring_small_quota", TreeKind::default_tree, "uring", true}),
    [](const testing::TestParamInfo<OrderCase>& info) { return std::string(info.param.label); });

}  // namespace
}  // namespace tai::test
