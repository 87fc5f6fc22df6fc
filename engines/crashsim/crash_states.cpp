// Crash-state enumeration: see crash_states.hpp.
#include "engines/crashsim/crash_states.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <unordered_set>

namespace tai::engines {
namespace {

std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// One piece of a candidate event that persists or not on its own.
struct Unit {
  std::size_t event;  // index into log.events
  std::uint64_t begin, end;  // file range (a truncate: 0, 0)
  std::size_t sector;        // sector number (for descriptions)
};

void apply_piece(std::vector<unsigned char>& img, const CrashEvent& e, std::uint64_t begin, std::uint64_t end) {
  if (e.kind == CrashEvent::Kind::truncate) {
    img.clear();
    return;
  }
  if (end <= begin) return;
  if (img.size() < end) img.resize(end, 0);
  std::memcpy(img.data() + begin, e.data.data() + (begin - e.offset), end - begin);
}

// The units a crash may persist or drop independently: each candidate write torn at sector_size
// (0: whole), a truncation whole. first_unit[c] is candidate c's first unit, with one entry more
// at the end (units of one candidate are contiguous).
void split_into_units(const std::vector<CrashEvent>& ev, const std::vector<std::size_t>& cands, std::uint64_t sector_size,
                      std::vector<Unit>& units, std::vector<std::size_t>& first_unit) {
  for (std::size_t i : cands) {
    const CrashEvent& e = ev[i];
    first_unit.push_back(units.size());
    if (e.kind == CrashEvent::Kind::truncate || sector_size == 0 || e.data.empty()) {
      units.push_back({i, e.offset, e.end(), 0});
      continue;
    }
    for (std::uint64_t a = e.offset; a < e.end();) {
      const std::uint64_t b = std::min(e.end(), (a / sector_size + 1) * sector_size);
      units.push_back({i, a, b, static_cast<std::size_t>(a / sector_size)});
      a = b;
    }
  }
  first_unit.push_back(units.size());
}

// What a state persisted beyond the durable cut, for its description: each candidate that has a
// chosen unit, with the sectors chosen when it was split into several; " nothing" for none.
std::string describe_persisted(const std::vector<CrashEvent>& ev, const std::vector<std::size_t>& cands,
                               const std::vector<Unit>& units, const std::vector<std::size_t>& first_unit,
                               const std::vector<char>& chosen) {
  std::string s;
  for (std::size_t ci = 0; ci < cands.size(); ++ci) {
    std::string sectors;
    std::size_t count = 0;
    for (std::size_t u = first_unit[ci]; u < first_unit[ci + 1]; ++u)
      if (chosen[u]) sectors += (count++ ? "," : "") + std::to_string(units[u].sector);
    if (!count) continue;
    s += " [" + ev[cands[ci]].to_string();
    if (first_unit[ci + 1] - first_unit[ci] > 1)
      s += (count == first_unit[ci + 1] - first_unit[ci] ? " all sectors" : " sectors {" + sectors + "}");
    s += "]";
  }
  return s.empty() ? " nothing" : s;
}

// Any subset of the units persisted: every one of the 2^n choices when n <= bound, else none,
// all, and `samples` seeded draws (then `sampled` is set). visit() sees each choice in `chosen`
// and returns whether to go on; so does this.
template <class Visit>
bool visit_any_subset(std::vector<char>& chosen, std::size_t bound, unsigned samples, std::mt19937_64& rng,
                      CrashStats& stats, bool& sampled, Visit&& visit) {
  bool go_on = true;
  const std::size_t n = chosen.size();
  if (n <= bound) {
    ++stats.exhaustive_points;
    const std::uint64_t total = std::uint64_t{1} << n;
    for (std::uint64_t m = 0; m < total && go_on; ++m) {
      for (std::size_t b = 0; b < n; ++b) chosen[b] = static_cast<char>((m >> b) & 1);
      go_on = visit();
    }
  } else {
    ++stats.sampled_points;
    sampled = true;
    for (unsigned s = 0; s < samples + 2 && go_on; ++s) {
      for (std::size_t b = 0; b < n; ++b) chosen[b] = s == 0 ? 0 : s == 1 ? 1 : static_cast<char>(rng() & 1);
      go_on = visit();
    }
  }
  return go_on;
}

}  // namespace

const char* to_string(CrashStateOptions::Order order) noexcept {
  return order == CrashStateOptions::Order::any_subset ? "any-subset" : "sequential";
}

std::uint64_t CrashChecker::context(std::uint32_t, std::uint64_t) const { return 0; }

CrashStats& CrashStats::operator+=(const CrashStats& o) {
  points += o.points;
  exhaustive_points += o.exhaustive_points;
  sampled_points += o.sampled_points;
  generated += o.generated;
  unique += o.unique;
  violations += o.violations;
  max_units = std::max(max_units, o.max_units);
  return *this;
}

std::uint64_t hash_bytes(const unsigned char* data, std::size_t n, std::uint64_t seed) noexcept {
  std::uint64_t h = mix64(seed ^ (n * 0x2545F4914F6CDD1Dull));
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = (h ^ mix64(w + i)) * 0x9FB21C651E98DF25ull;
    h ^= h >> 29;
  }
  std::uint64_t tail = 0;
  for (std::size_t k = 0; i + k < n; ++k) tail |= static_cast<std::uint64_t>(data[i + k]) << (8 * k);
  return mix64(h ^ mix64(tail + n));
}

