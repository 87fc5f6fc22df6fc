// src/detail/never_destroyed.hpp - a static object that is built and never destroyed.
//
// The preload library runs inside programs that may call exit() from one thread while others
// are still inside the library: exit() destroys the library's static objects (the shared
// object's __cxa_finalize, and the function-local statics first used after main started) in
// reverse order of construction, before or while the library's own exit handler runs, and a
// thread still writing would read a destroyed object. Every static the layer may read until
// the exit handler has shut it down is therefore either a constant or one of these.
#pragma once

#include <new>
#include <utility>

namespace tai::detail {

/// Holds a T built by the constructor and never destroyed (no destructor is registered at
/// exit). Thread safety: as T's; the holder adds no synchronisation.
template <class T>
class NeverDestroyed {
 public:
  template <class... Args>
  explicit NeverDestroyed(Args&&... args) {
    ::new (static_cast<void*>(storage_)) T(std::forward<Args>(args)...);
  }
  NeverDestroyed(const NeverDestroyed&) = delete;
  NeverDestroyed& operator=(const NeverDestroyed&) = delete;

  T& get() noexcept { return *std::launder(reinterpret_cast<T*>(storage_)); }
  const T& get() const noexcept { return *std::launder(reinterpret_cast<const T*>(storage_)); }
  T& operator*() noexcept { return get(); }
  const T& operator*() const noexcept { return get(); }
  T* operator->() noexcept { return &get(); }
  const T* operator->() const noexcept { return &get(); }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace tai::detail
