// The crash-simulation engine: see crashsim_engine.hpp.
#include "engines/crashsim/crashsim_engine.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include <unistd.h>

#include "tai/engine_selector.hpp"

namespace tai::engines {

std::string CrashEvent::to_string() const {
  std::string s;
  switch (kind) {
    case Kind::write:
      s = "write f" + std::to_string(file) + " [" + std::to_string(offset) + ", +" + std::to_string(data.size()) + ")";
      break;
    case Kind::sync: s = std::string(tai::to_string(op)) + " f" + std::to_string(file); break;
    case Kind::truncate: s = "truncate f" + std::to_string(file) + " to 0"; break;
    case Kind::mark: s = "mark '" + label + "'"; break;
  }
  s += " seq " + std::to_string(submit_seq) + ".." + std::to_string(complete_seq);
  if (kind == Kind::write || kind == Kind::sync) s += " -> " + std::to_string(result);
  return s;
}

int CrashLog::file_index(const std::string& path) const {
  for (std::size_t i = 0; i < paths.size(); ++i)
    if (paths[i] == path) return static_cast<int>(i);
  return -1;
}

CrashSimEngine::CrashSimEngine(std::unique_ptr<Engine> inner, CrashSimOptions options)
    : WrapperEngine("crashsim", std::move(inner)), options_(options), inner_synchronous_(!capabilities().asynchronous) {}

CrashSimEngine::~CrashSimEngine() = default;

std::uint64_t CrashSimEngine::take_seq(std::uint64_t n) noexcept {
  return next_seq_.fetch_add(n, std::memory_order_acq_rel);
}

std::uint64_t CrashSimEngine::now() const noexcept { return next_seq_.load(std::memory_order_acquire); }

std::uint64_t CrashSimEngine::mark(std::string label) {
  std::lock_guard<std::mutex> lock(mutex_);
  CrashEvent e;
  e.kind = CrashEvent::Kind::mark;
  e.label = std::move(label);
  e.submit_seq = e.complete_seq = take_seq();
  const std::uint64_t seq = e.complete_seq;
  append_locked(std::move(e));
  return seq;
}

std::uint64_t CrashSimEngine::log_truncate(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  CrashEvent e;
  e.kind = CrashEvent::Kind::truncate;
  e.file = path_index_locked(path, false);
  e.submit_seq = e.complete_seq = take_seq();
  const std::uint64_t seq = e.complete_seq;
  append_locked(std::move(e));
  return seq;
}

void CrashSimEngine::register_path(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  (void)path_index_locked(path, false);
}

std::size_t CrashSimEngine::log_write(const std::string& path, std::uint64_t offset, const struct iovec* iov,
                                      int iovcnt, std::int64_t result, std::uint64_t submit_seq) {
  const std::uint64_t complete_seq = take_seq();
  CrashEvent e;
  e.kind = CrashEvent::Kind::write;
  e.op = Op::write;
  e.offset = offset;
  // A kernel write that came back short wrote exactly its first `result` bytes: only those are
  // logged (as a complete write of them).
  std::uint64_t left = result >= 0 ? static_cast<std::uint64_t>(result) : ~std::uint64_t{0};
  std::vector<std::uint64_t> segments;
  for (int k = 0; k < iovcnt && left > 0; ++k) {
    const std::uint64_t len = std::min<std::uint64_t>(iov[k].iov_len, left);
    const auto* p = static_cast<const unsigned char*>(iov[k].iov_base);
    e.data.insert(e.data.end(), p, p + len);
    if (len != 0) segments.push_back(len);
    if (result >= 0) left -= len;
  }
  e.result = result;
  e.submit_seq = submit_seq;
  e.complete_seq = complete_seq;
  std::lock_guard<std::mutex> lock(mutex_);
  e.file = path_index_locked(path, false);
  if (segments.size() > 1) {
    append_write_locked(std::move(e), segments);
    return segments.size();
  }
  append_locked(std::move(e));
  return 1;
}

std::uint64_t CrashSimEngine::log_sync(const std::string& path, Op op, int err, std::uint64_t submit_seq) {
  const std::uint64_t complete_seq = take_seq();
  CrashEvent e;
  e.kind = CrashEvent::Kind::sync;
  e.op = op;
  e.result = err != 0 ? -err : 0;
  e.submit_seq = submit_seq;
  e.complete_seq = complete_seq;
  std::lock_guard<std::mutex> lock(mutex_);
  e.file = path_index_locked(path, false);
  append_locked(std::move(e));
  return complete_seq;
}

CrashLog CrashSimEngine::snapshot() const {
  CrashLog copy;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    copy = log_;
  }
  // Appended under the mutex but with seqs taken just before it (an open and a reap on two
  // threads may append out of order): sort. Seqs are unique, so the order is total.
  std::stable_sort(copy.events.begin(), copy.events.end(),
                   [](const CrashEvent& a, const CrashEvent& b) { return a.complete_seq < b.complete_seq; });
  return copy;
}

