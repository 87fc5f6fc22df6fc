// tai-def / tai-triv: a tai::Controller with BTreeDefault / BTreeTrivial per file. write() copies
// the record and returns at once; the receipts of a batch are waited for at its end. An engine
// suffix picks the controller's engine ("tai-def:posix", "tai-def:uring"); without one it is
// "auto", and note() names the engine really used.
#include <tai/tai.hpp>

#include "method.hpp"

namespace augment {
namespace {
template <class Tree>
class TaiMethod final : public Method {
 public:
  TaiMethod(const std::string& engine, const MethodConfig& config) {
    tai::ControllerOptions opts;
    opts.workers = config.tai_workers;
    if (!engine.empty()) opts.engine = engine;
    ctl_ = std::make_unique<tai::Controller>(opts);
  }
  bool open(const std::string& path) override {
    auto f = ctl_->open<Tree>(path, tai::Open::write | tai::Open::create | tai::Open::truncate);
    if (!f) {
      fail("tai open " + path + ": " + f.error().message);
      return false;
    }
    file_ = std::move(f.value());
    return true;
  }
  void begin_batch(std::size_t records) override {
    receipts_.clear();
    receipts_.resize(records);
  }
  void write(std::size_t slot, std::uint64_t offset, const void* data, std::size_t n) override {
    receipts_[slot] = file_.write(offset, data, n);
  }
  void end_batch() override {
    for (const tai::Receipt& r : receipts_)
      if (r.valid() && !r.ok()) fail("tai write: " + r.message());
    receipts_.clear();
  }
  void finish() override {
    if (!file_) return;
    if (tai::Receipt s = file_.fsync(); !s.ok()) fail("tai fsync: " + s.message());
    if (tai::Receipt c = file_.close(); !c.ok()) fail("tai close: " + c.message());
  }
  std::string note() const override { return "engine " + ctl_->engine_note(); }
  ~TaiMethod() override {
    file_ = tai::File();
    ctl_->shutdown();
  }

 private:
  std::unique_ptr<tai::Controller> ctl_;
  tai::File file_;
  std::vector<tai::Receipt> receipts_;
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
