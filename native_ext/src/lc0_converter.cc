#include "lc0_converter.h"

#include <arrow/type.h>

namespace shardmill {

TensorSpec Lc0TensorSpec(const Lc0Output& output, PlaneEncoding encoding) {
  TensorSpec spec{output.name, "float32", {}, output.row_bytes};
  if (output.name == "planes") {
    // bfloat16 has no numpy dtype: its bits as uint16 (ml_dtypes or torch view them as bfloat16).
    spec.dtype = encoding == PlaneEncoding::kFloat32   ? "float32"
                 : encoding == PlaneEncoding::kFloat16 ? "float16"
                 : encoding == PlaneEncoding::kBfloat16 ? "uint16"
                                                         : "uint8";
    spec.shape = encoding == PlaneEncoding::kPacked ? std::vector<int64_t>{kLc0Planes, 8}
                                                    : std::vector<int64_t>{kLc0Planes, 8, 8};
  } else if (output.name == "planes_scale") {
    spec.shape = {kLc0Planes};
  } else if (output.name == "values") {
    spec.shape = {kLoaderValueRows, 4};
  } else if (output.name == "policy") {
    spec.shape = {kLc0PolicySize};
  } else if (output.name != "plies_left") {
    spec.shape = {3};  // wdl, best_wdl
  }
  return spec;
}

Lc0Converter::Lc0Converter(Lc0Convention convention, PlaneEncoding encoding)
    : convention_(convention), encoding_(encoding), outputs_(Lc0Outputs(convention, encoding)) {
  for (const auto& output : outputs_) specs_.push_back(Lc0TensorSpec(output, encoding));
}

arrow::Status Lc0Converter::CheckColumn(const arrow::DataType& type, int64_t /*row_bytes*/) const {
  if (type.id() != arrow::Type::FIXED_SIZE_BINARY) {
    return arrow::Status::Invalid("lc0 tensors are converted from a fixed_size_binary 'frame' column, got ",
                                  type.ToString());
  }
  return arrow::Status::OK();
}

void Lc0Converter::Convert(const uint8_t* records, int64_t rows, int64_t record_bytes,
                           const std::vector<uint8_t*>& out, std::vector<RecordError>* errors) const {
  ConvertLc0Records(records, rows, record_bytes, convention_, encoding_, Lc0TensorsAt(outputs_, out, 0), errors);
}

arrow::Result<std::shared_ptr<const RecordConverter>> MakeRecordConverter(const ConverterOptions& options) {
  switch (options.kind) {
    case ConverterKind::kNone:
      return nullptr;
    case ConverterKind::kLc0Loader:
      return std::make_shared<const Lc0Converter>(Lc0Convention::kLoader, options.planes);
    case ConverterKind::kLc0Chunkparser:
      return std::make_shared<const Lc0Converter>(Lc0Convention::kChunkparser, options.planes);
  }
  return arrow::Status::Invalid("unknown converter kind ", static_cast<int>(options.kind));
}

}  // namespace shardmill
