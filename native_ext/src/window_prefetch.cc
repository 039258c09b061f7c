#include "window_prefetch.h"

#include <algorithm>
#include <exception>
#include <new>

namespace shardmill {

namespace {

// A window buffer: from the process cache (pages already faulted in) when
// one fits; OutOfMemory when the memory cannot be mapped.
arrow::Result<LargeBuffer> TakeWindowBuffer(int64_t bytes) {
  LargeBuffer buffer = LargeBuffer::Take(bytes);
  if (!buffer.data()) return arrow::Status::OutOfMemory("cannot map ", bytes, " bytes for a window");
  return buffer;
}

// The slot's arranged buffers (and tensors) for `rows` rows; the first failure, if any.
arrow::Status TakeSlotBuffers(WindowSlot* slot, int64_t rows, const std::vector<ColumnSpec>& columns,
                              const Conversion* conversion) {
  for (const auto& column : columns) {
    ARROW_ASSIGN_OR_RAISE(auto buffer, TakeWindowBuffer(rows * column.row_bytes));
    slot->arranged.push_back(std::move(buffer));
  }
  ARROW_ASSIGN_OR_RAISE(slot->arranged_index, TakeWindowBuffer(rows * static_cast<int64_t>(sizeof(int64_t))));
  if (conversion) {
    for (const auto& output : conversion->converter->outputs()) {
      ARROW_ASSIGN_OR_RAISE(auto buffer, TakeWindowBuffer(rows * output.row_bytes));
      slot->tensors.push_back(std::move(buffer));
    }
  }
  return arrow::Status::OK();
}

// Runs one step of a decode thread. An exception escaping a thread would end
// the process (it terminates); here it becomes the Status of the window the
// step belongs to, which the consumer raises for the batch that needs it.
template <typename Step>
arrow::Status StatusOfCall(Step&& step) {
  try {
    return step();
  } catch (const std::bad_alloc&) {
    return arrow::Status::OutOfMemory("a decode thread could not allocate memory");
  } catch (const std::exception& e) {
    return arrow::Status::UnknownError("a decode thread failed: ", e.what());
  }
}

}  // namespace

int64_t WindowSlot::PartOf(int64_t position) const {
  const int64_t offset = position - arranged_start;
  int64_t part = offset * parts / (arranged_end - arranged_start);
  while (part > 0 && PartBegin(part) > offset) --part;
  while (part + 1 < parts && PartBegin(part + 1) <= offset) ++part;
  return part;
}

bool WindowSlot::ReadyThrough(int64_t first, int64_t last) const {
  if (decode_pending > 0) return false;
  if (!status.ok()) return true;
  for (int64_t part = PartOf(first); part <= PartOf(last); ++part) {
    if (!part_done[static_cast<size_t>(part)]) return false;
  }
  return true;
}

WindowPrefetcher::WindowPrefetcher(const ReaderOptions& options, std::shared_ptr<const DatasetLayout> layout,
                                   std::unique_ptr<ShardGroups> groups, int64_t rank_start, int64_t rank_end,
                                   std::shared_ptr<const Conversion> conversion)
    : num_epochs_(options.num_epochs),
      seed_(options.seed),
      shuffle_(options.shuffle),
      window_row_groups_(options.window_row_groups),
      num_threads_(options.num_threads),
      prefetch_windows_(options.prefetch_windows),
      layout_(std::move(layout)),
      groups_(std::move(groups)),
      rank_start_(rank_start),
      rank_end_(rank_end),
      conversion_(std::move(conversion)) {
  for (const auto& column : groups_->columns()) row_bytes_ += column.row_bytes;
}

WindowPrefetcher::~WindowPrefetcher() { Stop(); }

arrow::Status WindowPrefetcher::Start(int64_t epoch, int64_t position) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!threads_.empty()) return arrow::Status::OK();
  stopping_ = false;
  resume_epoch_ = epoch;
  resume_position_ = position;
  next_ = {epoch, -1};
  for (int i = 0; i < num_threads_; ++i) threads_.emplace_back([this] { WorkerLoop(); });
  return arrow::Status::OK();
}

void WindowPrefetcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (threads_.empty()) return;
    stopping_ = true;
    tasks_.clear();
  }
  work_ready_.notify_all();
  group_done_.notify_all();
  for (auto& thread : threads_) thread.join();
  threads_.clear();
  // A batch may keep its window alive past the reader: its decoded groups
  // (buffers of the decode pool, which goes with the reader) go now, its
  // arranged rows stay.
  for (auto& slot : slots_) slot->groups.clear();
  slots_.clear();
}

std::shared_ptr<const EpochOrder> WindowPrefetcher::OrderFor(int64_t epoch) {
  // Two epochs kept: the cache's plan looks into the next epoch while the current one is scheduled.
  auto& order = order_cache_[epoch % 2];
  if (!order || order->epoch() != epoch) {
    order = std::make_shared<EpochOrder>(layout_, seed_, epoch, window_row_groups_, shuffle_);
  }
  return order;
}

bool WindowPrefetcher::TakeWindow(WindowCursor* cursor, std::shared_ptr<const EpochOrder>* order) {
  while (true) {
    if (num_epochs_ > 0 && cursor->epoch >= num_epochs_) return false;
    *order = OrderFor(cursor->epoch);
    if (cursor->window < 0) {
      const int64_t first = cursor->epoch == resume_epoch_ ? rank_start_ + resume_position_ : rank_start_;
      if (first >= rank_end_) {  // resumed exactly at the end of an epoch
        ++cursor->epoch;
        continue;
      }
      cursor->window = (*order)->WindowOf(first);
    }
    return true;
  }
}

void WindowPrefetcher::AdvanceCursor(WindowCursor* cursor, int64_t window_end) const {
  if (window_end >= rank_end_) {
    ++cursor->epoch;
    cursor->window = -1;
  } else {
    ++cursor->window;
  }
}

bool WindowPrefetcher::ScheduleLocked() {
  if (rank_end_ == rank_start_) return false;
  bool scheduled = false;
  std::shared_ptr<const EpochOrder> order;
  while (static_cast<int64_t>(slots_.size()) < prefetch_windows_ + 1 && TakeWindow(&next_, &order)) {
    auto slot = std::make_shared<WindowSlot>(next_.epoch, next_.window, order);
    const int64_t groups = static_cast<int64_t>(slot->layout.row_groups().size());
    if (!ScatterRows()) slot->groups.resize(static_cast<size_t>(groups));  // held until gathered
    slot->arranged_start = std::max(slot->layout.start(), rank_start_);
    slot->arranged_end = std::min(slot->layout.end(), rank_end_);
    const int64_t rows = std::max<int64_t>(0, slot->arranged_end - slot->arranged_start);
    // Parts of ~kArrangePartBytes: the first batch of a window waits for one
    // part, not the whole window (time to first batch and after a restore).
    slot->parts = std::min(rows, (rows * row_bytes_ + kArrangePartBytes - 1) / kArrangePartBytes);
    slot->part_done.assign(static_cast<size_t>(slot->parts), 0);
    if (conversion_) slot->part_errors.resize(static_cast<size_t>(slot->parts));
    slot->status = TakeSlotBuffers(slot.get(), rows, groups_->columns(), conversion_.get());
    if (slot->status.ok()) {  // else the window is failed, and ready: the batch that needs it raises the status
      slot->decode_pending = groups;
      slot->arrange_pending = slot->parts;
      for (int64_t i = 0; i < groups; ++i) tasks_.push_back({slot, false, i});
    }
    slots_.push_back(slot);
    scheduled = true;
    AdvanceCursor(&next_, slot->layout.end());
  }
  // Only when there is new work: this runs for every batch, and waking idle
  // decode threads for nothing cost two context switches per batch (a fifth
  // of the CPU on 100-byte rows).
  if (scheduled) work_ready_.notify_all();
  return scheduled;
}

