#include "cache_counters.hpp"

#ifdef TAI_AUGMENT_PAPI
#include <papi.h>
#endif

namespace augment {

CacheMisses operator-(const CacheMisses& after, const CacheMisses& before) {
  CacheMisses d;
  for (int i = 0; i < 3; ++i)
    if (after.misses[i] && before.misses[i]) d.misses[i] = *after.misses[i] - *before.misses[i];
  return d;
}

const char* CacheCounters::event_name(int level) {
  static const char* const names[3] = {"PAPI_L1_DCM", "PAPI_L2_DCM", "PAPI_L3_DCM"};
  return level >= 0 && level < 3 ? names[level] : "?";
}

#ifndef TAI_AUGMENT_PAPI

bool CacheCounters::start() {
  reason_ = "PAPI: not built in (libpapi-dev was not found when tai-augment was configured)";
  return false;
}
CacheMisses CacheCounters::read() const { return {}; }
void CacheCounters::stop() {}
CacheCounters::~CacheCounters() = default;

#else

namespace {
std::string papi_error(const char* what, int code) {
  return std::string("PAPI: ") + what + ": " + PAPI_strerror(code);
}
}  // namespace

bool CacheCounters::start() {
  if (running_) return true;
  reason_.clear();
  // PAPI_library_init may be called again after a failure; it returns the version on success.
  const int version = PAPI_library_init(PAPI_VER_CURRENT);
  if (version != PAPI_VER_CURRENT) {
    reason_ = version > 0 ? "PAPI: library version mismatch" : papi_error("PAPI_library_init", version);
    return false;
  }
  // Component 0 is the CPU's (perf_event on Linux). On a VM without a virtual PMU it reports no
  // counters, or is disabled with the kernel's reason.
  const PAPI_component_info_t* cpu = PAPI_get_component_info(0);
  if (!cpu) {
    reason_ = "PAPI: no CPU component";
    return false;
  }
  if (cpu->disabled) {
    reason_ = std::string("PAPI: CPU counters disabled (") + cpu->disabled_reason + ")";
    return false;
  }
  if (cpu->num_cntrs <= 0) {
    reason_ = "PAPI: no hardware counters (num_cntrs = 0)";
    return false;
  }
  // Ask for the events before building anything: a VM without a virtual PMU still shows the
  // perf_event component with counters (software ones), but no cache preset maps onto them.
  const int codes[3] = {PAPI_L1_DCM, PAPI_L2_DCM, PAPI_L3_DCM};
  std::string missing;
  bool any_event = false;
  for (int level = 0; level < 3; ++level) {
    const int rc = PAPI_query_event(codes[level]);
    if (rc == PAPI_OK) any_event = true;
    else missing += (missing.empty() ? "" : "; ") + std::string(event_name(level)) + ": " + PAPI_strerror(rc);
  }
  if (!any_event) {
    reason_ = "PAPI: no hardware cache-miss events on this machine (" + missing + ")";
    return false;
  }
  int rc = PAPI_create_eventset(&event_set_);
  if (rc != PAPI_OK) {
    reason_ = papi_error("PAPI_create_eventset", rc);
    return false;
  }
  // The inherit option needs the set bound to a component first.
  rc = PAPI_assign_eventset_component(event_set_, 0);
  if (rc == PAPI_OK) {
    PAPI_option_t opt{};
    opt.inherit.eventset = event_set_;
    opt.inherit.inherit = PAPI_INHERIT_ALL;
    rc = PAPI_set_opt(PAPI_INHERIT, &opt);
  }
  if (rc != PAPI_OK) {
    reason_ = papi_error("PAPI_INHERIT (counting the other threads)", rc);
    PAPI_destroy_eventset(&event_set_);
    event_set_ = -1;
    return false;
  }
  missing.clear();
  for (int level = 0; level < 3; ++level) {
    rc = PAPI_add_event(event_set_, codes[level]);
    if (rc == PAPI_OK) {
      slot_[level] = n_events_++;
    } else {
      missing += (missing.empty() ? "" : "; ") + std::string(event_name(level)) + ": " + PAPI_strerror(rc);
    }
  }
  if (n_events_ == 0) {
    reason_ = "PAPI: no cache-miss event available (" + missing + ")";
    PAPI_cleanup_eventset(event_set_);
    PAPI_destroy_eventset(&event_set_);
    event_set_ = -1;
    return false;
  }
  rc = PAPI_start(event_set_);
  if (rc != PAPI_OK) {
    reason_ = papi_error("PAPI_start", rc);
    PAPI_cleanup_eventset(event_set_);
    PAPI_destroy_eventset(&event_set_);
    event_set_ = -1;
    n_events_ = 0;
    slot_ = {-1, -1, -1};
    return false;
  }
  running_ = true;
  if (!missing.empty()) reason_ = "PAPI: " + missing;
  return true;
}

CacheMisses CacheCounters::read() const {
  CacheMisses m;
  if (!running_) return m;
  long long values[3] = {0, 0, 0};
  if (PAPI_read(event_set_, values) != PAPI_OK) return m;
  for (int level = 0; level < 3; ++level)
    if (slot_[level] >= 0) m.misses[level] = std::uint64_t(values[slot_[level]]);
  return m;
}

void CacheCounters::stop() {
  if (event_set_ < 0) return;
  if (running_) {
    long long values[3];
    PAPI_stop(event_set_, values);
  }
  PAPI_cleanup_eventset(event_set_);
  PAPI_destroy_eventset(&event_set_);
  event_set_ = -1;
  running_ = false;
}

CacheCounters::~CacheCounters() { stop(); }

#endif

}  // namespace augment
