// engines/common/wrapper_engine.hpp - tai::engines::WrapperEngine, the base of the test engines
// that wrap another engine (fault, recording).
//
// Layering. A wrapper is an Engine of its own whose native layer is the inner engine's native
// layer (Engine::native_*): the wrapper's base class validates, bounces unaligned direct I/O
// and chains requests; the inner engine only moves bytes, and its own base class is never used.
// The wrapped files' engine() is the inner engine (owns() delegates), so a wrapper must be the
// outermost layer. WrapperEngine forwards everything to the inner engine; a wrapper overrides
// only what it changes.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "tai/engine.hpp"
#include "tai/error.hpp"

namespace tai::engines {

/// Forwards open/close/submit/reap, eventfd() and owns() to the inner engine. Capabilities and
/// options are the inner engine's; name() is "<kind>(<inner name>)".
/// Thread-safety: as tai::Engine (submit/reap from the queue owner's thread, open/close from any
/// thread); inner() is safe from any thread, but using the inner engine directly is not allowed
/// once it is wrapped (its native layer belongs to the wrapper).
class WrapperEngine : public Engine {
 public:
  ~WrapperEngine() override = default;

  /// The wrapped engine. Thread-safe.
  Engine& inner() noexcept { return *inner_; }
  const Engine& inner() const noexcept { return *inner_; }
  /// The inner engine's eventfd. Thread-safe.
  int eventfd() const noexcept override { return inner_->eventfd(); }
  /// Delegates: the files are the inner engine's. Thread-safe.
  bool owns(const EngineFile& file) const noexcept override { return inner_->owns(file); }

 protected:
  WrapperEngine(std::string_view kind, std::unique_ptr<Engine> inner)
      : Engine(std::string(kind) + "(" + std::string(inner->name()) + ")", inner->capabilities(), inner->options()),
        inner_(std::move(inner)) {}

  /// The inner engine opens natively; this engine's base records the file as its own.
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override {
    return native_open(*inner_, path, mode);
  }
  std::error_code do_close(EngineFile& file) override { return native_close(*inner_, file); }
  std::size_t do_submit(const Request* requests, std::size_t n) override {
    return native_submit(*inner_, requests, n);
  }
  std::size_t do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) override {
    return native_reap(*inner_, out, max, min, timeout);
  }

 private:
  std::unique_ptr<Engine> inner_;
};

}  // namespace tai::engines
