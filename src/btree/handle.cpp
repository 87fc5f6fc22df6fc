// src/btree/handle.cpp - tai::BTree<Bits...>'s non-template side (detail::TreeHandle) and the
// tree factory: compiled here, where TreeCore is complete, so that tai/btree.hpp and
// tai/controller.hpp need only its forward declaration.
#include "src/btree/tree_core.hpp"

namespace tai::detail {

void TreeCoreDeleter::operator()(TreeCore* tree) const noexcept { delete tree; }

TreePtr make_tree_core(unsigned levels, const unsigned* bits, EngineFile* file, Quota& quota,
                       const BTreeOptions& options) {
  return TreePtr(new TreeCore(levels, bits, file, quota, options));
}

void TreeHandle::start(Operation& op, StepSink& sink) { core_->start(op, sink); }
BTreeStats TreeHandle::stats() const noexcept { return core_->stats(); }
std::uint64_t TreeHandle::id() const noexcept { return core_->id(); }
EngineFile* TreeHandle::file() const noexcept { return core_->file(); }
Quota& TreeHandle::quota() const noexcept { return core_->quota(); }
const BTreeOptions& TreeHandle::options() const noexcept { return core_->options(); }
unsigned TreeHandle::levels() const noexcept { return core_->levels(); }
unsigned TreeHandle::node_shift(unsigned depth) const noexcept { return core_->node_shift(depth); }
bool TreeHandle::take_collect_request() noexcept { return core_->take_collect_request(); }
bool TreeHandle::idle() const noexcept { return core_->idle(); }
std::error_code TreeHandle::recorded_error() const noexcept { return core_->recorded_error(); }
std::error_code TreeHandle::sync_error() const noexcept { return core_->sync_error(); }
std::optional<std::uint64_t> TreeHandle::logical_size() const noexcept { return core_->logical_size(); }
std::string TreeHandle::check_invariants() const { return core_->check_invariants(); }

}  // namespace tai::detail
