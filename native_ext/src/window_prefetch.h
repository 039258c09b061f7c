// Window prefetch: the decode threads that prepare, ahead of the consumer,
// the windows of the epoch order this rank reads.
//
// For each of the next `prefetch_windows` + 1 windows, the threads read the
// window's row groups (ShardGroups) and arrange this rank's rows of it into
// contiguous per-column buffers in epoch order (row_placement.h): narrow
// rows are gathered in parts of ~kArrangePartBytes once the window is
// decoded, wide rows are scattered as each group's pages are decompressed.
// The consumer waits only for the part it reads. Arranged buffers are
// LargeBuffers from the process-wide cache (pages already faulted in) and go
// back to it once no batch views the window. Memory: at most about
// 2 x (prefetch_windows + 1) x window_row_groups x the largest row group,
// plus that cache, plus the windows batches still view.
//
// With a conversion, each part of a window is also converted to training
// tensors (record_converter.h) on these threads once its rows are in place;
// the consumer waits for the conversion of the part it reads.
//
// Threads start in Start(), never in the constructor; Stop() is idempotent
// and the destructor calls it. A failure on a thread (a Status, or an
// exception: memory) becomes the Status of its window, which the consumer
// gets for the batch that needs it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <arrow/api.h>

#include "epoch_order.h"
#include "large_buffer.h"
#include "record_converter.h"
#include "reader_options.h"
#include "row_placement.h"
#include "shard_cache.h"
#include "shard_file.h"

namespace shardmill {

// The conversion the prefetcher applies to every window part (record_converter.h).
struct Conversion {
  std::shared_ptr<const RecordConverter> converter;
  size_t column;         // the converted column among the selected ones
  int64_t record_bytes;  // its width
};

// One window of one epoch as this rank reads it. Once ready through a
// position (WindowPrefetcher::ReadyWindow) its arranged rows up to there are
// immutable; the consumer reads only those and the arranged_* bounds.
struct WindowSlot {
  WindowSlot(int64_t epoch, int64_t window, std::shared_ptr<const EpochOrder> order)
      : epoch(epoch), window(window), order(std::move(order)), layout(this->order->Window(window)) {}
  int64_t epoch;
  int64_t window;
  std::shared_ptr<const EpochOrder> order;
  EpochWindow layout;
  // Epoch positions [arranged_start, arranged_end): the window clipped to this rank's slice.
  int64_t arranged_start = 0;
  int64_t arranged_end = 0;
  // Per column, this rank's rows of the window in epoch order, and their
  // global record indices: batches are views into these (the slot, which
  // owns them, lives as long as any batch viewing it).
  std::vector<LargeBuffer> arranged;
  LargeBuffer arranged_index;  // int64 global record index per row
  // With a conversion: one buffer per output (RecordConverter::outputs),
  // this rank's rows in epoch order, and per part the records it could not
  // convert (rows relative to arranged_start; their outputs are zeros).
  std::vector<LargeBuffer> tensors;
  std::vector<std::vector<RecordError>> part_errors;

  // Prefetch state, guarded by the prefetcher's mutex.
  std::vector<std::shared_ptr<DecodedGroup>> groups;  // gathered rows only; released once arranged
  int64_t parts = 0;                                  // arrange tasks
  std::vector<char> part_done;
  int64_t decode_pending = 0;
  int64_t arrange_pending = 0;
  arrow::Status status;

  int64_t PartBegin(int64_t part) const { return (arranged_end - arranged_start) * part / parts; }
  // The part holding epoch position `position` (arranged_start <= position < arranged_end).
  int64_t PartOf(int64_t position) const;
  // The first epoch position after the part holding `position`.
  int64_t PartEnd(int64_t position) const { return arranged_start + PartBegin(PartOf(position) + 1); }
  // Readable at positions first..last: decoded and their parts arranged, or failed.
  bool ReadyThrough(int64_t first, int64_t last) const;
};

class WindowPrefetcher {
 public:
  // Prepares the windows of [rank_start, rank_end) of each epoch (this
  // rank's slice) from `groups`, with the options' seed, shuffle, window,
  // thread and prefetch settings. Starts nothing.
  WindowPrefetcher(const ReaderOptions& options, std::shared_ptr<const DatasetLayout> layout,
                   std::unique_ptr<ShardGroups> groups, int64_t rank_start, int64_t rank_end,
                   std::shared_ptr<const Conversion> conversion = nullptr);
  ~WindowPrefetcher();
  WindowPrefetcher(const WindowPrefetcher&) = delete;
  WindowPrefetcher& operator=(const WindowPrefetcher&) = delete;

