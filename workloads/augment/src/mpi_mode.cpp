// tai-augment --mpi (see mpi_mode.hpp and README.md, "Scale-out over MPI"). Compiled only when
// CMake found MPI (TAI_AUGMENT_HAVE_MPI); without it run_mpi_mode says so and returns 2.
#include "mpi_mode.hpp"

#include <cstdio>

#if TAI_AUGMENT_HAVE_MPI
#include <fcntl.h>
#include <mpi.h>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fmt/core.h>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "input_dir.hpp"
#include "median.hpp"
#include "record.hpp"
#endif

namespace augment {

#if !TAI_AUGMENT_HAVE_MPI

bool mpi_mode_built(std::string* why_not) {
  if (why_not)
    *why_not = "this tai-augment was built without MPI (CMake did not find it): install Open MPI "
               "(Debian: openmpi-bin libopenmpi-dev, which `make deps` installs) and reconfigure";
  return false;
}

int run_mpi_mode(int&, char**&, const MpiSettings&) {
  std::string why;
  mpi_mode_built(&why);
  std::fprintf(stderr, "tai-augment: --mpi: %s\n", why.c_str());
  return 2;
}

#else

bool mpi_mode_built(std::string*) { return true; }

namespace {

/// The ids producer `rank` of `producers` takes: `ids` sorted by a 64-bit mix of the id
/// (splitmix64's finaliser), then dealt round-robin; returned in ascending id order.
std::vector<std::uint64_t> dealt_ids(std::vector<std::uint64_t> ids, unsigned producers, unsigned rank) {
  auto mix = [](std::uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::sort(ids.begin(), ids.end(), [&](std::uint64_t a, std::uint64_t b) {
    const std::uint64_t ma = mix(a), mb = mix(b);
    return ma != mb ? ma < mb : a < b;
  });
  std::vector<std::uint64_t> mine;
  for (std::size_t k = rank; k < ids.size(); k += producers) mine.push_back(ids[k]);
  std::sort(mine.begin(), mine.end());
  return mine;
}

constexpr int kTagRecords = 1;  // a batch of durable records, WireRecord[]
constexpr int kTagDone = 2;     // the producer finished: its error text, empty when it succeeded

// One durable record as a producer hands it to its consumer.
struct WireRecord {
  std::uint32_t file;
  std::uint32_t copy;
  std::uint64_t id;
  std::uint64_t offset;
  std::uint64_t size;
  std::uint32_t crc32c;
  std::uint32_t unused;
};
static_assert(sizeof(WireRecord) == 40, "the wire format has no hidden padding");

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The result of a record set does not depend on where its records landed: a sum of a mix of
// (id, copy, CRC32C of the record's bytes) over every record, the same for any number of ranks.
std::uint64_t record_digest(std::uint64_t id, std::uint32_t copy, std::uint32_t crc32c) {
  Rng r(id * 0x9e3779b97f4a7c15ull ^ (std::uint64_t(copy) << 32 | crc32c));
  return r.next();
}

std::string safe_method_name(std::string m) {
  std::replace(m.begin(), m.end(), ':', '_');
  return m;
}

// Who produces and who checks. stage2 "same": every rank produces, rank r checks rank r-1's
// records (a ring, so a rank never checks its own unless it is alone). "separate": ranks
// [0, P) produce, P = size/2, and ranks [P, size) only check: producer p's consumer is
// P + p mod (size - P).
struct Roles {
  int rank = 0, size = 1, producers = 1;
  bool separate = false;
  bool produces() const { return rank < producers; }
  bool consumes() const { return !separate || rank >= producers; }
  int consumer_of(int p) const { return separate ? producers + p % (size - producers) : (p + 1) % size; }
  std::vector<int> producers_of(int c) const {
    std::vector<int> out;
    for (int p = 0; p < producers; ++p)
      if (consumer_of(p) == c) out.push_back(p);
    return out;
  }
};

// The shared file's layout: the file is cut into chunks of C bytes dealt round-robin, so rank
// p's k-th chunk is chunk k*P + p, at offset (k*P + p)*C. A rank fills its current chunk with
// whole records and moves to its next one when a record does not fit; the rest of the chunk
// stays a hole (zeros). No rank ever writes into another's chunk, and no message is needed to
// reserve one. A record larger than C is refused (the run fails with the reason).
class ChunkReserver {
 public:
  ChunkReserver(unsigned files, int producer, int producers, std::uint64_t chunk)
      : cursors_(files), producer_(std::uint64_t(producer)), producers_(std::uint64_t(producers)), chunk_(chunk) {}
  std::uint64_t reserve(unsigned file, std::uint64_t size) {
    if (size > chunk_) return kNoOffset;
    Cursor& c = cursors_[file];
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.used + size > chunk_) {
      ++c.chunk;
      c.used = 0;
    }
    const std::uint64_t offset = (c.chunk * producers_ + producer_) * chunk_ + c.used;
    c.used += size;
    return offset;
  }

 private:
  struct Cursor {
    std::mutex mutex;
    std::uint64_t chunk = 0, used = 0;
  };
  std::vector<Cursor> cursors_;
  const std::uint64_t producer_, producers_, chunk_;
};

// What the next stage found, per consumer.
struct CheckTally {
  std::uint64_t records = 0, bytes = 0, bad = 0, digest = 0;
  double seconds = 0;
  double last_checked_epoch = 0;
  std::string first_error;
};

// Reads records back with pread (never through a cache of this process) and checks them.
class RecordChecker {
 public:
  RecordChecker(bool decode) : decode_(decode) {}
  ~RecordChecker() {
    for (auto& kv : fds_) ::close(kv.second);
  }
  void check(const std::string& path, const IndexEntry& e, CheckTally& t) {
    const auto c0 = std::chrono::steady_clock::now();
    std::string err;
    if (!read_and_check(path, e, &err)) {
      ++t.bad;
      if (t.first_error.empty()) t.first_error = path + ": " + err;
    } else {
      ++t.records;
      t.bytes += e.size;
      t.digest += record_digest(e.id, e.copy, e.crc32c);
    }
    t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    t.last_checked_epoch = epoch_seconds();
  }

