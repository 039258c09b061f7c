// LargeBuffer: a move-only block of memory backed by transparent huge pages
// where the kernel offers them.
//
// The reader's window buffers (decoded row groups, arranged rows) are tens
// of MB each and written once through. With 4 KiB pages every first touch
// is a page fault: under perf, faulting and zeroing fresh pages took about
// a fifth of the CPU of reading 100-byte rows with a new reader. Here large
// blocks are mmap'ed at 2 MiB alignment and madvise(MADV_HUGEPAGE)d, so a
// fault maps 2 MiB at once (on kernels whose THP mode is "madvise", the
// common default, nothing else would give huge pages). Where that is not
// available (other systems, THP off) it is plain anonymous memory.
#pragma once

#include <cstdint>

namespace shardmill {

class LargeBuffer {
 public:
  static constexpr int64_t kHugePageBytes = int64_t{2} << 20;

  LargeBuffer() = default;
  // An empty buffer (data() == nullptr) if the memory cannot be mapped.
  static LargeBuffer TryAllocate(int64_t bytes);

  LargeBuffer(LargeBuffer&& other) noexcept;
  LargeBuffer& operator=(LargeBuffer&& other) noexcept;
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;
  ~LargeBuffer();

  uint8_t* data() const { return data_; }
  // The usable size: the request rounded up to whole huge pages.
  int64_t capacity() const { return capacity_; }

 private:
  LargeBuffer(uint8_t* data, int64_t capacity) : data_(data), capacity_(capacity) {}
  void Release();

  uint8_t* data_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace shardmill
