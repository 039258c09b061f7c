// Fixed-width column values read straight from decompressed Parquet pages.
//
// Arrow's reader copies every value out of its decompressed page into a
// column buffer that grows as pages arrive, and the shard reader then copies
// it again into its shuffled window: for 8356-byte lc0 frames that first
// copy and the 4 MB buffer it fills cost as much as the copy that matters.
// The sampling job writes fixed-width columns PLAIN, without dictionary and
// without nulls, and such a data page holds its values back to back after
// the definition levels, so they can be handed on from where they lie.
#pragma once

#include <cstdint>
#include <functional>

#include <arrow/result.h>
#include <parquet/file_reader.h>

namespace shardmill {

// Receives `rows` consecutive values of a column, the first being row
// `first_row` of the row group, `width` bytes each, back to back. The
// pointer is valid only during the call.
using ColumnRunSink = std::function<void(int64_t first_row, const uint8_t* values, int64_t rows)>;

// Calls `sink` for every data page of column `column` (a leaf index) of the
// row group, in row order, and checks that they hold exactly `rows` values of
// `width` bytes. Returns false when the column cannot be read this way (a
// dictionary, another encoding, nested or null values, a physical width other
// than `width` such as int8 stored as INT32): the caller then decodes it with
// Arrow. `sink` may by then have received some of the rows, so it must
// tolerate receiving them again. Corrupt pages are an error.
arrow::Result<bool> ReadPlainColumn(parquet::RowGroupReader& row_group, int column, int64_t width, int64_t rows,
                                    const ColumnRunSink& sink);

// Whether `bytes` of RLE/bit-packed hybrid definition levels of bit width 1
// (a flat optional column) define all of the first `values` values.
bool AllLevelsDefined(const uint8_t* bytes, int64_t size, int64_t values);

}  // namespace shardmill
