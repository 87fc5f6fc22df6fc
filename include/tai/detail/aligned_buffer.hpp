// tai/detail/aligned_buffer.hpp - an owned, aligned block of memory (posix_memalign), move-only.
//
// Used for direct-I/O bounce buffers and cache blocks: O_DIRECT wants the buffer address aligned
// to the file's Alignment::memory, and cache blocks want page alignment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace tai::detail {

/// Memory that does not come from the C allocator (the controller's write-copy arena): a buffer
/// that holds some gives it back here instead of calling std::free. take_back() may be called
/// from any thread and must not throw.
class BufferHome {
 public:
  virtual void take_back(std::byte* data, std::size_t size) noexcept = 0;

 protected:
  ~BufferHome() = default;
};

/// Owns `size` bytes aligned to `alignment` (a power of two; raised to sizeof(void*) if
/// smaller, as posix_memalign requires). The contents are uninitialised unless zeroed.
/// A default-constructed or moved-from buffer is empty: data() == nullptr, size() == 0.
/// Thread-safety: none of its own; like a std::vector, distinct objects are independent and
/// const members may be called from several threads at once.
class AlignedBuffer {
 public:
  AlignedBuffer() noexcept = default;

  /// Allocates; throws std::bad_alloc when memory is exhausted (like new). A non-power-of-two
  /// alignment is a programming error, reported as std::bad_alloc too. size 0 gives an empty
  /// buffer.
  AlignedBuffer(std::size_t size, std::size_t alignment) {
    *this = try_allocate(size, alignment);
    if (size != 0 && data_ == nullptr) throw std::bad_alloc();
  }

  /// Allocates without throwing: an empty buffer on failure, when size is 0, or when the
  /// alignment is not a power of two.
  static AlignedBuffer try_allocate(std::size_t size, std::size_t alignment) noexcept {
    AlignedBuffer b;
    if (size == 0) return b;
    // Checked here rather than left to posix_memalign's EINVAL: sanitizers abort on it.
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) return b;
    if (alignment < sizeof(void*)) alignment = sizeof(void*);
    void* p = nullptr;
    if (::posix_memalign(&p, alignment, size) != 0) return b;
    b.data_ = static_cast<std::byte*>(p);
    b.size_ = size;
    b.alignment_ = alignment;
    return b;
  }

  /// Takes `size` bytes at `data` (aligned to `alignment`) that `home` lends: the buffer gives
  /// them back to `home` when it is destroyed or reset. home must outlive the buffer.
  static AlignedBuffer adopt(std::byte* data, std::size_t size, std::size_t alignment, BufferHome* home) noexcept {
    AlignedBuffer b;
    b.data_ = data;
    b.size_ = size;
    b.alignment_ = alignment;
    b.home_ = home;
    return b;
  }

  ~AlignedBuffer() { free_memory(); }

  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        alignment_(std::exchange(other.alignment_, 0)),
        home_(std::exchange(other.home_, nullptr)) {}

  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      free_memory();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      alignment_ = std::exchange(other.alignment_, 0);
      home_ = std::exchange(other.home_, nullptr);
    }
    return *this;
  }

  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() noexcept { return data_; }
  const std::byte* data() const noexcept { return data_; }
  /// The same memory as char*, for read()/write()-style interfaces.
  char* chars() noexcept { return reinterpret_cast<char*>(data_); }
  const char* chars() const noexcept { return reinterpret_cast<const char*>(data_); }
  std::size_t size() const noexcept { return size_; }
  /// The alignment actually requested from posix_memalign (0 when empty).
  std::size_t alignment() const noexcept { return alignment_; }
  bool empty() const noexcept { return data_ == nullptr; }
  explicit operator bool() const noexcept { return data_ != nullptr; }

  /// Sets every byte to zero.
  void zero() noexcept {
    if (data_) std::memset(data_, 0, size_);
  }

  /// Frees the memory now; the buffer becomes empty.
  void reset() noexcept { *this = AlignedBuffer(); }

  /// Whether the memory is lent by a BufferHome (not the C allocator's).
  bool borrowed() const noexcept { return home_ != nullptr; }
  /// The home that lent the memory (nullptr: the C allocator's, or empty).
  const BufferHome* home() const noexcept { return home_; }

  /// Gives up ownership: the caller must std::free() the returned pointer. Only for memory of
  /// the C allocator: a borrowed buffer returns nullptr and keeps its memory.
  std::byte* release() noexcept {
    if (home_ != nullptr) return nullptr;
    size_ = 0;
    alignment_ = 0;
    return std::exchange(data_, nullptr);
  }

 private:
  void free_memory() noexcept {
    if (home_ != nullptr)
      home_->take_back(data_, size_);
    else
      std::free(data_);
  }

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t alignment_ = 0;
  BufferHome* home_ = nullptr;  // null: posix_memalign's memory
};

}  // namespace tai::detail