  // Starts the decode threads at the consumer's resume point (idempotent while started).
  arrow::Status Start(int64_t epoch, int64_t position);
  void Stop();

  // The window holding epoch position `first` of `epoch` (positions of the
  // epoch, not of the rank's slice), once its rows first..min(last, its
  // end - 1) are arranged: blocks until then. Windows before it are dropped.
  arrow::Result<std::shared_ptr<const WindowSlot>> ReadyWindow(int64_t epoch, int64_t first, int64_t last);

 private:
  // The next window to schedule: of this epoch (window -1: the first this rank reads in it).
  struct WindowCursor {
    int64_t epoch = 0;
    int64_t window = -1;
  };
  // Decode row group `index` of the slot's window, or arrange part `index` of it.
  struct Task {
    std::shared_ptr<WindowSlot> slot;
    bool arrange = false;
    int64_t index = 0;
  };

  // Schedules windows up to prefetch_windows ahead; whether it scheduled any.
  bool ScheduleLocked();
  // Resolves the cursor to the window it names (its epoch's order in *order); false when no epoch is left.
  bool TakeWindow(WindowCursor* cursor, std::shared_ptr<const EpochOrder>* order);
  // Moves the cursor past its window, which ends at epoch position window_end.
  void AdvanceCursor(WindowCursor* cursor, int64_t window_end) const;
  // Tells the shard cache the shards of the scheduled windows and of the cache's ahead_windows after them.
  void PlanCacheLocked();
  void WorkerLoop();
  void RunArrange(const Task& task);
  void RunDecode(const Task& task, ShardGroups::Handles* handles);
  // Copies the rows of part `part` of the slot's arranged range to their place.
  void ArrangePart(WindowSlot& slot, int64_t part) const;
  // Converts the arranged rows of part `part` to tensors; the records it could not convert go to *errors.
  void ConvertPart(WindowSlot& slot, int64_t part, std::vector<RecordError>* errors) const;
  // Decodes group `index` of the slot's window and copies the rows this
  // rank reads to their places in the slot's arranged buffers (wide rows).
  arrow::Status ScatterGroup(const WindowSlot& slot, int64_t index, ShardGroups::Handles* handles) const;
  std::shared_ptr<const EpochOrder> OrderFor(int64_t epoch);
  // Wide rows are scattered to their places as each group is decoded
  // (no arrange tasks); narrow ones gathered per part.
  bool ScatterRows() const { return row_bytes_ >= kScatterMinRowBytes; }

  // Bytes of selected columns per arrange task: 1.6 MB is 16k rows of 100 B
  // but only ~200 lc0 frames, whose whole window (4k frames, 33 MB) as one
  // part made the first batch after a restore wait for all of it (13.6 ms).
  static constexpr int64_t kArrangePartBytes = 1600 * 1024;

  const int64_t num_epochs_;
  const uint64_t seed_;
  const bool shuffle_;
  const int64_t window_row_groups_;
  const int num_threads_;
  const int64_t prefetch_windows_;
  const std::shared_ptr<const DatasetLayout> layout_;
  const std::unique_ptr<ShardGroups> groups_;
  const int64_t rank_start_;
  const int64_t rank_end_;
  const std::shared_ptr<const Conversion> conversion_;  // null: no conversion
  int64_t row_bytes_ = 0;  // of all selected columns

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable group_done_;
  std::deque<std::shared_ptr<WindowSlot>> slots_;  // windows in consumption order
  std::deque<Task> tasks_;
  int64_t resume_epoch_ = 0;     // the consumer's position at Start(): the first window ...
  int64_t resume_position_ = 0;  // ... holds this row of the rank's slice of that epoch
  WindowCursor next_;  // the next window to schedule
  std::shared_ptr<const EpochOrder> order_cache_[2];  // by epoch parity
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace shardmill