void WindowPrefetcher::PlanCacheLocked() {
  ShardCache* cache = groups_->cache();
  if (!cache) return;
  std::vector<int64_t> shards;
  auto add_window = [&](const EpochWindow& window) {
    for (int64_t group : window.row_groups()) shards.push_back(groups_->ShardOf(group));
  };
  for (const auto& slot : slots_) add_window(slot->layout);
  WindowCursor cursor = next_;
  std::shared_ptr<const EpochOrder> order;
  for (int64_t i = 0; i < cache->options().ahead_windows && TakeWindow(&cursor, &order); ++i) {
    const EpochWindow window = order->Window(cursor.window);
    add_window(window);
    AdvanceCursor(&cursor, window.end());
  }
  cache->Plan(shards);
}

arrow::Result<std::shared_ptr<const WindowSlot>> WindowPrefetcher::ReadyWindow(int64_t epoch, int64_t first,
                                                                               int64_t last) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (threads_.empty()) return arrow::Status::Invalid("the reader is stopped");
  bool moved = false;  // the windows ahead changed: the cache's plan follows
  while (true) {
    moved |= ScheduleLocked();
    if (slots_.empty()) return arrow::Status::IndexError("no window holds epoch position ", first);
    auto& front = slots_.front();
    if (front->epoch < epoch || (front->epoch == epoch && front->layout.end() <= first)) {
      // A window of a skipped remainder, or one already consumed: its
      // buffers go back to the process cache once no worker or batch holds it.
      slots_.pop_front();
      moved = true;
      continue;
    }
    break;
  }
  if (moved) PlanCacheLocked();
  auto slot = slots_.front();
  if (slot->epoch != epoch || slot->arranged_start > first || slot->arranged_end <= first) {
    return arrow::Status::IndexError("window schedule out of step at epoch ", epoch, " position ", first);
  }
  last = std::min(last, slot->arranged_end - 1);
  group_done_.wait(lock, [&] { return stopping_ || slot->ReadyThrough(first, last); });
  if (stopping_) return arrow::Status::Cancelled("the reader was stopped");
  ARROW_RETURN_NOT_OK(slot->status);
  return slot;
}

void WindowPrefetcher::WorkerLoop() {
  ShardGroups::Handles handles = groups_->NewHandles();
  const WindowSlot* handles_window = nullptr;
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (stopping_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    if (groups_->cache() && task.slot.get() != handles_window) {
      // Cached shards are opened per window: an open file would keep an evicted copy's disk space.
      handles = groups_->NewHandles();
      handles_window = task.slot.get();
    }
    if (task.arrange) {
      RunArrange(task);
    } else {
      RunDecode(task, &handles);
    }
  }
}

void WindowPrefetcher::RunArrange(const Task& task) {
  WindowSlot& slot = *task.slot;
  std::vector<RecordError> errors;
  const arrow::Status arranged = StatusOfCall([&] {  // the decoded groups are immutable by now
    if (!ScatterRows()) ArrangePart(slot, task.index);  // scattered rows are in place already
    if (conversion_) ConvertPart(slot, task.index, &errors);
    return arrow::Status::OK();
  });
  std::lock_guard<std::mutex> lock(mutex_);
  if (!arranged.ok() && slot.status.ok()) slot.status = arranged;
  if (conversion_) slot.part_errors[static_cast<size_t>(task.index)] = std::move(errors);
  slot.part_done[static_cast<size_t>(task.index)] = 1;
  if (--slot.arrange_pending == 0) slot.groups.clear();
  group_done_.notify_all();
}

