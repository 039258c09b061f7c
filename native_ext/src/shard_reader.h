// ShardReader: serves a shardmill output directory's shards as batches.
//
// Order: EpochOrder (row-group permutation + windowed row shuffle per epoch);
// this rank reads a contiguous slice of every epoch. Decoding: `num_threads`
// worker threads read whole row groups (selected columns) of the next
// `prefetch_windows` windows ahead of the consumer (PLAIN fixed-width
// columns page by page, straight from the decompressed page: see
// plain_pages.h; anything else through Arrow), then arrange each window
// in parts across the threads: locate every row this rank reads through the
// permutation and copy it into contiguous per-column buffers in epoch order
// (the cache-missing gather runs ahead on the workers; the decoded row
// groups are released as soon as the window is arranged). Rows of at least
// kScatterMinRowBytes instead go straight to their places, through the
// inverse permutation, from each page as soon as it is decompressed (lc0
// frames: ~0.69M -> ~1M rows/s paired, and ~1.2M -> ~2M without Arrow's
// copy of the group in between). A batch is then
// a view into those buffers (ViewNext, no copy; it keeps its window alive),
// or, where it spans two windows, a contiguous copy (FillNext). Arranged
// buffers and large decode blocks (through a RecyclingPool) are
// LargeBuffers, given back to a process-wide cache of at most
// LargeBuffer::kMaxCachedBytes when a window is done with, so the next
// window, and the next reader in the process, reuse pages already faulted
// in. Memory is bounded by (prefetch_windows + 1) windows of arranged rows
// plus the decoded row groups of the windows not yet arranged: at most
// about 2 x (prefetch_windows + 1) x window_row_groups x the largest row
// group, plus that cache, plus the windows batches still held view.
// State: the consumer's (epoch, position) alone determines everything that
// follows, whatever the thread count, so a checkpoint is two integers.
//
// Threads start in Start(), never in the constructor; Stop() is idempotent
// and the destructor calls it. Every failure is an arrow::Status.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <arrow/api.h>

#include "epoch_order.h"
#include "large_buffer.h"
#include "shard_file.h"

namespace shardmill {

class RecyclingPool;

struct ReaderOptions {
  std::vector<ShardFile> shards;
  std::vector<std::string> columns;  // fixed_size_binary or fixed-width numeric
  int64_t batch_size = 256;
  bool drop_remainder = false;
  int64_t shard_index = 0;  // this rank
  int64_t shard_count = 1;  // number of ranks
  int64_t num_epochs = 1;   // 0: unbounded
  uint64_t seed = 0;
  bool shuffle = true;
  int64_t window_row_groups = 8;
  int num_threads = 2;
  int64_t prefetch_windows = 2;
  int64_t start_epoch = 0;     // resume point: epoch ...
  int64_t start_position = 0;  // ... and rows of this rank's slice already delivered
};


struct BatchPlan {
  int64_t epoch = -1;  // -1: the stream has ended
  int64_t rows = 0;
};

// A batch as views into a window's arranged rows: per column rows x
// row_bytes contiguous bytes, and the rows' global record indices. `owner`
// keeps them alive (and out of the buffer cache) for as long as it is held.
struct BatchView {
  std::vector<const uint8_t*> columns;
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
  int64_t rows_per_epoch() const { return rank_rows_; }
  int64_t num_rows() const { return layout_->num_rows(); }
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }

  // The size of the next batch (moves past finished epochs); no I/O.
  BatchPlan PlanNext();
  // Fills the next batch planned by PlanNext(): one buffer per column
  // (rows x row_bytes), plus each row's global record index (its position in
  // the dataset, shards in manifest order) and record seed
  // HashWords(seed, kStreamRecordSeed, {index}). Blocks until decoded.
  arrow::Status FillNext(const BatchPlan& plan, const std::vector<uint8_t*>& buffers, int64_t* record_index,
                         uint64_t* record_seed);
  // The next batch planned by PlanNext() without copying: views into the
  // arranged rows of its window (record seeds into record_seed), or, if its
  // rows span two windows, an empty view and nothing consumed (use FillNext).
  arrow::Result<BatchView> ViewNext(const BatchPlan& plan, uint64_t* record_seed);

