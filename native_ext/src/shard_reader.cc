#include "shard_reader.h"

#include <algorithm>
#include <cstring>

#include "keyed_hash.h"

namespace shardmill {

namespace {

// Bounds on numbers read from a manifest (the Python layer checks the same, and the footers).
constexpr int64_t kMaxRows = int64_t{1} << 48;
constexpr int64_t kMaxRowGroupsPerShard = 1'000'000;

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

ShardReader::ShardReader(ReaderOptions options) : options_(std::move(options)) {
  for (auto& shard : options_.shards) shard.remote = options_.remote;
}

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
  for (const auto& shard : o.shards) rows.insert(rows.end(), shard.row_group_rows.begin(), shard.row_group_rows.end());
  layout_ = std::make_shared<DatasetLayout>(std::move(rows));
  rank_rows_ = layout_->num_rows() / o.shard_count;
  if (o.slice_begin != -1 || o.slice_end != -1) {
    if (o.slice_begin < 0 || o.slice_end < o.slice_begin || o.slice_end > layout_->num_rows()) {
      return arrow::Status::Invalid("slice [", o.slice_begin, ", ", o.slice_end, ") is not within the epoch's ",
                                    layout_->num_rows(), " rows");
    }
    rank_rows_ = o.slice_end - o.slice_begin;
  }

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
  ARROW_ASSIGN_OR_RAISE(auto converter, MakeRecordConverter(o.converter));
  if (converter) {
    const auto& name = converter->column();
    auto column = std::find_if(columns_.begin(), columns_.end(), [&](const ColumnSpec& c) { return c.name == name; });
    if (column == columns_.end()) return arrow::Status::Invalid("the conversion reads column '", name, "': select it");
    ARROW_RETURN_NOT_OK(converter->CheckColumn(*column->type, column->row_bytes));
    conversion_ = std::make_shared<const Conversion>(
        Conversion{std::move(converter), static_cast<size_t>(column - columns_.begin()), column->row_bytes});
  }
  epoch_ = o.start_epoch;
  position_ = o.start_position;
  if (!o.cache.directory.empty()) {
    ARROW_ASSIGN_OR_RAISE(cache_, ShardCache::Make(o.cache, options_.shards));  // shards with their remote bounds
  }
  prefetcher_ = std::make_unique<WindowPrefetcher>(
      o, layout_, std::make_unique<ShardGroups>(o.shards, columns_, cache_), RankStart(), RankStart() + rank_rows_,
      conversion_);
  return arrow::Status::OK();
}

arrow::Status ShardReader::Start() {
  if (cache_) ARROW_RETURN_NOT_OK(cache_->Start());
  return prefetcher_->Start(epoch_, position_);
}

void ShardReader::Stop() {
  if (prefetcher_) prefetcher_->Stop();
  if (cache_) cache_->Stop();
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

void ShardReader::RecordSeeds(const int64_t* record_index, int64_t rows, uint64_t* record_seed) const {
  // HashWords(seed, kStreamRecordSeed, {index}) is Mix64(key ^ index) with
  // the key below, computed once per batch rather than per row.
  MixKeyedWords(Mix64(options_.seed ^ kStreamRecordSeed), reinterpret_cast<const uint64_t*>(record_index), rows,
                record_seed);
}

arrow::Status ShardReader::ConvertedThrough(const WindowSlot& slot, int64_t first, int64_t last) const {
  if (!conversion_ || slot.parts == 0) return arrow::Status::OK();
  for (int64_t part = slot.PartOf(first); part <= slot.PartOf(last); ++part) {
    for (const auto& error : slot.part_errors[static_cast<size_t>(part)]) {
      const int64_t position = slot.arranged_start + error.row;
      if (position < first || position > last) continue;
      // The record's shard and row, from its global index (shards in manifest order).
      int64_t row = reinterpret_cast<const int64_t*>(slot.arranged_index.data())[error.row];
      for (const auto& shard : options_.shards) {
        int64_t rows = 0;
        for (int64_t count : shard.row_group_rows) rows += count;
        if (row < rows) return arrow::Status::Invalid(shard.path, ": row ", row, ": ", error.what);
        row -= rows;
      }
    }
  }
  return arrow::Status::OK();
}

arrow::Result<BatchView> ShardReader::ViewNext(const BatchPlan& plan, uint64_t* record_seed) {
  if (plan.epoch != epoch_) return arrow::Status::Invalid("ViewNext without a matching PlanNext");
  const int64_t target = RankStart() + position_;
  ARROW_ASSIGN_OR_RAISE(auto slot, prefetcher_->ReadyWindow(epoch_, target, target + plan.rows - 1));
  if (target + plan.rows > slot->arranged_end) return BatchView{};  // spans two windows
  const arrow::Status converted = ConvertedThrough(*slot, target, target + plan.rows - 1);
  if (!converted.ok()) {
    position_ += plan.rows;  // consumed: the next call serves the next batch
    return converted;
  }
  const int64_t offset = target - slot->arranged_start;
  BatchView view;
  for (size_t c = 0; c < columns_.size(); ++c) {
    view.columns.push_back(slot->arranged[c].data() + offset * columns_[c].row_bytes);
  }
  if (conversion_) {
    const auto& outputs = conversion_->converter->outputs();
    for (size_t i = 0; i < outputs.size(); ++i) view.tensors.push_back(slot->tensors[i].data() + offset * outputs[i].row_bytes);
  }
  view.record_index = reinterpret_cast<const int64_t*>(slot->arranged_index.data()) + offset;
  RecordSeeds(view.record_index, plan.rows, record_seed);
  view.owner = slot;
  position_ += plan.rows;
  return view;
}

arrow::Status ShardReader::FillNext(const BatchPlan& plan, const std::vector<uint8_t*>& buffers,
                                    int64_t* record_index, uint64_t* record_seed,
                                    const std::vector<uint8_t*>& tensors) {
  if (plan.epoch != epoch_) return arrow::Status::Invalid("FillNext without a matching PlanNext");
  if (buffers.size() != columns_.size()) return arrow::Status::Invalid("one buffer per column expected");
  if (conversion_ && tensors.size() != conversion_->converter->outputs().size()) {
    return arrow::Status::Invalid("one buffer per converted output expected");
  }
  arrow::Status converted;
  int64_t done = 0;
  while (done < plan.rows) {
    // Part by part: each copy starts as soon as its part is arranged.
    const int64_t target = RankStart() + position_ + done;
    ARROW_ASSIGN_OR_RAISE(auto slot, prefetcher_->ReadyWindow(epoch_, target, target));
    const int64_t run = std::min(plan.rows - done, slot->PartEnd(target) - target);
    const int64_t offset = target - slot->arranged_start;
    for (size_t c = 0; c < columns_.size(); ++c) {
      const int64_t width = columns_[c].row_bytes;
      std::memcpy(buffers[c] + done * width, slot->arranged[c].data() + offset * width, run * width);
    }
    if (conversion_) {
      if (converted.ok()) converted = ConvertedThrough(*slot, target, target + run - 1);
      const auto& outputs = conversion_->converter->outputs();
      for (size_t i = 0; i < outputs.size(); ++i) {
        const int64_t width = outputs[i].row_bytes;
        std::memcpy(tensors[i] + done * width, slot->tensors[i].data() + offset * width, run * width);
      }
    }
    const auto* index = reinterpret_cast<const int64_t*>(slot->arranged_index.data()) + offset;
    std::memcpy(record_index + done, index, run * sizeof(int64_t));
    RecordSeeds(index, run, record_seed + done);
    done += run;
  }
  position_ += plan.rows;
  return converted;
}

}  // namespace shardmill
