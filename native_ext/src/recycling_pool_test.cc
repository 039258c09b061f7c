// The decode pool: freed blocks come back, reallocation keeps content, small ones go upstream.
#include <cstdint>

#include <gtest/gtest.h>

#include "recycling_pool.h"

namespace {
TEST(RecyclingPool, ReusesFreedBlocksAndKeepsContentOnReallocate) {
  shardmill::RecyclingPool pool(arrow::default_memory_pool(), 1 << 20);
  uint8_t* block = nullptr;
  EXPECT_TRUE(pool.Allocate(2 << 20, 64, &block).ok() && block != nullptr);
  std::memset(block, 7, 2 << 20);
  EXPECT_TRUE(pool.Reallocate(2 << 20, 3 << 20, 64, &block).ok());
  EXPECT_TRUE(block[0] == 7 && block[(2 << 20) - 1] == 7);
  pool.Free(block, 3 << 20, 64);
  uint8_t* again = nullptr;
  EXPECT_TRUE(pool.Allocate(3 << 20, 64, &again).ok());
  EXPECT_TRUE(again == block);  // the freed block came back
  pool.Free(again, 3 << 20, 64);
  uint8_t* small = nullptr;
  EXPECT_TRUE(pool.Allocate(100, 64, &small).ok() && small != nullptr);  // below the recycling size: upstream
  pool.Free(small, 100, 64);
}

}  // namespace
