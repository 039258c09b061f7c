// The build self-check round-trips rows through Parquet with the linked Arrow and reports what it did.
#include <cstdint>

#include <arrow/util/config.h>
#include <gtest/gtest.h>

#include "self_check.h"

namespace {

TEST(SelfCheck, RoundTripsEveryRowThroughParquet) {
  auto report = shardmill::RunSelfCheck(1000);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->rows_round_tripped, 1000);
  EXPECT_GT(report->parquet_bytes, 0);
  EXPECT_EQ(report->arrow_version, ARROW_VERSION_STRING);
  EXPECT_FALSE(shardmill::RunSelfCheck(-1).ok());
}

}  // namespace
