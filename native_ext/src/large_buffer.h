// LargeBuffer: a move-only block of anonymous memory, recycled through one
// cache per process.
//
// The reader's window buffers (decoded row groups, arranged rows) are MBs
// to tens of MBs each and written once through. Fresh memory is a page
// fault per 4 KiB plus the kernel zeroing it: under perf that was about a
// fifth of the CPU of reading 100-byte rows. So a destroyed
// LargeBuffer goes back to a process-wide cache (at most kMaxCachedBytes)
// and Take() hands out the smallest cached block that fits: the next
// window, and the next reader of the process (a PyTorch iterator per epoch
// constructs one), reuse pages already faulted in. Sizes are rounded up to
// kRoundBytes so blocks are interchangeable between windows whose sizes
// differ a little. ReleaseCached() unmaps the cache.
//
// Transparent huge pages (madvise(MADV_HUGEPAGE)) were tried: the kernel's
// synchronous compaction for them cost a new process 0.3-0.7 s of system
// time for its first reader, with no steady-state gain measurable here.
#pragma once

#include <cstdint>

namespace shardmill {

class LargeBuffer {
 public:
  static constexpr int64_t kRoundBytes = int64_t{2} << 20;
  static constexpr int64_t kMaxCachedBytes = int64_t{512} << 20;
  // Blocks are mmap'ed, so aligned to the page size: at least 4 KiB.
  static constexpr int64_t kAlignment = 4096;

  LargeBuffer() = default;
  // At least `bytes` (a multiple of kRoundBytes): the smallest cached
  // block that fits (the last given back of those), else a new mapping.
  // Empty (data() == nullptr) if the memory cannot be mapped. Thread-safe.
  static LargeBuffer Take(int64_t bytes);
  // Bytes of freed blocks the process keeps mapped for reuse.
  static int64_t CachedBytes();
  // Unmaps every cached block; returns how many bytes that released.
  static int64_t ReleaseCached();

  LargeBuffer(LargeBuffer&& other) noexcept;
  LargeBuffer& operator=(LargeBuffer&& other) noexcept;
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;
  // Gives the block back to the process cache (or unmaps it if full).
  ~LargeBuffer();

  uint8_t* data() const { return data_; }
  int64_t capacity() const { return capacity_; }

 private:
  LargeBuffer(uint8_t* data, int64_t capacity) : data_(data), capacity_(capacity) {}
  void GiveBack();

  uint8_t* data_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace shardmill
