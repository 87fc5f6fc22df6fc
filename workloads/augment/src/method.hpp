// The one interface every I/O method implements (one file per method under methods/). The loop
// calls only these; no method is special-cased in it.
//
//   open(path)          create/truncate the run's output file (before the clock)
//   begin_batch(n)      a batch of n records starts; slots are 0..n-1
//   write(slot, off..)  from any compute thread, at once; the bytes may be reused on return
//                       (an asynchronous method copies them or hands them to a library that does)
//   end_batch()         wait until every write of the batch finished (asynchronous methods wait
//                       only here, as the TAI paper does)
//   finish()            fsync + close, inside the clock
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

struct MethodConfig {
  unsigned compute_threads = 1;
  unsigned tai_workers = 2;  // the paper's fixed load: 2 workers beside the compute threads
};

class Method {
 public:
  virtual ~Method() = default;
  virtual bool open(const std::string& path) = 0;
  virtual void begin_batch(std::size_t /*records*/) {}
  virtual void write(std::size_t slot, std::uint64_t offset, const void* data, std::size_t n) = 0;
  virtual void end_batch() {}
  virtual void finish() = 0;
  // What really ran (e.g. the engine TAI chose); empty when the name says it all.
  virtual std::string note() const { return {}; }
  // Records are zero-padded to a multiple of this (a power of two): direct I/O needs aligned
  // offsets and lengths. Every record then starts at an aligned offset.
  virtual std::size_t record_alignment() const { return 1; }

  // Set by open() when this machine refuses the method (no O_DIRECT on the filesystem, no kernel
  // AIO, ...): the run is skipped with the reason, not failed.
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

}  // namespace augment
