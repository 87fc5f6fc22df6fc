// ThreadSanitizer suppressions for Boost.Lockfree's node free lists: why they are benign and why
// they live here, see src/detail/lockfree_queue.hpp. Empty in builds without TSan.
#include "src/detail/lockfree_queue.hpp"

#if defined(TAI_TSAN)
namespace tai::detail {
// Frames of Boost.Lockfree's free lists and tagged pointers/indices only: fixed_size_freelist and
// tagged_index serve fixed_sized<true> queues (the controller, IoQueue), freelist_stack and
// tagged_ptr the growable ones (CompletionQueue).
extern const char kLockfreeTsanSuppressions[] =
    "race:boost::lockfree::detail::fixed_size_freelist\n"
    "race:boost::lockfree::detail::tagged_index\n"
    "race:boost::lockfree::detail::freelist_stack\n"
    "race:boost::lockfree::detail::tagged_ptr\n";
}  // namespace tai::detail

// TSan's runtime calls this at start-up for its built-in suppressions. Weak, so that a program
// may define its own (fuller) list; it then takes over this one.
extern "C" __attribute__((weak)) const char* __tsan_default_suppressions() {
  return tai::detail::kLockfreeTsanSuppressions;
}
#endif
