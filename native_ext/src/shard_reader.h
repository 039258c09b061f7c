// ShardReader: serves a shardmill output directory's shards as batches (the
// consumer facade over the reader's parts).
//
// Order: EpochOrder (row-group permutation + windowed row shuffle per epoch;
// epoch_order.h); rank r of k reads a contiguous slice of every epoch.
// Parts: ShardGroups reads row groups from the shard files (shard_file.h),
// or from their copies in a local ShardCache (shard_cache.h) fetched ahead;
// a WindowPrefetcher's threads prepare the next windows of this rank's
// slice ahead of the consumer (window_prefetch.h), placing each row where
// the epoch order puts it (row_placement.h). A batch is then a view into a
// window's arranged rows (ViewNext, no copy; it keeps its window alive),
// or, where it spans two windows, a contiguous copy (FillNext).
// State: the consumer's (epoch, position) alone determines everything that
// follows, whatever the thread count, so a checkpoint is two integers.
//
// Make() checks the options and the row-group counts before anything is
// sized from them, and opens the first shard for the column types; threads
// start in Start(), never in the constructor; Stop() is idempotent and the
// destructor calls it. Every failure is an arrow::Status. One consumer
// thread at a time (the Python layer holds a lock around each call).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <arrow/api.h>

#include "epoch_order.h"
#include "reader_options.h"
#include "shard_cache.h"
#include "shard_file.h"
#include "window_prefetch.h"

namespace shardmill {

struct BatchPlan {
  int64_t epoch = -1;  // -1: the stream has ended
  int64_t rows = 0;
};

// A batch as views into a window's arranged rows: per column rows x
// row_bytes contiguous bytes, and the rows' global record indices. `owner`
// keeps them alive (and out of the buffer cache) for as long as it is held.
struct BatchView {
  std::vector<const uint8_t*> columns;
  std::vector<const uint8_t*> tensors;  // the converter's outputs, if converting
  const int64_t* record_index = nullptr;
  std::shared_ptr<const void> owner;  // null: no view (the batch spans two windows)
};

class ShardReader {
 public:
  static arrow::Result<std::unique_ptr<ShardReader>> Make(ReaderOptions options);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  arrow::Status Start();
  void Stop();

  const std::vector<ColumnSpec>& columns() const { return columns_; }
  // The converter of every batch, or null (ReaderOptions::converter).
  const RecordConverter* converter() const { return conversion_ ? conversion_->converter.get() : nullptr; }
  int64_t rows_per_epoch() const { return rank_rows_; }
  int64_t num_rows() const { return layout_->num_rows(); }
  // The shard cache (ReaderOptions::cache), or null.
  ShardCache* cache() const { return cache_.get(); }
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }

  // The size of the next batch (moves past finished epochs); no I/O.
  BatchPlan PlanNext();
  // Fills the next batch planned by PlanNext(): one buffer per column
  // (rows x row_bytes), plus each row's global record index (its position in
  // the dataset, shards in manifest order) and record seed
  // HashWords(seed, kStreamRecordSeed, {index}); with a conversion,
  // one buffer per converted output in `tensors`. Blocks until decoded. A record
  // the conversion refused fails the batch that holds it (naming its shard
  // and row); the batch is consumed all the same.
  arrow::Status FillNext(const BatchPlan& plan, const std::vector<uint8_t*>& buffers, int64_t* record_index,
                         uint64_t* record_seed, const std::vector<uint8_t*>& tensors = {});
  // The next batch planned by PlanNext() without copying: views into the
  // arranged rows of its window (record seeds into record_seed), or, if its
  // rows span two windows, an empty view and nothing consumed (use FillNext).
  arrow::Result<BatchView> ViewNext(const BatchPlan& plan, uint64_t* record_seed);

 private:
  explicit ShardReader(ReaderOptions options);
  arrow::Status Init();
  void RecordSeeds(const int64_t* record_index, int64_t rows, uint64_t* record_seed) const;
  // OK, or the error of the first record in epoch positions [first, last] the conversion refused.
  arrow::Status ConvertedThrough(const WindowSlot& slot, int64_t first, int64_t last) const;
  // The first epoch position of this rank's slice.
  int64_t RankStart() const {
    return options_.slice_begin >= 0 ? options_.slice_begin : options_.shard_index * rank_rows_;
  }

  ReaderOptions options_;
  std::shared_ptr<const DatasetLayout> layout_;
  std::vector<ColumnSpec> columns_;
  int64_t rank_rows_ = 0;
  std::shared_ptr<const Conversion> conversion_;
  std::shared_ptr<ShardCache> cache_;
  std::unique_ptr<WindowPrefetcher> prefetcher_;

  // Consumer state (the checkpoint).
  int64_t epoch_ = 0;
  int64_t position_ = 0;
};

}  // namespace shardmill
