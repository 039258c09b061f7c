// RecyclingPool: an arrow::MemoryPool whose large blocks are LargeBuffers.
//
// The reader decodes a window of row groups, arranges it and frees it, then
// decodes the next window into buffers of the same sizes. Through Arrow's
// default pool every such buffer came back from the OS as fresh pages: the
// kernel zeroing them was the largest single cost of reading 100-byte rows
// (`clear_page_erms` from FLBARecordReader::ReserveValues under perf). Here
// every request of at least `min_block_bytes` takes a LargeBuffer: the
// smallest freed block of the process that fits (whole 2 MiB multiples, so
// a buffer growing by doubling mostly grows in place), and
// freeing it gives it back to that cache. Smaller requests go to the
// upstream pool. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include <arrow/memory_pool.h>

#include "large_buffer.h"

namespace shardmill {

class RecyclingPool : public arrow::MemoryPool {
 public:
  RecyclingPool(arrow::MemoryPool* upstream, int64_t min_block_bytes);

  arrow::Status Allocate(int64_t size, int64_t alignment, uint8_t** out) override;
  arrow::Status Reallocate(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t** ptr) override;
  void Free(uint8_t* buffer, int64_t size, int64_t alignment) override;
  int64_t bytes_allocated() const override;
  int64_t total_bytes_allocated() const override;
  int64_t num_allocations() const override;
  std::string backend_name() const override { return "recycling(" + upstream_->backend_name() + ")"; }

 private:
  arrow::MemoryPool* upstream_;
  const int64_t min_block_bytes_;
  mutable std::mutex mutex_;
  std::unordered_map<uint8_t*, LargeBuffer> in_use_;  // large blocks handed out, by address
  int64_t in_use_bytes_ = 0;
  int64_t total_large_bytes_ = 0;
  int64_t large_allocations_ = 0;
};

}  // namespace shardmill
