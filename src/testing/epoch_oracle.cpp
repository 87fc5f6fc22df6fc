// The epoch oracle of TAI_FSYNC=order: see epoch_oracle.hpp.
#include "src/testing/epoch_oracle.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace tai::engines {
namespace {

constexpr std::uint64_t kInf = std::numeric_limits<std::uint64_t>::max();
constexpr int kMaxK = 63;

// Bits a+1 .. b (k in (a, b]), with a >= -1 and b <= 63.
std::uint64_t bits_after(int a, int b) {
  std::uint64_t m = 0;
  for (int k = a + 1; k <= b && k <= kMaxK; ++k) m |= std::uint64_t{1} << k;
  return m;
}

std::string mask_text(std::uint64_t m) {
  if (m == 0) return "{}";
  std::string s = "{";
  bool first = true;
  for (int k = 0; k <= kMaxK; ++k) {
    if (!((m >> k) & 1)) continue;
    int j = k;
    while (j + 1 <= kMaxK && ((m >> (j + 1)) & 1)) ++j;
    s += (first ? "" : ",") + std::to_string(k) + (j > k ? (j == kMaxK ? "+" : ".." + std::to_string(j)) : "");
    first = false;
    k = j;
  }
  return s + "}";
}

}  // namespace

struct EpochOracle::FileModel {
  struct Source {
    enum class Kind : std::uint8_t { initial, write, truncate } kind;
    int epoch;          // -1: the initial content
    std::size_t op;     // index into ops_ (write, truncate)
    std::uint64_t begin, end;  // range covered (truncate, initial: [0, inf))
  };
  struct Segment {
    std::uint64_t begin, end;  // end kInf: the last one
    std::vector<std::pair<std::size_t, std::uint64_t>> sources;  // (source, mask of k it explains)
  };
  const std::vector<unsigned char>* initial = nullptr;
  std::vector<Source> sources;
  std::vector<Segment> segments;
};

EpochOracle::EpochOracle(const CrashLog& log, std::vector<EpochOp> ops) : log_(log), ops_(std::move(ops)) {
  files_.resize(log_.paths.size());
  std::vector<std::size_t> order(ops_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ops_[a].begin < ops_[b].begin; });
  for (std::size_t i : order) {
    const EpochOp& op = ops_[i];
    if (op.kind == EpochOp::Kind::sync_point) continue;
    if (op.epoch > 62) throw std::invalid_argument("EpochOracle: epoch above 62 in " + op.label);
    const int f = log_.file_index(op.path);
    if (f < 0) throw std::invalid_argument("EpochOracle: the crash log has no file " + op.path);
    auto& m = files_[static_cast<std::size_t>(f)];
    if (!m) {
      m = std::make_unique<FileModel>();
      m->initial = &log_.initial[static_cast<std::size_t>(f)];
      m->sources.push_back({FileModel::Source::Kind::initial, -1, 0, 0, kInf});
    }
    if (op.kind == EpochOp::Kind::write)
      m->sources.push_back({FileModel::Source::Kind::write, static_cast<int>(op.epoch), i, op.offset,
                            op.offset + op.data.size()});
    else
      m->sources.push_back({FileModel::Source::Kind::truncate, static_cast<int>(op.epoch), i, 0, kInf});
  }
  for (auto& m : files_) {
    if (!m) continue;
    std::vector<std::uint64_t> cuts{0, m->initial->size()};
    for (const auto& s : m->sources)
      if (s.kind == FileModel::Source::Kind::write) cuts.push_back(s.begin), cuts.push_back(s.end);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (std::size_t c = 0; c < cuts.size(); ++c) {
      FileModel::Segment seg{cuts[c], c + 1 < cuts.size() ? cuts[c + 1] : kInf, {}};
      std::vector<std::size_t> cover;  // program order (sources are)
      for (std::size_t s = 0; s < m->sources.size(); ++s)
        if (m->sources[s].begin <= seg.begin && seg.begin < m->sources[s].end) cover.push_back(s);
      for (std::size_t j = 0; j < cover.size(); ++j) {
        const int e = m->sources[cover[j]].epoch;
        const int next = j + 1 < cover.size() ? m->sources[cover[j + 1]].epoch : kMaxK;
        // The last source of an epoch below k for k in (e, next]; a source of epoch k itself.
        std::uint64_t mask = bits_after(e, next);
        if (e >= 0) mask |= std::uint64_t{1} << e;
        seg.sources.emplace_back(cover[j], mask);
      }
      m->segments.push_back(std::move(seg));
    }
  }
}

