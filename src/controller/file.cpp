// tai::File: the submission checks (closed, open mode, offset range), the write copy, and the
// file's status.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "src/controller/core.hpp"
#include "src/detail/small_copy_pool.hpp"

namespace tai {

namespace detail {
Receipt reject_now(Task* t, int err, const char* reason) {
  finish_task(*t, TaskState::rejected, err, reason);
  return Receipt(t);
}

Receipt file_hook(FileCore* f, Task* t) {
  if (!file_accepts(f)) return reject_now(t, EBADF, kClosedReason);
  return f->ctl->submit_file_task(f, t);
}
}  // namespace detail

using detail::FileCore;
using detail::Task;
using detail::TaskKind;

namespace {
// The largest end (offset + length) a transfer may have: the kernel's off_t is signed and a
// transfer must end at or below its maximum, as the engine layer checks too. The tree could cache
// a byte above it, but that byte could never be written back or read from the file, so the
// request is refused here, the same on every tree and engine.
constexpr std::uint64_t kFileOffsetLimit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// Why a read or write cannot be submitted at all (nullptr: it can), checked before the cache so
// that every tree answers as the engines would: a cached tree must not accept what the file
// will refuse later.
const char* transfer_refusal(const FileCore& f, TreeOp kind, std::uint64_t offset, std::uint64_t length, int& err) {
  const bool write = kind == TreeOp::write;
  if (!has(f.mode.flags, write ? Open::write : Open::read)) {
    err = EBADF;
    return write ? "the file was not opened for writing (Open::write)" : "the file was not opened for reading (Open::read)";
  }
  if (length != 0 && (offset > kFileOffsetLimit || length > kFileOffsetLimit - offset)) {
    err = EOVERFLOW;
    return length - 1 > ~std::uint64_t{0} - offset ? "offset + length passes 2^64"
                                                   : "offset + length passes 2^63 - 1, the largest file offset (off_t)";
  }
  return nullptr;
}

// Fills t as the transfer it was asked to be, and rejects it: the receipt then tells what was
// refused as well as why.
Receipt reject_transfer(Task* t, TreeOp kind, std::uint64_t offset, std::uint64_t length, int err, const char* why) {
  t->kind = TaskKind::tree_op;
  t->op.kind = kind;
  t->op.offset = offset;
  t->op.length = length;
  return detail::reject_now(t, err, why);
}

// `checked`: the caller already ran transfer_refusal (File::write does, before its copy).
Receipt tree_op(FileCore* f, Task* t, TreeOp kind, std::uint64_t offset, std::uint64_t length, std::byte* buffer,
                bool checked = false) {
  t->op.buffer = buffer;
  if (!detail::file_accepts(f)) return reject_transfer(t, kind, offset, length, EBADF, detail::kClosedReason);
  if (!checked && (kind == TreeOp::read || kind == TreeOp::write)) {
    int err = 0;
    if (const char* why = transfer_refusal(*f, kind, offset, length, err))
      return reject_transfer(t, kind, offset, length, err, why);
  }
  t->kind = TaskKind::tree_op;
  t->op.kind = kind;
  t->op.offset = offset;
  t->op.length = length;
  // After every refusal above (a write refused here was never counted): from here on the task
  // is pushed, and the worker that ends it uncounts it.
  if (kind == TreeOp::write) f->ctl->charge_copy(*t);
  return f->ctl->submit_file_task(f, t);
}
}  // namespace

bool File::is_open() const noexcept { return detail::file_accepts(core_); }

const std::string& File::path() const noexcept {
  static const std::string empty;
  return core_ ? core_->path : empty;
}

Receipt File::read(std::uint64_t offset, void* dst, std::size_t n) {
  Task* t = detail::acquire_task();
  if (n != 0 && dst == nullptr) return reject_transfer(t, TreeOp::read, offset, n, EFAULT, "the destination buffer is null");
  return tree_op(core_, t, TreeOp::read, offset, n, static_cast<std::byte*>(dst));
}

Receipt File::read(std::uint64_t offset, std::size_t n) {
  Task* t = detail::acquire_task();
  if (n != 0) {
    t->data = detail::AlignedBuffer::try_allocate(n, Buffer::kDefaultAlignment);
    if (t->data.empty()) return reject_transfer(t, TreeOp::read, offset, n, ENOMEM, "no memory for the read's buffer");
  }
  t->returns_buffer = true;
  return tree_op(core_, t, TreeOp::read, offset, n, t->data.data());
}

Receipt File::write(std::uint64_t offset, const void* src, std::size_t n) {
  Task* t = detail::acquire_task();
  if (n != 0 && src == nullptr) return reject_transfer(t, TreeOp::write, offset, n, EFAULT, "the source buffer is null");
  int err = 0;
  // Before the copy: a write that cannot be applied costs no allocation.
  if (const char* why = core_ ? transfer_refusal(*core_, TreeOp::write, offset, n, err) : nullptr)
    return reject_transfer(t, TreeOp::write, offset, n, err, why);
  // A large write the tree would send around its cache: done here, with no copy, when the
  // file allows (ControllerOptions::caller_writes).
  if (core_ != nullptr && core_->caller_engine != nullptr && detail::file_accepts(core_) &&
      core_->ctl->try_caller_write(*core_, t, offset, src, n))
    return Receipt(t);
  if (n != 0 && t->data.size() < n) {
    // Two sizes of small copy (4 KiB and kKeepDataBytes), so that a recycled task fits the next
    // write of a similar size: records a few bytes apart (compressed images) made a task's copy
    // grow on about one write in seven when it was allocated at the size asked. A large copy
    // comes from the controller's pool (reused pages, no fault per write), and the small copy it
    // displaces waits in the task (displaced_copy) until the write ends (ControllerCore::finish).
    // Small copies come from the process's pool, apart from the program's heap
    // (small_copy_pool.hpp).
    if (n > Task::kKeepDataBytes && core_) {
      if (!t->data.borrowed() || detail::SmallCopyPool::owns(t->data)) t->displaced_copy = std::move(t->data);
      t->data = core_->ctl->copy_pool.take(n);
    } else if (n <= Task::kKeepDataBytes) {
      t->data = detail::SmallCopyPool::instance().take(n);
    } else {
      t->data = detail::AlignedBuffer::try_allocate(n, 64);
    }
    if (t->data.empty()) return reject_transfer(t, TreeOp::write, offset, n, ENOMEM, "no memory for the write's copy");
  }
  if (n != 0) std::memcpy(t->data.data(), src, n);
  return tree_op(core_, t, TreeOp::write, offset, n, t->data.data(), /*checked=*/core_ != nullptr);
}

Receipt File::write(std::uint64_t offset, Buffer&& data) {
  Task* t = detail::acquire_task();
  const std::size_t n = data.size();
  t->data = data.release_memory();
  return tree_op(core_, t, TreeOp::write, offset, n, t->data.data());
}

Receipt File::fsync() { return tree_op(core_, detail::acquire_task(), TreeOp::fsync, 0, 0, nullptr); }
Receipt File::fdatasync() { return tree_op(core_, detail::acquire_task(), TreeOp::fdatasync, 0, 0, nullptr); }

Receipt File::barrier() {
  Task* t = detail::acquire_task();
  t->kind = TaskKind::barrier;
  t->op.kind = TreeOp::fdatasync;
  if (!detail::file_accepts(core_)) return detail::reject_now(t, EBADF, detail::kClosedReason);
  return core_->ctl->submit_file_task(core_, t);
}

void File::detach() noexcept {
  if (!core_ || core_->closed.exchange(true, std::memory_order_acq_rel)) return;
  core_->ctl->close_file(core_, nullptr);
}

Receipt File::close() {
  Task* t = detail::acquire_task();
  t->kind = TaskKind::close;
  if (!core_ || core_->closed.exchange(true, std::memory_order_acq_rel))
    return detail::reject_now(t, EBADF, "the file is already closed");
  core_->ctl->close_file(core_, t);
  return Receipt(t);
}

FileStatus File::status() const {
  FileStatus s;
  if (!core_) return s;
  FileCore& f = *core_;
  s.path = f.path;
  s.engine = f.engine_name;
  s.tree = f.tree_name;
  s.open = !f.closed.load(std::memory_order_acquire);
  // refs: the handle (this), the registry until fully closed, one per task in flight, the
  // unused ones in submitting threads' reserves (this thread's go back first; the others' are
  // subtracted), and finished tasks' that workers hold for a batched release (subtracted).
  detail::t_file_refs.drop_if(&f);
  const bool registered = !f.fully_closed.load(std::memory_order_acquire);
  std::uint32_t held = detail::FileRefReserve::unused_references(&f);
  // Finished tasks whose references a worker still holds for a batched release (while the file
  // is registered its controller, and so its workers, still exist).
  if (registered)
    for (const auto& w : f.ctl->workers) held += w->deferred_references(&f);
  const std::uint32_t refs = f.refs.load(std::memory_order_acquire);
  const std::uint32_t structural = 1u + (registered ? 1u : 0u) + held;
  s.in_flight = refs > structural ? refs - structural : 0;
  if (const int st = f.sticky.load(std::memory_order_relaxed)) s.sticky_error = std::error_code(st, std::generic_category());
  if (registered) {
    f.ctl->registry.with_lock([&] {
      if (f.tree) {
        const BTreeStats t = f.tree->stats();
        s.cached_bytes = t.cached_bytes;
        s.dirty_bytes = t.dirty_bytes;
        s.node_bytes = t.node_bytes;
        s.size = f.tree->logical_size();
      }
    });
  }
  return s;
}

}  // namespace tai
