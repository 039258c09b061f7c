#include "shard_file.h"

#include <cstring>

#include <arrow/filesystem/api.h>
#include <arrow/io/api.h>
#include <arrow/util/future.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>

#include "shard_cache.h"

namespace shardmill {

arrow::Result<std::unique_ptr<ShardHandle>> ShardHandle::Open(const ShardFile& shard, arrow::MemoryPool* pool) {
  auto handle = std::unique_ptr<ShardHandle>(new ShardHandle());
  handle->path_ = shard.path;
  std::string internal_path;
  ARROW_ASSIGN_OR_RAISE(auto fs, OpenFileSystem(shard.path, shard.remote, &internal_path));
  handle->remote_ = fs->type_name() != "local";
  ARROW_ASSIGN_OR_RAISE(auto input, fs->OpenInputFile(internal_path));
  parquet::arrow::FileReaderBuilder builder;
  ARROW_RETURN_NOT_OK(builder.Open(input, parquet::ReaderProperties(pool)));  // page buffers from `pool` too
  ARROW_RETURN_NOT_OK(builder.memory_pool(pool)->Build(&handle->reader_));
  auto metadata = handle->reader_->parquet_reader()->metadata();
  if (metadata->num_row_groups() != static_cast<int>(shard.row_group_rows.size())) {
    return arrow::Status::Invalid("has ", metadata->num_row_groups(), " row groups, the manifest says ",
                                  shard.row_group_rows.size());
  }
  for (int i = 0; i < metadata->num_row_groups(); ++i) {
    int64_t rows = metadata->RowGroup(i)->num_rows();
    if (rows != shard.row_group_rows[i]) {
      return arrow::Status::Invalid("row group ", i, " has ", rows, " rows, the manifest says ",
                                    shard.row_group_rows[i]);
    }
  }
  return handle;
}

arrow::Result<std::shared_ptr<arrow::Schema>> ShardHandle::Schema() {
  std::shared_ptr<arrow::Schema> schema;
  ARROW_RETURN_NOT_OK(reader_->GetSchema(&schema));
  return schema;
}

arrow::Status ShardHandle::Bind(const std::vector<ColumnSpec>& columns) {
  ARROW_ASSIGN_OR_RAISE(auto schema, Schema());
  column_indices_.clear();
  leaf_indices_.clear();
  names_.clear();
  for (const auto& column : columns) {
    int index = schema->GetFieldIndex(column.name);
    if (index < 0) return arrow::Status::Invalid("has no column '", column.name, "'");
    if (!schema->field(index)->type()->Equals(*column.type)) {
      return arrow::Status::Invalid("column '", column.name, "' is ", schema->field(index)->type()->ToString(),
                                    ", other shards have ", column.type->ToString());
    }
    column_indices_.push_back(index);
    names_.push_back(column.name);
    // -1 for a nested field: not a leaf, so never read page by page.
    leaf_indices_.push_back(reader_->parquet_reader()->metadata()->schema()->ColumnIndex(column.name));
  }
  return arrow::Status::OK();
}

arrow::Status ShardHandle::Prefetch(int index) {
  if (!remote_ || leaf_indices_.empty()) return arrow::Status::OK();
  for (int leaf : leaf_indices_) {
    if (leaf < 0) return arrow::Status::OK();  // a nested column: Arrow reads it as it would
  }
  auto* file = reader_->parquet_reader();
  PARQUET_CATCH_NOT_OK(file->PreBuffer({index}, leaf_indices_, arrow::io::default_io_context(),
                                       arrow::io::CacheOptions::Defaults()));
  return file->WhenBuffered({index}, leaf_indices_).status();
}

arrow::Status ShardHandle::ReadColumn(int index, size_t c, int64_t width, int64_t rows, const ColumnRunSink& sink) {
  if (leaf_indices_[c] >= 0) {
    std::shared_ptr<parquet::RowGroupReader> row_group;
    PARQUET_CATCH_NOT_OK(row_group = reader_->parquet_reader()->RowGroup(index));
    ARROW_ASSIGN_OR_RAISE(bool plain, ReadPlainColumn(*row_group, leaf_indices_[c], width, rows, sink));
    if (plain) return arrow::Status::OK();
  }
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Table> table, reader_->ReadRowGroup(index, {column_indices_[c]}));
  ARROW_ASSIGN_OR_RAISE(table, table->CombineChunks());
  const auto& column = *table->column(0);
  if (column.length() != rows) {
    return arrow::Status::Invalid("decoded to ", column.length(), " rows, expected ", rows);
  }
  if (rows == 0) return arrow::Status::OK();
  const auto& array = *column.chunk(0);
  if (array.null_count() != 0) return arrow::Status::Invalid("column '", names_[c], "' has nulls");
  sink(0, array.data()->buffers[1]->data() + array.offset() * width, rows);
  return arrow::Status::OK();
}

