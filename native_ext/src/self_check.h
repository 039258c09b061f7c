// A build self-check: proves the extension links and runs against the Arrow
// and Parquet libraries of the pyarrow it was built with.
#pragma once

#include <cstdint>
#include <string>

#include <arrow/result.h>

namespace shardmill {

struct SelfCheckReport {
  std::string arrow_version;  // Arrow's runtime version string
  int64_t rows_round_tripped = 0;
  int64_t parquet_bytes = 0;
};

// Writes `num_rows` rows of a two-column table (int64, fixed_size_binary) to an
// in-memory Parquet file with zstd and reads them back, comparing every value.
arrow::Result<SelfCheckReport> RunSelfCheck(int64_t num_rows);

}  // namespace shardmill
