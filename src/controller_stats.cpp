// ControllerStats: histograms and the printed table.
#include <cstdarg>
#include <cstdio>
#include <ostream>

#include <algorithm>

#include "tai/controller_stats.hpp"

namespace tai {

std::uint64_t LatencyHistogram::count() const noexcept {
  std::uint64_t n = 0;
  for (std::uint64_t c : counts) n += c;
  return n;
}

std::uint64_t LatencyHistogram::quantile_ns(double p) const noexcept {
  const std::uint64_t n = count();
  if (n == 0) return 0;
  const auto want = static_cast<std::uint64_t>(p * static_cast<double>(n) + 0.5);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += counts[i];
    if (seen >= want && seen > 0) return (std::uint64_t{1} << (i + 1)) - 1;
  }
  return (std::uint64_t{1} << kBuckets) - 1;
}

LatencyHistogram& LatencyHistogram::operator+=(const LatencyHistogram& o) noexcept {
  for (std::size_t i = 0; i < kBuckets; ++i) counts[i] += o.counts[i];
  return *this;
}

const char* to_string(RequestKind k) noexcept {
  switch (k) {
    case RequestKind::read: return "read";
    case RequestKind::write: return "write";
    case RequestKind::fsync: return "fsync";
    case RequestKind::fdatasync: return "fdatasync";
    case RequestKind::barrier: return "barrier";
    case RequestKind::hook: return "hook";
    case RequestKind::task: return "task";
    case RequestKind::close: return "close";
    case RequestKind::flush: return "flush";
  }
  return "?";
}

namespace {
// printf into a std::string (the library itself does not depend on {fmt}).
std::string format(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* f, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, f);
  const int n = std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return std::string(buf, n < 0 ? 0 : static_cast<std::size_t>(std::min<int>(n, sizeof buf - 1)));
}
std::string ns_text(std::uint64_t ns) {
  if (ns < 10'000) return format("%llu ns", static_cast<unsigned long long>(ns));
  if (ns < 10'000'000) return format("%.1f us", static_cast<double>(ns) / 1e3);
  if (ns < 10'000'000'000ull) return format("%.1f ms", static_cast<double>(ns) / 1e6);
  return format("%.1f s", static_cast<double>(ns) / 1e9);
}
}  // namespace

std::string ControllerStats::table() const {
  std::string out;
  auto row = [&out](const char* name, std::uint64_t v) {
    out += format("%-22s%16llu\n", name, static_cast<unsigned long long>(v));
  };
  row("workers", workers);
  out += "requests (by kind)    taken by workers  latency p50 / p99 (submit to finish, bucket upper bounds)\n";
  for (std::size_t k = 0; k < kRequestKinds; ++k) {
    const LatencyHistogram& h = latency[k];
    out += format("  %-20s%16llu", to_string(static_cast<RequestKind>(k)), static_cast<unsigned long long>(requests[k]));
    if (h.count() != 0) out += "  " + ns_text(h.quantile_ns(0.5)) + " / " + ns_text(h.quantile_ns(0.99));
    out += '\n';
  }
  row("rejected", rejected);
  row("failed", failed);
  row("bytes read", bytes_read);
  row("bytes written", bytes_written);
  row("caller writes", caller_writes);
  row("engine reads", engine_reads);
  row("engine writes", engine_writes);
  row("engine syncs", engine_syncs);
  row("engine submit calls", engine_submit_calls);
  row("bytes from engine", bytes_from_engine);
  row("bytes to engine", bytes_to_engine);
  row("cache hits", cache_hits);
  row("fills", fills);
  row("merges", merges);
  row("merged bytes", merged_bytes);
  row("write-throughs", write_throughs);
  row("reroutes", reroutes);
  row("quota denials", quota_denials);
  row("evictions", evictions);
  row("uncached", uncached);
  row("restructures", restructures);
  row("quiesces", quiesces);
  row("write-back errors", write_back_errors);
  row("inline ops", inline_ops);
  row("size refreshes", size_refreshes);
  row("collects", collects);
  row("gathered blocks", gathered_blocks);
  row("write-arounds", write_arounds);
  row("cached bytes", cached_bytes);
  row("dirty bytes", dirty_bytes);
  row("blocks", blocks);
  row("dirty blocks", dirty_blocks);
  row("nodes", nodes);
  row("node bytes", node_bytes);
  row("quota used", quota_used);
  row("quota peak", quota_peak);
  row("quota weak", quota_weak);
  row("quota strict", quota_strict);
  row("write copy bytes", write_copy_bytes);
  row("write copy budget", write_copy_budget);
  row("write copy waits", write_copy_waits);
  row("write copy pooled", write_copy_pooled);
  row("write copy mapped", write_copy_mapped);
  row("write copy reuses", write_copy_reuses);
  row("write copy allocations", write_copy_allocations);
  row("rounds normal", rounds_normal);
  row("rounds recycle", rounds_recycle);
  row("rounds flush", rounds_flush);
  row("rounds idle", rounds_idle);
  row("rounds close", rounds_close);
  row("steps", steps);
  row("steals", steals);
  row("sleeps", sleeps);
  row("max pending/round", max_pending);
  row("max ready/round", max_ready);
  row("async in flight", async_in_flight);
  row("open files", open_files);
  return out;
}

std::ostream& operator<<(std::ostream& os, const ControllerStats& s) { return os << s.table(); }

}  // namespace tai
