// Python bindings of the native extension (shardmill.native_ext._native).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

#include "blending.h"
#include "chunk_records.h"
#include "large_buffer.h"
#include "lc0_tensors.h"
#include "label_sampling.h"
#include "self_check.h"
#include "shard_reader.h"
#include "status.h"
#include "token_runs.h"

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

py::array Lc0Array(const std::string& name, shardmill::PlaneEncoding encoding, int64_t rows, const uint8_t* data,
                   py::handle owner);

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
    if (const auto* lc0 = reader.lc0()) {
      for (size_t i = 0; i < lc0->outputs.size(); ++i) {
        batch[py::str(lc0->outputs[i].name)] =
            Lc0Array(lc0->outputs[i].name, lc0->encoding, plan.rows, view.tensors[i], owner);
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
    if (const auto* lc0 = reader.lc0()) {
      for (const auto& output : lc0->outputs) {
        py::array array = Lc0Array(output.name, lc0->encoding, plan.rows, nullptr, py::handle());
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

// The numpy dtype and per-record shape of a conversion output (lc0_tensors.h).
std::pair<py::dtype, std::vector<py::ssize_t>> Lc0ArrayLayout(const std::string& name,
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
py::array Lc0Array(const std::string& name, shardmill::PlaneEncoding encoding, int64_t rows, const uint8_t* data,
                   py::handle owner) {
  auto [dtype, record_shape] = Lc0ArrayLayout(name, encoding);
  std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(rows)};
  shape.insert(shape.end(), record_shape.begin(), record_shape.end());
  if (owner) return py::array(dtype, shape, data, owner);
  return data ? py::array(dtype, shape, data) : py::array(dtype, shape);
}

// lc0 records (rows x record_bytes) to tensors, split over `threads` threads with the GIL released.
py::tuple Lc0Tensors(py::array_t<uint8_t, py::array::c_style> frames, const std::string& convention_name,
                     const std::string& planes_name, int threads, bool copy_policy) {
  if (frames.ndim() != 2) throw shardmill::NativeError("frames must be a (rows, record_bytes) uint8 array");
  shardmill::Lc0Convention convention;
  shardmill::PlaneEncoding encoding;
  shardmill::ThrowIfError(shardmill::ParseLc0Options(convention_name, planes_name, &convention, &encoding), "");
  const int64_t rows = frames.shape(0), record_bytes = frames.shape(1);
  auto outputs = shardmill::Lc0Outputs(convention, encoding);
  if (copy_policy) outputs.push_back({"policy", shardmill::kLc0PolicySize * 4});
  // Every output of the batch in one block from the process's buffer cache: fresh numpy arrays of this
  // size were new mappings each batch, and zeroing their pages took a third of the conversion's time.
  int64_t total = 64;
  for (const auto& output : outputs) total += (rows * output.row_bytes + 63) / 64 * 64;
  auto block = std::make_shared<shardmill::LargeBuffer>(shardmill::LargeBuffer::Take(total));
  if (!block->data()) throw shardmill::NativeError("out of memory for a batch of lc0 tensors");
  py::capsule owner(new std::shared_ptr<shardmill::LargeBuffer>(block),
                    [](void* p) { delete static_cast<std::shared_ptr<shardmill::LargeBuffer>*>(p); });
  std::vector<uint8_t*> buffers;
  int64_t offset = 0;
  for (const auto& output : outputs) {
    buffers.push_back(block->data() + offset);
    offset += (rows * output.row_bytes + 63) / 64 * 64;
  }
  py::dict tensors;
  for (size_t i = 0; i < outputs.size(); ++i) {
    tensors[py::str(outputs[i].name)] = Lc0Array(outputs[i].name, encoding, rows, buffers[i], owner);
  }
  const uint8_t* data = frames.data();
  const int parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, rows / 64)));
  std::vector<std::vector<shardmill::Lc0RecordError>> errors(parts);
  {
    py::gil_scoped_release release;
    auto run = [&](int part) {
      const int64_t begin = rows * part / parts, end = rows * (part + 1) / parts;
      shardmill::Lc0Tensors out = shardmill::Lc0TensorsAt(outputs, buffers, begin);
      if (copy_policy) out.policy = reinterpret_cast<float*>(buffers.back()) + begin * shardmill::kLc0PolicySize;
      try {
        shardmill::ConvertLc0Records(data + begin * record_bytes, end - begin, record_bytes, convention, encoding,
                                     out, &errors[part]);
        for (auto& error : errors[part]) error.row += begin;
      } catch (const std::exception& e) {  // memory: never past a thread's edge (that would terminate)
        errors[part].push_back({begin, e.what()});
      }
    };
    std::vector<std::thread> helpers;
    try {
      for (int part = 1; part < parts; ++part) helpers.emplace_back(run, part);
    } catch (const std::system_error&) {
      // No thread to be had: the rest runs here.
      for (int part = static_cast<int>(helpers.size()) + 1; part < parts; ++part) run(part);
    }
    run(0);
    for (auto& helper : helpers) helper.join();
  }
  for (const auto& part : errors) {
    if (!part.empty()) return py::make_tuple(tensors, part.front().row, part.front().what);
  }
  return py::make_tuple(tensors, -1, "");
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "shardmill native extension: the Arrow/Parquet shard reader core.";
  py::register_exception<shardmill::NativeError>(m, "NativeError", PyExc_RuntimeError);


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

  m.def(
      "copy_runs",
      [](py::array_t<uint8_t, py::array::c_style> src, py::array_t<int64_t, py::array::c_style | py::array::forcecast> starts,
         py::array_t<int64_t, py::array::c_style | py::array::forcecast> lengths,
         py::array_t<uint8_t, py::array::c_style> dest) {
        if (starts.size() != lengths.size()) throw std::invalid_argument("copy_runs: starts and lengths differ in size");
        if (!dest.writeable()) throw std::invalid_argument("copy_runs: dest is read-only");
        const uint8_t* source = src.data();
        const int64_t source_size = src.size();
        const int64_t* start = starts.data();
        const int64_t* length = lengths.data();
        const int64_t n = starts.size();
        uint8_t* out = dest.mutable_data();
        const int64_t out_size = dest.size();
        arrow::Status copied;
        {
          py::gil_scoped_release release;
          copied = shardmill::CopyRuns(source, source_size, start, length, n, out, out_size);
        }
        if (!copied.ok()) throw std::invalid_argument("copy_runs: " + copied.message());
      },
      py::arg("src"), py::arg("starts"), py::arg("lengths"), py::arg("dest"),
      "Copies src[starts[i]:starts[i]+lengths[i]] back to back into dest (uint8 arrays; src may be a memmap view).");

  m.def(
      "build_blending_indices",
      [](py::array_t<double, py::array::c_style | py::array::forcecast> weights, int64_t size) {
        const auto num_datasets = weights.size();
        if (num_datasets < 1 || num_datasets >= 32767) {
          throw std::invalid_argument("build_blending_indices: 1 to 32766 datasets, got " +
                                      std::to_string(num_datasets));
        }
        if (size < 0) throw std::invalid_argument("build_blending_indices: size must be >= 0");
        py::array_t<int16_t> dataset_index(static_cast<py::ssize_t>(size));
        py::array_t<int64_t> dataset_sample_index(static_cast<py::ssize_t>(size));
        const double* w = weights.data();
        int16_t* index = dataset_index.mutable_data();
        int64_t* sample = dataset_sample_index.mutable_data();
        {
          py::gil_scoped_release release;
          shardmill::BuildBlendingIndices(w, static_cast<int32_t>(num_datasets), size, index, sample);
        }
        return py::make_tuple(dataset_index, dataset_sample_index);
      },
      py::arg("weights"), py::arg("size"),
      "Megatron's BlendedDataset indices for normalised weights: (dataset_index int16, dataset_sample_index "
      "int64), each of `size` entries.");

  m.def(
      "sample_labels",
      [](py::array_t<uint8_t, py::array::c_style | py::array::forcecast> is_target, double ratio, bool adaptive,
         uint64_t seed, uint64_t partition_key) {
        const uint8_t* data = is_target.data();
        const int64_t n = is_target.size();
        shardmill::LabelSample sample;
        {
          py::gil_scoped_release release;
          sample = shardmill::SampleLabels(data, n, ratio, adaptive, seed, partition_key);
        }
        py::array_t<int64_t> emitted(static_cast<py::ssize_t>(sample.emitted.size()));
        std::copy(sample.emitted.begin(), sample.emitted.end(), emitted.mutable_data());
        return py::make_tuple(emitted, sample.reservoir_sizes, sample.non_targets_out, sample.draws);
      },
      py::arg("is_target"), py::arg("ratio"), py::arg("adaptive"), py::arg("seed"), py::arg("partition_key"),
      "ITERATIVE/ADAPTIVE label sampling of one partition: (emitted, reservoir_sizes, non_targets_out, draws).");

  m.def(
      "reservoir_sample",
      [](int64_t m_items, int64_t k, uint64_t seed, uint64_t partition_key, uint64_t gap) {
        std::vector<int64_t> out;
        int64_t draws = shardmill::ReservoirSample(m_items, k, seed, partition_key, gap, &out);
        py::array_t<int64_t> chosen(static_cast<py::ssize_t>(out.size()));
        std::copy(out.begin(), out.end(), chosen.mutable_data());
        return py::make_tuple(chosen, draws);
      },
      py::arg("m"), py::arg("k"), py::arg("seed"), py::arg("partition_key"), py::arg("gap"),
      "Algorithm L over one gap: (ascending chosen offsets, number of draws).");

  m.def(
      "scatter_chunk_records",
      [](py::buffer compressed, int64_t num_records, int64_t record_size, uint32_t version,
         py::array_t<int64_t, py::array::c_style | py::array::forcecast> positions,
         py::array_t<int64_t, py::array::c_style | py::array::forcecast> dest_rows,
         py::array_t<uint8_t, py::array::c_style> out) -> py::object {
        py::buffer_info in = compressed.request();
        if (in.itemsize != 1 || in.ndim != 1) throw shardmill::NativeError("compressed must be a 1-D byte buffer");
        if (num_records <= 0 || record_size <= 0) throw shardmill::NativeError("num_records and record_size must be > 0");
        if (positions.size() != dest_rows.size()) throw shardmill::NativeError("positions and dest_rows differ in length");
        if (out.ndim() != 2 || out.shape(1) != record_size || !out.writeable()) {
          throw shardmill::NativeError("out must be a writable (rows, record_size) uint8 array");
        }
        const int64_t* pos = positions.data();
        const int64_t* rows = dest_rows.data();
        const int64_t count = positions.size();
        for (int64_t i = 0; i < count; ++i) {
          if (pos[i] < 0 || pos[i] >= num_records) throw shardmill::NativeError("position out of range");
          if (rows[i] < 0 || rows[i] >= out.shape(0)) throw shardmill::NativeError("destination row out of range");
        }
        shardmill::ChunkRecordsSpec spec{static_cast<const uint8_t*>(in.ptr), in.size, num_records, record_size,
                                         version};
        uint8_t* out_data = out.mutable_data();
        arrow::Result<shardmill::ChunkRecordsResult> result;
        {
          py::gil_scoped_release release;
          result = shardmill::ScatterChunkRecords(spec, pos, rows, count, out_data);
        }
        shardmill::ChunkRecordsResult value = shardmill::ValueOrThrow(std::move(result), "inflate");
        if (!value.fast_path) return py::none();
        return py::int_(value.bad_version_record);
      },
      py::arg("compressed"), py::arg("num_records"), py::arg("record_size"), py::arg("version"), py::arg("positions"),
      py::arg("dest_rows"), py::arg("out"),
      "Inflates one lc0 chunk into a per-thread buffer (GIL released), checks its size and every record's "
      "version, and copies record positions[i] to out[dest_rows[i]]. Returns None when the gzip trailer "
      "does not prove the size (use the streaming path), -1 on success, else the first record with "
      "another version (nothing copied); raises NativeError when the stream is broken or has another size.");

  m.def("lc0_tensors", &Lc0Tensors, py::arg("frames"), py::arg("convention") = "loader",
        py::arg("planes") = "float32", py::arg("threads") = 1, py::arg("copy_policy") = true,
        "lc0 records (rows, record_bytes) to training tensors (lc0_tensors.h): (dict of arrays, first bad row or "
        "-1, what is wrong with it). Rows before a bad one are converted. copy_policy=False leaves `policy` out "
        "(the records' own float32 probabilities can be viewed in place).");

  // The reader's options, one struct (shardmill::ReaderOptions; see shard_reader.h for each field).
  py::class_<shardmill::ReaderOptions>(m, "ReaderOptions")
      .def(py::init<>())
      .def(
          "add_shard",
          [](shardmill::ReaderOptions& options, std::string path, std::vector<int64_t> row_group_rows) {
            options.shards.push_back({std::move(path), std::move(row_group_rows)});
          },
          py::arg("path"), py::arg("row_group_rows"))
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
      .def_readwrite("lc0_convention", &shardmill::ReaderOptions::lc0_convention)
      .def_readwrite("lc0_planes", &shardmill::ReaderOptions::lc0_planes);

  py::class_<ShardReader>(m, "NativeReader")
      .def(py::init(&MakeReader), py::arg("options"), "Checks the options and the first shard; starts nothing.")
      .def(
          "start", [](ShardReader& reader) { shardmill::ThrowIfError(reader.Start(), ""); },
          py::call_guard<py::gil_scoped_release>(), "Starts the decode threads (idempotent).")
      .def("next_batch", &NextBatch, "The next batch as a dict of numpy arrays, or None at the end.")
      .def("stop", &ShardReader::Stop, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("epoch", &ShardReader::epoch)
      .def_property_readonly("position", &ShardReader::position)
      .def_property_readonly("rows_per_epoch", &ShardReader::rows_per_epoch)
      .def_property_readonly("num_rows", &ShardReader::num_rows);
}
