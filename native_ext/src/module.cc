// Python bindings of the native extension (shardmill.native_ext._native).
#include <pybind11/pybind11.h>

#include "self_check.h"
#include "status.h"

namespace py = pybind11;

#ifndef SHARDMILL_PYARROW_VERSION
#define SHARDMILL_PYARROW_VERSION "unknown"
#endif

PYBIND11_MODULE(_native, m) {
  m.doc() = "shardmill native extension (Arrow/Parquet based shard reader core).";
  py::register_exception<shardmill::NativeError>(m, "NativeError", PyExc_RuntimeError);

  m.attr("BUILT_AGAINST_PYARROW") = SHARDMILL_PYARROW_VERSION;

  m.def(
      "self_check",
      [](int64_t num_rows) {
        shardmill::SelfCheckReport report;
        {
          py::gil_scoped_release release;
          report = shardmill::ValueOrThrow(shardmill::RunSelfCheck(num_rows), "self_check");
        }
        py::dict out;
        out["arrow_version"] = report.arrow_version;
        out["rows_round_tripped"] = report.rows_round_tripped;
        out["parquet_bytes"] = report.parquet_bytes;
        return out;
      },
      py::arg("num_rows") = 1000,
      "Round-trips num_rows rows through an in-memory zstd Parquet file with the linked "
      "Arrow/Parquet libraries; raises NativeError on any failure.");
}