 private:
  bool read_and_check(const std::string& path, const IndexEntry& e, std::string* err) {
    auto it = fds_.find(path);
    if (it == fds_.end()) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        *err = std::string("open: ") + std::strerror(errno);
        return false;
      }
      it = fds_.emplace(path, fd).first;
    }
    bytes_.resize(e.size);
    std::size_t got = 0;
    while (got < e.size) {
      const ssize_t r = ::pread(it->second, bytes_.data() + got, e.size - got, off_t(e.offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        *err = std::string("pread: ") + std::strerror(errno);
        return false;
      }
      if (r == 0) break;  // end of file: check_record reports the short read
      got += std::size_t(r);
    }
    return check_record(bytes_.data(), got, e, decode_, err);
  }
  bool decode_;
  std::map<std::string, int> fds_;
  Bytes bytes_;
};

// Output paths of one method's run. Own files: `<out>/<method>.np<N>.rank<p>` per producer (the
// plain run's record files and indexes). Shared: `<out>/<method>.np<N>.shared.taia` (or
// .f<j>.taia), and per producer the index `<file>.rank<p>.idx`. One manifest for the job,
// `<out>/<method>.np<N>[.shared].run`, written by rank 0.
struct Paths {
  std::string out, method;
  int ranks = 1;
  bool shared = false;
  unsigned files = 1;
  std::string stem(int producer) const {
    const std::string base = out + "/" + safe_method_name(method) + ".np" + std::to_string(ranks);
    return shared ? base + ".shared" : base + ".rank" + std::to_string(producer);
  }
  std::string record_file(int producer, unsigned j) const {
    return files == 1 ? stem(producer) + ".taia" : stem(producer) + ".f" + std::to_string(j) + ".taia";
  }
  // The name write_index/read_index take (they append ".idx").
  std::string index_name(int producer, unsigned j) const {
    return shared ? record_file(producer, j) + ".rank" + std::to_string(producer) : record_file(producer, j);
  }
  // The job's run manifest (rank 0 writes it after stage 2): `tai-augment verify` reads it.
  std::string job_manifest() const {
    return out + "/" + safe_method_name(method) + ".np" + std::to_string(ranks) + (shared ? ".shared" : "") + ".run";
  }
};

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The job's manifest: every producer's record files (own files: each with its index; shared:
// each file once, with one index per producer), the images of every rank.
bool write_job_manifest(const Paths& paths, const std::string& spec, const std::string& note, const std::string& content,
                        std::uint64_t inputs, std::uint64_t images, unsigned amplify, int producers, std::string* err) {
  RunManifest m;
  m.method = spec;
  m.note = note + fmt::format(" (MPI job: {} ranks, {} producing{})", paths.ranks, producers,
                              paths.shared ? ", shared files" : ", a file set per rank");
  m.content = content;
  m.inputs = inputs;
  m.images = images;
  m.amplify = amplify;
  m.shared_writers = paths.shared ? unsigned(producers) : 0;
  for (int p = 0; p < (paths.shared ? 1 : producers); ++p)
    for (unsigned j = 0; j < paths.files; ++j) m.files.push_back(base_name(paths.record_file(p, j)));
  return write_manifest(paths.job_manifest(), m, err);
}

// Per-rank figures gathered on rank 0, in this order.
enum Field {
  kProduces, kImages, kBytes, kStart, kLastWrite, kEnd, kReady, kChecked, kCheckedBytes, kBad, kCheckSeconds,
  kLastChecked, kWall, kCpu, kFields
};

constexpr int kErrorChars = 1024;

struct Pending {
  MPI_Request request;
  std::vector<WireRecord> records;
};

// The streaming side of one rank: its sends in flight and, as a consumer, its producers.
class Stream {
 public:
  Stream(const Roles& roles, const Paths& paths, RecordChecker& checker, CheckTally& tally)
      : roles_(roles), paths_(paths), checker_(checker), tally_(tally) {
    if (roles.consumes())
      for (int p : roles.producers_of(roles.rank)) waiting_.emplace(p, false);
  }
  void send_records(const std::vector<std::pair<unsigned, IndexEntry>>& durable) {
    if (durable.empty()) return;
    sends_.emplace_back();
    Pending& p = sends_.back();
    for (const auto& [file, e] : durable) p.records.push_back({file, e.copy, e.id, e.offset, e.size, e.crc32c, 0});
    MPI_Isend(p.records.data(), int(p.records.size() * sizeof(WireRecord)), MPI_BYTE, roles_.consumer_of(roles_.rank),
              kTagRecords, MPI_COMM_WORLD, &p.request);
  }
  void send_done(const std::string& error) {
    done_text_ = error;
    MPI_Isend(done_text_.data(), int(done_text_.size()), MPI_CHAR, roles_.consumer_of(roles_.rank), kTagDone,
              MPI_COMM_WORLD, &done_request_);
    done_sent_ = true;
  }
  // Completes finished sends and takes in what arrived; true when something happened.
  bool poll() {
    bool any = false;
    for (auto it = sends_.begin(); it != sends_.end();) {
      int flag = 0;
      MPI_Test(&it->request, &flag, MPI_STATUS_IGNORE);
      if (flag) {
        it = sends_.erase(it);
        any = true;
      } else {
        ++it;
      }
    }
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
      if (!flag) break;
      any = true;
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      std::vector<char> buf(std::size_t(std::max(count, 1)));
      MPI_Recv(buf.data(), count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (st.MPI_TAG == kTagDone) {
        waiting_[st.MPI_SOURCE] = true;
        if (count > 0) producer_errors_.push_back(fmt::format("rank {}: {}", st.MPI_SOURCE, std::string(buf.data(), std::size_t(count))));
        continue;
      }
      const std::size_t n = std::size_t(count) / sizeof(WireRecord);
      std::vector<WireRecord> recs(n);
      std::memcpy(recs.data(), buf.data(), n * sizeof(WireRecord));
      for (const WireRecord& w : recs)
        checker_.check(paths_.record_file(st.MPI_SOURCE, w.file), IndexEntry{w.id, w.copy, w.offset, w.size, w.crc32c},
                       tally_);
    }
    return any;
  }
  bool finished() const {
    if (!sends_.empty()) return false;
    if (done_sent_) {
      int flag = 0;
      MPI_Test(const_cast<MPI_Request*>(&done_request_), &flag, MPI_STATUS_IGNORE);
      if (!flag) return false;
    }
    for (const auto& kv : waiting_)
      if (!kv.second) return false;
    return true;
  }
  // Every send completed and every producer said it is done. Polls (never blocks in one call):
  // ranks both send and receive, and a blocking wait on a ring of them could deadlock.
  void drain() {
    while (!finished())
      if (!poll()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const std::vector<std::string>& producer_errors() const { return producer_errors_; }

 private:
  const Roles& roles_;
  const Paths& paths_;
  RecordChecker& checker_;
  CheckTally& tally_;
  std::list<Pending> sends_;
  std::string done_text_;
  MPI_Request done_request_ = MPI_REQUEST_NULL;
  bool done_sent_ = false;
  std::map<int, bool> waiting_;  // producer -> its done message arrived
  std::vector<std::string> producer_errors_;
};

// Rank 0 after stage 2, shared file: every producer's index, together. Records must not
// overlap, every record's bytes must be what its producer wrote (CRC32C), and every byte no
// record covers (the tails of chunks) must still be zero: a neighbour that wrote back a whole
// block, or read-modify-wrote one, would have put stale bytes there or over a record.
struct SharedCheck {
  bool ok = true;
  std::string error;
  std::uint64_t records = 0, record_bytes = 0, lost_bytes = 0, gap_bytes = 0, dirty_gap_bytes = 0, file_bytes = 0;
  std::uint64_t shared_blocks = 0;  // 4 KiB blocks holding bytes of two or more ranks' records
};

SharedCheck check_shared_file(const Paths& paths, unsigned file, int producers, bool decode) {
  SharedCheck res;
  struct Placed {
    IndexEntry e;
    int rank;
  };
  std::vector<Placed> all;
  for (int p = 0; p < producers; ++p) {
    std::vector<IndexEntry> entries;
    std::string err;
    if (!read_index(paths.index_name(p, file), entries, &err)) {
      res.ok = false;
      res.error = "rank " + std::to_string(p) + "'s index: " + err;
      return res;
    }
    for (const IndexEntry& e : entries) all.push_back({e, p});
  }
  std::sort(all.begin(), all.end(), [](const Placed& a, const Placed& b) { return a.e.offset < b.e.offset; });
  const std::string path = paths.record_file(0, file);
  Bytes bytes;
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      res.ok = false;
      res.error = path + ": " + std::strerror(errno);
      if (fd >= 0) ::close(fd);
      return res;
    }
    bytes.resize(std::size_t(st.st_size));
    std::size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t r = ::pread(fd, bytes.data() + got, bytes.size() - got, off_t(got));
      if (r <= 0 && !(r < 0 && errno == EINTR)) break;
      if (r > 0) got += std::size_t(r);
    }
    ::close(fd);
    bytes.resize(got);
  }
  res.file_bytes = bytes.size();
  std::uint64_t covered_to = 0;
  std::map<std::uint64_t, int> block_owner;  // block -> first rank seen (-1: two or more)
  for (const Placed& pl : all) {
    const IndexEntry& e = pl.e;
    ++res.records;
    res.record_bytes += e.size;
    if (e.offset < covered_to) {
      res.ok = false;
      if (res.error.empty()) res.error = fmt::format("records overlap at offset {} (rank {}, image {})", e.offset, pl.rank, e.id);
    }
    for (std::uint64_t g = covered_to; g < std::min<std::uint64_t>(e.offset, bytes.size()); ++g) {
      ++res.gap_bytes;
      if (bytes[g] != 0) ++res.dirty_gap_bytes;
    }
    std::string err;
    const std::size_t avail = e.offset < bytes.size() ? std::size_t(std::min<std::uint64_t>(e.size, bytes.size() - e.offset)) : 0;
    if (!check_record(bytes.data() + std::min<std::uint64_t>(e.offset, bytes.size()), avail, e, decode, &err)) {
      res.ok = false;
      res.lost_bytes += e.size;
      if (res.error.empty()) res.error = fmt::format("rank {}'s {}", pl.rank, err);
    }
    for (std::uint64_t b = e.offset / 4096; e.size && b <= (e.offset + e.size - 1) / 4096; ++b) {
      auto [it, fresh] = block_owner.emplace(b, pl.rank);
      if (!fresh && it->second != pl.rank && it->second != -1) {
        it->second = -1;
        ++res.shared_blocks;
      }
    }
    covered_to = std::max(covered_to, e.offset + e.size);
  }
  for (std::uint64_t g = covered_to; g < bytes.size(); ++g) {
    ++res.gap_bytes;
    if (bytes[g] != 0) ++res.dirty_gap_bytes;
  }
  if (res.dirty_gap_bytes) {
    res.ok = false;
    if (res.error.empty()) res.error = fmt::format("{} bytes outside every record are not zero", res.dirty_gap_bytes);
  }
  if (covered_to > bytes.size()) {
    res.ok = false;
    if (res.error.empty()) res.error = fmt::format("the file ends at {} before the last record's end {}", bytes.size(), covered_to);
  }
  return res;
}

// Stage 2 after the barrier: this rank reads the records of the ranks it checks through their
// indexes.
void check_from_indexes(const Roles& roles, const Paths& paths, RecordChecker& checker, CheckTally& tally) {
  for (int p : roles.producers_of(roles.rank))
    for (unsigned j = 0; j < paths.files; ++j) {
      std::vector<IndexEntry> entries;
      std::string err;
      if (!read_index(paths.index_name(p, j), entries, &err)) {
        ++tally.bad;
        if (tally.first_error.empty()) tally.first_error = "rank " + std::to_string(p) + "'s index: " + err;
        continue;
      }
      for (const IndexEntry& e : entries) checker.check(paths.record_file(p, j), e, tally);
    }
}

// What rank 0 holds of every rank after a method's run (the other ranks hold nothing).
struct Gathered {
  std::vector<double> fields;  // kFields per rank
  std::vector<char> errors;    // kErrorChars per rank
  std::uint64_t digest_sum = 0;
  double at(int rank, Field k) const { return fields[std::size_t(rank) * kFields + k]; }
  std::string error(int rank) const { return std::string(&errors[std::size_t(rank) * kErrorChars]); }
};

// Gathers this rank's figures and first error (its own, else stage 2's) on rank 0. Collective.
Gathered gather_on_rank0(const Roles& roles, const RunResult& res, double ready_epoch, const CheckTally& tally,
                         const std::string& error) {
  double mine[kFields] = {};
  mine[kProduces] = roles.produces() ? 1 : 0;
  mine[kImages] = double(res.images);
  mine[kBytes] = double(res.bytes);
  mine[kStart] = res.start_epoch_s;
  mine[kLastWrite] = res.last_write_epoch_s;
  mine[kEnd] = res.end_epoch_s;
  mine[kReady] = ready_epoch;
  mine[kChecked] = double(tally.records);
  mine[kCheckedBytes] = double(tally.bytes);
  mine[kBad] = double(tally.bad);
  mine[kCheckSeconds] = tally.seconds;
  mine[kLastChecked] = tally.last_checked_epoch;
  mine[kWall] = res.wall_s;
  mine[kCpu] = res.user_s + res.sys_s;  // the whole rank's CPU time over its run (TAI's workers included)
  Gathered g;
  g.fields.resize(std::size_t(roles.size) * kFields);
  MPI_Gather(mine, kFields, MPI_DOUBLE, g.fields.data(), kFields, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  std::string my_error = error;
  if (my_error.empty() && !tally.first_error.empty()) my_error = "stage 2: " + tally.first_error;
  char my_text[kErrorChars] = {};
  std::snprintf(my_text, sizeof my_text, "%s", my_error.c_str());
  g.errors.resize(std::size_t(roles.size) * kErrorChars);
  MPI_Gather(my_text, kErrorChars, MPI_CHAR, g.errors.data(), kErrorChars, MPI_CHAR, 0, MPI_COMM_WORLD);
  std::uint64_t digest = tally.digest;
  MPI_Reduce(&digest, &g.digest_sum, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  return g;
}

// The job's figures over every rank, as rank 0 adds them up.
struct JobTotals {
  double first_start = 1e300, last_end = 0, last_ready = 0, last_checked = 0, bytes = 0, images = 0, checked = 0,
         checked_bytes = 0, bad = 0;
  std::vector<double> durable_ms, cpu_share;  // of the producing ranks
  bool rank_failed = false;                   // a rank reported an error
  double span() const { return last_end - first_start; }  // earliest start to latest end
  double durable_ms_max() const { return durable_ms.empty() ? 0.0 : *std::max_element(durable_ms.begin(), durable_ms.end()); }
};

// Rank 0: the heading and one row per rank (a failed rank's error before its row); the totals.
JobTotals print_rank_table(const std::string& spec, const MpiSettings& s, const Roles& roles, const Gathered& g) {
  JobTotals t;
  fmt::print("\n{}: {} ranks ({} producing, stage 2 on {}), hand-off {}, {}\n", spec, roles.size, roles.producers,
             roles.separate ? "the other ranks" : "the same ranks (rank r checks rank r-1)", s.handoff,
             s.shared_file ? fmt::format("one shared file per output, chunks of {} bytes dealt round-robin", s.chunk_bytes)
                           : std::string("one file per rank"));
  fmt::print("{:>4} {:>7} {:>9} {:>8} {:>8} {:>8} {:>16} {:>9} {:>9}\n", "rank", "images", "images/s", "MB/s", "seconds",
             "CPU/wall", "write->durable ms", "checked", "check s");
  auto f = [&](int r, Field k) { return g.at(r, k); };
  for (int r = 0; r < roles.size; ++r) {
    const std::string text = g.error(r);
    if (!text.empty()) {
      fmt::print("rank {}: FAILED: {}\n", r, text);
      t.rank_failed = true;
    }
    t.checked += f(r, kChecked);
    t.checked_bytes += f(r, kCheckedBytes);
    t.bad += f(r, kBad);
    t.last_checked = std::max(t.last_checked, f(r, kLastChecked));
    if (f(r, kProduces) == 0) {
      fmt::print("{:>4} {:>7} {:>9} {:>8} {:>8} {:>8} {:>16} {:>9.0f} {:>9.2f}\n", r, "-", "-", "-", "-", "-", "-",
                 f(r, kChecked), f(r, kCheckSeconds));
      continue;
    }
    const double wall = f(r, kWall);
    t.images += f(r, kImages);
    t.bytes += f(r, kBytes);
    if (f(r, kStart) > 0) t.first_start = std::min(t.first_start, f(r, kStart));
    t.last_end = std::max(t.last_end, f(r, kEnd));
    t.last_ready = std::max(t.last_ready, f(r, kReady));
    const double to_durable = (f(r, kEnd) - f(r, kLastWrite)) * 1e3;
    t.durable_ms.push_back(to_durable);
    if (wall > 0) t.cpu_share.push_back(f(r, kCpu) / wall);
    fmt::print("{:>4} {:>7.0f} {:>9.1f} {:>8.1f} {:>8.2f} {:>8.2f} {:>16.1f} {:>9.0f} {:>9.2f}\n", r, f(r, kImages),
               wall > 0 ? f(r, kImages) / wall : 0.0, wall > 0 ? f(r, kBytes) / 1e6 / wall : 0.0, wall,
               wall > 0 ? f(r, kCpu) / wall : 0.0, to_durable, f(r, kChecked), f(r, kCheckSeconds));
  }
  return t;
}

// Rank 0, when every producer wrote and synced: the job's totals, stage 2's count against the
// expected one, the shared files' layout, the job's manifest and the mpi-result line. Returns
// false when one of them found a failure.
bool print_job_summary(const std::string& spec, const MpiSettings& s, const Roles& roles, const Paths& paths,
                       const JobTotals& t, std::uint64_t digest_sum, std::uint64_t total_images, unsigned amplify,
                       const std::string& engine_note, const std::string& content) {
  bool ok = true;
  const double span = t.span();
  const double expected = double(total_images) * amplify;
  fmt::print("total: {:.0f} images, {:.1f} MB in {:.2f} s (earliest start to latest end, final fsync inside): "
             "{:.1f} images/s, {:.1f} MB/s; {:.1f} images/s per producing rank\n",
             t.images, t.bytes / 1e6, span, t.images / span, t.bytes / 1e6 / span, t.images / span / roles.producers);
  fmt::print("ready: {:.3f} s from the earliest start to the last rank's {}; last write to fsync done per rank: "
             "median {:.1f} ms, max {:.1f} ms\n",
             t.last_ready - t.first_start, s.handoff == "stream" ? "final hand-off" : "barrier", median(t.durable_ms),
             t.durable_ms_max());
  fmt::print("stage 2: {:.0f} of {:.0f} records ({:.1f} MB) read back and checked by another rank (CRC32C, header CRC-32{}), "
             "{:.0f} bad, last checked {:.3f} s after the earliest start; digest {:016x}\n",
             t.checked, expected, t.checked_bytes / 1e6, s.decode ? ", PNG decode" : "", t.bad, t.last_checked - t.first_start,
             digest_sum);
  if (t.bad > 0 || t.checked != expected) {
    fmt::print("stage 2: FAILED: {:.0f} records checked, {:.0f} expected, {:.0f} bad\n", t.checked, expected, t.bad);
    ok = false;
  }
  if (s.shared_file)
    for (unsigned j = 0; j < paths.files; ++j) {
      const SharedCheck c = check_shared_file(paths, j, roles.producers, false);  // stage 2 decoded
      fmt::print("shared file {}: {} records of {} ranks, {} record bytes, {} bytes between records (all must be 0: {} "
                 "are not), {} 4-KiB blocks shared by two or more ranks' records, file {} bytes; "
                 "{} bytes lost or clobbered\n",
                 paths.record_file(0, j), c.records, roles.producers, c.record_bytes, c.gap_bytes, c.dirty_gap_bytes,
                 c.shared_blocks, c.file_bytes, c.lost_bytes + c.dirty_gap_bytes);
      if (!c.ok) {
        fmt::print("shared file: FAILED: {}\n", c.error);
        ok = false;
      }
    }
  // The job's manifest, for `tai-augment verify` (written once every producer wrote and synced
  // its files and indexes, whatever stage 2 found: verify then checks on its own).
  std::string manifest_error;
  if (write_job_manifest(paths, spec, engine_note, content, total_images, std::uint64_t(t.images), amplify,
                         roles.producers, &manifest_error)) {
    fmt::print("manifest: {} (tai-augment verify {} reads the job's files back)\n", paths.job_manifest(), s.output);
  } else {
    fmt::print("manifest: FAILED: {}\n", manifest_error);
    ok = false;
  }
  return ok;
}

// One method on every rank. Returns true when every rank and every check succeeded.
bool run_one_method(const std::string& spec, const MpiSettings& s, const Roles& roles, MPI_Comm producers_comm,
                    const std::vector<EncodedImage>& shard, std::uint64_t total_images) {
  Paths paths;
  paths.out = s.output;
  paths.method = spec;
  paths.ranks = roles.size;
  paths.shared = s.shared_file;
  paths.files = std::max(1u, s.config.files);
  const unsigned amplify = std::max(1u, s.config.amplify);

  RunConfig config = s.config;
  config.threads = s.threads;
  config.method.compute_threads = s.threads;
  config.method.tai_workers = s.tai_workers;
  if (roles.rank == s.fault_rank) config.method.fault_rules = s.fault_rules;
  config.write_artifacts = !s.shared_file;
  config.write_manifest = false;  // rank 0 writes the job's manifest after stage 2
  config.method.shared_writers = s.shared_file;
  config.after_open = [&] { MPI_Barrier(producers_comm); };  // every rank opened (and truncated) first
  std::unique_ptr<ChunkReserver> reserver;
  if (s.shared_file) {
    reserver = std::make_unique<ChunkReserver>(paths.files, roles.rank, roles.producers, s.chunk_bytes);
    config.reserve_offset = [&](unsigned file, std::uint64_t size) { return reserver->reserve(file, size); };
    config.reserve_refusal = fmt::format("it is larger than a chunk (--chunk {})", s.chunk_bytes);
  }
  RecordChecker checker(s.decode);
  CheckTally tally;
  Stream stream(roles, paths, checker, tally);
  if (s.handoff == "stream")
    config.on_batch_durable = [&](const std::vector<std::pair<unsigned, IndexEntry>>& durable) {
      stream.send_records(durable);
      stream.poll();  // this rank may be a consumer too: check what arrived meanwhile
    };

  std::string error;
  RunResult res;
  double ready_epoch = 0;
  if (roles.produces()) {
    if (s.shared_file) {
      // Every rank opens the shared file with O_TRUNC (the methods create their outputs so); the
      // barrier in after_open keeps every truncation ahead of every write.
      config.content += " (shared file)";
    }
    res = run_method(shard, spec, paths.stem(roles.rank), config);
    if (!res.refused.empty() && res.error.empty()) res.error = "refused: " + res.refused;
    error = res.error;
    if (error.empty() && s.shared_file)
      for (unsigned j = 0; j < paths.files; ++j)
        if (!write_index(paths.index_name(roles.rank, j), res.index[j], &error)) break;
    if (s.handoff == "stream") {
      stream.send_done(error);
      ready_epoch = epoch_seconds();
    }
  }
  std::vector<std::string> stage2_errors;
  int all_ok = 1;
  if (s.handoff == "stream") {
    stream.drain();
    stage2_errors = stream.producer_errors();
    int mine = error.empty() ? 1 : 0;
    MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  } else {
    // The stage barrier: a rank arrives once its final fsync completed (run_method's finish) and
    // its index is written; the reduction is the barrier and tells everyone whether all did.
    int mine = error.empty() ? 1 : 0;
    MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    ready_epoch = epoch_seconds();
    if (all_ok && roles.consumes()) check_from_indexes(roles, paths, checker, tally);
  }

  const Gathered g = gather_on_rank0(roles, res, ready_epoch, tally, error);
  int ok_flag = 1;
  if (roles.rank == 0) {
    // all_ok: every producer wrote and synced; stage 2's findings arrive in the error texts.
    const JobTotals t = print_rank_table(spec, s, roles, g);
    bool ok = all_ok != 0 && !t.rank_failed;
    for (const std::string& e : stage2_errors) fmt::print("stage 2: a producer reported: {}\n", e);
    if (all_ok) {
      if (!print_job_summary(spec, s, roles, paths, t, g.digest_sum, total_images, amplify, res.note, config.content))
        ok = false;
      const double span = t.span();
      fmt::print("mpi-result: method={} ranks={} producers={} handoff={} shared={} images={:.0f} bytes={:.0f} seconds={:.4f} "
                 "images_per_s={:.3f} mb_per_s={:.3f} per_rank_images_per_s={:.3f} ready_s={:.4f} durable_ms_max={:.1f} "
                 "checked={:.0f} bad={:.0f} digest={:016x} cpu_per_wall={:.3f} ok={}\n",
                 spec, roles.size, roles.producers, s.handoff, s.shared_file ? 1 : 0, t.images, t.bytes, span,
                 t.images / span, t.bytes / 1e6 / span, t.images / span / roles.producers, t.last_ready - t.first_start,
                 t.durable_ms_max(), t.checked, t.bad, g.digest_sum, median(t.cpu_share), ok ? 1 : 0);
    } else {
      fmt::print("{}: FAILED on {} ranks: stage 2 {}\n", spec, roles.size,
                 s.handoff == "stream" ? "stopped at the failed producer's done message" : "not run (the barrier reported the failure)");
    }
    ok_flag = ok ? 1 : 0;
  }
  MPI_Bcast(&ok_flag, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return ok_flag != 0;
}

// Why these settings cannot run on these ranks; empty when they can.
std::string settings_refusal(const MpiSettings& s, const Roles& roles) {
  if (roles.separate && roles.size < 2) return "--stage2 separate needs at least 2 ranks (half produce, half check)";
  if (s.shared_file && s.config.method.direct && s.chunk_bytes % kDirectAlignment != 0 && !s.allow_unsafe_shared_direct)
    return fmt::format(
        "--shared-file with --direct needs --chunk to be a multiple of {} (the direct-I/O block): a chunk edge "
        "inside a block would make two ranks read-modify-write the same block and overwrite each other's bytes",
        kDirectAlignment);
  // --direct-unpadded is fine on a shared file: an unaligned direct write whose last block lies
  // past the end of the file pads the file to the block, and the TAI methods open a shared file
  // with tai::Open::shared_writers, under which the engine keeps that zero padding instead of
  // cutting the file back (an fstat then an ftruncate, which would cut off another rank's write
  // landing in between). The file then ends at a block boundary; the checks skip the zeros.
  if (s.shared_file && s.chunk_bytes == 0) return "--chunk must be at least 1 byte";
  if (s.fault_rank >= roles.size) return fmt::format("--fault-rank {} is not a rank of {}", s.fault_rank, roles.size);
  for (const std::string& m : s.methods)
    if (!s.fault_rules.empty() && m.rfind("tai-", 0) != 0)
      return "--fault needs TAI methods only (the fault engine is a TAI engine): '" + m + "' is not one";
  return {};
}

// This rank's shard: the ids in a fixed pseudo-random order (sorted by a 64-bit mix of the
// id), dealt round-robin, so every producer gets the same count (within one) and a mix of
// every image size. Dealing by id mod producers would hand each rank the same few sizes of the
// synthetic set's size cycle (size = id mod 4): at 2 ranks one rank got the two small sizes and
// finished in a quarter of the other's time, which measured as a weak-scaling efficiency of 0.67
// for every method. The union over the producers is the whole set, and each record depends
// only on (seed, id), so the records do not depend on the number of ranks.
// `total` is the number of images over every producer; `load_error` says why the input could not be
// loaded or encoded (empty when it was).
void load_shard(const MpiSettings& s, const Roles& roles, std::vector<EncodedImage>& shard, std::uint64_t& total,
                std::string& load_error) {
  if (!s.input_dir.empty()) {
    InputSet set;
    if (!load_input_dir(s.input_dir, set, &load_error, s.input_budget)) {
      load_error = "--input: " + load_error;
    } else {
      total = set.images.size();
      std::vector<std::uint64_t> all;
      for (const EncodedImage& e : set.images) all.push_back(e.id);
      const std::vector<std::uint64_t> mine = dealt_ids(all, unsigned(roles.producers), unsigned(roles.rank));
      for (EncodedImage& e : set.images)
        if (roles.produces() && std::binary_search(mine.begin(), mine.end(), e.id)) shard.push_back(std::move(e));
    }
  } else {
    total = s.images_per_rank ? s.images * std::uint64_t(roles.producers) : s.images;
    std::vector<std::uint64_t> ids;
    if (roles.produces()) {
      std::vector<std::uint64_t> all(total);
      for (std::uint64_t id = 0; id < total; ++id) all[id] = id;
      ids = dealt_ids(all, unsigned(roles.producers), unsigned(roles.rank));
    }
    shard = synthetic_images(s.config.seed, ids, s.sizes);
    if (shard.size() != ids.size()) load_error = "encoding the synthetic input set failed";
  }
}

}  // namespace

int run_mpi_mode(int& argc, char**& argv, const MpiSettings& s) {
  int provided = 0;
  // Only the loop's thread calls MPI (between batches and after the run); OpenMP's and TAI's
  // threads never do.
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "tai-augment --mpi: MPI_Init_thread failed\n");
    return 2;
  }
  Roles roles;
  MPI_Comm_rank(MPI_COMM_WORLD, &roles.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &roles.size);
  roles.separate = s.stage2 == "separate";
  roles.producers = roles.separate ? roles.size / 2 : roles.size;
  auto refuse = [&](const std::string& why) {
    if (roles.rank == 0) std::fprintf(stderr, "tai-augment --mpi: %s\n", why.c_str());
    MPI_Finalize();
    return 2;
  };
  if (provided < MPI_THREAD_FUNNELED) return refuse("the MPI library does not provide MPI_THREAD_FUNNELED");
  if (const std::string why = settings_refusal(s, roles); !why.empty()) return refuse(why);
  MPI_Comm producers_comm;
  MPI_Comm_split(MPI_COMM_WORLD, roles.produces() ? 0 : 1, roles.rank, &producers_comm);
  omp_set_num_threads(int(s.threads));

  std::vector<EncodedImage> shard;
  std::uint64_t total = 0;
  std::string load_error;
  load_shard(s, roles, shard, total, load_error);
  int load_ok = load_error.empty() ? 1 : 0, all_loaded = 0;
  MPI_Allreduce(&load_ok, &all_loaded, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!load_ok) std::fprintf(stderr, "tai-augment --mpi: rank %d: FAILED: %s\n", roles.rank, load_error.c_str());
  if (!all_loaded) {
    MPI_Comm_free(&producers_comm);
    MPI_Finalize();
    return 1;
  }
  if (roles.rank == 0) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    fmt::print("mpi: {} ranks (rank 0 on {}), {} producing, {} images in all ({}), {} OpenMP thread(s) and {} TAI "
               "worker(s) per rank, hand-off {}, {}, output in {}/\n",
               roles.size, host, roles.producers, total,
               s.input_dir.empty() ? (s.images_per_rank ? fmt::format("{} per producing rank", s.images) : std::string("synthetic"))
                                   : s.input_dir,
               s.threads, s.tai_workers, s.handoff,
               s.shared_file ? fmt::format("shared file, chunks of {} bytes", s.chunk_bytes) : std::string("one file per rank"),
               s.output);
  }
  bool ok = true;
  for (const std::string& m : s.methods) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (!run_one_method(m, s, roles, producers_comm, shard, total)) ok = false;
  }
  if (roles.rank == 0) fmt::print("mpi: {}\n", ok ? "ok" : "FAILED");
  MPI_Comm_free(&producers_comm);
  MPI_Finalize();
  return ok ? 0 : 1;
}

#endif  // TAI_AUGMENT_HAVE_MPI

}  // namespace augment
