// Shard file access: one shard's Parquet file, opened by one decode thread.
//
// A ShardHandle checks the footer's row groups against the manifest's counts
// when it opens, binds the selected columns (checking their types agree
// across shards) and hands a row group's values on column by column:
// straight from the decompressed pages where they are PLAIN fixed-width
// (plain_pages.h), else decoded by Arrow. Every failure is an arrow::Status.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <arrow/api.h>
#include <parquet/arrow/reader.h>

#include "plain_pages.h"

namespace shardmill {

struct ShardFile {
  std::string path;                    // local path or Arrow filesystem URI
  std::vector<int64_t> row_group_rows;  // as the manifest states
};

// One output column: its name and the bytes one row takes.
struct ColumnSpec {
  std::string name;
  std::shared_ptr<arrow::DataType> type;
  int64_t row_bytes;
};

// One open shard file of one worker thread (FileReader is not shared across threads).
class ShardHandle {
 public:
  // Opens the shard's Parquet footer and checks its row groups against the manifest's counts.
  static arrow::Result<std::unique_ptr<ShardHandle>> Open(const ShardFile& shard,
                                                          arrow::MemoryPool* pool = arrow::default_memory_pool());

  arrow::Result<std::shared_ptr<arrow::Schema>> Schema();

  // Column indices of `columns` in this file, checking their types.
  arrow::Status Bind(const std::vector<ColumnSpec>& columns);

  // Hands the values of bound column `c` in row group `index` to `sink`, in
  // runs: straight from the decompressed pages where the column is PLAIN
  // fixed-width without nulls (the sampling job's output), else decoded by
  // Arrow as one run. `sink` may receive a row twice (ReadPlainColumn).
  arrow::Status ReadColumn(int index, size_t c, int64_t width, int64_t rows, const ColumnRunSink& sink);

 private:
  ShardHandle() = default;
  std::string path_;
  std::unique_ptr<parquet::arrow::FileReader> reader_;
  std::vector<int> column_indices_;  // of the bound columns, in the Arrow schema
  std::vector<int> leaf_indices_;    // ... and among the Parquet leaf columns
  std::vector<std::string> names_;
};

}  // namespace shardmill
