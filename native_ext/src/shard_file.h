// Shard file access: one shard's Parquet file, opened by one decode thread,
// and the dataset's shards as one sequence of row groups.
//
// A ShardHandle checks the footer's row groups against the manifest's counts
// when it opens, binds the selected columns (checking their types agree
// across shards) and hands a row group's values on column by column:
// straight from the decompressed pages where they are PLAIN fixed-width
// (plain_pages.h), else decoded by Arrow. Every failure is an arrow::Status.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <arrow/api.h>
#include <parquet/arrow/reader.h>

#include "plain_pages.h"
#include "recycling_pool.h"
#include "remote_filesystem.h"

namespace shardmill {

struct ShardFile {
  std::string path;                    // local path or Arrow filesystem URI
  std::vector<int64_t> row_group_rows;  // as the manifest states
  RemoteOptions remote;                 // bounds on the calls reaching it, when it is remote
  std::string sha256;                   // the manifest's digest (64 hex digits; a cached copy is checked by it)
  int64_t bytes = -1;                   // the manifest's size
};

class ShardCache;

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

  // On a remote store: fetches the bound columns of row group `index` in as few requests as their byte
  // ranges allow (one, for adjacent column chunks), before ReadColumn reads them page by page; every page
  // read would otherwise be a request. Nothing on local files.
  arrow::Status Prefetch(int index);

 private:
  ShardHandle() = default;
  bool remote_ = false;
  std::string path_;
  std::unique_ptr<parquet::arrow::FileReader> reader_;
  std::vector<int> column_indices_;  // of the bound columns, in the Arrow schema
  std::vector<int> leaf_indices_;    // ... and among the Parquet leaf columns
  std::vector<std::string> names_;
};

// The dataset's row groups numbered across its shards in manifest order,
// read through one decode thread's handles. Decoding allocates through a
// RecyclingPool: blocks of >= 1 MiB are LargeBuffers, reused by the next
// window's row groups (and by the next reader in the process).
class ShardGroups {
 public:
  // One decode thread's open shards (opened on first use).
  using Handles = std::vector<std::unique_ptr<ShardHandle>>;
  // Receives column c's values of rows first_row.. of a row group (see ColumnRunSink).
  using RunSink = std::function<void(size_t c, int64_t first_row, const uint8_t* values, int64_t rows)>;

  // `shards` with row-group counts already checked (ShardReader::Make); with a cache, shards are opened
  // from their cached copies (shard_cache.h).
  ShardGroups(std::vector<ShardFile> shards, std::vector<ColumnSpec> columns,
              std::shared_ptr<ShardCache> cache = nullptr);

  Handles NewHandles() const { return Handles(shards_.size()); }
  const std::vector<ColumnSpec>& columns() const { return columns_; }
  ShardCache* cache() const { return cache_.get(); }
  int64_t ShardOf(int64_t row_group) const { return shard_of_group_[row_group]; }

  // Reads the selected columns of global row group `row_group` (opening and
  // checking its shard on first use), handing every run of values to `sink`.
  // Errors name the shard and row group.
  arrow::Status Read(int64_t row_group, Handles* handles, const RunSink& sink) const;
  // Row group `row_group` decoded into one buffer per column.
  arrow::Result<std::vector<std::shared_ptr<arrow::Buffer>>> Decode(int64_t row_group, Handles* handles) const;

 private:
  static constexpr int64_t kRecycleMinBlockBytes = 1 << 20;
  std::vector<ShardFile> shards_;
  std::vector<ColumnSpec> columns_;
  std::shared_ptr<ShardCache> cache_;
  std::vector<int64_t> shard_of_group_;  // global row group -> shard
  std::vector<int64_t> index_in_shard_;  // global row group -> row group within its shard
  std::vector<int64_t> rows_;            // global row group -> rows
  std::unique_ptr<RecyclingPool> pool_;
};

}  // namespace shardmill
