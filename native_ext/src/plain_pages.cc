#include "plain_pages.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>

#include <parquet/column_page.h>
#include <parquet/column_reader.h>
#include <parquet/exception.h>
#include <parquet/metadata.h>
#include <parquet/schema.h>

namespace shardmill {

namespace {

// The bytes one PLAIN value of the column takes in a page (0: not fixed width).
int64_t PlainWidth(const parquet::ColumnDescriptor& column) {
  switch (column.physical_type()) {
    case parquet::Type::INT32:
    case parquet::Type::FLOAT:
      return 4;
    case parquet::Type::INT64:
    case parquet::Type::DOUBLE:
      return 8;
    case parquet::Type::FIXED_LEN_BYTE_ARRAY:
      return column.type_length();
    default:
      return 0;
  }
}

}  // namespace

bool AllLevelsDefined(const uint8_t* bytes, int64_t size, int64_t values) {
  const uint8_t* p = bytes;
  const uint8_t* const end = bytes + size;
  int64_t seen = 0;
  while (seen < values) {
    uint64_t header = 0;
    int shift = 0;
    while (true) {  // ULEB128 run header
      if (p >= end || shift > 56) return false;
      const uint8_t byte = *p++;
      header |= static_cast<uint64_t>(byte & 0x7f) << shift;
      shift += 7;
      if (!(byte & 0x80)) break;
    }
    const int64_t count = static_cast<int64_t>(header >> 1);
    if (count == 0) return false;
    if (header & 1) {  // bit-packed: `count` groups of 8 levels, one byte per group at bit width 1
      if (count > end - p) return false;
      const int64_t levels = std::min(count * 8, values - seen);
      const int64_t full = levels / 8;
      for (int64_t i = 0; i < full; ++i) {
        if (p[i] != 0xff) return false;
      }
      const int rest = static_cast<int>(levels % 8);
      if (rest && (p[full] & ((1 << rest) - 1)) != (1 << rest) - 1) return false;
      p += count;
      seen += levels;
    } else {  // RLE: `count` repeats of one level, stored in one byte
      if (p >= end || *p++ != 1) return false;
      seen += count;
    }
  }
  return true;
}

arrow::Result<bool> ReadPlainColumn(parquet::RowGroupReader& row_group, int column, int64_t width, int64_t rows,
                                    const ColumnRunSink& sink) {
  const parquet::ColumnDescriptor& descr = *row_group.metadata()->schema()->Column(column);
  if (PlainWidth(descr) != width || descr.max_repetition_level() != 0 || descr.max_definition_level() > 1) {
    return false;
  }
  BEGIN_PARQUET_CATCH_EXCEPTIONS
  if (row_group.metadata()->ColumnChunk(column)->has_dictionary_page()) return false;
  const bool optional = descr.max_definition_level() == 1;
  std::unique_ptr<parquet::PageReader> pages = row_group.GetColumnPageReader(column);
  int64_t row = 0;
  while (std::shared_ptr<parquet::Page> page = pages->NextPage()) {
    const auto type = page->type();
    if (type == parquet::PageType::DICTIONARY_PAGE) return false;
    if (type != parquet::PageType::DATA_PAGE && type != parquet::PageType::DATA_PAGE_V2) continue;  // index pages
    const auto& data_page = static_cast<const parquet::DataPage&>(*page);
    if (data_page.encoding() != parquet::Encoding::PLAIN) return false;
    const int64_t values = data_page.num_values();
    const uint8_t* data = page->data();
    int64_t size = page->size();
    int64_t levels_bytes = 0;  // in front of the values
    if (type == parquet::PageType::DATA_PAGE_V2) {
      const auto& v2 = static_cast<const parquet::DataPageV2&>(*page);
      if (v2.num_nulls() != 0) return false;
      levels_bytes = int64_t{v2.repetition_levels_byte_length()} + v2.definition_levels_byte_length();
    } else if (optional) {
      const auto& v1 = static_cast<const parquet::DataPageV1&>(*page);
      if (v1.definition_level_encoding() != parquet::Encoding::RLE || size < 4) return false;
      uint32_t length;  // little-endian, as every Parquet integer
      std::memcpy(&length, data, sizeof(length));
      if (length > size - 4 || !AllLevelsDefined(data + 4, length, values)) return false;
      levels_bytes = 4 + int64_t{length};
    }
    if (levels_bytes > size || values < 0 || values > (size - levels_bytes) / std::max<int64_t>(width, 1)) {
      return arrow::Status::Invalid("data page of column '", descr.name(), "' holds ", size - levels_bytes,
                                    " bytes of values, too few for ", values, " values of ", width, " bytes");
    }
    if (row + values > rows) {
      return arrow::Status::Invalid("column '", descr.name(), "' has more than the row group's ", rows, " values");
    }
    if (values > 0) sink(row, data + levels_bytes, values);
    row += values;
  }
  if (row != rows) {
    return arrow::Status::Invalid("column '", descr.name(), "' has ", row, " values, the row group ", rows, " rows");
  }
  return true;
  END_PARQUET_CATCH_EXCEPTIONS
  catch (const std::bad_alloc&) {
    return arrow::Status::OutOfMemory("decoding column '", descr.name(), "'");
  }
}

}  // namespace shardmill
