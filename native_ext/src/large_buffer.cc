#include "large_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace shardmill {

namespace {

struct Block {
  uint8_t* data;
  int64_t capacity;
};

struct ProcessCache {
  std::mutex mutex;
  std::vector<Block> blocks;
  int64_t bytes = 0;
};

// Never destroyed: buffers may be given back during interpreter shutdown,
// after static destructors ran; the OS reclaims the mappings at exit.
ProcessCache& Cache() {
  static ProcessCache* cache = new ProcessCache;
  return *cache;
}

uint8_t* MapHugeAligned(int64_t capacity) {
  // Map one huge page more than needed and trim both ends, so the block
  // starts on a 2 MiB boundary (a huge page can only map aligned memory).
  const int64_t page = LargeBuffer::kHugePageBytes;
  const size_t mapped = static_cast<size_t>(capacity + page);
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + page - 1) & ~static_cast<uintptr_t>(page - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = aligned + static_cast<uintptr_t>(capacity);
  if (start + mapped > end) munmap(reinterpret_cast<void*>(end), start + mapped - end);
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(aligned), static_cast<size_t>(capacity), MADV_HUGEPAGE);  // a hint: may fail
#endif
  return reinterpret_cast<uint8_t*>(aligned);
}

}  // namespace

LargeBuffer LargeBuffer::Take(int64_t bytes) {
  const int64_t capacity = (std::max<int64_t>(bytes, 1) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  {
    ProcessCache& cache = Cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto best = cache.blocks.end();
    for (auto it = cache.blocks.begin(); it != cache.blocks.end(); ++it) {
      if (it->capacity >= capacity && (best == cache.blocks.end() || it->capacity < best->capacity)) best = it;
    }
    if (best != cache.blocks.end()) {
      LargeBuffer buffer(best->data, best->capacity);
      cache.bytes -= best->capacity;
      cache.blocks.erase(best);
      return buffer;
    }
  }
  uint8_t* data = MapHugeAligned(capacity);
  if (!data) return {};
  return LargeBuffer(data, capacity);
}

int64_t LargeBuffer::CachedBytes() {
  ProcessCache& cache = Cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.bytes;
}

int64_t LargeBuffer::ReleaseCached() {
  std::vector<Block> blocks;
  {
    ProcessCache& cache = Cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    blocks.swap(cache.blocks);
    cache.bytes = 0;
  }
  int64_t released = 0;
  for (const Block& block : blocks) {
    munmap(block.data, static_cast<size_t>(block.capacity));
    released += block.capacity;
  }
  return released;
}

LargeBuffer::LargeBuffer(LargeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

LargeBuffer& LargeBuffer::operator=(LargeBuffer&& other) noexcept {
  if (this != &other) {
    GiveBack();
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

LargeBuffer::~LargeBuffer() { GiveBack(); }

void LargeBuffer::GiveBack() {
  if (!data_) return;
  {
    ProcessCache& cache = Cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (cache.bytes + capacity_ <= kMaxCachedBytes) {
      cache.blocks.push_back({data_, capacity_});
      cache.bytes += capacity_;
      data_ = nullptr;
      return;
    }
  }
  munmap(data_, static_cast<size_t>(capacity_));
  data_ = nullptr;
}

}  // namespace shardmill
