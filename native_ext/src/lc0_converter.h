// lc0 training tensors as a RecordConverter of the `frame` column (lc0_tensors.h does the conversion).
#pragma once

#include <string>
#include <vector>

#include "lc0_tensors.h"
#include "record_converter.h"

namespace shardmill {

// The numpy description of a conversion output (policy included).
TensorSpec Lc0TensorSpec(const Lc0Output& output, PlaneEncoding encoding);

class Lc0Converter : public RecordConverter {
 public:
  Lc0Converter(Lc0Convention convention, PlaneEncoding encoding);

  const std::string& column() const override { return column_; }
  const std::vector<TensorSpec>& outputs() const override { return specs_; }
  arrow::Status CheckColumn(const arrow::DataType& type, int64_t row_bytes) const override;
  void Convert(const uint8_t* records, int64_t rows, int64_t record_bytes, const std::vector<uint8_t*>& out,
               std::vector<RecordError>* errors) const override;

 private:
  const Lc0Convention convention_;
  const PlaneEncoding encoding_;
  const std::string column_ = "frame";
  std::vector<Lc0Output> outputs_;
  std::vector<TensorSpec> specs_;
};

}  // namespace shardmill
