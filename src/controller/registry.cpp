// FileRegistry: the controller's open files, their home workers and reopen predecessors; and the
// per-thread file-reference reserve of the submission path.
#include <cstdlib>

#include "src/controller/core.hpp"

namespace tai::detail {

void file_retain(FileCore* f) noexcept { file_retain(f, 1); }
void file_release(FileCore* f) noexcept { file_release(f, 1); }

FileCore::~FileCore() {
  if (predecessor) file_release(predecessor);
}

// Why a reserve: a submission used to take its task's file reference with a locked
// read-modify-write. That instruction cost more than its own work: it drains the store buffer,
// so it waited for every store the submission had just made to the task (cache lines a worker
// read last: an invalidation each); perf put a quarter of the submitting thread's samples on it.

namespace {
// Every thread's reserve, listed once per thread (at its first batch) so that status() can
// subtract the references they hold unused.
struct ReserveList {
  std::mutex mu;
  std::vector<const FileRefReserve*> all;
};
ReserveList& reserves() {
  static ReserveList* list = new ReserveList;  // never destroyed: threads may exit after main
  return *list;
}
}  // namespace

void FileRefReserve::take_batch(FileCore* f) noexcept {
  if (gone_) {  // a thread_local destructor submitting after ours ran: no reserve any more
    file_retain(f);
    return;
  }
  drop();
  // The first batch makes the guard whose destructor, at the thread's exit, gives the reserve
  // back. The reserve itself has no destructor, so that a thread_local destroyed after the guard
  // may still submit (it then takes single references, see gone_).
  thread_local ExitGuard guard;
  file_retain(f, kBatch);
  left_.store(kBatch - 1, std::memory_order_relaxed);
  file_.store(f, std::memory_order_relaxed);
}

void FileRefReserve::drop() noexcept {
  FileCore* f = file_.exchange(nullptr, std::memory_order_relaxed);  // single writer: no race
  const std::uint32_t n = left_.exchange(0u, std::memory_order_relaxed);
  if (f != nullptr && n != 0) file_release(f, n);
}

std::uint32_t FileRefReserve::unused_references(const FileCore* f) noexcept {
  ReserveList& list = reserves();
  std::lock_guard<std::mutex> lock(list.mu);
  std::uint32_t n = 0;
  for (const FileRefReserve* r : list.all)
    if (r->file_.load(std::memory_order_relaxed) == f) n += r->left_.load(std::memory_order_relaxed);
  return n;
}

FileRefReserve::ExitGuard::ExitGuard() {
  ReserveList& list = reserves();
  std::lock_guard<std::mutex> lock(list.mu);
  try {
    list.all.push_back(&t_file_refs);
  } catch (const std::bad_alloc&) {
    // Unlisted: status() then counts this thread's unused references as operations in flight.
  }
}

FileRefReserve::ExitGuard::~ExitGuard() {
  {
    ReserveList& list = reserves();
    std::lock_guard<std::mutex> lock(list.mu);
    list.all.erase(std::remove(list.all.begin(), list.all.end(), &t_file_refs), list.all.end());
  }
  t_file_refs.drop();
  t_file_refs.gone_ = true;
}

void FileRegistry::add(FileCore* f, unsigned workers) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_path_.find(f->key);
  // Home worker: a path keeps the home of its earlier handle (a reopen waits for the earlier
  // close on that worker, see `predecessor`); a new path goes to the worker with the fewest
  // files not yet closed, the master first on ties. The master runs every round anyway: a
  // single busy file homed there needs no follower at all, and no barrier wake-up per round.
  if (it != by_path_.end()) {
    f->home = it->second->home;
  } else {
    std::vector<unsigned> load(workers, 0);
    for (const FileCore* o : files_)
      if (!o->fully_closed.load(std::memory_order_acquire)) ++load[o->home];
    f->home = static_cast<unsigned>(std::min_element(load.begin(), load.end()) - load.begin());
  }
  if (it != by_path_.end() && it->second->closed.load(std::memory_order_acquire) &&
      !it->second->fully_closed.load(std::memory_order_acquire)) {
    f->predecessor = it->second;  // its data must be written back before we read
    file_retain(f->predecessor);
    // Its tree is replaced once the predecessor is gone (Worker::progress): no caller writes
    // until then.
    f->traffic.store(FileTraffic::kReopening, std::memory_order_relaxed);  // not yet published
  }
  by_path_[f->key] = f;
  by_tree_[f->tree_id] = f;
  files_.push_back(f);
}

void FileRegistry::replace_tree(FileCore& f, TreePtr fresh) {
  std::lock_guard<std::mutex> lock(mu_);
  by_tree_.erase(f.tree_id);
  f.tree = std::move(fresh);
  f.tree_id = f.tree->id();
  by_tree_[f.tree_id] = &f;
}

void FileRegistry::retire_tree(FileCore& f) {
  std::lock_guard<std::mutex> lock(mu_);
  retired_ += f.tree->stats();
  f.tree.reset();  // its blocks go back to the quota
  by_tree_.erase(f.tree_id);
}

void FileRegistry::remove(FileCore& f) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_path_.find(f.key);
  if (it != by_path_.end() && it->second == &f) by_path_.erase(it);
  files_.erase(std::remove(files_.begin(), files_.end(), &f), files_.end());
}

std::vector<FileCore*> FileRegistry::retain_all(bool with_tree) {
  std::vector<FileCore*> out;
  std::lock_guard<std::mutex> lock(mu_);
  out.reserve(files_.size());
  for (FileCore* f : files_)
    if (!with_tree || f->tree) {
      file_retain(f);
      out.push_back(f);
    }
  return out;
}

FileCore* FileRegistry::retain_by_tree(std::uint64_t tree_id, unsigned depth, std::uint64_t& block_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_tree_.find(tree_id);
  if (it == by_tree_.end() || !it->second->tree) return nullptr;  // the tree is gone: a stale record
  FileCore* f = it->second;
  if (depth >= f->tree->levels()) return nullptr;
  block_bytes = std::uint64_t{1} << std::min(63u, f->tree->node_shift(depth));
  file_retain(f);
  return f;
}

FileCore* FileRegistry::retain_closing(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_path_.find(key);
  if (it == by_path_.end()) return nullptr;
  FileCore* f = it->second;
  if (!f->closed.load(std::memory_order_acquire) || f->fully_closed.load(std::memory_order_acquire)) return nullptr;
  file_retain(f);
  return f;
}

std::vector<std::pair<std::uint64_t, FileCore*>> FileRegistry::retain_dirty(std::uint64_t& total) {
  std::vector<std::pair<std::uint64_t, FileCore*>> dirty;
  total = 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (FileCore* f : files_) {
    if (!f->tree) continue;
    const std::uint64_t d = f->tree->stats().dirty_bytes;
    if (d == 0) continue;
    dirty.emplace_back(d, f);
    total += d;
    file_retain(f);
  }
  return dirty;
}

bool FileRegistry::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.empty();
}

bool FileRegistry::any_dirty() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const FileCore* f : files_)
    if (f->tree && f->tree->stats().dirty_bytes) return true;
  return false;
}

std::size_t FileRegistry::sum_stats(BTreeStats& open, BTreeStats& all) const {
  std::lock_guard<std::mutex> lock(mu_);
  open = BTreeStats{};
  for (const FileCore* f : files_)
    if (f->tree) open += f->tree->stats();
  all = retired_;
  all += open;
  return files_.size();
}

}  // namespace tai::detail
