// Turning arrow::Status / arrow::Result into Python exceptions.
//
// Every call into Arrow or Parquet from the bindings goes through these
// helpers so that bad input becomes a Python exception naming what failed,
// never an abort: a Result is only unwrapped after its status was checked.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <arrow/result.h>
#include <arrow/status.h>

namespace shardmill {

// Raised to pybind11; both binding modules map it to shardmill.core.errors.NativeError (bind/native_error.h).
class NativeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void ThrowIfError(const arrow::Status& status, const std::string& context) {
  if (!status.ok()) {
    throw NativeError(context.empty() ? status.ToString() : context + ": " + status.ToString());
  }
}

template <typename T>
T ValueOrThrow(arrow::Result<T>&& result, const std::string& context) {
  ThrowIfError(result.status(), context);
  return std::move(result).MoveValueUnsafe();
}

}  // namespace shardmill