std::size_t CrashSimEngine::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return log_.events.size();
}

void CrashSimEngine::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  log_ = CrashLog{};
  path_ids_.clear();
}

void CrashSimEngine::append_locked(CrashEvent e) { log_.events.push_back(std::move(e)); }

std::uint32_t CrashSimEngine::path_index_locked(const std::string& path, bool created) {
  auto it = path_ids_.find(path);
  if (it != path_ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(log_.paths.size());
  path_ids_.emplace(path, id);
  log_.paths.push_back(path);
  std::vector<unsigned char> bytes;
  if (!created) {
    // The image before any logged event: what the file holds now (read through the path, not
    // through any engine, so it works under every inner engine that stores data in the file).
    std::ifstream in(path, std::ios::binary);
    if (in) bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  log_.initial.push_back(std::move(bytes));
  return id;
}

Result<std::unique_ptr<EngineFile>> CrashSimEngine::do_open(const std::string& path, OpenMode mode) {
  {
    // First sight of the path: record its content before the open can change it.
    std::lock_guard<std::mutex> lock(mutex_);
    path_index_locked(path, false);
  }
  const std::uint64_t submit_seq = take_seq();
  auto file = native_open(inner(), path, mode);
  if (file.ok() && has(mode.flags, Open::truncate) && has(mode.flags, Open::write)) {
    const std::uint64_t complete_seq = take_seq();
    std::lock_guard<std::mutex> lock(mutex_);
    CrashEvent e;
    e.kind = CrashEvent::Kind::truncate;
    e.file = path_index_locked(path, false);
    e.submit_seq = submit_seq;
    e.complete_seq = complete_seq;
    append_locked(std::move(e));
  }
  return file;
}

std::error_code CrashSimEngine::do_close(EngineFile& file) { return native_close(inner(), file); }

CrashEvent CrashSimEngine::event_for(const Request& r, std::uint64_t submit_seq) {
  CrashEvent e;
  e.kind = r.op == Op::write ? CrashEvent::Kind::write : CrashEvent::Kind::sync;
  e.op = r.op;
  e.file = path_index_locked(r.file->path(), false);
  e.offset = r.offset;
  if (r.op == Op::write && r.length > 0) {
    // The buffer is valid and unmodified until the completion is reaped (Request's contract),
    // which has not happened yet: reaping is this thread's job.
    e.data.resize(r.length);
    copy_request_bytes(r, e.data.data());
    if (r.iov_count > 1) {
      std::vector<std::uint64_t>& lengths = segments_[r.user_data];
      lengths.clear();
      for (std::uint32_t k = 0; k < r.iov_count; ++k)
        if (r.iov[k].iov_len != 0) lengths.push_back(r.iov[k].iov_len);
    }
  }
  e.submit_seq = submit_seq;
  return e;
}

void CrashSimEngine::signal_local() noexcept {
  const int fd = inner().eventfd();
  if (fd < 0) return;
  const std::uint64_t one = 1;
  // An eventfd write fails only when the counter would overflow (it is readable then anyway) or
  // on a bad descriptor; neither loses a wake-up.
  (void)!::write(fd, &one, sizeof one);
}

std::size_t CrashSimEngine::do_submit(const Request* requests, std::size_t n) {
  auto absorbed = [&](const Request& r) { return !options_.forward_syncs && r.op != Op::read && r.op != Op::write; };
  if (inner_synchronous_) {
    // One at a time: the transfer runs inside the inner submit, so it completes before the next
    // request of the batch starts, and its completion seq says so. The result is taken from the
    // completion when it is reaped (below).
    std::size_t taken = 0;
    bool local = false;
    for (; taken < n; ++taken) {
      const Request& r = requests[taken];
      const bool logged = r.op != Op::read;
      const std::uint64_t submit_seq = logged ? take_seq() : 0;
      if (absorbed(r)) {
        const std::uint64_t complete_seq = take_seq();
        std::lock_guard<std::mutex> lock(mutex_);
        CrashEvent e = event_for(r, submit_seq);
        e.complete_seq = complete_seq;
        append_locked(std::move(e));
        local_.push_back(Completion{r.user_data, 0});
        local = true;
        continue;
      }
      if (native_submit(inner(), &r, 1) == 0) break;  // the seq stays unused
      if (!logged) continue;
      const std::uint64_t complete_seq = take_seq();
      std::lock_guard<std::mutex> lock(mutex_);
      CrashEvent e = event_for(r, submit_seq);
      e.complete_seq = complete_seq;
      in_flight_[r.user_data] = std::move(e);
    }
    if (local) signal_local();
    return taken;
  }
  // Asynchronous: the batch goes to the kernel as one. The mutex is held across the short,
  // non-blocking inner submit so that a reap on another thread cannot see a completion before
  // its event exists. Absorbed syncs complete here, at once, and do not go to the kernel: like a
  // real fsync they cover only the writes that completed before they were submitted.
  // Linked requests (Request::link) are logged with the time of the batch's submit although the
  // kernel starts a linked request only after its predecessor: the controller does not link, and
  // a user that does gets a stricter (earlier) submit time for the linked request.
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Request> to_inner;
  std::vector<std::size_t> index;  // to_inner[j] is requests[index[j]]
  to_inner.reserve(n);
  index.reserve(n);
  const std::uint64_t first_seq = take_seq(n);
  std::vector<CrashEvent> local_events;
  for (std::size_t k = 0; k < n; ++k) {
    if (absorbed(requests[k])) {
      local_events.push_back(event_for(requests[k], first_seq + k));
      continue;
    }
    to_inner.push_back(requests[k]);
    index.push_back(k);
  }
  const std::size_t sent = to_inner.empty() ? 0 : native_submit(inner(), to_inner.data(), to_inner.size());
  const std::size_t taken = sent == to_inner.size() ? n : index[sent];
  for (std::size_t j = 0; j < sent; ++j)
    if (to_inner[j].op != Op::read) in_flight_[to_inner[j].user_data] = event_for(to_inner[j], first_seq + index[j]);
  bool local = false;
  for (auto& e : local_events) {
    if (e.submit_seq - first_seq >= taken) break;  // not taken: the caller submits it again
    const std::uint64_t user_data = requests[e.submit_seq - first_seq].user_data;
    e.complete_seq = take_seq();
    append_locked(std::move(e));
    local_.push_back(Completion{user_data, 0});
    local = true;
  }
  if (local) signal_local();
  return taken;
}

std::size_t CrashSimEngine::do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) {
  if (max == 0) return 0;
  // Absorbed syncs first (only this thread touches local_).
  std::size_t n = std::min(max, local_.size());
  std::copy(local_.begin(), local_.begin() + static_cast<std::ptrdiff_t>(n), out);
  local_.erase(local_.begin(), local_.begin() + static_cast<std::ptrdiff_t>(n));
  if (n == max) return n;
  // Not under the mutex: the inner reap may block for `timeout`.
  const std::size_t got = native_reap(inner(), out + n, max - n, n >= min ? 0 : min - n, timeout);
  if (got > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t k = n; k < n + got; ++k) {
      auto it = in_flight_.find(out[k].user_data);
      if (it == in_flight_.end()) continue;  // a read
      CrashEvent e = std::move(it->second);
      in_flight_.erase(it);
      if (e.complete_seq == 0) e.complete_seq = take_seq();  // asynchronous: completes when reaped
      e.result = out[k].result;
      auto seg = segments_.find(out[k].user_data);
      if (seg == segments_.end()) {
        append_locked(std::move(e));
      } else {
        const std::vector<std::uint64_t> lengths = std::move(seg->second);
        segments_.erase(seg);
        append_write_locked(std::move(e), lengths);
      }
    }
  }
  return n + got;
}

