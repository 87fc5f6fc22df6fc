// tai/posix.hpp's layer: settings from the environment, and the log.
#include "src/posix/layer_internal.hpp"

namespace tai::posix::detail {

// ---------------------------------------------------------------------------------------------
// Settings and logging

std::atomic<bool> g_log{false};
void logf(const char* fmt, ...) {
  if (!g_log.load(std::memory_order_relaxed)) return;
  const int saved = errno;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "tai::posix: %s\n", line);
  errno = saved;
}

bool parse_bytes(const std::string& s, std::uint64_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || s[0] == '-') return false;
  std::uint64_t mul = 1;
  std::string rest(end);
  if (rest == "" || rest == "B") {
    mul = 1;
  } else if (rest == "K" || rest == "k" || rest == "KiB") {
    mul = 1ull << 10;
  } else if (rest == "M" || rest == "m" || rest == "MiB") {
    mul = 1ull << 20;
  } else if (rest == "G" || rest == "g" || rest == "GiB") {
    mul = 1ull << 30;
  } else {
    return false;
  }
  if (v > std::numeric_limits<std::uint64_t>::max() / mul) return false;
  out = v * mul;
  return true;
}

/// A number of milliseconds in 0..86400000 (at most a day: the deadline arithmetic of the keeper
/// and of the idle flush stays far from overflow).
bool parse_ms(const char* text, std::uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long ms = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-' || ms > 86'400'000ull) return false;
  out = ms;
  return true;
}

