// Byte runs copied back to back; every run outside the source refused before anything is copied.
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "token_runs.h"

namespace {
TEST(TokenRuns, CopyRunsCopiesBackToBackAndRefusesRunsOutsideTheSource) {
  std::vector<uint8_t> src(100);
  std::iota(src.begin(), src.end(), 0);
  std::vector<uint8_t> dest(10, 0xFF);
  const std::vector<int64_t> starts = {90, 5, 0}, lengths = {4, 3, 2};
  EXPECT_TRUE(shardmill::CopyRuns(src.data(), 100, starts.data(), lengths.data(), 3, dest.data(), 10).ok());
  EXPECT_TRUE((std::vector<uint8_t>(dest.begin(), dest.begin() + 9) == std::vector<uint8_t>{90, 91, 92, 93, 5, 6, 7, 0, 1}));
  EXPECT_TRUE(dest[9] == 0xFF);
  const int64_t huge = int64_t{1} << 62;
  for (auto [start, length] : std::vector<std::pair<int64_t, int64_t>>{{98, 3}, {-1, 1}, {huge, huge}, {0, -2}}) {
    std::vector<uint8_t> untouched(10, 0xAA);
    const arrow::Status error = shardmill::CopyRuns(src.data(), 100, &start, &length, 1, untouched.data(), 10);
    EXPECT_TRUE(error.IsInvalid() && error.message().find("outside the 100-byte source") != std::string::npos);
    EXPECT_TRUE(untouched == std::vector<uint8_t>(10, 0xAA));  // nothing copied before the check
  }
  const int64_t start = 0, length = 11;
  EXPECT_FALSE(shardmill::CopyRuns(src.data(), 100, &start, &length, 1, dest.data(), 10).ok());
}

}  // namespace
