// numpy arrays of lc0 conversion outputs (lc0_tensors.h), for the bindings of both modules.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "lc0_tensors.h"

namespace shardmill::bind {

namespace py = pybind11;

// The numpy dtype and per-record shape of a conversion output (lc0_tensors.h).
inline std::pair<py::dtype, std::vector<py::ssize_t>> Lc0ArrayLayout(const std::string& name,
                                                               shardmill::PlaneEncoding encoding) {
  using shardmill::PlaneEncoding;
  if (name == "planes") {
    if (encoding == PlaneEncoding::kPacked) return {py::dtype::of<uint8_t>(), {shardmill::kLc0Planes, 8}};
    // bfloat16 has no numpy dtype: its bits as uint16 (ml_dtypes or torch view them as bfloat16).
    py::dtype dtype = encoding == PlaneEncoding::kFloat32   ? py::dtype::of<float>()
                      : encoding == PlaneEncoding::kUint8   ? py::dtype::of<uint8_t>()
                      : encoding == PlaneEncoding::kFloat16 ? py::dtype("float16")
                                                            : py::dtype::of<uint16_t>();
    return {dtype, {shardmill::kLc0Planes, 8, 8}};
  }
  if (name == "planes_scale") return {py::dtype::of<float>(), {shardmill::kLc0Planes}};
  if (name == "values") return {py::dtype::of<float>(), {shardmill::kLoaderValueRows, 4}};
  if (name == "policy") return {py::dtype::of<float>(), {shardmill::kLc0PolicySize}};
  if (name == "plies_left") return {py::dtype::of<float>(), {}};
  return {py::dtype::of<float>(), {3}};  // wdl, best_wdl
}

// `rows` records of an output at `data` as a numpy array owned by `owner`; without an owner, a fresh array
// (a copy of `data`, or uninitialised if data is null).
inline py::array Lc0Array(const std::string& name, shardmill::PlaneEncoding encoding, int64_t rows,
                          const uint8_t* data, py::handle owner) {
  auto [dtype, record_shape] = Lc0ArrayLayout(name, encoding);
  std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(rows)};
  shape.insert(shape.end(), record_shape.begin(), record_shape.end());
  if (owner) return py::array(dtype, shape, data, owner);
  return data ? py::array(dtype, shape, data) : py::array(dtype, shape);
}

}  // namespace shardmill::bind
