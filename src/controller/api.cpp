// tai::Controller and ShutdownReport: the public handle over ControllerCore, and the free
// functions the public headers call.
#include <cstdio>

#include <thread>

#include "src/controller/core.hpp"
#include "engines/common/own_descriptors.hpp"

namespace tai {

namespace detail {
Receipt controller_submit(ControllerCore& core, Task* t) { return core.submit_task(t); }
const ControllerCore* worker_controller() noexcept { return t_worker ? &t_worker->c : nullptr; }
void wake_for_waiter(const ControllerCore* c) noexcept {
  // The doorbell's state is atomic; the task's owner is const only because receipts never
  // change their controller.
  if (c != nullptr) const_cast<ControllerCore*>(c)->doorbell.ring();
}
std::int64_t wait_spin_ns(const ControllerCore* c) noexcept { return c != nullptr ? c->opt.spin_ns : kDefaultWaitSpinNs; }
}  // namespace detail

Controller::Controller(const ControllerOptions& options) : core_(std::make_unique<detail::ControllerCore>(options)) {}

Controller::~Controller() {
  if (detail::worker_controller() == core_.get()) {
    // Destroyed by one of its own tasks: the workers cannot be joined from one of them, and the
    // task that runs this still needs the core when it returns. The shutdown goes on on a thread
    // of its own, which joins this worker after the task has returned and then frees the core.
    std::fprintf(stderr,
                 "tai::Controller: destroyed from one of its own tasks; its shutdown continues on a thread of "
                 "its own (failures, if any, are printed here)\n");
    std::thread([core = std::move(core_)]() mutable {
      tai::detail::mark_this_thread_as_tai("tai-shutdown");
      const ShutdownReport rep = core->shutdown();
      if (!rep.ok()) std::fprintf(stderr, "tai::Controller: shutdown: %s\n", rep.to_string().c_str());
      core.reset();
    }).detach();
    return;
  }
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
