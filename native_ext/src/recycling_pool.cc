#include "recycling_pool.h"

#include <algorithm>
#include <cstring>

namespace shardmill {

RecyclingPool::RecyclingPool(arrow::MemoryPool* upstream, int64_t min_block_bytes)
    : upstream_(upstream), min_block_bytes_(min_block_bytes) {}

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
  if (size < min_block_bytes_ || alignment > LargeBuffer::kAlignment) {
    return upstream_->Allocate(size, alignment, out);
  }
  LargeBuffer block = LargeBuffer::Take(size);
  if (!block.data()) return arrow::Status::OutOfMemory("could not map ", size, " bytes");
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
  LargeBuffer released;  // back to the process cache once the lock is dropped
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
  }
}

}  // namespace shardmill