void CrashSimEngine::append_write_locked(CrashEvent e, const std::vector<std::uint64_t>& segments) {
  // pwritev gives no more atomicity than the pwrites it replaces: each segment reaches the disk
  // (or not, or torn) on its own. A segment the write covered in full is a complete write; the
  // one it ended inside is short, and those past it moved nothing (short: never durable).
  const std::int64_t total = e.result;
  std::uint64_t at = 0;
  for (const std::uint64_t len : segments) {
    CrashEvent piece;
    piece.kind = e.kind;
    piece.file = e.file;
    piece.op = e.op;
    piece.offset = e.offset + at;
    piece.data.assign(e.data.begin() + static_cast<std::ptrdiff_t>(at),
                      e.data.begin() + static_cast<std::ptrdiff_t>(at + len));
    piece.submit_seq = e.submit_seq;
    piece.complete_seq = e.complete_seq;
    if (total < 0)
      piece.result = total;
    else
      piece.result = static_cast<std::int64_t>(
          std::min<std::uint64_t>(len, static_cast<std::uint64_t>(total) > at ? static_cast<std::uint64_t>(total) - at : 0));
    append_locked(std::move(piece));
    at += len;
  }
}

std::unique_ptr<CrashSimEngine> make_crashsim(std::unique_ptr<Engine> inner, CrashSimOptions options) {
  return std::make_unique<CrashSimEngine>(std::move(inner), options);
}

