#include "shard_reader.h"

#include <algorithm>
#include <cstring>
#include <exception>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <new>
#include <tuple>

#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>

#include "keyed_hash.h"
#include "plain_pages.h"
#include "recycling_pool.h"

namespace shardmill {

namespace {

// A window buffer: from the process cache (pages already faulted in) when
// one fits. Throws like `new` when the memory cannot be mapped (the binding
// raises MemoryError).
LargeBuffer TakeWindowBuffer(int64_t bytes) {
  LargeBuffer buffer = LargeBuffer::Take(bytes);
  if (!buffer.data()) throw std::bad_alloc();
  return buffer;
}

// Copies of wide rows into the arranged buffers bypass the cache (AVX-512
// streaming stores, whole 64-byte lines): the window is tens of MB, so the
// lines would be evicted before the consumer reads them, and a normal store
// first reads each line it writes. A standalone gather of 8356 B rows from a
// 33 MB window: 8.1 -> 11.2 GB/s (SSE2 streaming stores: no gain). Rows of
// 400 B scattered from their pages: ~14 % less CPU than memcpy, 1000 B: even.
constexpr int64_t kStreamCopyMinBytes = 256;
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) void StreamCopyAvx512(uint8_t* dest, const uint8_t* src, int64_t bytes) {
  const int64_t head = std::min<int64_t>(bytes, (64 - (reinterpret_cast<uintptr_t>(dest) & 63)) & 63);
  std::memcpy(dest, src, head);
  int64_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dest + i), _mm512_loadu_si512(src + i));
  }
  std::memcpy(dest + i, src + i, bytes - i);
}
// __builtin_cpu_init first: this initializer may run before libgcc's own.
const bool kStreamingCopy = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f"));
void StreamCopy(uint8_t* dest, const uint8_t* src, int64_t bytes) { StreamCopyAvx512(dest, src, bytes); }
// Streaming stores are weakly ordered: fenced before the part is published.
void StreamFence() { _mm_sfence(); }
#else
constexpr bool kStreamingCopy = false;
void StreamCopy(uint8_t* dest, const uint8_t* src, int64_t bytes) { std::memcpy(dest, src, bytes); }
void StreamFence() {}
#endif

// One row of one column to its place in an arranged buffer (the scatter):
// streamed if wide enough (then StreamFence() before the rows are published).
inline void CopyRow(uint8_t* dest, const uint8_t* src, int64_t width) {
  if (width >= kStreamCopyMinBytes && kStreamingCopy) {
    StreamCopy(dest, src, width);
  } else {
    std::memcpy(dest, src, width);
  }
}

}  // namespace

struct ShardReader::DecodedGroup {
  std::vector<std::shared_ptr<arrow::Buffer>> buffers;  // per column: rows x row_bytes
};

struct ShardReader::WindowSlot {
  WindowSlot(int64_t epoch, int64_t window, std::shared_ptr<const EpochOrder> order)
      : epoch(epoch), window(window), order(std::move(order)), layout(this->order->Window(window)) {}
  int64_t epoch;
  int64_t window;
  std::shared_ptr<const EpochOrder> order;
  EpochWindow layout;
  std::vector<std::shared_ptr<DecodedGroup>> groups;  // released once arranged
  // Epoch positions [arranged_start, arranged_end): the window clipped to this rank's slice.
  int64_t arranged_start = 0;
  int64_t arranged_end = 0;
  int64_t parts = 0;                        // arrange tasks
  // Per column, this rank's rows of the window in epoch order, and their
  // global record indices: batches are views into these (the slot, which
  // owns them, lives as long as any batch viewing it). The decoded groups
  // are released once the window is arranged.
  std::vector<LargeBuffer> arranged;
  LargeBuffer arranged_index;                 // int64 global record index per row
  std::vector<char> part_done;  // the consumer waits only for the part it reads
  int64_t decode_pending = 0;
  int64_t arrange_pending = 0;
  arrow::Status status;
  int64_t PartBegin(int64_t part) const { return (arranged_end - arranged_start) * part / parts; }
  // The part holding epoch position `position` (arranged_start <= position < arranged_end).
  int64_t PartOf(int64_t position) const {
    const int64_t offset = position - arranged_start;
    int64_t part = offset * parts / (arranged_end - arranged_start);
    while (part > 0 && PartBegin(part) > offset) --part;
    while (part + 1 < parts && PartBegin(part + 1) <= offset) ++part;
    return part;
  }
  // Readable at positions first..last: decoded and their parts arranged, or failed.
  bool ReadyThrough(int64_t first, int64_t last) const {
    if (decode_pending > 0) return false;
    if (!status.ok()) return true;
    for (int64_t part = PartOf(first); part <= PartOf(last); ++part) {
      if (!part_done[static_cast<size_t>(part)]) return false;
    }
    return true;
  }
};

