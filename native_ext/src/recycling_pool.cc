#include "recycling_pool.h"

#include <algorithm>
#include <cstring>

namespace shardmill {

RecyclingPool::RecyclingPool(arrow::MemoryPool* upstream, int64_t min_block_bytes, int64_t max_cached_bytes)
    : upstream_(upstream), min_block_bytes_(min_block_bytes), max_cached_bytes_(max_cached_bytes) {}

RecyclingPool::~RecyclingPool() = default;

int64_t RecyclingPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

int64_t RecyclingPool::bytes_allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return upstream_->bytes_allocated() + in_use_bytes_;
}

int64_t RecyclingPool::total_bytes_allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return upstream_->total_bytes_allocated() + total_large_bytes_;
}

int64_t RecyclingPool::num_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return upstream_->num_allocations() + large_allocations_;
}

arrow::Status RecyclingPool::Allocate(int64_t size, int64_t alignment, uint8_t** out) {
  if (size < min_block_bytes_ || alignment > LargeBuffer::kHugePageBytes) {
    return upstream_->Allocate(size, alignment, out);
  }
  LargeBuffer block;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto best = cached_.end();
    for (auto it = cached_.begin(); it != cached_.end(); ++it) {
      // Any block that fits, the smallest first: buffers grow by doubling
      // (FLBARecordReader::ReserveValues), so a request for 1 MiB that takes
      // last window's 4 MiB block then grows in place, never faulting pages.
      if (it->capacity() >= size && (best == cached_.end() || it->capacity() < best->capacity())) best = it;
    }
    if (best != cached_.end()) {
      block = std::move(*best);
      cached_.erase(best);
      cached_bytes_ -= block.capacity();
    }
  }
  if (!block.data()) {
    block = LargeBuffer::TryAllocate(size);
    if (!block.data()) return arrow::Status::OutOfMemory("could not map ", size, " bytes");
  }
  *out = block.data();
  std::lock_guard<std::mutex> lock(mutex_);
  in_use_bytes_ += block.capacity();
  total_large_bytes_ += block.capacity();
  ++large_allocations_;
  in_use_.emplace(block.data(), std::move(block));
  return arrow::Status::OK();
}

arrow::Status RecyclingPool::Reallocate(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t** ptr) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = in_use_.find(*ptr);
    if (it == in_use_.end() && new_size < min_block_bytes_) {
      return upstream_->Reallocate(old_size, new_size, alignment, ptr);
    }
    if (it != in_use_.end() && new_size <= it->second.capacity()) return arrow::Status::OK();  // fits in place
  }
  uint8_t* moved = nullptr;
  ARROW_RETURN_NOT_OK(Allocate(new_size, alignment, &moved));
  std::memcpy(moved, *ptr, static_cast<size_t>(std::min(old_size, new_size)));
  Free(*ptr, old_size, alignment);
  *ptr = moved;
  return arrow::Status::OK();
}

void RecyclingPool::Free(uint8_t* buffer, int64_t size, int64_t alignment) {
  LargeBuffer released;  // unmapped after the lock is dropped, if not kept
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = in_use_.find(buffer);
    if (it == in_use_.end()) {
      upstream_->Free(buffer, size, alignment);
      return;
    }
    released = std::move(it->second);
    in_use_.erase(it);
    in_use_bytes_ -= released.capacity();
    if (cached_bytes_ + released.capacity() <= max_cached_bytes_) {
      cached_bytes_ += released.capacity();
      cached_.push_back(std::move(released));
    }
  }
}

}  // namespace shardmill
