// src/btree/tree_core.hpp - the private side of tai::detail::TreeCore, shared by the files of
// src/btree/ and by nothing else (never installed): the node and its dirty ranges, the sink the
// step handlers run with, and the inline helpers that read a node's fields. tai/btree.hpp
// declares them; defining them here keeps the node out of every header a user includes.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "tai/btree.hpp"
#include "src/btree/dirty.hpp"
#include "src/btree/node.hpp"

namespace tai::detail {

/// The sink a tree's run() hands to its step handlers: forwards emit/io to the runner's sink and
/// collects the operations whose step finished, so that run() completes them only after the
/// step is done touching its node (a completed operation lets the parent's next step delete an
/// idle node, see TreeCore::done_up_to).
class RunContext final : public StepSink {
 public:
  explicit RunContext(StepSink& outer) noexcept : outer_(outer) {}
  void emit(const Step& s) override { outer_.emit(s); }
  void io(const Request& r, const Step& c) override { outer_.io(r, c); }
  void finish_later(Operation& op) {
    if (count_ < kInline) {
      inline_[count_++] = &op;
    } else {
      if (!more_) more_ = std::make_unique<std::vector<Operation*>>();  // a long drain only
      more_->push_back(&op);
    }
  }
  template <class Fn>
  void for_each_finished(Fn&& fn) {
    for (std::size_t i = 0; i < count_; ++i) fn(*inline_[i]);
    if (more_)
      for (Operation* op : *more_) fn(*op);
  }
  StepSink& outer() noexcept { return outer_; }

 private:
  static constexpr std::size_t kInline = 8;
  StepSink& outer_;
  Operation* inline_[kInline];
  std::size_t count_ = 0;
  std::unique_ptr<std::vector<Operation*>> more_;
};

inline bool is_transfer(const Step& s) noexcept {
  return s.kind == StepKind::visit && (s.op->kind == TreeOp::read || s.op->kind == TreeOp::write);
}

inline std::uint64_t TreeCore::node_last(const Node& n) const noexcept { return n.base + node_mask(n.depth); }

inline std::uint64_t TreeCore::block_size(const Node& n) const noexcept { return node_mask(n.depth) + 1; }

inline bool TreeCore::writes_around(const Step& s) const noexcept {
  const Node& n = *s.node;
  return s.op->kind == TreeOp::write && goes_around(s) && n.block == nullptr && n.child_count == 0 &&
         !(bottom(n) && !cacheable(n.depth));  // where no block can ever be, it is "uncached" as before
}

inline bool TreeCore::bottom(const Node& n) const noexcept {
  return n.depth + 1u >= levels_ || node_mask(n.depth) < min_block_;
}

inline void TreeCore::step_done(Operation& op, StepSink& sink) { static_cast<RunContext&>(sink).finish_later(op); }

inline bool TreeCore::finished(const Step& s, StepSink& sink) {
  step_done(*s.op, sink);
  return true;
}

inline bool TreeCore::unsynced_live(const Node& n) const noexcept {
  return !n.unsynced.empty() && n.unsynced_epoch > epochs_.synced.load(std::memory_order_acquire);
}

inline bool TreeCore::gatherable(const Node& n) const noexcept {
  // done_up_to first: until it holds, n's own fields may be changing under n's steps (its
  // acquire load makes their last writes visible once it does).
  return done_up_to(n.last_seq) && n.block != nullptr && !n.dirty.empty() && !n.busy && !n.has_parked() &&
         n.direct_count == 0;
}

inline std::uint64_t TreeCore::array_bytes(const Node& n) const noexcept {
  return (std::uint64_t{1} << bits_[n.depth]) * sizeof(Node*);
}

inline bool TreeCore::mirrors(const Node& n, std::uint64_t hi) const noexcept {
  return n.valid && (hi <= n.fill_end || n.fill_end >= fill_limit(n));
}

template <class Fn>
void TreeCore::for_each_child(Node& n, std::uint64_t i0, std::uint64_t i1, Fn&& fn) {
  // erase_child() frees the table with the last child: re-check it after every call.
  if (n.sparse) {
    if (n.map == nullptr) return;
    auto it = n.map->lower_bound(i0);
    while (it != n.map->end() && it->first <= i1) {
      auto next = std::next(it);
      fn(it->first, it->second);  // may erase `it`
      if (n.map == nullptr) return;
      it = next;
    }
  } else {
    for (std::uint64_t i = i0; n.array != nullptr; ++i) {
      if (n.array[i] != nullptr) fn(i, n.array[i]);
      if (i == i1) break;
    }
  }
}

}  // namespace tai::detail
