// EngineTable: the controller's engines, found by name (open) or by file (the engine driver).
#include "src/controller/core.hpp"
#include "tai/engine_selector.hpp"

namespace tai::detail {

EngineSlot* EngineTable::find_locked(const std::string& name) const noexcept {
  const unsigned n = count_.load(std::memory_order_relaxed);  // under mu_: the writer's own count
  for (unsigned i = 0; i < n; ++i)
    if (slots_[i]->name == name) return slots_[i].get();
  return nullptr;
}

bool EngineTable::add(std::string name, std::unique_ptr<Engine> engine) {
  std::lock_guard<std::mutex> lock(mu_);
  if (find_locked(name) != nullptr) return false;
  const unsigned n = count_.load(std::memory_order_relaxed);
  if (n == kMax || !engine) return false;
  auto s = std::make_unique<EngineSlot>();
  s->name = std::move(name);
  s->engine = std::move(engine);
  s->sync = dynamic_cast<SyncEngine*>(s->engine.get());
  s->async = s->sync == nullptr && s->engine->capabilities().asynchronous;
  const std::size_t depth = std::max<std::size_t>(1, s->engine->depth());
  s->conts.resize(2 * depth);
  for (std::size_t i = s->conts.size(); i-- > 0;) s->free_conts.push_back(static_cast<std::uint32_t>(i));
  slots_[n] = std::move(s);
  count_.store(n + 1, std::memory_order_release);  // publishes the slot to count()'s acquire
  return true;
}

Result<EngineSlot*> EngineTable::find_or_make(std::string_view name, const EngineOptions& options, bool direct) {
  const bool by_default = name.empty() || name == "auto";
  std::string want(by_default ? std::string_view(direct ? default_direct_name : default_name) : name);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (EngineSlot* s = find_locked(want)) return s;
  }
  auto e = make_engine(want, options);
  if (!e) return e.error();
  add(want, std::move(e.value()));  // a concurrent open may have added it first: fine
  std::lock_guard<std::mutex> lock(mu_);
  if (EngineSlot* s = find_locked(want)) return s;
  return Error{std::make_error_code(std::errc::too_many_files_open),
               "tai::Controller: no room for engine '" + want + "' (at most 32 engines per controller)"};
}

EngineSlot* EngineTable::owning(const EngineFile& f) const noexcept {
  const unsigned n = count();
  for (unsigned i = 0; i < n; ++i)
    if (slots_[i]->engine->owns(f)) return slots_[i].get();
  return nullptr;
}

std::uint64_t EngineTable::async_in_flight() const noexcept {
  std::uint64_t total = 0;
  const unsigned n = count();
  for (unsigned i = 0; i < n; ++i)
    if (slots_[i]->async) total += slots_[i]->in_flight.load(std::memory_order_relaxed);
  return total;
}

}  // namespace tai::detail