EpochOracle::~EpochOracle() = default;

unsigned EpochOracle::required_at(std::uint64_t seq) const {
  unsigned r = 0;
  for (const auto& op : ops_)
    if (op.kind == EpochOp::Kind::sync_point && op.end < seq) r = std::max(r, op.required_epoch);
  return r;
}

std::uint64_t EpochOracle::context(std::uint64_t seq) const { return required_at(seq); }

void EpochOracle::check(const MultiCrashState& state, std::vector<std::string>& out) {
  const unsigned required = required_at(state.seq);
  std::uint64_t all = required > static_cast<unsigned>(kMaxK) ? 0 : ~std::uint64_t{0} << required;
  std::vector<std::uint64_t> per_file(files_.size(), ~std::uint64_t{0});
  std::vector<std::string> where(files_.size());
  for (std::size_t f = 0; f < files_.size(); ++f) {
    const FileModel* m = files_[f].get();
    if (!m) continue;
    const std::vector<unsigned char>& img = (*state.images)[f];
    const std::uint64_t len = img.size();
    std::uint64_t acc = ~std::uint64_t{0};
    for (const auto& seg : m->segments) {
      const std::uint64_t hi = seg.end == kInf ? std::max(len, seg.begin) : seg.end;
      for (std::uint64_t x = seg.begin; x < hi && acc != 0;) {
        std::uint64_t y = std::min(hi, (x / 512 + 1) * 512);
        if (x < len) y = std::min(y, len);
        std::uint64_t match = 0;
        for (const auto& [si, mask] : seg.sources) {
          const auto& s = m->sources[si];
          bool ok;
          if (x >= len) {
            // Past the end of file: what a truncation or the initial content's end leaves.
            ok = s.kind == FileModel::Source::Kind::truncate ||
                 (s.kind == FileModel::Source::Kind::initial && x >= m->initial->size());
          } else if (s.kind == FileModel::Source::Kind::write) {
            ok = std::memcmp(img.data() + x, ops_[s.op].data.data() + (x - s.begin), y - x) == 0;
          } else if (s.kind == FileModel::Source::Kind::initial && x < m->initial->size()) {
            ok = std::memcmp(img.data() + x, m->initial->data() + x, y - x) == 0;
          } else {
            // A hole: nothing persisted here below a persisted piece's end reads as 0.
            ok = std::all_of(img.data() + x, img.data() + y, [](unsigned char b) { return b == 0; });
          }
          if (ok) match |= mask;
        }
        if ((acc & match) == 0 && where[f].empty()) {
          where[f] = "bytes [" + std::to_string(x) + ", " + std::to_string(y) + ") " +
                     (x >= len ? "past the end of file" : "") + " fit k in " + mask_text(match) + " against " +
                     mask_text(acc) + " before them";
        }
        acc &= match;
        x = y;
      }
      if (acc == 0) break;
    }
    per_file[f] = acc;
    all &= acc;
  }
  if (all != 0) return;
  std::string s = "no epoch k explains the state (sync points done require k >= " + std::to_string(required) + ");";
  for (std::size_t f = 0; f < files_.size(); ++f) {
    if (!files_[f]) continue;
    s += " f" + std::to_string(f) + " (" + std::to_string((*state.images)[f].size()) + " bytes) fits " +
         mask_text(per_file[f]);
    if (!where[f].empty()) s += " [first misfit: " + where[f] + "]";
    s += ";";
  }
  out.push_back(std::move(s));
}

}  // namespace tai::engines