Settings settings_from_env(std::vector<std::string>* warnings) {
  const int saved = errno;
  Settings s;
  s.options.workers = 2;
  s.options.engine = "auto";
  auto warn = [&](const std::string& w) {
    if (warnings) warnings->push_back(w);
  };
  // A byte count (suffixes K, M, G) from `name`, into `target`; a malformed value keeps it.
  auto env_bytes = [&](const char* name, std::uint64_t& target) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') return;
    std::uint64_t bytes = 0;
    if (parse_bytes(text, bytes))
      target = bytes;
    else
      warn(std::string(name) + "='" + text + "' is not a byte count (suffixes K, M, G); using " + std::to_string(target));
  };
  // A switch, 0 or 1, from `name`, into `target`; any other value keeps it.
  auto env_switch = [&](const char* name, bool& target) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') return;
    const std::string v = text;
    if (v == "0" || v == "1")
      target = v == "1";
    else
      warn(std::string(name) + "='" + v + "' is neither 0 nor 1; using " + (target ? "1" : "0"));
  };
  if (const char* e = std::getenv("TAI_ENGINE"); e && *e) s.options.engine = e;
  if (const char* t = std::getenv("TAI_TREE"); t && *t) {
    const std::string v = t;
    if (v == "default") {
      s.trivial_tree = false;
    } else if (v == "trivial") {
      s.trivial_tree = true;
    } else {
      warn("TAI_TREE='" + v + "' is neither 'default' nor 'trivial'; using 'default'");
    }
  }
  if (const char* w = std::getenv("TAI_WORKERS"); w && *w) {
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(w, &end, 10);
    if (errno != 0 || *end != '\0' || n < 1 || n > 1024)
      warn(std::string("TAI_WORKERS='") + w + "' is not a number in 1..1024; using 2");
    else
      s.options.workers = static_cast<unsigned>(n);
  }
  if (const char* q = std::getenv("TAI_QUOTA"); q && *q) {
    const std::string v = q;
    const auto comma = v.find(',');
    std::uint64_t weak = 0, strict = 0;
    if (comma == std::string::npos || !parse_bytes(v.substr(0, comma), weak) ||
        !parse_bytes(v.substr(comma + 1), strict) || weak > strict || strict == 0) {
      warn("TAI_QUOTA='" + v + "' is not 'weak,strict' in bytes (suffixes K, M, G) with weak <= strict; using " +
           std::to_string(s.options.weak_quota) + "," + std::to_string(s.options.strict_quota));
    } else {
      s.options.weak_quota = weak;
      s.options.strict_quota = strict;
    }
  }
  env_bytes("TAI_START_WRITEBACK", s.start_writeback_bytes);
  if (const char* b = std::getenv("TAI_WRITE_BEHIND_MS"); b && *b) {
    std::uint64_t ms = 0;
    if (parse_ms(b, ms))
      s.write_behind_ms = ms;
    else
      warn(std::string("TAI_WRITE_BEHIND_MS='") + b + "' is not a number of milliseconds in 0..86400000; using " +
           std::to_string(s.write_behind_ms));
  }
  env_bytes("TAI_SYNC_THROUGH", s.sync_through_bytes);
  // The controller's idle flush (ControllerOptions::flush_idle_ns): "off" turns it off, so that
  // only fsync, close, the quota and the write-behind deadline hand cached writes to the kernel
  // (the preload's kill test checks the deadline that way).
  if (const char* f = std::getenv("TAI_FLUSH_IDLE_MS"); f && *f) {
    std::uint64_t ms = 0;
    if (std::string(f) == "off")
      s.options.flush_idle_ns = -1;
    else if (parse_ms(f, ms))
      s.options.flush_idle_ns = static_cast<std::int64_t>(ms) * 1'000'000;
    else
      warn(std::string("TAI_FLUSH_IDLE_MS='") + f + "' is not 'off' or a number of milliseconds in 0..86400000; using " +
           (s.options.flush_idle_ns < 0 ? std::string("off") : std::to_string(s.options.flush_idle_ns / 1'000'000)));
  }
  // Write-around (BTreeOptions::write_around_bytes) for writes of a page or more: behind the
  // POSIX calls the kernel's page cache already holds what was written, so copying such a write
  // into cache blocks over a range that holds none buys nothing (docs/results/cache-cost.md).
  s.options.tree_options.write_around_bytes = 4096;
  env_bytes("TAI_WRITE_AROUND", s.options.tree_options.write_around_bytes);
  // The cache's memory (ControllerOptions::clean_budget, huge_pages) and the write copies in
  // flight (write_copy_budget): for measuring them.
  env_bytes("TAI_CLEAN_BUDGET", s.options.clean_budget);
  env_bytes("TAI_WRITE_COPY_BUDGET", s.options.write_copy_budget);
  env_switch("TAI_HUGE_PAGES", s.options.huge_pages);
  // The layer's workers under SCHED_BATCH (ControllerOptions::batch_scheduling).
  env_switch("TAI_BATCH_SCHEDULING", s.options.batch_scheduling);
  // Large writes to files whose caches hold nothing made by the calling thread
  // (ControllerOptions::caller_writes and caller_write_threads): auto (the default: once as
  // many threads as CPUs have written), 0 never, 1 from the first thread.
  if (const char* c = std::getenv("TAI_CALLER_WRITES"); c && *c) {
    const std::string v = c;
    if (v == "0") {
      s.options.caller_writes = false;
    } else if (v == "1") {
      s.options.caller_writes = true;
      s.options.caller_write_threads = 1;
    } else if (v != "auto") {
      warn("TAI_CALLER_WRITES='" + v + "' is none of 'auto', '0', '1'; using 'auto'");
    }
  }
  if (const char* f = std::getenv("TAI_FSYNC"); f && *f) {
    const std::string v = f;
    if (v == "full") {
      s.fsync_mode = FsyncMode::full;
    } else if (v == "order") {
      s.fsync_mode = FsyncMode::order;
    } else {
      warn("TAI_FSYNC='" + v + "' is neither 'full' nor 'order'; using 'full'");
    }
  }
  if (const char* f = std::getenv("TAI_FSYNC_INLINE"); f && *f) {
    const std::string v = f;
    if (v == "auto")
      s.fsync_inline = InlineEpochs::automatic;
    else if (v == "never")
      s.fsync_inline = InlineEpochs::never;
    else if (v == "always")
      s.fsync_inline = InlineEpochs::always;
    else
      warn("TAI_FSYNC_INLINE='" + v + "' is none of 'auto', 'never', 'always'; using 'auto'");
  }
  if (const char* m = std::getenv("TAI_FSYNC_MAX_DELAY"); m && *m) {
    std::string v = m;
    std::uint64_t scale = 1;
    if (v.size() > 2 && v.compare(v.size() - 2, 2, "ms") == 0) {
      v.resize(v.size() - 2);
    } else if (v.size() > 1 && v.back() == 's') {
      v.pop_back();
      scale = 1000;
    }
    std::uint64_t n = 0;
    if (!v.empty() && parse_ms(v.c_str(), n) && n * scale <= 86'400'000ull && n * scale > 0)
      s.fsync_max_delay_ms = n * scale;
    else
      warn(std::string("TAI_FSYNC_MAX_DELAY='") + m + "' is not a delay (1s, 250ms, or milliseconds) in 1ms..1 day; using " +
           std::to_string(s.fsync_max_delay_ms) + "ms");
  }
  if (const char* d = std::getenv("TAI_FSYNC_LOG_DIR"); d && *d) {
    if (d[0] == '/')
      s.fsync_log_dir = d;
    else
      warn(std::string("TAI_FSYNC_LOG_DIR='") + d + "' is not an absolute path; the order mode keeps no log");
  }
  env_bytes("TAI_FSYNC_LOG_CHECKPOINT", s.fsync_log_checkpoint_bytes);
  // Benchmark only, deliberately not documented as an option: the unsafe upper bound.
  if (const char* n = std::getenv("TAI_FSYNC_BENCHMARK_ONLY_NONE"); n && std::string(n) == "1")
    s.fsync_none_for_benchmark = true;
  if (const char* l = std::getenv("TAI_LOG"); l && *l && std::string(l) != "0") s.log = true;
  errno = saved;
  return s;
}

}  // namespace tai::posix::detail
