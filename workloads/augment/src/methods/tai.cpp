// tai-def / tai-triv: a tai::Controller with BTreeDefault / BTreeTrivial per file. write() copies
// the record and returns at once; sync() submits an fsync (or fdatasync) and returns at once with
// its receipt; every receipt of a batch is checked at the batch's end. An engine suffix picks the
// controller's engine ("tai-def:posix", "tai-def:uring"); without one it is "auto", and note()
// names the engine really used. With --direct the files are opened O_DIRECT; with
// --direct-unpadded TAI gets the records unpadded and its cache does the read-modify-write. With
// fault rules (the MPI mode's failure tests) the outputs are opened on a fault engine over posix.
#include <fmt/core.h>
#include <tai/tai.hpp>
#if TAI_AUGMENT_FAULT_ENGINE
#include <tai/engines/fault/fault_engine.hpp>
#include <tai/engines/posix/posix_engine.hpp>
#endif

#include <cerrno>
#include <cstdlib>

#include "method.hpp"

namespace augment {
namespace {
template <class Tree>
class TaiMethod final : public Method {
 public:
  TaiMethod(const std::string& engine, const MethodConfig& config) : config_(config) {
    tai::ControllerOptions opts;
    opts.workers = config.tai_workers;
    if (!engine.empty()) opts.engine = engine;
    // The cache-memory knobs of the drop-in layer (plain byte counts here), so that both
    // interfaces can be measured with and without them (docs/results/cache-cost.md).
    if (const char* b = std::getenv("TAI_CLEAN_BUDGET"); b && *b) opts.clean_budget = std::strtoull(b, nullptr, 10);
    if (const char* h = std::getenv("TAI_HUGE_PAGES"); h && *h) opts.huge_pages = h[0] == '1';
    // Writes of at least this many bytes over ranges the tree holds nothing of go to the engine
    // uncached (default 4096, as in the drop-in layer; 0 caches every write).
    if (const char* w = std::getenv("TAI_WRITE_AROUND"); w && *w)
      opts.tree_options.write_around_bytes = std::strtoull(w, nullptr, 10);
    // The engine's write-behind (EngineOptions::start_writeback_bytes, 0 turns it off), for
    // measuring what starting the device early buys.
    if (const char* sw = std::getenv("TAI_START_WRITEBACK"); sw && *sw)
      opts.engine_options.start_writeback_bytes = std::strtoull(sw, nullptr, 10);
    // How long waiting workers and receipts spin before they sleep (ControllerOptions::spin_ns),
    // for measuring what spinning costs when the compute threads fill every core.
    if (const char* sp = std::getenv("TAI_SPIN_NS"); sp && *sp) opts.spin_ns = std::strtoll(sp, nullptr, 10);
    // How late a write may wake a sleeping master (ControllerOptions::write_wake_delay_ns), for
    // measuring what the wake-ups cost.
    if (const char* wd = std::getenv("TAI_WRITE_WAKE_DELAY_NS"); wd && *wd)
      opts.write_wake_delay_ns = std::strtoll(wd, nullptr, 10);
    // Whether the workers run under SCHED_BATCH (ControllerOptions::batch_scheduling), for
    // measuring what their wake-up preemptions of the compute threads cost.
    if (const char* bs = std::getenv("TAI_BATCH_SCHEDULING"); bs && *bs) opts.batch_scheduling = bs[0] == '1';
    // Whether large writes to files whose trees hold nothing are done by the calling thread
    // (ControllerOptions::caller_writes; 0 hands every write to the workers), for measuring it.
    // (0 off, 1 from the first submitting thread, auto: the default rule of
    // ControllerOptions::caller_write_threads).
    if (const char* cw = std::getenv("TAI_CALLER_WRITES"); cw && *cw) {
      opts.caller_writes = cw[0] != '0';
      if (cw[0] == '1') opts.caller_write_threads = 1;
    }
    ctl_ = std::make_unique<tai::Controller>(opts);
    if (!config.fault_rules.empty()) {
#if TAI_AUGMENT_FAULT_ENGINE
      auto rules = tai::engines::FaultRule::parse_list(config.fault_rules);
      if (!rules) {
        fault_setup_error_ = "--fault '" + config.fault_rules + "': " + rules.error().message;
        return;
      }
      ctl_->add_engine("fault", tai::engines::make_fault(tai::engines::make_posix({}), std::move(rules.value())));
      open_engine_ = "fault";
#else
      fault_setup_error_ = "--fault: this build has no fault engine (configured with TAI_BUILD_TESTING_ENGINES=OFF)";
#endif
    }
  }
  bool open(const std::vector<std::string>& paths) override {
    tai::Open mode = tai::Open::write | tai::Open::create | tai::Open::truncate;
    if (config_.direct) mode = mode | tai::Open::direct;
    if (config_.shared_writers) mode = mode | tai::Open::shared_writers;
    if (!fault_setup_error_.empty()) {
      fail(fault_setup_error_);
      return false;
    }
    for (const std::string& path : paths) {
      auto f = open_engine_.empty() ? ctl_->open<Tree>(path, mode) : ctl_->open<Tree>(path, mode, open_engine_);
      if (!f) {
        if (config_.direct && f.error().code == std::errc::invalid_argument)
          refuse("tai open " + path + " with O_DIRECT: " + f.error().message);
        else
          fail("tai open " + path + ": " + f.error().message);
        return false;
      }
      files_.push_back(std::move(f.value()));
    }
    return true;
  }
  std::size_t record_alignment() const override {
    return config_.direct && !config_.direct_unpadded ? kDirectAlignment : 1;
  }
  void begin_batch(std::size_t ops) override {
    receipts_.clear();
    receipts_.resize(ops);
  }
  void write(std::size_t slot, unsigned file, std::uint64_t offset, const void* data, std::size_t n) override {
    receipts_[slot] = files_[file].write(offset, data, n);
  }
  void sync(std::size_t slot, unsigned file) override {
    receipts_[slot] = config_.fdatasync ? files_[file].fdatasync() : files_[file].fsync();
  }
  void end_batch() override {
    for (const tai::Receipt& r : receipts_)
      if (r.valid() && !r.ok()) fail("tai: " + r.message());
    receipts_.clear();
  }
  void finish() override {
    std::vector<tai::Receipt> syncs;
    for (tai::File& f : files_) syncs.push_back(config_.fdatasync ? f.fdatasync() : f.fsync());
    for (const tai::Receipt& s : syncs)
      if (!s.ok()) fail("tai fsync: " + s.message());
    for (tai::File& f : files_)
      if (tai::Receipt c = f.close(); !c.ok()) fail("tai close: " + c.message());
    files_.clear();
    const tai::ControllerStats s = ctl_->stats();
    stats_ = fmt::format(
        "engine writes {} (blocks gathered {}), syncs {}, MB to engine {:.1f}, MB merged in cache {:.1f}, write-throughs {}, reroutes {}, "
        "evictions {}, restructures {} (quiesced {}), collects {}, steps {}, steals {}, rounds normal/recycle/flush/idle "
        "{}/{}/{}/{}, sleeps {}, quota peak MB {:.1f}, copy waits {}",
        s.engine_writes, s.gathered_blocks, s.engine_syncs, s.bytes_to_engine / 1e6, s.merged_bytes / 1e6, s.write_throughs, s.reroutes,
        s.evictions, s.restructures, s.quiesces, s.collects, s.steps, s.steals, s.rounds_normal, s.rounds_recycle,
        s.rounds_flush, s.rounds_idle, s.sleeps, s.quota_peak / 1e6, s.write_copy_waits);
  }
  std::string stats() const override { return stats_; }
  std::string note() const override { return "engine " + ctl_->engine_note(); }
  ~TaiMethod() override {
    files_.clear();
    ctl_->shutdown();
  }

 private:
  const MethodConfig config_;
  std::unique_ptr<tai::Controller> ctl_;
  std::vector<tai::File> files_;
  std::vector<tai::Receipt> receipts_;
  std::string stats_;
  std::string open_engine_;        // "fault" when the outputs go through the fault engine
  std::string fault_setup_error_;
};
}  // namespace

std::vector<MethodInfo> tai_methods() {
  return {{"tai-def", "TAI controller, BTreeDefault (engine suffix: tai-def:posix, :uring, :libaio)",
           [](const std::string& engine, const MethodConfig& c) {
             return std::unique_ptr<Method>(new TaiMethod<tai::BTreeDefault>(engine, c));
           },
           "", true},
          {"tai-triv", "TAI controller, BTreeTrivial (engine suffix as tai-def)",
           [](const std::string& engine, const MethodConfig& c) {
             return std::unique_ptr<Method>(new TaiMethod<tai::BTreeTrivial>(engine, c));
           },
           "", true}};
}
}  // namespace augment
