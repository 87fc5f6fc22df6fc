// The recording engine: see recording_engine.hpp.
#include "engines/recording/recording_engine.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace tai::engines {

std::string RecordEntry::to_string() const {
  std::string s;
  switch (kind) {
    case Kind::open: s = "open"; break;
    case Kind::close: s = "close"; break;
    case Kind::request: s = tai::to_string(op); break;
  }
  s += "#" + std::to_string(file_id) + " " + path;
  if (kind == Kind::request && (op == Op::read || op == Op::write))
    s += " [" + std::to_string(offset) + ", +" + std::to_string(length) + ")";
  s += " submit " + std::to_string(submit_seq);
  s += complete_seq ? " complete " + std::to_string(complete_seq) : std::string(" (in flight)");
  if (kind == Kind::request) {
    if (reap_seq) s += " reap " + std::to_string(reap_seq) + " -> " + std::to_string(result);
  } else if (error) {
    s += " -> " + error.message();
  }
  return s;
}

RecordingEngine::RecordingEngine(std::unique_ptr<Engine> inner)
    : WrapperEngine("recording", std::move(inner)), inner_synchronous_(!capabilities().asynchronous) {}

RecordingEngine::~RecordingEngine() = default;

std::uint64_t RecordingEngine::take_seq(std::uint64_t n) noexcept {
  return next_seq_.fetch_add(n, std::memory_order_acq_rel);
}

std::uint64_t RecordingEngine::now() const noexcept { return next_seq_.load(std::memory_order_acquire); }

std::vector<RecordEntry> RecordingEngine::snapshot() const {
  std::vector<RecordEntry> copy;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    copy = log_;
  }
  // Entries are appended after the inner call returns, so two threads (an open racing with a
  // submit) may append out of seq order: sort. Seqs are unique, so the order is total.
  std::sort(copy.begin(), copy.end(),
            [](const RecordEntry& a, const RecordEntry& b) { return a.submit_seq < b.submit_seq; });
  return copy;
}

std::size_t RecordingEngine::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return log_.size();
}

void RecordingEngine::set_record_data(bool on) noexcept { record_data_.store(on, std::memory_order_relaxed); }

void RecordingEngine::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  cleared_before_ += log_.size();
  log_.clear();
}

Result<std::unique_ptr<EngineFile>> RecordingEngine::do_open(const std::string& path, OpenMode mode) {
  RecordEntry e;
  e.kind = RecordEntry::Kind::open;
  e.path = path;
  e.mode = mode;
  e.submit_seq = take_seq();
  // The inner engine opens natively; this engine's base records the file as its own (owns()
  // delegates, so the file's engine() stays the inner one), exactly as the fault engine does.
  auto file = native_open(inner(), path, mode);
  e.complete_seq = take_seq();
  std::lock_guard<std::mutex> lock(mutex_);
  if (file.ok()) {
    e.file_id = next_file_id_++;
    files_[file.value().get()] = FileInfo{e.file_id, path};
  } else {
    e.error = file.error().code;
  }
  log_.push_back(std::move(e));
  return file;
}

std::error_code RecordingEngine::do_close(EngineFile& file) {
  RecordEntry e;
  e.kind = RecordEntry::Kind::close;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = files_.find(&file);
    if (it != files_.end()) {
      e.file_id = it->second.id;
      e.path = it->second.path;
      files_.erase(it);  // the object may be freed and its address reused by a later open
    } else {
      e.path = file.path();
    }
  }
  e.submit_seq = take_seq();
  const std::error_code err = native_close(inner(), file);
  e.complete_seq = take_seq();
  e.error = err;
  std::lock_guard<std::mutex> lock(mutex_);
  log_.push_back(std::move(e));
  return err;
}

void RecordingEngine::log_request(const Request& r, std::uint64_t submit_seq, std::uint64_t complete_seq,
                                  bool with_data) {
  RecordEntry e;
  e.kind = RecordEntry::Kind::request;
  auto it = files_.find(r.file);
  if (it != files_.end()) {
    e.file_id = it->second.id;
    e.path = it->second.path;
  } else if (r.file != nullptr) {
    e.path = r.file->path();
  }
  e.submit_seq = submit_seq;
  e.complete_seq = complete_seq;
  e.op = r.op;
  e.offset = r.offset;
  e.length = r.length;
  e.link = r.link;
  if (with_data && r.op == Op::write && (r.buffer != nullptr || r.iov_count != 0) && r.length > 0) {
    // The buffer is valid and unmodified until the request's completion is reaped (Request's
    // contract), which has not happened yet: reaping is this thread's job. A vectored write is
    // logged as the bytes it carries, in order.
    e.data.resize(r.length);
    copy_request_bytes(r, e.data.data());
  }
  in_flight_[r.user_data] = cleared_before_ + log_.size();
  log_.push_back(std::move(e));
}

std::size_t RecordingEngine::do_submit(const Request* requests, std::size_t n) {
  const bool with_data = record_data_.load(std::memory_order_relaxed);
  if (inner_synchronous_) {
    // One at a time: the transfer runs inside the inner submit, so its completion seq is taken
    // the moment it returns, before the next request of the batch starts.
    std::size_t taken = 0;
    for (; taken < n; ++taken) {
      const std::uint64_t submit_seq = take_seq();
      if (native_submit(inner(), requests + taken, 1) == 0) break;  // the seq stays unused
      const std::uint64_t complete_seq = take_seq();
      std::lock_guard<std::mutex> lock(mutex_);
      log_request(requests[taken], submit_seq, complete_seq, with_data);
    }
    return taken;
  }
  // Asynchronous: the batch goes to the kernel as one (links must stay together). Its submit
  // seqs are taken before the kernel can start any of it; the seqs of requests not taken stay
  // unused. The mutex is held across the (short, non-blocking) inner submit so that a reap on
  // another thread cannot see a completion before its entry is logged.
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint64_t first_seq = take_seq(n);
  const std::size_t taken = native_submit(inner(), requests, n);
  for (std::size_t k = 0; k < taken; ++k) log_request(requests[k], first_seq + k, 0, with_data);
  return taken;
}

std::size_t RecordingEngine::do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) {
  // Not under the mutex: the inner reap may block for `timeout`.
  const std::size_t got = native_reap(inner(), out, max, min, timeout);
  if (got == 0) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t k = 0; k < got; ++k) {
    const std::uint64_t seq = take_seq();
    auto it = in_flight_.find(out[k].user_data);
    if (it == in_flight_.end()) continue;  // not one of ours (cannot happen: every request is logged)
    const std::uint64_t number = it->second;
    in_flight_.erase(it);
    if (number < cleared_before_) continue;  // its entry was cleared
    RecordEntry& e = log_[number - cleared_before_];
    if (e.complete_seq == 0) e.complete_seq = seq;  // asynchronous: completes when reaped
    e.reap_seq = seq;
    e.result = out[k].result;
  }
  return got;
}

std::unique_ptr<RecordingEngine> make_recording(std::unique_ptr<Engine> inner) {
  return std::make_unique<RecordingEngine>(std::move(inner));
}

}  // namespace tai::engines
