// The one interface every I/O method implements (one file per method under methods/). The loop
// calls only these; no method is special-cased in it.
//
//   open(paths)             create/truncate the run's output files (before the clock)
//   begin_batch(ops)        a batch of `ops` operations starts; every write and every sync of the
//                           batch has its own slot in 0..ops-1 (so asynchronous methods keep one
//                           buffer or control block per slot without locking)
//   write(slot, file, ..)   from any compute thread, at once; the bytes may be reused on return
//                           (an asynchronous method copies them or hands them to a library that
//                           does). When record_alignment() > 1 the bytes are aligned to it.
//   sync(slot, file)        fsync (or fdatasync, MethodConfig::fdatasync) of one output file,
//                           covering every write of that file made before it by this thread. A
//                           synchronous method waits for it; an asynchronous one only starts it.
//   end_batch()             wait until every operation of the batch finished (asynchronous
//                           methods wait only here, as the TAI paper does)
//   finish()                fsync + close of every output, inside the clock
// A failure is recorded with fail(); the first one is kept and fails the run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace augment {

// What every method is told. Thread-safety: read-only once the run starts.
struct MethodConfig {
  unsigned compute_threads = 1;
  unsigned tai_workers = 2;       // the paper's fixed load: 2 workers beside the compute threads
  bool direct = false;            // open the outputs with O_DIRECT
  bool direct_unpadded = false;   // with direct: a method whose library can take unaligned
                                  // requests (TAI: its cache does the read-modify-write) gets the
                                  // records unpadded; the others still pad
  bool fdatasync = false;         // sync() and finish() use fdatasync instead of fsync
  bool shared_writers = false;    // other processes write the outputs too (the MPI mode's shared
                                  // file): TAI methods open them with tai::Open::shared_writers, so
                                  // that an unaligned direct write at the end keeps its zero
                                  // padding instead of cutting the file back over a neighbour's write
  std::string fault_rules;        // TAI methods: open the outputs on a fault engine over posix with
                                  // these rules (tai::engines::FaultRule syntax), to test failures
};

// The alignment of direct I/O requests (offset, length, memory). 4096 covers the logical block
// size of the usual devices and the page size, so it is valid wherever 512 is.
constexpr std::size_t kDirectAlignment = 4096;

class Method {
 public:
  virtual ~Method() = default;
  // Thread-safety of the members below: open, begin_batch, end_batch and finish are called by the
  // loop's thread only, with no write or sync running; write and sync are called by any number of
  // compute threads at once, each slot by one thread.
  virtual bool open(const std::vector<std::string>& paths) = 0;
  virtual void begin_batch(std::size_t /*ops*/) {}
  virtual void write(std::size_t slot, unsigned file, std::uint64_t offset, const void* data, std::size_t n) = 0;
  virtual void sync(std::size_t slot, unsigned file) = 0;
  virtual void end_batch() {}
  virtual void finish() = 0;
  // What really ran (e.g. the engine TAI chose, a fallback); empty when the name says it all.
  virtual std::string note() const { return {}; }
  // The library's own counters over the run (TAI: engine requests, bytes that reached the engine,
  // bytes merged in the cache, steps, sleeps), read after finish(); empty when it has none.
  virtual std::string stats() const { return {}; }
  // Records are zero-padded to a multiple of this (a power of two) and handed over in memory
  // aligned to it: direct I/O needs aligned offsets, lengths and buffers. Every record then
  // starts at an aligned offset.
  virtual std::size_t record_alignment() const { return 1; }

  // Set by open() when this machine refuses the method (no O_DIRECT on the filesystem, no kernel
  // AIO, a method that cannot do direct I/O, ...): the run is skipped with the reason, not failed.
  std::string refused() const {
    std::lock_guard<std::mutex> lock(error_mutex_);
    return refused_;
  }

  bool failed() const {
    std::lock_guard<std::mutex> lock(error_mutex_);
    return !error_.empty();
  }
  std::string error() const {
    std::lock_guard<std::mutex> lock(error_mutex_);
    return error_;
  }

 protected:
  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (error_.empty()) error_ = why;
  }
  void refuse(const std::string& why) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    refused_ = why;
  }
  // open_outputs() for a method's open(): a refused O_DIRECT becomes refuse(reason + why_direct),
  // any other failure fail().
  bool open_descriptors(const std::vector<std::string>& paths, bool direct, std::vector<int>* fds,
                        const std::string& why_direct = "");

 private:
  mutable std::mutex error_mutex_;
  std::string error_;
  std::string refused_;
};

// A method's name as given to --method ("posix", "tai-def:uring", ...), its factory, and why it
// is unavailable on this build (empty when it is available).
struct MethodInfo {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<Method>(const std::string& suffix, const MethodConfig&)> make;
  std::string unavailable;
  bool takes_engine_suffix = false;
};

const std::vector<MethodInfo>& methods();
// Finds "name" or "name:suffix"; nullptr when unknown.
const MethodInfo* find_method(const std::string& spec, std::string* suffix);

// Registration, one line at the end of each methods/*.cpp (called by methods() in order).
std::vector<MethodInfo> posix_methods();
std::vector<MethodInfo> cstdio_methods();
std::vector<MethodInfo> fstream_methods();
std::vector<MethodInfo> aio_methods();
std::vector<MethodInfo> uring_methods();
std::vector<MethodInfo> libaio_methods();
std::vector<MethodInfo> tai_methods();

std::string errno_text(const std::string& what, int err);

// Opens every path write-only, created and truncated (O_DIRECT when `direct`), into *fds. On
// failure closes what it opened and returns false: with *refused set when the filesystem refuses
// O_DIRECT (EINVAL), else with *error set.
bool open_outputs(const std::vector<std::string>& paths, bool direct, std::vector<int>* fds, std::string* error,
                  std::string* refused);
// fsync or fdatasync, retried on EINTR; 0 or the errno.
int sync_fd(int fd, bool data_only);
// Closes every descriptor >= 0 and sets it to -1; the first errno or 0.
int close_all(std::vector<int>& fds);

// A heap buffer aligned for direct I/O that keeps its capacity across reuse. Not thread-safe.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(AlignedBuffer&& o) noexcept : p_(o.p_), capacity_(o.capacity_), size_(o.size_) {
    o.p_ = nullptr, o.capacity_ = o.size_ = 0;
  }
  AlignedBuffer& operator=(AlignedBuffer&&) = delete;
  ~AlignedBuffer();
  // Copies n bytes in (growing to a multiple of kDirectAlignment when needed); false when the
  // allocation failed.
  bool assign(const void* data, std::size_t n);
  void* data() const { return p_; }
  std::size_t size() const { return size_; }

 private:
  void* p_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t size_ = 0;
};

}  // namespace augment
