// L1/L2/L3 data-cache misses of the whole process over a run, through PAPI's preset events
// PAPI_L1_DCM, PAPI_L2_DCM and PAPI_L3_DCM, where the machine has hardware counters.
//
// Counting every thread: the counters are one PAPI event set on the main thread with PAPI_INHERIT
// set, so the kernel (perf_event's inherit flag) gives every thread created AFTER start() its own
// counters and adds them into the main thread's: OpenMP's pool, TAI's workers and glibc's AIO
// threads are counted, live or exited. Threads that exist before start() are NOT counted (the
// kernel only inherits into new children), so start() must run at the top of main(), before the
// first OpenMP region or TAI engine; a run's misses are then read(end) - read(begin) of the one
// running event set. Kernel threads (io_uring's io-wq workers, the block layer) are not counted.
//
// This code could not be verified on a machine with counters (it was written on a VM with none,
// where it reports "n/a" with the reason): it is kept deliberately simple; each event is added on
// its own so a CPU without, say, an L3 preset still gets L1 and L2.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace augment {

struct CacheMisses {
  // Indexed 0, 1, 2 for L1, L2, L3; std::nullopt where the event is unavailable (see the reason).
  std::array<std::optional<std::uint64_t>, 3> misses;
  bool any() const { return misses[0] || misses[1] || misses[2]; }
};
CacheMisses operator-(const CacheMisses& after, const CacheMisses& before);

class CacheCounters {
 public:
  CacheCounters() = default;
  ~CacheCounters();
  CacheCounters(const CacheCounters&) = delete;
  CacheCounters& operator=(const CacheCounters&) = delete;

  // Initialises PAPI and starts the inherited counters. Call once, before any other thread
  // exists. False when no event could be started; reason() then says why in one line.
  bool start();
  bool available() const { return running_; }
  // One line: why counters are unavailable (empty when all three run), or which events are
  // missing (e.g. "PAPI_L3_DCM: Event does not exist") when some run.
  const std::string& reason() const { return reason_; }
  // The counts since start(); all nullopt when unavailable.
  CacheMisses read() const;
  // Stops the event set; the destructor does it too.
  void stop();

  static const char* event_name(int level);  // "PAPI_L1_DCM", ...

 private:
  int event_set_ = -1;
  bool running_ = false;
  std::array<int, 3> slot_ = {-1, -1, -1};  // position of each level's event in the set, -1 if absent
  int n_events_ = 0;
  std::string reason_;
};

}  // namespace augment
