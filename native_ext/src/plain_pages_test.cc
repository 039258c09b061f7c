// PLAIN pages handed on value by value in row order; dictionary pages left to Arrow; definition levels.
#include <cstdint>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <arrow/api.h>
#include <arrow/io/memory.h>
#include <parquet/arrow/writer.h>
#include <parquet/file_reader.h>

#include "plain_pages.h"

namespace {
std::shared_ptr<arrow::Buffer> ParquetOf(const std::shared_ptr<arrow::Table>& table, bool dictionary) {
  auto sink = arrow::io::BufferOutputStream::Create();
  EXPECT_TRUE(sink.ok());
  if (!sink.ok()) return nullptr;
  auto properties = parquet::WriterProperties::Builder();
  properties.data_pagesize(4096);
  properties.write_batch_size(64);  // the page size is checked between write batches
  if (!dictionary) properties.disable_dictionary();
  EXPECT_TRUE(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), *sink, 1000, properties.build()).ok());
  auto buffer = (*sink)->Finish();
  EXPECT_TRUE(buffer.ok());
  return buffer.ok() ? *buffer : nullptr;
}

TEST(PlainPages, HandOnEveryValueInRowOrder) {
  const int64_t rows = 2500, width = 12;
  arrow::FixedSizeBinaryBuilder builder(arrow::fixed_size_binary(static_cast<int32_t>(width)));
  std::vector<uint8_t> value(width);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < width; ++b) value[static_cast<size_t>(b)] = static_cast<uint8_t>(r * 31 + b);
    EXPECT_TRUE(builder.Append(value.data()).ok());
  }
  std::shared_ptr<arrow::Array> array;
  EXPECT_TRUE(builder.Finish(&array).ok());
  auto field = arrow::field("frame", arrow::fixed_size_binary(static_cast<int32_t>(width)), false);
  auto table = arrow::Table::Make(arrow::schema({field}), {array});
  for (bool dictionary : {false, true}) {
    auto reader = parquet::ParquetFileReader::Open(std::make_shared<arrow::io::BufferReader>(
        ParquetOf(table, dictionary)));
    EXPECT_TRUE(reader->metadata()->num_row_groups() == 3);
    int64_t group_start = 0;
    for (int g = 0; g < reader->metadata()->num_row_groups(); ++g) {
      auto group = reader->RowGroup(g);
      const int64_t group_rows = reader->metadata()->RowGroup(g)->num_rows();
      std::vector<uint8_t> got(static_cast<size_t>(group_rows * width), 0);
      int64_t calls = 0;
      auto read = shardmill::ReadPlainColumn(*group, 0, width, group_rows,
                                             [&](int64_t first, const uint8_t* values, int64_t count) {
                                               ++calls;
                                               std::memcpy(got.data() + first * width, values,
                                                           static_cast<size_t>(count * width));
                                             });
      EXPECT_TRUE(read.ok());
      if (dictionary) {
        EXPECT_TRUE(read.ok() && !*read);  // a dictionary page: left to Arrow
        continue;
      }
      EXPECT_TRUE(read.ok() && *read && calls > 1);  // several pages, each handed on
      for (int64_t r = 0; r < group_rows; ++r) {
        for (int64_t b = 0; b < width; ++b) {
          EXPECT_TRUE(got[static_cast<size_t>(r * width + b)] == static_cast<uint8_t>((group_start + r) * 31 + b));
        }
      }
      group_start += group_rows;
    }
  }
}

TEST(PlainPages, DefinitionLevelsOfAllDefinedValuesAreRecognised) {
  // RLE run: header (count << 1) = 20, then the value byte 1: 10 values defined.
  const uint8_t all_defined[] = {20, 1};
  const uint8_t one_null[] = {3, 0xEF};  // bit-packed group of 8: one 0 bit
  EXPECT_TRUE(shardmill::AllLevelsDefined(all_defined, sizeof(all_defined), 10));
  EXPECT_TRUE(!shardmill::AllLevelsDefined(all_defined, sizeof(all_defined), 11));
  EXPECT_TRUE(!shardmill::AllLevelsDefined(one_null, sizeof(one_null), 8));
}

}  // namespace
