// tai/detail/inplace_function.hpp - a move-only std::function that never allocates.
//
// The callable is stored inside the object (Capacity bytes); a callable that does not fit fails
// to compile with a message saying so, instead of silently going to the heap. IoQueue keeps one
// of these per slot, so submitting a request costs no allocation.
//
// Thread-safety: none (a value type); distinct objects may be used from distinct threads.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace tai::detail {

template <class Signature, std::size_t Capacity = 48, std::size_t Align = alignof(std::max_align_t)>
class InplaceFunction;

template <class R, class... Args, std::size_t Capacity, std::size_t Align>
class InplaceFunction<R(Args...), Capacity, Align> {
 public:
  static constexpr std::size_t capacity = Capacity;

  InplaceFunction() noexcept = default;
  InplaceFunction(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor)

  template <class F, class D = std::decay_t<F>,
            class = std::enable_if_t<!std::is_same_v<D, InplaceFunction> && std::is_invocable_r_v<R, D&, Args...>>>
  InplaceFunction(F&& f) {  // NOLINT(google-explicit-constructor)
    emplace(std::forward<F>(f));
  }

  InplaceFunction(InplaceFunction&& other) noexcept { move_from(other); }
  InplaceFunction& operator=(InplaceFunction&& other) noexcept {
    if (this != &other) {
      reset();
      move_from(other);
    }
    return *this;
  }
  InplaceFunction(const InplaceFunction&) = delete;
  InplaceFunction& operator=(const InplaceFunction&) = delete;
  ~InplaceFunction() { reset(); }

  /// Replaces the stored callable by `f`, constructed in place.
  template <class F>
  void emplace(F&& f) {
    using D = std::decay_t<F>;
    static_assert(std::is_invocable_r_v<R, D&, Args...>, "callable has the wrong signature");
    static_assert(sizeof(D) <= Capacity,
                  "callable too large for the inline storage of tai::detail::InplaceFunction "
                  "(IoQueue callbacks hold at most IoQueue::kCallbackCapacity bytes): capture a "
                  "pointer to your state instead of the state itself");
    static_assert(alignof(D) <= Align, "callable over-aligned for InplaceFunction's storage");
    static_assert(std::is_nothrow_move_constructible_v<D>,
                  "InplaceFunction needs a callable whose move constructor is noexcept");
    reset();
    ::new (static_cast<void*>(storage_)) D(std::forward<F>(f));
    ops_ = &kOps<D>;
  }

  void reset() noexcept {
    if (ops_) {
      ops_->destroy(storage_);
      ops_ = nullptr;
    }
  }

  explicit operator bool() const noexcept { return ops_ != nullptr; }

  /// Calls the stored callable. Precondition: one is stored.
  R operator()(Args... args) { return ops_->invoke(storage_, std::forward<Args>(args)...); }

 private:
  struct Ops {
    R (*invoke)(void* self, Args&&... args);
    void (*move_destroy)(void* dst, void* src) noexcept;  // move-construct at dst, destroy src
    void (*destroy)(void* self) noexcept;
  };

  template <class D>
  static R invoke_impl(void* self, Args&&... args) {
    return (*static_cast<D*>(self))(std::forward<Args>(args)...);
  }
  template <class D>
  static void move_destroy_impl(void* dst, void* src) noexcept {
    D* s = static_cast<D*>(src);
    ::new (dst) D(std::move(*s));
    s->~D();
  }
  template <class D>
  static void destroy_impl(void* self) noexcept {
    static_cast<D*>(self)->~D();
  }
  template <class D>
  static constexpr Ops kOps{&invoke_impl<D>, &move_destroy_impl<D>, &destroy_impl<D>};

  void move_from(InplaceFunction& other) noexcept {
    if (other.ops_) {
      other.ops_->move_destroy(storage_, other.storage_);
      ops_ = other.ops_;
      other.ops_ = nullptr;
    }
  }

  const Ops* ops_ = nullptr;
  alignas(Align) unsigned char storage_[Capacity];
};

}  // namespace tai::detail