namespace {

// Bounds on numbers read from a manifest (the Python layer checks the same, and the footers).
constexpr int64_t kMaxRows = int64_t{1} << 48;
constexpr int64_t kMaxRowGroupsPerShard = 1'000'000;

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

arrow::Result<ColumnSpec> SpecOf(const arrow::Schema& schema, const std::string& name, const std::string& path) {
  auto field = schema.GetFieldByName(name);
  if (!field) {
    std::string names;
    for (const auto& f : schema.fields()) names += (names.empty() ? "" : ", ") + f->name();
    return arrow::Status::Invalid("shard ", path, " has no column '", name, "' (columns: ", names, ")");
  }
  const auto& type = field->type();
  if (type->id() == arrow::Type::FIXED_SIZE_BINARY) {
    return ColumnSpec{name, type, static_cast<const arrow::FixedSizeBinaryType&>(*type).byte_width()};
  }
  // float16 has no page reader here and no numpy twin the batch could use: refused up front.
  if (arrow::is_integer(type->id()) || type->id() == arrow::Type::FLOAT || type->id() == arrow::Type::DOUBLE) {
    return ColumnSpec{name, type, type->byte_width()};
  }
  return arrow::Status::NotImplemented("column '", name, "' is ", type->ToString(),
                                       "; the reader serves fixed_size_binary and fixed-width numeric columns");
}

}  // namespace

ShardReader::ShardReader(ReaderOptions options) : options_(std::move(options)) {}

ShardReader::~ShardReader() { Stop(); }

arrow::Result<std::unique_ptr<ShardReader>> ShardReader::Make(ReaderOptions options) {
  auto reader = std::unique_ptr<ShardReader>(new ShardReader(std::move(options)));
  ARROW_RETURN_NOT_OK(reader->Init());
  return reader;
}

