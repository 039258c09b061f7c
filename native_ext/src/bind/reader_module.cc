// Python bindings of the native reader (shardmill.native_ext._native): options, the reader, its memory.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>

#include "bind/native_error.h"
#include "bind/tensor_arrays.h"
#include "large_buffer.h"
#include "self_check.h"
#include "shard_reader.h"
#include "status.h"

namespace py = pybind11;

namespace {

using shardmill::ShardReader;

// Made without starting: threads start in start(), never in a constructor.
std::unique_ptr<ShardReader> MakeReader(shardmill::ReaderOptions options) {
  py::gil_scoped_release release;  // opens the first shard's footer
  return shardmill::ValueOrThrow(ShardReader::Make(std::move(options)), "");
}

// A column's numpy dtype and the shape of `rows` of it.
std::pair<py::dtype, std::vector<py::ssize_t>> ArrayLayout(const shardmill::ColumnSpec& column, int64_t rows) {
  if (column.type->id() == arrow::Type::FIXED_SIZE_BINARY) {
    return {py::dtype::of<uint8_t>(), {static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(column.row_bytes)}};
  }
  // The numpy dtype of an Arrow fixed-width numeric type has the same name.
  std::string name = column.type->ToString();
  if (name == "float") name = "float32";
  if (name == "double") name = "float64";
  return {py::dtype(name), {static_cast<py::ssize_t>(rows)}};
}

py::object NextBatch(ShardReader& reader) {
  shardmill::BatchPlan plan = reader.PlanNext();
  if (plan.epoch < 0) return py::none();
  py::dict batch;
  py::array_t<uint64_t> record_seed(plan.rows);
  uint64_t* seed_data = record_seed.mutable_data();
  shardmill::BatchView view;
  {
    py::gil_scoped_release release;
    view = shardmill::ValueOrThrow(reader.ViewNext(plan, seed_data), "");
  }
  if (view.owner) {
    // Arrays viewing the window's arranged rows (writable: each row is served
    // once); the capsule keeps the window alive while any of them lives.
    py::capsule owner(new std::shared_ptr<const void>(std::move(view.owner)),
                      [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); });
    for (size_t c = 0; c < reader.columns().size(); ++c) {
      auto [dtype, shape] = ArrayLayout(reader.columns()[c], plan.rows);
      batch[py::str(reader.columns()[c].name)] = py::array(dtype, shape, view.columns[c], owner);
    }
    batch["record_index"] = py::array_t<int64_t>({static_cast<py::ssize_t>(plan.rows)}, view.record_index, owner);
    if (const auto* converter = reader.converter()) {
      const auto& outputs = converter->outputs();
      for (size_t i = 0; i < outputs.size(); ++i) {
        batch[py::str(outputs[i].name)] = shardmill::bind::TensorArray(outputs[i], plan.rows, view.tensors[i], owner);
      }
    }
  } else {
    // The batch spans two windows: copied into fresh arrays.
    std::vector<uint8_t*> buffers;
    for (const auto& column : reader.columns()) {
      auto [dtype, shape] = ArrayLayout(column, plan.rows);
      py::array array(dtype, shape);
      buffers.push_back(static_cast<uint8_t*>(array.mutable_data()));
      batch[py::str(column.name)] = array;
    }
    py::array_t<int64_t> record_index(plan.rows);
    int64_t* index_data = record_index.mutable_data();
    std::vector<uint8_t*> tensors;
    if (const auto* converter = reader.converter()) {
      for (const auto& output : converter->outputs()) {
        py::array array = shardmill::bind::TensorArray(output, plan.rows, nullptr, py::handle());
        tensors.push_back(static_cast<uint8_t*>(array.mutable_data()));
        batch[py::str(output.name)] = array;
      }
    }
    {
      py::gil_scoped_release release;
      shardmill::ThrowIfError(reader.FillNext(plan, buffers, index_data, seed_data, tensors), "");
    }
    batch["record_index"] = record_index;
  }
  batch["record_seed"] = record_seed;
  batch["epoch"] = plan.epoch;
  return batch;
}

