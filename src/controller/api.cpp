// tai::Controller and ShutdownReport: the public handle over ControllerCore, and the free
// functions the public headers call.
#include <cstdio>

#include "src/controller/core.hpp"

namespace tai {

namespace detail {
Receipt controller_submit(ControllerCore& core, Task* t) { return core.submit_task(t); }
const ControllerCore* worker_controller() noexcept { return t_worker ? &t_worker->c : nullptr; }
}  // namespace detail

Controller::Controller(const ControllerOptions& options) : core_(std::make_unique<detail::ControllerCore>(options)) {}

Controller::~Controller() {
  const ShutdownReport rep = core_->shutdown();
  if (!rep.ok()) std::fprintf(stderr, "tai::Controller: shutdown: %s\n", rep.to_string().c_str());
}

Result<File> Controller::open_file(const detail::OpenRequest& req) { return core_->open(req); }
bool Controller::add_engine(std::string name, std::unique_ptr<Engine> engine) {
  return core_->engines.add(std::move(name), std::move(engine));
}
Receipt Controller::flush() { return core_->flush(); }
ShutdownReport Controller::shutdown() { return core_->shutdown(); }
ControllerStats Controller::stats() const { return core_->stats(); }
unsigned Controller::workers() const noexcept { return core_->n; }
const ControllerOptions& Controller::options() const noexcept { return core_->opt; }
const std::string& Controller::engine_note() const noexcept { return core_->engine_note; }

std::string ShutdownReport::to_string() const {
  if (failures.empty()) return "nothing failed";
  std::string s = std::to_string(failures.size()) + " failure(s): ";
  for (std::size_t i = 0; i < failures.size(); ++i) {
    if (i) s += "; ";
    s += failures[i];
  }
  return s;
}

}  // namespace tai