arrow::Status ShardReader::Init() {
  const auto& o = options_;
  if (o.shards.empty()) return arrow::Status::Invalid("the dataset has no shards");
  if (o.columns.empty()) return arrow::Status::Invalid("select at least one column");
  if (o.batch_size < 1) return arrow::Status::Invalid("batch_size must be >= 1, got ", o.batch_size);
  if (o.shard_count < 1 || o.shard_index < 0 || o.shard_index >= o.shard_count) {
    return arrow::Status::Invalid("shard_index must be in [0, shard_count), got ", o.shard_index, " of ",
                                  o.shard_count);
  }
  if (o.num_epochs < 0) return arrow::Status::Invalid("num_epochs must be >= 0 (0: unbounded)");
  if (o.window_row_groups < 1) return arrow::Status::Invalid("window_row_groups must be >= 1");
  if (o.num_threads < 1) return arrow::Status::Invalid("num_threads must be >= 1");
  if (o.prefetch_windows < 0) return arrow::Status::Invalid("prefetch_windows must be >= 0");

  // Row-group counts come from a manifest, which anyone may have written: check them before
  // anything is sized from them (a shard's footer is compared with them when it is opened).
  int64_t total_rows = 0;
  for (const auto& shard : o.shards) {
    if (shard.row_group_rows.size() > static_cast<size_t>(kMaxRowGroupsPerShard)) {
      return arrow::Status::Invalid("shard ", shard.path, ": ", shard.row_group_rows.size(),
                                    " row groups, more than a shard can have");
    }
    for (int64_t count : shard.row_group_rows) {
      if (count < 0 || count > kMaxRows - total_rows) {
        return arrow::Status::Invalid("shard ", shard.path, ": row-group count ", count,
                                      " is negative or makes the dataset larger than ", kMaxRows, " rows");
      }
      total_rows += count;
    }
  }
  std::vector<int64_t> rows;
  for (size_t s = 0; s < o.shards.size(); ++s) {
    for (size_t g = 0; g < o.shards[s].row_group_rows.size(); ++g) {
      rows.push_back(o.shards[s].row_group_rows[g]);
      shard_of_group_.push_back(static_cast<int64_t>(s));
      index_in_shard_.push_back(static_cast<int64_t>(g));
    }
  }
  layout_ = std::make_shared<DatasetLayout>(std::move(rows));
  decode_pool_ = std::make_unique<RecyclingPool>(arrow::default_memory_pool(), kRecycleMinBlockBytes);
  rank_rows_ = layout_->num_rows() / o.shard_count;

  // Column types come from the first shard; every other shard is checked against them when opened.
  auto first = ShardHandle::Open(o.shards[0]);
  if (!first.ok()) return first.status().WithMessage("shard ", o.shards[0].path, ": ", first.status().message());
  ARROW_ASSIGN_OR_RAISE(auto schema, (*first)->Schema());
  for (const auto& name : o.columns) {
    ARROW_ASSIGN_OR_RAISE(auto spec, SpecOf(*schema, name, o.shards[0].path));
    columns_.push_back(std::move(spec));
  }
  if (o.start_epoch < 0 || (o.num_epochs > 0 && o.start_epoch > o.num_epochs)) {
    return arrow::Status::Invalid("start epoch ", o.start_epoch, " is outside [0, ", o.num_epochs, "]");
  }
  if (o.start_position < 0 || o.start_position > rank_rows_) {
    return arrow::Status::Invalid("start position ", o.start_position, " is outside [0, ", rank_rows_, "]");
  }
  for (const auto& column : columns_) row_bytes_ += column.row_bytes;
  epoch_ = o.start_epoch;
  position_ = o.start_position;
  return arrow::Status::OK();
}

std::shared_ptr<const EpochOrder> ShardReader::OrderFor(int64_t epoch) {
  if (!order_cache_ || order_cache_->epoch() != epoch) {
    order_cache_ = std::make_shared<EpochOrder>(layout_, options_.seed, epoch, options_.window_row_groups,
                                                options_.shuffle);
  }
  return order_cache_;
}

arrow::Status ShardReader::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!threads_.empty()) return arrow::Status::OK();
  stopping_ = false;
  next_epoch_ = epoch_;
  next_window_ = -1;  // ScheduleLocked finds the first window of the resume point
  for (int i = 0; i < options_.num_threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
  return arrow::Status::OK();
}

void ShardReader::Stop() {
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
  // (buffers of this reader's decode pool) go now, its arranged rows stay.
  for (auto& slot : slots_) slot->groups.clear();
  slots_.clear();
}

