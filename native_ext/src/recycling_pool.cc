#include "recycling_pool.h"

#include <algorithm>
#include <cstring>

namespace shardmill {

RecyclingPool::RecyclingPool(arrow::MemoryPool* upstream, int64_t min_block_bytes, int64_t max_cached_bytes)
    : upstream_(upstream), min_block_bytes_(min_block_bytes), max_cached_bytes_(max_cached_bytes) {}

RecyclingPool::~RecyclingPool() {
  for (const Block& block : cached_) upstream_->Free(block.data, block.capacity, block.alignment);
}

int64_t RecyclingPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

int64_t RecyclingPool::CapacityLocked(uint8_t* data, int64_t size) {
  auto it = capacity_.find(data);
  return it == capacity_.end() ? size : it->second;
}

arrow::Status RecyclingPool::Allocate(int64_t size, int64_t alignment, uint8_t** out) {
  if (size < min_block_bytes_) return upstream_->Allocate(size, alignment, out);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto best = cached_.end();
    for (auto it = cached_.begin(); it != cached_.end(); ++it) {
      // Any block that fits, the smallest first: buffers grow by doubling
      // (FLBARecordReader::ReserveValues), so a request for 1 MiB that takes
      // last window's 4 MiB block then grows in place, never faulting pages.
      if (it->alignment >= alignment && it->capacity >= size &&
          (best == cached_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != cached_.end()) {
      *out = best->data;
      capacity_[best->data] = best->capacity;
      cached_bytes_ -= best->capacity;
      cached_.erase(best);
      return arrow::Status::OK();
    }
  }
  ARROW_RETURN_NOT_OK(upstream_->Allocate(size, alignment, out));
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_[*out] = size;
  return arrow::Status::OK();
}

arrow::Status RecyclingPool::Reallocate(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t** ptr) {
  int64_t capacity;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity = CapacityLocked(*ptr, old_size);
    const bool tracked = capacity_.count(*ptr) > 0;
    if (!tracked && new_size < min_block_bytes_) {
      return upstream_->Reallocate(old_size, new_size, alignment, ptr);
    }
    if (tracked && new_size <= capacity) return arrow::Status::OK();  // fits in place
  }
  uint8_t* moved = nullptr;
  ARROW_RETURN_NOT_OK(Allocate(new_size, alignment, &moved));
  std::memcpy(moved, *ptr, static_cast<size_t>(std::min(old_size, new_size)));
  Free(*ptr, old_size, alignment);
  *ptr = moved;
  return arrow::Status::OK();
}

void RecyclingPool::Free(uint8_t* buffer, int64_t size, int64_t alignment) {
  int64_t capacity = size;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = capacity_.find(buffer);
    if (it != capacity_.end()) {
      capacity = it->second;
      capacity_.erase(it);
      if (cached_bytes_ + capacity <= max_cached_bytes_) {
        cached_.push_back({buffer, capacity, alignment});
        cached_bytes_ += capacity;
        return;
      }
    }
  }
  upstream_->Free(buffer, capacity, alignment);
}

}  // namespace shardmill