 private:
  struct DecodedGroup;
  struct WindowSlot;
  // Decode row group `index` of the slot's window, or arrange part `index` of it.
  struct Task {
    std::shared_ptr<WindowSlot> slot;
    bool arrange = false;
    int64_t index = 0;
  };

  explicit ShardReader(ReaderOptions options);
  arrow::Status Init();
  void ScheduleLocked();
  void WorkerLoop();
  // Copies the rows of part `part` of the slot's arranged range to their place.
  void ArrangePart(WindowSlot& slot, int64_t part);
  // Decodes group `index` of the slot's window and copies the rows this
  // rank reads to their places in the slot's arranged buffers (wide rows).
  arrow::Status ScatterGroup(const WindowSlot& slot, int64_t index,
                             std::vector<std::unique_ptr<ShardHandle>>* handles) const;
  // The window holding epoch position `target` of the current epoch
  // (dropping windows already consumed); requires mutex_.
  arrow::Result<std::shared_ptr<WindowSlot>> WindowAtLocked(int64_t target);
  void RecordSeeds(const int64_t* record_index, int64_t rows, uint64_t* record_seed) const;
  // Copies the rows at `locations` (in the slot's decoded groups) to
  // consecutive rows starting at dest[c], per column.
  void GatherRows(const WindowSlot& slot, const RowLocation* locations, int64_t count,
                  const std::vector<uint8_t*>& dest) const;
  // Receives column c's values of rows first_row.. of a row group (see ColumnRunSink).
  using GroupRunSink = std::function<void(size_t c, int64_t first_row, const uint8_t* values, int64_t rows)>;
  // Reads the selected columns of global row group `row_group` through this
  // thread's `handles` (opened on first use), handing every run of values to `sink`.
  arrow::Status ReadGroup(int64_t row_group, std::vector<std::unique_ptr<ShardHandle>>* handles,
                          const GroupRunSink& sink) const;
  // Row group `row_group` decoded into a buffer per column (for the gather).
  arrow::Result<std::shared_ptr<DecodedGroup>> Decode(int64_t row_group,
                                                      std::vector<std::unique_ptr<ShardHandle>>* handles) const;
  std::shared_ptr<const EpochOrder> OrderFor(int64_t epoch);

  ReaderOptions options_;
  std::shared_ptr<const DatasetLayout> layout_;
  std::vector<int64_t> shard_of_group_;        // global row group -> shard
  std::vector<int64_t> index_in_shard_;        // global row group -> row group within shard
  std::vector<ColumnSpec> columns_;
  int64_t rank_rows_ = 0;
  int64_t row_bytes_ = 0;  // of all selected columns

  // Bytes of selected columns per arrange task: 1.6 MB is 16k rows of 100 B
  // but only ~200 lc0 frames, whose whole window (4k frames, 33 MB) as one
  // part made the first batch after a restore wait for all of it (13.6 ms).
  static constexpr int64_t kArrangePartBytes = 1600 * 1024;
  // Rows of at least this many bytes (all selected columns) are scattered to
  // their places as each group is decoded, instead of gathered per part.
  // Measured straight from the pages, paired (CPU per row, gathered ->
  // scattered): 100 B 70 -> 77-100 ns, 200 B even, 400 B 170 -> 140 ns,
  // 600 B 230-340 -> 170-240 ns, 1-3 KB 1.6-1.9x less, 8356 B ~1.5x less.
  static constexpr int64_t kScatterMinRowBytes = 256;
  // Wide rows: each decoded group's rows are copied straight to their places
  // by the thread that decoded it (no arrange tasks).
  bool ScatterRows() const { return row_bytes_ >= kScatterMinRowBytes; }
  // Decoding allocates through a RecyclingPool: blocks of >= 1 MiB are
  // LargeBuffers, reused by the next window's row groups.
  static constexpr int64_t kRecycleMinBlockBytes = 1 << 20;
  std::unique_ptr<RecyclingPool> decode_pool_;

  // Consumer state (the checkpoint).
  int64_t epoch_ = 0;
  int64_t position_ = 0;

  // Prefetch state, guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable group_done_;
  std::deque<std::shared_ptr<WindowSlot>> slots_;  // windows in consumption order
  std::deque<Task> tasks_;
  int64_t next_epoch_ = 0;   // next window to schedule ...
  int64_t next_window_ = 0;  // ... within that epoch
  std::shared_ptr<const EpochOrder> order_cache_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;

};

}  // namespace shardmill