void ShardReader::ScheduleLocked() {
  if (rank_rows_ == 0) return;
  const int64_t lo = options_.shard_index * rank_rows_;
  const int64_t hi = lo + rank_rows_;
  bool scheduled = false;
  while (static_cast<int64_t>(slots_.size()) < options_.prefetch_windows + 1) {
    if (options_.num_epochs > 0 && next_epoch_ >= options_.num_epochs) break;
    auto order = OrderFor(next_epoch_);
    if (next_window_ < 0) {
      int64_t first = next_epoch_ == epoch_ ? lo + position_ : lo;
      if (first >= hi) {  // resumed exactly at the end of an epoch
        ++next_epoch_;
        continue;
      }
      next_window_ = order->WindowOf(first);
    }
    auto slot = std::make_shared<WindowSlot>(next_epoch_, next_window_, order);
    const int64_t groups = static_cast<int64_t>(slot->layout.row_groups().size());
    if (!ScatterRows()) slot->groups.resize(static_cast<size_t>(groups));  // held until gathered
    slot->arranged_start = std::max(slot->layout.start(), lo);
    slot->arranged_end = std::min(slot->layout.end(), hi);
    const int64_t rows = std::max<int64_t>(0, slot->arranged_end - slot->arranged_start);
    // Parts of ~kArrangePartBytes: the first batch of a window waits for one
    // part, not the whole window (time to first batch and after a restore).
    slot->parts = std::min(rows, (rows * row_bytes_ + kArrangePartBytes - 1) / kArrangePartBytes);
    slot->part_done.assign(static_cast<size_t>(slot->parts), 0);
    for (const auto& column : columns_) slot->arranged.push_back(TakeWindowBuffer(rows * column.row_bytes));
    slot->arranged_index = TakeWindowBuffer(rows * static_cast<int64_t>(sizeof(int64_t)));
    slot->decode_pending = groups;
    slot->arrange_pending = slot->parts;
    for (int64_t i = 0; i < groups; ++i) tasks_.push_back({slot, false, i});
    slots_.push_back(slot);
    scheduled = true;
    if (slot->layout.end() >= hi) {
      ++next_epoch_;
      next_window_ = -1;
    } else {
      ++next_window_;
    }
  }
  // Only when there is new work: this runs for every batch, and waking idle
  // decode threads for nothing cost two context switches per batch (a fifth
  // of the CPU on 100-byte rows).
  if (scheduled) work_ready_.notify_all();
}

