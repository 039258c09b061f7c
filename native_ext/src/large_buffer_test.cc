// Window-sized buffers: rounded, aligned, writable, cached after use and released on demand.
#include <cstdint>
#include <cstring>
#include <utility>

#include <gtest/gtest.h>

#include "large_buffer.h"

namespace {

using shardmill::LargeBuffer;
TEST(LargeBuffer, IsRoundedWritableAndCachedAfterUse) {
  LargeBuffer::ReleaseCached();
  {
    LargeBuffer buffer = LargeBuffer::Take(1000);
    EXPECT_TRUE(buffer.data() != nullptr);
    EXPECT_TRUE(buffer.capacity() >= 1000 && buffer.capacity() % LargeBuffer::kRoundBytes == 0);
    EXPECT_TRUE(reinterpret_cast<uintptr_t>(buffer.data()) % LargeBuffer::kAlignment == 0);
    std::memset(buffer.data(), 0xAB, static_cast<size_t>(buffer.capacity()));
    LargeBuffer moved = std::move(buffer);
    EXPECT_TRUE(buffer.data() == nullptr && moved.data() != nullptr);
  }
  EXPECT_TRUE(LargeBuffer::CachedBytes() == LargeBuffer::kRoundBytes);
  uint8_t* reused = nullptr;
  {
    LargeBuffer again = LargeBuffer::Take(10);  // the cached block fits: no new mapping
    reused = again.data();
    EXPECT_TRUE(again.capacity() == LargeBuffer::kRoundBytes && LargeBuffer::CachedBytes() == 0);
  }
  EXPECT_TRUE(reused != nullptr);
  EXPECT_TRUE(LargeBuffer::ReleaseCached() == LargeBuffer::kRoundBytes && LargeBuffer::CachedBytes() == 0);
}

}  // namespace