CrashStats enumerate_crash_states(const CrashLog& log, std::uint32_t file, const CrashStateOptions& opt,
                                  CrashChecker& checker,
                                  const std::function<void(const CrashState&, const std::vector<std::string>&)>&
                                      on_violation) {
  CrashStats stats;
  const auto& ev = log.events;
  const std::size_t n_events = ev.size();
  const unsigned bound = std::min(opt.exhaustive_bound, 20u);
  std::unordered_set<std::uint64_t> seen;
  std::vector<unsigned char> image;
  std::vector<std::string> lines;

  auto is_data = [&](const CrashEvent& e) {
    return e.file == file && (e.kind == CrashEvent::Kind::write || e.kind == CrashEvent::Kind::truncate);
  };

  // The previous point's shape: a point with the same durable set, candidates and context as the
  // one before it would only rebuild the same states.
  std::uint64_t prev_signature = 0;
  bool have_prev = false;

  // The durable cut: the latest submit of a successful sync of this file completed before the
  // point (events are in completion order, so it only grows with k).
  std::uint64_t cut = 0;
  for (std::size_t k = 0; k <= n_events; ++k) {
    const std::uint64_t c = k < n_events ? ev[k].complete_seq : std::numeric_limits<std::uint64_t>::max();
    if (k > 0) {
      const CrashEvent& prev = ev[k - 1];
      if (prev.file == file && prev.kind == CrashEvent::Kind::sync && prev.ok()) cut = std::max(cut, prev.submit_seq);
    }
    auto durable = [&](const CrashEvent& e) { return e.ok() && e.complete_seq < cut; };

    // Candidates (in completion order) and the first of them.
    std::vector<std::size_t> cands;
    for (std::size_t i = 0; i < n_events; ++i) {
      const CrashEvent& e = ev[i];
      if (!is_data(e) || e.submit_seq >= c) continue;
      if (!durable(e)) cands.push_back(i);
    }
    const std::uint64_t context = checker.context(file, c);
    std::uint64_t signature = mix64(cut ^ mix64(context));
    for (std::size_t i : cands) signature = mix64(signature ^ i);
    if (have_prev && signature == prev_signature) continue;
    prev_signature = signature;
    have_prev = true;

    const std::size_t first = cands.empty() ? n_events : cands.front();
    // The base image: the initial content and the durable events before the first candidate.
    std::vector<unsigned char> base = file < log.initial.size() ? log.initial[file] : std::vector<unsigned char>{};
    for (std::size_t i = 0; i < first && i < n_events; ++i)
      if (is_data(ev[i]) && ev[i].submit_seq < c && durable(ev[i])) apply_piece(base, ev[i], ev[i].offset, ev[i].end());

    // Units.
    std::vector<Unit> units;
    std::vector<std::size_t> first_unit;  // per candidate: its first unit (units of one candidate are contiguous)
    split_into_units(ev, cands, opt.sector_size, units, first_unit);
    stats.max_units = std::max<std::uint64_t>(stats.max_units, units.size());

    std::vector<char> chosen(units.size(), 0);
    CrashState state;
    state.file = file;
    state.point = k;
    state.seq = c;
    state.image = &image;
    state.describe = [&]() {
      std::string s = "crash before event " + std::to_string(k) +
                      (k < n_events ? " (" + ev[k].to_string() + ")" : std::string(" (after the last event)")) +
                      "; durable: writes completed before seq " + std::to_string(cut) + "; persisted beyond that:";
      return s + describe_persisted(ev, cands, units, first_unit, chosen);
    };

    bool counted_point = false;
    auto visit = [&]() -> bool {  // false: stop (max_states reached)
      image = base;
      std::size_t u = 0;
      for (std::size_t i = first; i < n_events; ++i) {
        const CrashEvent& e = ev[i];
        if (!is_data(e) || e.submit_seq >= c) continue;
        if (durable(e)) {
          apply_piece(image, e, e.offset, e.end());
          continue;
        }
        for (; u < units.size() && units[u].event == i; ++u)
          if (chosen[u]) apply_piece(image, e, units[u].begin, units[u].end);
      }
      ++stats.generated;
      const std::uint64_t key = hash_bytes(image.data(), image.size(), context);
      if (!seen.insert(key).second) return true;
      if (!counted_point) {
        ++stats.points;
        counted_point = true;
      }
      ++stats.unique;
      lines.clear();
      checker.check(state, lines);
      if (!lines.empty()) {
        stats.violations += lines.size();
        if (on_violation) on_violation(state, lines);
      }
      return opt.max_states == 0 || stats.unique < opt.max_states;
    };

    std::mt19937_64 rng(mix64(opt.seed ^ mix64(k + 1) ^ (static_cast<std::uint64_t>(file) << 40)));
    bool go_on = true;
    if (opt.order == CrashStateOptions::Order::any_subset) {
      go_on = visit_any_subset(chosen, bound, opt.samples, rng, stats, state.sampled, visit);
    } else {
      // Sequential: the first j candidates whole, then any subset of candidate j's units.
      std::uint64_t total = 1;  // j == cands.size(): everything
      bool small = true;
      for (std::size_t j = 0; j < cands.size(); ++j) {
        const std::size_t nu = first_unit[j + 1] - first_unit[j];
        if (nu > bound) small = false;
        else total += std::uint64_t{1} << nu;
        if (total > (std::uint64_t{1} << bound)) small = false;
      }
      auto set_prefix = [&](std::size_t j, std::uint64_t sub_mask, bool random_sub) {
        std::fill(chosen.begin(), chosen.end(), 0);
        for (std::size_t u = 0; u < first_unit[j]; ++u) chosen[u] = 1;
        if (j < cands.size())
          for (std::size_t u = first_unit[j]; u < first_unit[j + 1]; ++u)
            chosen[u] = random_sub ? static_cast<char>(rng() & 1) : static_cast<char>((sub_mask >> (u - first_unit[j])) & 1);
      };
      if (small) {
        ++stats.exhaustive_points;
        for (std::size_t j = 0; j <= cands.size() && go_on; ++j) {
          const std::uint64_t subsets = j < cands.size() ? std::uint64_t{1} << (first_unit[j + 1] - first_unit[j]) : 1;
          for (std::uint64_t m = 0; m < subsets && go_on; ++m) {
            set_prefix(j, m, false);
            go_on = visit();
          }
        }
      } else {
        ++stats.sampled_points;
        state.sampled = true;
        for (unsigned s = 0; s < opt.samples + 2 && go_on; ++s) {
          const std::size_t j = s == 0 ? 0 : s == 1 ? cands.size() : static_cast<std::size_t>(rng() % (cands.size() + 1));
          set_prefix(j, 0, s >= 2);
          go_on = visit();
        }
      }
    }
    if (!go_on) break;
  }
  return stats;
}

