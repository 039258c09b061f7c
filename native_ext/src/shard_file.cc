#include "shard_file.h"

#include <arrow/filesystem/api.h>
#include <arrow/io/api.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>

namespace shardmill {

arrow::Result<std::unique_ptr<ShardHandle>> ShardHandle::Open(const ShardFile& shard, arrow::MemoryPool* pool) {
  auto handle = std::unique_ptr<ShardHandle>(new ShardHandle());
  handle->path_ = shard.path;
  std::string internal_path;
  ARROW_ASSIGN_OR_RAISE(auto fs, arrow::fs::FileSystemFromUriOrPath(shard.path, &internal_path));
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

arrow::Status ShardHandle::ReadColumn(int index, size_t c, int64_t width, int64_t rows, const ColumnRunSink& sink) {
  if (leaf_indices_[c] >= 0) {
    std::shared_ptr<parquet::RowGroupReader> row_group;
    PARQUET_CATCH_NOT_OK(row_group = reader_->parquet_reader()->RowGroup(index));
    ARROW_ASSIGN_OR_RAISE(bool plain, ReadPlainColumn(*row_group, leaf_indices_[c], width, rows, sink));
    if (plain) return arrow::Status::OK();
  }
  std::shared_ptr<arrow::Table> table;
  ARROW_RETURN_NOT_OK(reader_->ReadRowGroup(index, {column_indices_[c]}, &table));
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

}  // namespace shardmill