void ShardReader::WorkerLoop() {
  std::vector<std::unique_ptr<ShardHandle>> handles(options_.shards.size());
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (stopping_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    WindowSlot& slot = *task.slot;
    if (task.arrange) {
      const arrow::Status arranged = StatusOfCall([&] {  // the decoded groups are immutable by now
        ArrangePart(slot, task.index);
        return arrow::Status::OK();
      });
      std::lock_guard<std::mutex> lock(mutex_);
      if (!arranged.ok() && slot.status.ok()) slot.status = arranged;
      slot.part_done[static_cast<size_t>(task.index)] = 1;
      if (--slot.arrange_pending == 0) slot.groups.clear();
      group_done_.notify_all();
      continue;
    }
    arrow::Status status;
    std::shared_ptr<DecodedGroup> decoded;
    if (ScatterRows()) {
      status = StatusOfCall([&] { return ScatterGroup(slot, task.index, &handles); });
    } else {
      status = StatusOfCall([&] {
        ARROW_ASSIGN_OR_RAISE(decoded, Decode(slot.layout.row_groups()[task.index], &handles));
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
        if (slot.status.ok() && ScatterRows()) {
          std::fill(slot.part_done.begin(), slot.part_done.end(), 1);  // every row is in place
          slot.arrange_pending = 0;
        } else if (slot.status.ok()) {
          // Ahead of the decoding of later windows, part 0 first: the
          // consumer waits for this window (first batch, restore).
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
}

void ShardReader::ArrangePart(WindowSlot& slot, int64_t part) {
  const int64_t begin = slot.PartBegin(part);
  const int64_t end = slot.PartBegin(part + 1);
  const auto& groups = slot.layout.row_groups();
  auto* index = reinterpret_cast<int64_t*>(slot.arranged_index.data()) + begin;
  thread_local std::vector<RowLocation> locations;  // reused: no fresh pages per part
  locations.resize(static_cast<size_t>(end - begin));
  slot.layout.LocateRange(slot.arranged_start + begin, end - begin, locations.data());
  std::vector<int64_t> group_offsets;  // global index of each of the window's groups' first row
  for (int64_t g : groups) group_offsets.push_back(layout_->row_group_offsets[g]);
  for (int64_t j = 0; j < end - begin; ++j) index[j] = group_offsets[locations[j].row_group] + locations[j].row;
  std::vector<uint8_t*> dest;
  for (size_t c = 0; c < columns_.size(); ++c) {
    dest.push_back(slot.arranged[c].data() + begin * columns_[c].row_bytes);
  }
  GatherRows(slot, locations.data(), end - begin, dest);
}

arrow::Status ShardReader::ScatterGroup(const WindowSlot& slot, int64_t index,
                                        std::vector<std::unique_ptr<ShardHandle>>* handles) const {
  // Each row of the group, as its page is decompressed (in cache), straight
  // to its place in the window through the inverse permutation: for wide
  // rows a scattered write of whole rows costs less than gathering them
  // later from a window that has left the cache, and there is no decoded
  // copy of the group in between.
  thread_local std::vector<int64_t> positions;  // reused: no fresh pages per group
  const int64_t rows = slot.layout.group_rows(index);
  positions.resize(static_cast<size_t>(rows));
  slot.layout.PositionsOfGroup(index, positions.data());
  const int64_t start = slot.arranged_start;
  const uint64_t span = static_cast<uint64_t>(slot.arranged_end - start);
  const int64_t row_group = slot.layout.row_groups()[index];
  const int64_t first_index = layout_->row_group_offsets[row_group];
  auto* record_index = reinterpret_cast<int64_t*>(slot.arranged_index.data());
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t offset = static_cast<uint64_t>(positions[r] - start);
    if (offset < span) record_index[offset] = first_index + r;  // else another rank's row
  }
  auto status = ReadGroup(row_group, handles, [&](size_t c, int64_t first_row, const uint8_t* values, int64_t count) {
    const int64_t width = columns_[c].row_bytes;
    uint8_t* dest = slot.arranged[c].data();
    for (int64_t k = 0; k < count; ++k) {
      const uint64_t offset = static_cast<uint64_t>(positions[first_row + k] - start);
      if (offset < span) CopyRow(dest + static_cast<int64_t>(offset) * width, values + k * width, width);
    }
  });
  StreamFence();
  return status;
}

void ShardReader::GatherRows(const WindowSlot& slot, const RowLocation* locations, int64_t count,
                             const std::vector<uint8_t*>& dest) const {
  // Rows are scattered over the whole window (tens of MB), so each copy is a
  // cache miss; with the locations known, prefetching kPrefetchAhead rows
  // ahead keeps many misses in flight (measured: several times faster for
  // 100-byte rows).
  // Every cache line of a row's first kPrefetchBytes, not just the first:
  // a 100-byte row spans two or three (a standalone gather of 100-byte rows
  // from 32 MiB: 36 -> 28 ns per row); the hardware prefetcher follows
  // wider rows.
  constexpr int64_t kPrefetchAhead = 16;
  constexpr int64_t kPrefetchBytes = 256;
  // Only rows narrower than kScatterMinRowBytes are gathered, so no column
  // here is wide enough for streaming stores (CopyRow, StreamFence).
  static_assert(kScatterMinRowBytes <= kStreamCopyMinBytes, "gathered rows would need streaming stores");
  for (int64_t j = 0; j < count; ++j) {
    if (j + kPrefetchAhead < count) {
      const RowLocation& ahead = locations[j + kPrefetchAhead];
      const auto& group = slot.groups[ahead.row_group];
      for (size_t c = 0; c < columns_.size(); ++c) {
        const uint8_t* row = group->buffers[c]->data() + ahead.row * columns_[c].row_bytes;
        const int64_t bytes = std::min(columns_[c].row_bytes, kPrefetchBytes);
        for (int64_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(row + offset);
        __builtin_prefetch(row + bytes - 1);
      }
    }
    const RowLocation& loc = locations[j];
    const auto& group = slot.groups[loc.row_group];
    for (size_t c = 0; c < columns_.size(); ++c) {
      const int64_t width = columns_[c].row_bytes;
      std::memcpy(dest[c] + j * width, group->buffers[c]->data() + loc.row * width, width);
    }
  }
}

arrow::Status ShardReader::ReadGroup(int64_t row_group, std::vector<std::unique_ptr<ShardHandle>>* handles,
                                     const GroupRunSink& sink) const {
  const int64_t shard = shard_of_group_[row_group];
  const auto& file = options_.shards[shard];
  auto in_file = [&](const arrow::Status& status) {
    return status.WithMessage("shard ", file.path, ": ", status.message());
  };
  auto& handle = (*handles)[shard];
  if (!handle) {
    auto opened = ShardHandle::Open(file, decode_pool_.get());
    if (!opened.ok()) return in_file(opened.status());
    auto bound = (*opened)->Bind(columns_);
    if (!bound.ok()) return in_file(bound);
    handle = std::move(opened).MoveValueUnsafe();
  }
  const int index = static_cast<int>(index_in_shard_[row_group]);
  const int64_t rows = layout_->row_group_rows[row_group];
  for (size_t c = 0; c < columns_.size(); ++c) {
    auto read = handle->ReadColumn(index, c, columns_[c].row_bytes, rows,
                                   [&](int64_t first_row, const uint8_t* values, int64_t count) {
                                     sink(c, first_row, values, count);
                                   });
    if (!read.ok()) return in_file(read.WithMessage("row group ", index, ": ", read.message()));
  }
  return arrow::Status::OK();
}

arrow::Result<std::shared_ptr<ShardReader::DecodedGroup>> ShardReader::Decode(
    int64_t row_group, std::vector<std::unique_ptr<ShardHandle>>* handles) const {
  const int64_t rows = layout_->row_group_rows[row_group];
  auto decoded = std::make_shared<DecodedGroup>();
  for (const auto& column : columns_) {
    // Large blocks are recycled LargeBuffers (pages already faulted in).
    ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> buffer,
                          arrow::AllocateBuffer(rows * column.row_bytes, decode_pool_.get()));
    decoded->buffers.push_back(std::move(buffer));
  }
  ARROW_RETURN_NOT_OK(ReadGroup(row_group, handles, [&](size_t c, int64_t first_row, const uint8_t* values,
                                                        int64_t count) {
    const int64_t width = columns_[c].row_bytes;
    std::memcpy(decoded->buffers[c]->mutable_data() + first_row * width, values, count * width);
  }));
  return decoded;
}

BatchPlan ShardReader::PlanNext() {
  while (true) {
    if (rank_rows_ == 0) return {};
    if (options_.num_epochs > 0 && epoch_ >= options_.num_epochs) return {};
    int64_t remaining = rank_rows_ - position_;
    if (remaining == 0 || (options_.drop_remainder && remaining < options_.batch_size)) {
      ++epoch_;
      position_ = 0;
      continue;
    }
    return {epoch_, std::min(options_.batch_size, remaining)};
  }
}

arrow::Result<std::shared_ptr<ShardReader::WindowSlot>> ShardReader::WindowAtLocked(int64_t target) {
  if (threads_.empty()) return arrow::Status::Invalid("the reader is stopped");
  while (true) {
    ScheduleLocked();
    if (slots_.empty()) return arrow::Status::IndexError("no window holds epoch position ", target);
    auto& front = slots_.front();
    if (front->epoch < epoch_ || (front->epoch == epoch_ && front->layout.end() <= target)) {
      // A window of a skipped remainder, or one already consumed: its
      // buffers go back to the process cache once no worker or batch holds it.
      slots_.pop_front();
      continue;
    }
    break;
  }
  auto slot = slots_.front();
  if (slot->epoch != epoch_ || slot->arranged_start > target || slot->arranged_end <= target) {
    return arrow::Status::IndexError("window schedule out of step at epoch ", epoch_, " position ", target);
  }
  return slot;
}

void ShardReader::RecordSeeds(const int64_t* record_index, int64_t rows, uint64_t* record_seed) const {
  // HashWords(seed, kStreamRecordSeed, {index}) is Mix64(key ^ index) with
  // the key below, computed once per batch rather than per row.
  MixKeyedWords(Mix64(options_.seed ^ kStreamRecordSeed), reinterpret_cast<const uint64_t*>(record_index), rows,
                record_seed);
}

arrow::Result<BatchView> ShardReader::ViewNext(const BatchPlan& plan, uint64_t* record_seed) {
  if (plan.epoch != epoch_) return arrow::Status::Invalid("ViewNext without a matching PlanNext");
  const int64_t target = options_.shard_index * rank_rows_ + position_;
  std::shared_ptr<WindowSlot> slot;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    ARROW_ASSIGN_OR_RAISE(slot, WindowAtLocked(target));
    if (target + plan.rows > slot->arranged_end) return BatchView{};  // spans two windows
    group_done_.wait(lock, [&] { return stopping_ || slot->ReadyThrough(target, target + plan.rows - 1); });
    if (stopping_) return arrow::Status::Cancelled("the reader was stopped");
    ARROW_RETURN_NOT_OK(slot->status);
  }
  // Those parts are arranged and immutable (workers write only other parts).
  const int64_t offset = target - slot->arranged_start;
  BatchView view;
  for (size_t c = 0; c < columns_.size(); ++c) {
    view.columns.push_back(slot->arranged[c].data() + offset * columns_[c].row_bytes);
  }
  view.record_index = reinterpret_cast<const int64_t*>(slot->arranged_index.data()) + offset;
  RecordSeeds(view.record_index, plan.rows, record_seed);
  view.owner = slot;
  position_ += plan.rows;
  return view;
}

arrow::Status ShardReader::FillNext(const BatchPlan& plan, const std::vector<uint8_t*>& buffers,
                                    int64_t* record_index, uint64_t* record_seed) {
  if (plan.epoch != epoch_) return arrow::Status::Invalid("FillNext without a matching PlanNext");
  if (buffers.size() != columns_.size()) return arrow::Status::Invalid("one buffer per column expected");
  const int64_t lo = options_.shard_index * rank_rows_;
  int64_t done = 0;
  while (done < plan.rows) {
    const int64_t target = lo + position_ + done;
    std::shared_ptr<WindowSlot> slot;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ARROW_ASSIGN_OR_RAISE(slot, WindowAtLocked(target));
      group_done_.wait(lock, [&] { return stopping_ || slot->ReadyThrough(target, target); });
      if (stopping_) return arrow::Status::Cancelled("the reader was stopped");
      ARROW_RETURN_NOT_OK(slot->status);
    }
    // This part of the window is arranged and immutable: copies without the lock.
    const int64_t part = slot->PartOf(target);
    const int64_t run = std::min(plan.rows - done, slot->arranged_start + slot->PartBegin(part + 1) - target);
    const int64_t offset = target - slot->arranged_start;
    for (size_t c = 0; c < columns_.size(); ++c) {
      const int64_t width = columns_[c].row_bytes;
      std::memcpy(buffers[c] + done * width, slot->arranged[c].data() + offset * width, run * width);
    }
    const auto* index = reinterpret_cast<const int64_t*>(slot->arranged_index.data()) + offset;
    std::memcpy(record_index + done, index, run * sizeof(int64_t));
    RecordSeeds(index, run, record_seed + done);
    done += run;
  }
  position_ += plan.rows;
  return arrow::Status::OK();
}

}  // namespace shardmill
