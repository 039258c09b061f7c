// The reader's one hook for record formats: a RecordConverter turns the rows
// of one column into training tensors on the decode threads, once each window
// part's rows are in epoch order, and batches view the tensors like the rows.
// The reader knows only this interface; MakeRecordConverter is the registry
// of formats (lc0 today: lc0_converter.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <arrow/result.h>
#include <arrow/status.h>
#include <arrow/type_fwd.h>

namespace shardmill {

// Which conversion a reader applies (set from Python through the bindings' enums).
enum class ConverterKind { kNone, kLc0Loader, kLc0Chunkparser };
// How lc0 planes are encoded (lc0_tensors.h).
enum class PlaneEncoding { kFloat32, kFloat16, kBfloat16, kUint8, kPacked };

struct ConverterOptions {
  ConverterKind kind = ConverterKind::kNone;
  PlaneEncoding planes = PlaneEncoding::kFloat32;
};

// One tensor a converter adds to each batch.
struct TensorSpec {
  std::string name;
  std::string dtype;           // the numpy dtype of its values ("float32", "uint16", ...)
  std::vector<int64_t> shape;  // per record
  int64_t row_bytes = 0;       // bytes per record
};

// A record a converter refused: its row among the converted ones, and why.
struct RecordError {
  int64_t row;
  std::string what;
};

class RecordConverter {
 public:
  virtual ~RecordConverter() = default;
  // The column it converts, and the tensors it writes, in order.
  virtual const std::string& column() const = 0;
  virtual const std::vector<TensorSpec>& outputs() const = 0;
  // OK when the selected column (its type and width) can be converted.
  virtual arrow::Status CheckColumn(const arrow::DataType& type, int64_t row_bytes) const = 0;
  // Converts `rows` records of `record_bytes` each; out[i] receives rows x outputs()[i].row_bytes. A refused
  // record gets zeros in every output and an entry in *errors. Thread-safe: called by every decode thread.
  virtual void Convert(const uint8_t* records, int64_t rows, int64_t record_bytes, const std::vector<uint8_t*>& out,
                       std::vector<RecordError>* errors) const = 0;
};

// The converter of `options` (null for kNone).
arrow::Result<std::shared_ptr<const RecordConverter>> MakeRecordConverter(const ConverterOptions& options);

}  // namespace shardmill
