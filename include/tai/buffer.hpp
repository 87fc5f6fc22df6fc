// tai/buffer.hpp - tai::Buffer, an owned, aligned byte buffer that moves through the controller.
//
// Two uses (DESIGN section 2, "Buffers"): File::write(offset, Buffer&&) moves one in, so the
// write costs no copy; File::read(offset, n) returns one with the data (Receipt::take_buffer).
// The memory is aligned (4096 by default: any direct-I/O file accepts it without a bounce).
#pragma once

#include <cstddef>
#include <cstring>
#include <utility>

#include "tai/detail/aligned_buffer.hpp"

namespace tai {

/// An owned byte buffer: capacity() bytes aligned to alignment(), of which size() are in use.
/// Move-only. Thread-safety: none of its own (a value type, like std::vector).
class Buffer {
 public:
  static constexpr std::size_t kDefaultAlignment = 4096;

  Buffer() noexcept = default;
  /// `size` uninitialised bytes; throws std::bad_alloc when memory is exhausted.
  explicit Buffer(std::size_t size, std::size_t alignment = kDefaultAlignment)
      : mem_(size, alignment), size_(size) {}
  /// A copy of `n` bytes at `data`.
  static Buffer copy_of(const void* data, std::size_t n, std::size_t alignment = kDefaultAlignment) {
    Buffer b(n, alignment);
    if (n != 0) std::memcpy(b.data(), data, n);
    return b;
  }

  std::byte* data() noexcept { return mem_.data(); }
  const std::byte* data() const noexcept { return mem_.data(); }
  char* chars() noexcept { return mem_.chars(); }
  const char* chars() const noexcept { return mem_.chars(); }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return mem_.size(); }
  std::size_t alignment() const noexcept { return mem_.alignment(); }
  bool empty() const noexcept { return size_ == 0; }
  std::byte* begin() noexcept { return data(); }
  std::byte* end() noexcept { return data() + size_; }
  const std::byte* begin() const noexcept { return data(); }
  const std::byte* end() const noexcept { return data() + size_; }
  std::byte& operator[](std::size_t i) noexcept { return data()[i]; }
  const std::byte& operator[](std::size_t i) const noexcept { return data()[i]; }

  /// Shrinks or regrows the used part within capacity (a read that hit end of file shrinks it).
  /// Returns false, changing nothing, when n > capacity().
  bool resize(std::size_t n) noexcept {
    if (n > capacity()) return false;
    size_ = n;
    return true;
  }

  /// For the library: adopt or give up the underlying memory.
  explicit Buffer(detail::AlignedBuffer&& mem, std::size_t size) noexcept : mem_(std::move(mem)), size_(size) {}
  detail::AlignedBuffer release_memory() noexcept {
    size_ = 0;
    return std::move(mem_);
  }

 private:
  detail::AlignedBuffer mem_;
  std::size_t size_ = 0;
};

}  // namespace tai