// ---------------------------------------------------------------------------------------------
// CrashSimSyncEngine

CrashSimSyncEngine::CrashSimSyncEngine(std::unique_ptr<SyncEngine> inner, CrashSimOptions options)
    : SyncEngine("crashsim-sync(" + std::string(inner->name()) + ")", inner->capabilities(), inner->options()),
      options_(options),
      inner_(std::move(inner)),
      log_(std::make_unique<CrashSimEngine>(make_engine("null").value(), options)) {}

CrashSimSyncEngine::~CrashSimSyncEngine() = default;

Result<std::unique_ptr<EngineFile>> CrashSimSyncEngine::do_open(const std::string& path, OpenMode mode) {
  // First sight of the path: its image before any event is what it holds before the open.
  log_->register_path(path);
  auto file = native_open(*inner_, path, mode);
  if (file.ok() && has(mode.flags, Open::truncate) && has(mode.flags, Open::write)) log_->log_truncate(path);
  return file;
}

std::error_code CrashSimSyncEngine::do_close(EngineFile& file) { return native_close(*inner_, file); }

std::int64_t CrashSimSyncEngine::transfer(const Request& r) {
  if (r.op == Op::read) return native_transfer(*inner_, r);
  const std::string& path = r.file->path();
  // Taken before the inner transfer starts: a write that overlaps another thread's sync in time
  // gets a submit_seq before that sync's completion, and the crash states treat it as unsynced.
  const std::uint64_t submit_seq = log_->tick();
  if (r.op == Op::write) {
    const std::int64_t got = native_transfer(*inner_, r);
    if (r.iov_count != 0) {
      log_->log_write(path, r.offset, r.iov, static_cast<int>(r.iov_count), got, submit_seq);
    } else {
      const ::iovec one{r.buffer, static_cast<std::size_t>(r.length)};
      log_->log_write(path, r.offset, &one, 1, got, submit_seq);
    }
    return got;
  }
  const std::int64_t got = options_.forward_syncs ? native_transfer(*inner_, r) : 0;
  log_->log_sync(path, r.op, got < 0 ? static_cast<int>(-got) : 0, submit_seq);
  return got;
}

std::unique_ptr<CrashSimSyncEngine> make_crashsim_sync(std::unique_ptr<Engine> inner, CrashSimOptions options) {
  auto* sync = dynamic_cast<SyncEngine*>(inner.get());
  if (sync == nullptr) return nullptr;
  inner.release();
  return std::make_unique<CrashSimSyncEngine>(std::unique_ptr<SyncEngine>(sync), options);
}

}  // namespace tai::engines
