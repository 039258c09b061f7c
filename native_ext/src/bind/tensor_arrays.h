// numpy arrays of converted tensors (record_converter.h's TensorSpec), for both binding modules.
#pragma once

#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "record_converter.h"

namespace shardmill::bind {

namespace py = pybind11;

// `rows` records of a tensor at `data` as a numpy array owned by `owner`; without an owner, a fresh array
// (uninitialised when data is null).
inline py::array TensorArray(const TensorSpec& spec, int64_t rows, const uint8_t* data, py::handle owner) {
  std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(rows)};
  shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
  const py::dtype dtype(spec.dtype);
  if (owner) return py::array(dtype, shape, data, owner);
  return data ? py::array(dtype, shape, data) : py::array(dtype, shape);
}

}  // namespace shardmill::bind