void WindowPrefetcher::RunDecode(const Task& task, ShardGroups::Handles* handles) {
  WindowSlot& slot = *task.slot;
  arrow::Status status;
  std::shared_ptr<DecodedGroup> decoded;
  if (ScatterRows()) {
    status = StatusOfCall([&] { return ScatterGroup(slot, task.index, handles); });
  } else {
    status = StatusOfCall([&] {
      decoded = std::make_shared<DecodedGroup>();
      ARROW_ASSIGN_OR_RAISE(decoded->buffers, groups_->Decode(slot.layout.row_groups()[task.index], handles));
      return arrow::Status::OK();
    });
  }
  bool schedule_arrange = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!status.ok()) {
      if (slot.status.ok()) slot.status = status;
    } else if (decoded) {
      slot.groups[task.index] = std::move(decoded);
    }
    if (--slot.decode_pending == 0) {
      if (slot.status.ok() && ScatterRows() && !conversion_) {
        std::fill(slot.part_done.begin(), slot.part_done.end(), 1);  // every row is in place
        slot.arrange_pending = 0;
      } else if (slot.status.ok()) {
        // Ahead of the decoding of later windows, part 0 first: the
        // consumer waits for this window (first batch, restore). Scattered
        // rows with a conversion: these tasks only convert.
        for (int64_t part = slot.parts - 1; part >= 0; --part) tasks_.push_front({task.slot, true, part});
        schedule_arrange = slot.parts > 0;
      } else {
        slot.arrange_pending = 0;  // the consumer reports the status
      }
    }
  }
  if (schedule_arrange) work_ready_.notify_all();
  group_done_.notify_all();
}

void WindowPrefetcher::ArrangePart(WindowSlot& slot, int64_t part) const {
  const int64_t begin = slot.PartBegin(part);
  const int64_t end = slot.PartBegin(part + 1);
  auto* index = reinterpret_cast<int64_t*>(slot.arranged_index.data()) + begin;
  thread_local std::vector<RowLocation> locations;  // reused: no fresh pages per part
  locations.resize(static_cast<size_t>(end - begin));
  slot.layout.LocateRange(slot.arranged_start + begin, end - begin, locations.data());
  std::vector<int64_t> group_offsets;  // global index of each of the window's groups' first row
  for (int64_t g : slot.layout.row_groups()) group_offsets.push_back(layout_->row_group_offsets[g]);
  for (int64_t j = 0; j < end - begin; ++j) index[j] = group_offsets[locations[j].row_group] + locations[j].row;
  const auto& columns = groups_->columns();
  std::vector<uint8_t*> dest;
  for (size_t c = 0; c < columns.size(); ++c) dest.push_back(slot.arranged[c].data() + begin * columns[c].row_bytes);
  GatherRows(slot.groups, columns, locations.data(), end - begin, dest);
}

void WindowPrefetcher::ConvertPart(WindowSlot& slot, int64_t part, std::vector<RecordError>* errors) const {
  const int64_t begin = slot.PartBegin(part);
  const int64_t end = slot.PartBegin(part + 1);
  const auto& outputs = conversion_->converter->outputs();
  std::vector<uint8_t*> out;
  for (size_t i = 0; i < outputs.size(); ++i) out.push_back(slot.tensors[i].data() + begin * outputs[i].row_bytes);
  const uint8_t* records = slot.arranged[conversion_->column].data() + begin * conversion_->record_bytes;
  conversion_->converter->Convert(records, end - begin, conversion_->record_bytes, out, errors);
  for (auto& error : *errors) error.row += begin;
}

arrow::Status WindowPrefetcher::ScatterGroup(const WindowSlot& slot, int64_t index,
                                             ShardGroups::Handles* handles) const {
  thread_local std::vector<int64_t> positions;  // reused: no fresh pages per group
  const int64_t rows = slot.layout.group_rows(index);
  positions.resize(static_cast<size_t>(rows));
  slot.layout.PositionsOfGroup(index, positions.data());
  const int64_t start = slot.arranged_start;
  const int64_t span = slot.arranged_end - start;
  const int64_t row_group = slot.layout.row_groups()[index];
  const int64_t first_index = layout_->row_group_offsets[row_group];
  auto* record_index = reinterpret_cast<int64_t*>(slot.arranged_index.data());
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t offset = static_cast<uint64_t>(positions[r] - start);
    if (offset < static_cast<uint64_t>(span)) record_index[offset] = first_index + r;  // else another rank's row
  }
  const auto& columns = groups_->columns();
  auto status = groups_->Read(row_group, handles, [&](size_t c, int64_t first_row, const uint8_t* values,
                                                      int64_t count) {
    ScatterRun(positions.data() + first_row, start, span, values, count, columns[c].row_bytes,
               slot.arranged[c].data());
  });
  StreamFence();
  return status;
}

}  // namespace shardmill
