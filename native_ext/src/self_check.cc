#include "self_check.h"

#include <arrow/api.h>
#include <arrow/config.h>
#include <arrow/io/memory.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>

namespace shardmill {

namespace {

constexpr int32_t kFrameWidth = 16;

arrow::Result<std::shared_ptr<arrow::Table>> MakeTable(int64_t num_rows) {
  arrow::Int64Builder ids;
  arrow::FixedSizeBinaryBuilder frames(arrow::fixed_size_binary(kFrameWidth));
  ARROW_RETURN_NOT_OK(ids.Reserve(num_rows));
  ARROW_RETURN_NOT_OK(frames.Reserve(num_rows));
  uint8_t frame[kFrameWidth];
  for (int64_t i = 0; i < num_rows; ++i) {
    for (int32_t b = 0; b < kFrameWidth; ++b) frame[b] = static_cast<uint8_t>(i * 31 + b);
    ARROW_RETURN_NOT_OK(ids.Append(i));
    ARROW_RETURN_NOT_OK(frames.Append(frame));
  }
  ARROW_ASSIGN_OR_RAISE(auto id_array, ids.Finish());
  ARROW_ASSIGN_OR_RAISE(auto frame_array, frames.Finish());
  auto schema = arrow::schema({arrow::field("id", arrow::int64()),
                               arrow::field("frame", arrow::fixed_size_binary(kFrameWidth))});
  return arrow::Table::Make(schema, {id_array, frame_array});
}

}  // namespace

arrow::Result<SelfCheckReport> RunSelfCheck(int64_t num_rows) {
  if (num_rows < 0) return arrow::Status::Invalid("num_rows must be >= 0, got ", num_rows);
  ARROW_ASSIGN_OR_RAISE(auto table, MakeTable(num_rows));

  ARROW_ASSIGN_OR_RAISE(auto sink, arrow::io::BufferOutputStream::Create());
  auto props = parquet::WriterProperties::Builder().compression(arrow::Compression::ZSTD)->build();
  ARROW_RETURN_NOT_OK(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), sink,
                                                 /*chunk_size=*/1024, props));
  ARROW_ASSIGN_OR_RAISE(auto buffer, sink->Finish());

  auto source = std::make_shared<arrow::io::BufferReader>(buffer);
  ARROW_ASSIGN_OR_RAISE(auto reader, parquet::arrow::OpenFile(source, arrow::default_memory_pool()));
  std::shared_ptr<arrow::Table> read_back;
  ARROW_RETURN_NOT_OK(reader->ReadTable(&read_back));
  if (!read_back->Equals(*table)) {
    return arrow::Status::Invalid("Parquet round trip changed the table");
  }
  SelfCheckReport report;
  report.arrow_version = arrow::GetBuildInfo().version_string;
  report.rows_round_tripped = read_back->num_rows();
  report.parquet_bytes = buffer->size();
  return report;
}

}  // namespace shardmill