py::dict CacheStatsDict(const shardmill::CacheStats& stats) {
  py::dict out;
  out["downloads"] = stats.downloads;
  out["downloaded_bytes"] = stats.downloaded_bytes;
  out["verified"] = stats.verified;
  out["corrupt"] = stats.corrupt;
  out["evicted"] = stats.evicted;
  out["uncached"] = stats.uncached;
  return out;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "shardmill native extension: the Arrow/Parquet shard reader core.";
  shardmill::bind::TranslateNativeErrors(m);

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

  m.def(
      "release_cached_memory", [] { return shardmill::LargeBuffer::ReleaseCached(); },
      py::call_guard<py::gil_scoped_release>(),
      "Unmaps the window buffers the process keeps for its next readers; returns the bytes released.");
  m.def(
      "cached_memory_bytes", [] { return shardmill::LargeBuffer::CachedBytes(); },
      "Bytes of freed window buffers the process keeps mapped for reuse (at most 512 MiB).");

  // The conversions a reader applies (record_converter.h), as enums.
  py::enum_<shardmill::ConverterKind>(m, "ConverterKind")
      .value("NONE", shardmill::ConverterKind::kNone)
      .value("LC0_LOADER", shardmill::ConverterKind::kLc0Loader)
      .value("LC0_CHUNKPARSER", shardmill::ConverterKind::kLc0Chunkparser);
  py::enum_<shardmill::PlaneEncoding>(m, "PlaneEncoding")
      .value("FLOAT32", shardmill::PlaneEncoding::kFloat32)
      .value("FLOAT16", shardmill::PlaneEncoding::kFloat16)
      .value("BFLOAT16", shardmill::PlaneEncoding::kBfloat16)
      .value("UINT8", shardmill::PlaneEncoding::kUint8)
      .value("PACKED", shardmill::PlaneEncoding::kPacked);

  // The reader's options, one struct (shardmill::ReaderOptions; see shard_reader.h for each field).
  py::class_<shardmill::ReaderOptions>(m, "ReaderOptions")
      .def(py::init<>())
      .def(
          "add_shard",
          [](shardmill::ReaderOptions& options, std::string path, std::vector<int64_t> row_group_rows,
             std::string sha256, int64_t bytes) {
            shardmill::ShardFile shard{std::move(path), std::move(row_group_rows)};
            shard.sha256 = std::move(sha256);
            shard.bytes = bytes;
            options.shards.push_back(std::move(shard));
          },
          py::arg("path"), py::arg("row_group_rows"), py::arg("sha256") = "", py::arg("bytes") = -1)
      .def_property(
          "cache",
          [](const shardmill::ReaderOptions& options) {
            const auto& c = options.cache;
            return py::make_tuple(c.directory, c.max_bytes, c.ahead_windows, c.fetch_threads);
          },
          [](shardmill::ReaderOptions& options, std::tuple<std::string, int64_t, int64_t, int> cache) {
            options.cache = {std::get<0>(cache), std::get<1>(cache), std::get<2>(cache), std::get<3>(cache)};
          },
          "(directory, max_bytes, ahead_windows, fetch_threads) of the local shard cache; directory '': none")
      .def_property(
          "remote",
          [](const shardmill::ReaderOptions& options) {
            return py::make_tuple(options.remote.connect_timeout_seconds, options.remote.request_timeout_seconds,
                                  options.remote.max_attempts);
          },
          [](shardmill::ReaderOptions& options, std::tuple<double, double, int> remote) {
            options.remote = {std::get<0>(remote), std::get<1>(remote), std::get<2>(remote)};
          },
          "(connect_timeout_seconds, request_timeout_seconds, max_attempts) for remote shards")
      .def_readwrite("columns", &shardmill::ReaderOptions::columns)
      .def_readwrite("batch_size", &shardmill::ReaderOptions::batch_size)
      .def_readwrite("drop_remainder", &shardmill::ReaderOptions::drop_remainder)
      .def_readwrite("shard_index", &shardmill::ReaderOptions::shard_index)
      .def_readwrite("shard_count", &shardmill::ReaderOptions::shard_count)
      .def_readwrite("slice_begin", &shardmill::ReaderOptions::slice_begin)
      .def_readwrite("slice_end", &shardmill::ReaderOptions::slice_end)
      .def_readwrite("num_epochs", &shardmill::ReaderOptions::num_epochs)
      .def_readwrite("seed", &shardmill::ReaderOptions::seed)
      .def_readwrite("shuffle", &shardmill::ReaderOptions::shuffle)
      .def_readwrite("window_row_groups", &shardmill::ReaderOptions::window_row_groups)
      .def_readwrite("num_threads", &shardmill::ReaderOptions::num_threads)
      .def_readwrite("prefetch_windows", &shardmill::ReaderOptions::prefetch_windows)
      .def_readwrite("start_epoch", &shardmill::ReaderOptions::start_epoch)
      .def_readwrite("start_position", &shardmill::ReaderOptions::start_position)
      .def_property(
          "converter", [](const shardmill::ReaderOptions& o) { return o.converter.kind; },
          [](shardmill::ReaderOptions& o, shardmill::ConverterKind kind) { o.converter.kind = kind; })
      .def_property(
          "planes", [](const shardmill::ReaderOptions& o) { return o.converter.planes; },
          [](shardmill::ReaderOptions& o, shardmill::PlaneEncoding planes) { o.converter.planes = planes; });

  // A shard cache without a reader (random access: Grain's data source): the shards and their remote bounds, the
  // cache of a ReaderOptions; its fetch threads started at once (the reader starts its own in start()).
  py::class_<shardmill::ShardCache, std::shared_ptr<shardmill::ShardCache>>(m, "ShardCache")
      .def(py::init([](shardmill::ReaderOptions options) {
             for (auto& shard : options.shards) shard.remote = options.remote;
             py::gil_scoped_release release;
             auto cache = shardmill::ValueOrThrow(shardmill::ShardCache::Make(options.cache, options.shards), "");
             shardmill::ThrowIfError(cache->Start(), "");
             return cache;
           }),
           py::arg("options"), "The cache of options.cache over options' shards; starts its fetch threads.")
      .def(
          "acquire",
          [](shardmill::ShardCache& cache, int64_t shard) {
            return shardmill::ValueOrThrow(cache.Acquire(shard), "");
          },
          py::arg("shard"), py::call_guard<py::gil_scoped_release>(),
          "The path to open shard `shard` at: its verified cached copy (fetched if need be), held until it leaves "
          "the plan.")
      .def("plan", &shardmill::ShardCache::Plan, py::arg("shards"), py::call_guard<py::gil_scoped_release>(),
           "The shards in use, in order: held (fetched ahead if need be); the others may be evicted.")
      .def("stats", [](const shardmill::ShardCache& cache) { return CacheStatsDict(cache.stats()); },
           "The cache's counts (shard_cache.h CacheStats).")
      .def("stop", &shardmill::ShardCache::Stop, py::call_guard<py::gil_scoped_release>(),
           "Stops the fetch threads and releases every held copy (idempotent).");

  py::class_<ShardReader>(m, "NativeReader")
      .def(py::init(&MakeReader), py::arg("options"), "Checks the options and the first shard; starts nothing.")
      .def(
          "start", [](ShardReader& reader) { shardmill::ThrowIfError(reader.Start(), ""); },
          py::call_guard<py::gil_scoped_release>(), "Starts the decode threads (idempotent).")
      .def("next_batch", &NextBatch, "The next batch as a dict of numpy arrays, or None at the end.")
      .def("stop", &ShardReader::Stop, py::call_guard<py::gil_scoped_release>())
      .def(
          "cached_path",
          [](ShardReader& reader, int64_t shard) {
            if (!reader.cache()) throw shardmill::NativeError("the reader has no shard cache");
            py::gil_scoped_release release;
            return shardmill::ValueOrThrow(reader.cache()->Acquire(shard), "");
          },
          py::arg("shard"), "The path to open shard `shard` at: its verified cached copy (fetched if need be).")
      .def(
          "cache_stats",
          [](const ShardReader& reader) -> py::object {
            if (!reader.cache()) return py::none();
            return CacheStatsDict(reader.cache()->stats());
          },
          "The shard cache's counts (shard_cache.h CacheStats), or None without a cache.")
      .def_property_readonly("epoch", &ShardReader::epoch)
      .def_property_readonly("position", &ShardReader::position)
      .def_property_readonly("rows_per_epoch", &ShardReader::rows_per_epoch)
      .def_property_readonly("num_rows", &ShardReader::num_rows);
}