ShardGroups::ShardGroups(std::vector<ShardFile> shards, std::vector<ColumnSpec> columns,
                         std::shared_ptr<ShardCache> cache)
    : shards_(std::move(shards)),
      columns_(std::move(columns)),
      cache_(std::move(cache)),
      pool_(std::make_unique<RecyclingPool>(arrow::default_memory_pool(), kRecycleMinBlockBytes)) {
  for (size_t s = 0; s < shards_.size(); ++s) {
    for (size_t g = 0; g < shards_[s].row_group_rows.size(); ++g) {
      shard_of_group_.push_back(static_cast<int64_t>(s));
      index_in_shard_.push_back(static_cast<int64_t>(g));
      rows_.push_back(shards_[s].row_group_rows[g]);
    }
  }
}

arrow::Status ShardGroups::Read(int64_t row_group, Handles* handles, const RunSink& sink) const {
  const int64_t shard = shard_of_group_[row_group];
  const auto& file = shards_[shard];
  auto in_file = [&](const arrow::Status& status) {
    return status.WithMessage("shard ", file.path, ": ", status.message());
  };
  auto& handle = (*handles)[shard];
  if (!handle) {
    ShardFile source = file;
    if (cache_) {
      auto cached = cache_->Acquire(shard);
      if (!cached.ok()) return in_file(cached.status());
      source.path = *cached;
    }
    auto opened = ShardHandle::Open(source, pool_.get());
    if (!opened.ok()) return in_file(opened.status());
    auto bound = (*opened)->Bind(columns_);
    if (!bound.ok()) return in_file(bound);
    handle = std::move(*opened);
  }
  const int index = static_cast<int>(index_in_shard_[row_group]);
  const int64_t rows = rows_[row_group];
  auto fetched = handle->Prefetch(index);
  if (!fetched.ok()) return in_file(fetched.WithMessage("row group ", index, ": ", fetched.message()));
  for (size_t c = 0; c < columns_.size(); ++c) {
    auto read = handle->ReadColumn(index, c, columns_[c].row_bytes, rows,
                                   [&](int64_t first_row, const uint8_t* values, int64_t count) {
                                     sink(c, first_row, values, count);
                                   });
    if (!read.ok()) return in_file(read.WithMessage("row group ", index, ": ", read.message()));
  }
  return arrow::Status::OK();
}

arrow::Result<std::vector<std::shared_ptr<arrow::Buffer>>> ShardGroups::Decode(int64_t row_group,
                                                                              Handles* handles) const {
  const int64_t rows = rows_[row_group];
  std::vector<std::shared_ptr<arrow::Buffer>> buffers;
  for (const auto& column : columns_) {
    // Large blocks are recycled LargeBuffers (pages already faulted in).
    ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> buffer,
                          arrow::AllocateBuffer(rows * column.row_bytes, pool_.get()));
    buffers.push_back(std::move(buffer));
  }
  ARROW_RETURN_NOT_OK(Read(row_group, handles, [&](size_t c, int64_t first_row, const uint8_t* values,
                                                   int64_t count) {
    const int64_t width = columns_[c].row_bytes;
    std::memcpy(buffers[c]->mutable_data() + first_row * width, values, count * width);
  }));
  return buffers;
}

}  // namespace shardmill
