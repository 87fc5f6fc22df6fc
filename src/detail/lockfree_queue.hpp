// src/detail/lockfree_queue.hpp - Boost.Lockfree for libtai: every source that uses
// boost::lockfree::queue or spsc_queue (the controller's Pending queues and inboxes, the
// CompletionQueue of receipt.cpp, IoQueue's thread pool, the tests that mimic them) includes this
// header instead of Boost's, so all of them get the same ThreadSanitizer treatment.
//
// ThreadSanitizer and Boost.Lockfree. boost::lockfree::queue keeps its nodes on a free list
// (fixed_size_freelist for fixed_sized<true> queues, freelist_stack otherwise) whose head is a
// tagged pointer or tagged index: a pointer or index plus a counter bumped on every change. A
// popping thread reads a node's `next` link after loading the head, while another thread may
// already have taken that node and be rewriting the link with a plain store. The value read is
// then stale, but the compare-and-swap that follows fails because the tag moved, and the stale
// value is thrown away; nodes are never handed back to the allocator while the queue lives, so
// the read never touches freed memory. The race is benign by design (the ABA protection of
// tagged pointers) but it is formally a data race, and TSan reports it from inside Boost (a
// known report upstream). spsc_queue has no free list and needs nothing.
//
// The decision, once for libtai: use Boost.Lockfree, and suppress exactly those reports, by
// frames of Boost.Lockfree's free lists and tagged pointers only (races in TAI's own code are
// still reported). The suppressions are defined once, in src/lockfree_queue.cpp, which is part of
// libtai; in a TSan build this header makes every object that includes it refer to that source,
// so a static link of any program that uses one of the queues also takes the suppressions (before,
// they came with IoQueue's source only, and a program without IoQueue ran unsuppressed).
#pragma once

#include <boost/lockfree/queue.hpp>
#include <boost/lockfree/spsc_queue.hpp>

#if defined(__SANITIZE_THREAD__)
#define TAI_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TAI_TSAN 1
#endif
#endif

#if defined(TAI_TSAN)
namespace tai::detail {
/// Defined beside __tsan_default_suppressions (src/lockfree_queue.cpp).
extern const char kLockfreeTsanSuppressions[];
namespace {
/// Kept (gnu::used) even though nothing reads it: its reference to kLockfreeTsanSuppressions is
/// what makes a static link take src/lockfree_queue.cpp along with any user of the queues.
[[gnu::used]] const char* const lockfree_tsan_suppressions_anchor = kLockfreeTsanSuppressions;
}  // namespace
}  // namespace tai::detail
#endif