std::uint64_t MultiCrashChecker::context(std::uint64_t) const { return 0; }

CrashStats enumerate_multi_crash_states(
    const CrashLog& log, const CrashStateOptions& opt, MultiCrashChecker& checker,
    const std::function<void(const MultiCrashState&, const std::vector<std::string>&)>& on_violation) {
  CrashStats stats;
  const auto& ev = log.events;
  const std::size_t n_events = ev.size();
  const std::size_t n_files = log.paths.size();
  const unsigned bound = std::min(opt.exhaustive_bound, 20u);
  std::unordered_set<std::uint64_t> seen;
  std::vector<std::vector<unsigned char>> images(n_files);
  std::vector<std::string> lines;

  auto is_data = [&](const CrashEvent& e) {
    return e.file < n_files && (e.kind == CrashEvent::Kind::write || e.kind == CrashEvent::Kind::truncate);
  };
  std::vector<std::uint64_t> cut(n_files, 0);  // per file, as in enumerate_crash_states
  std::uint64_t prev_signature = 0;
  bool have_prev = false;

  for (std::size_t k = 0; k <= n_events; ++k) {
    const std::uint64_t c = k < n_events ? ev[k].complete_seq : std::numeric_limits<std::uint64_t>::max();
    if (k > 0) {
      const CrashEvent& prev = ev[k - 1];
      if (prev.file < n_files && prev.kind == CrashEvent::Kind::sync && prev.ok())
        cut[prev.file] = std::max(cut[prev.file], prev.submit_seq);
    }
    auto durable = [&](const CrashEvent& e) { return e.ok() && e.complete_seq < cut[e.file]; };

    std::vector<std::size_t> cands;
    for (std::size_t i = 0; i < n_events; ++i) {
      const CrashEvent& e = ev[i];
      if (!is_data(e) || e.submit_seq >= c) continue;
      if (!durable(e)) cands.push_back(i);
    }
    const std::uint64_t context = checker.context(c);
    std::uint64_t signature = mix64(context);
    for (std::size_t f = 0; f < n_files; ++f) signature = mix64(signature ^ cut[f] ^ (f << 56));
    for (std::size_t i : cands) signature = mix64(signature ^ i);
    if (have_prev && signature == prev_signature) continue;
    prev_signature = signature;
    have_prev = true;

    const std::size_t first = cands.empty() ? n_events : cands.front();
    std::vector<std::vector<unsigned char>> base(n_files);
    for (std::size_t f = 0; f < n_files; ++f)
      if (f < log.initial.size()) base[f] = log.initial[f];
    for (std::size_t i = 0; i < first && i < n_events; ++i)
      if (is_data(ev[i]) && ev[i].submit_seq < c && durable(ev[i]))
        apply_piece(base[ev[i].file], ev[i], ev[i].offset, ev[i].end());

    std::vector<Unit> units;
    std::vector<std::size_t> first_unit;  // per candidate: its first unit (units of one candidate are contiguous)
    split_into_units(ev, cands, opt.sector_size, units, first_unit);
    stats.max_units = std::max<std::uint64_t>(stats.max_units, units.size());

    std::vector<char> chosen(units.size(), 0);
    MultiCrashState state;
    state.point = k;
    state.seq = c;
    state.images = &images;
    state.describe = [&]() {
      std::string s = "crash before event " + std::to_string(k) +
                      (k < n_events ? " (" + ev[k].to_string() + ")" : std::string(" (after the last event)")) +
                      "; durable cuts:";
      for (std::size_t f = 0; f < n_files; ++f) s += " f" + std::to_string(f) + " seq " + std::to_string(cut[f]);
      s += "; persisted beyond them:";
      return s + describe_persisted(ev, cands, units, first_unit, chosen);
    };

    bool counted_point = false;
    auto visit = [&]() -> bool {
      images = base;
      std::size_t u = 0;
      for (std::size_t i = first; i < n_events; ++i) {
        const CrashEvent& e = ev[i];
        if (!is_data(e) || e.submit_seq >= c) continue;
        if (durable(e)) {
          apply_piece(images[e.file], e, e.offset, e.end());
          continue;
        }
        for (; u < units.size() && units[u].event == i; ++u)
          if (chosen[u]) apply_piece(images[e.file], e, units[u].begin, units[u].end);
      }
      ++stats.generated;
      std::uint64_t key = mix64(context);
      for (std::size_t f = 0; f < n_files; ++f) key = mix64(key ^ hash_bytes(images[f].data(), images[f].size(), f));
      if (!seen.insert(key).second) return true;
      if (!counted_point) {
        ++stats.points;
        counted_point = true;
      }
      ++stats.unique;
      lines.clear();
      checker.check(state, lines);
      if (!lines.empty()) {
        stats.violations += lines.size();
        if (on_violation) on_violation(state, lines);
      }
      return opt.max_states == 0 || stats.unique < opt.max_states;
    };

    std::mt19937_64 rng(mix64(opt.seed ^ mix64(k + 1) ^ 0x6D756C7469ull));
    bool go_on = true;
    go_on = visit_any_subset(chosen, bound, opt.samples, rng, stats, state.sampled, visit);
    if (!go_on) break;
  }
  return stats;
}

}  // namespace tai::engines
