#include "large_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace shardmill {

LargeBuffer LargeBuffer::TryAllocate(int64_t bytes) {
  const int64_t capacity = (std::max<int64_t>(bytes, 1) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  // Map one huge page more than needed and trim both ends, so the block
  // starts on a 2 MiB boundary (a huge page can only map aligned memory).
  const size_t mapped = static_cast<size_t>(capacity + kHugePageBytes);
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return {};
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~static_cast<uintptr_t>(kHugePageBytes - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = aligned + static_cast<uintptr_t>(capacity);
  if (start + mapped > end) munmap(reinterpret_cast<void*>(end), start + mapped - end);
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(aligned), static_cast<size_t>(capacity), MADV_HUGEPAGE);  // a hint: may fail
#endif
  return LargeBuffer(reinterpret_cast<uint8_t*>(aligned), capacity);
}

LargeBuffer::LargeBuffer(LargeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

LargeBuffer& LargeBuffer::operator=(LargeBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

LargeBuffer::~LargeBuffer() { Release(); }

void LargeBuffer::Release() {
  if (data_) munmap(data_, static_cast<size_t>(capacity_));
  data_ = nullptr;
  capacity_ = 0;
}

}  // namespace shardmill
