// Python bindings of the job kernels (shardmill.core._kernels): plain functions over numpy arrays,
// each releasing the GIL for its work; core/kernels.py is what job code calls.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <libdeflate.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bind/native_error.h"
#include "bind/tensor_arrays.h"
#include "lc0_converter.h"
#include "blending.h"
#include "chunk_records.h"
#include "label_sampling.h"
#include "lc0_tensors.h"
#include "record_packing.h"
#include "status.h"
#include "token_runs.h"

namespace py = pybind11;

namespace {

// lc0 records (rows x record_bytes) to tensors, split over `threads` threads with the GIL released.
py::tuple Lc0Tensors(py::array_t<uint8_t, py::array::c_style> frames, const std::string& convention_name,
                     const std::string& planes_name, int threads, bool copy_policy) {
  if (frames.ndim() != 2) throw shardmill::NativeError("frames must be a (rows, record_bytes) uint8 array");
  shardmill::Lc0Convention convention;
  shardmill::PlaneEncoding encoding;
  shardmill::ThrowIfError(shardmill::ParseLc0Options(convention_name, planes_name, &convention, &encoding), "");
  const int64_t rows = frames.shape(0), record_bytes = frames.shape(1);
  const uint8_t* data = frames.data();
  arrow::Result<shardmill::Lc0Batch> converted;
  {
    py::gil_scoped_release release;
    converted = shardmill::ConvertLc0Batch(data, rows, record_bytes, convention, encoding, threads, copy_policy);
  }
  shardmill::Lc0Batch batch = shardmill::ValueOrThrow(std::move(converted), "");
  py::capsule owner(new std::shared_ptr<shardmill::LargeBuffer>(batch.block),
                    [](void* p) { delete static_cast<std::shared_ptr<shardmill::LargeBuffer>*>(p); });
  py::dict tensors;
  for (size_t i = 0; i < batch.outputs.size(); ++i) {
    tensors[py::str(batch.outputs[i].name)] = shardmill::bind::TensorArray(
        shardmill::Lc0TensorSpec(batch.outputs[i], encoding), rows, batch.buffers[i], owner);
  }
  if (!batch.errors.empty()) return py::make_tuple(tensors, batch.errors.front().row, batch.errors.front().what);
  return py::make_tuple(tensors, -1, "");
}

}  // namespace

PYBIND11_MODULE(_kernels, m) {
  m.doc() = "shardmill's job kernels: chunk records, label sampling, Megatron blending and byte runs, lc0 tensors.";
  shardmill::bind::TranslateNativeErrors(m);

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
      "build_exhaustive_blending_indices",
      [](py::array_t<int64_t, py::array::c_style | py::array::forcecast> sizes) {
        const auto num_datasets = sizes.size();
        if (num_datasets < 1 || num_datasets >= 32767) {
          throw std::invalid_argument("build_exhaustive_blending_indices: 1 to 32766 datasets, got " +
                                      std::to_string(num_datasets));
        }
        const int64_t* n = sizes.data();
        int64_t total = 0;
        for (py::ssize_t d = 0; d < num_datasets; ++d) {
          if (n[d] <= 0) throw std::invalid_argument("build_exhaustive_blending_indices: every size must be > 0");
          total += n[d];
        }
        py::array_t<int16_t> dataset_index(static_cast<py::ssize_t>(total));
        py::array_t<int64_t> dataset_sample_index(static_cast<py::ssize_t>(total));
        int16_t* index = dataset_index.mutable_data();
        int64_t* sample = dataset_sample_index.mutable_data();
        {
          py::gil_scoped_release release;
          shardmill::BuildExhaustiveBlendingIndices(n, static_cast<int32_t>(num_datasets), index, sample);
        }
        return py::make_tuple(dataset_index, dataset_sample_index);
      },
      py::arg("sizes"),
      "Megatron's exhaustive BlendedDataset indices (no weights, no size): every sample of each dataset once, "
      "interleaved by their sizes.");

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
      "pack_chunk_records",
      [](py::buffer compressed, int64_t num_records, int64_t record_size, uint32_t version,
         py::array_t<int64_t, py::array::c_style | py::array::forcecast> positions,
         py::array_t<uint8_t, py::array::c_style> out, py::array_t<int64_t, py::array::c_style> offsets) -> py::object {
        py::buffer_info in = compressed.request();
        if (in.itemsize != 1 || in.ndim != 1) throw shardmill::NativeError("compressed must be a 1-D byte buffer");
        if (num_records <= 0 || record_size <= 0) throw shardmill::NativeError("num_records and record_size must be > 0");
        const int64_t* pos = positions.data();
        const int64_t count = positions.size();
        for (int64_t i = 0; i < count; ++i) {
          if (pos[i] < 0 || pos[i] >= num_records) throw shardmill::NativeError("position out of range");
        }
        if (out.ndim() != 1 || !out.writeable() || out.size() < shardmill::MaxPackedBytes(record_size, count)) {
          throw shardmill::NativeError("out must be a writable 1-D uint8 array of max_packed_bytes(record_size, "
                                       "len(positions)) bytes");
        }
        if (offsets.ndim() != 1 || !offsets.writeable() || offsets.size() != count + 1) {
          throw shardmill::NativeError("offsets must be a writable int64 array of len(positions) + 1 entries");
        }
        shardmill::ChunkRecordsSpec spec{static_cast<const uint8_t*>(in.ptr), in.size, num_records, record_size,
                                         version};
        uint8_t* out_data = out.mutable_data();
        int64_t* at = offsets.mutable_data();
        arrow::Result<shardmill::ChunkRecordsResult> result;
        {
          py::gil_scoped_release release;
          result = shardmill::PackChunkRecords(spec, pos, count, out_data, at);
        }
        shardmill::ChunkRecordsResult value = shardmill::ValueOrThrow(std::move(result), "inflate");
        if (!value.fast_path) return py::none();
        return py::int_(value.bad_version_record);
      },
      py::arg("compressed"), py::arg("num_records"), py::arg("record_size"), py::arg("version"), py::arg("positions"),
      py::arg("out"), py::arg("offsets"),
      "Inflates one lc0 chunk, gzip member after member (libdeflate, CRC-32 checked), into a per-thread "
      "buffer (GIL released), checks its size and every record's version, and packs record positions[i] "
      "(pack_records' form) back to back into out: record i is out[offsets[i]:offsets[i + 1]]. Returns None "
      "when bytes follow a member that are not a member (use the streaming path), -1 on success, else the "
      "first record with another version (nothing written); raises NativeError when a member is broken or "
      "the payload has another size than the index says.");

  m.def("max_packed_bytes", &shardmill::MaxPackedBytes, py::arg("record_size"), py::arg("count"),
        "The most bytes count records of record_size pack to (every word a literal, plus the bitmaps).");

  m.def(
      "pack_records",
      [](py::array_t<uint8_t, py::array::c_style> records,
         py::array_t<int64_t, py::array::c_style | py::array::forcecast> rows) {
        if (records.ndim() != 2) throw shardmill::NativeError("records must be a (rows, record_bytes) uint8 array");
        const int64_t record_bytes = records.shape(1), count = rows.size();
        const int64_t* row = rows.data();
        for (int64_t k = 0; k < count; ++k) {
          if (row[k] < 0 || row[k] >= records.shape(0)) throw shardmill::NativeError("row out of range");
        }
        py::array_t<int64_t> offsets(static_cast<py::ssize_t>(count + 1));
        int64_t* at = offsets.mutable_data();
        const uint8_t* data = records.data();
        // Packed into a buffer of the worst case's size, then copied to an array of exactly the packed size (the
        // job's own path packs in pack_chunk_records; this one serves the streaming inflater's chunks and tests).
        std::vector<uint8_t> scratch(shardmill::MaxPackedBytes(record_bytes, count));
        {
          py::gil_scoped_release release;
          shardmill::PackRecords(data, record_bytes, row, count, at, scratch.data());
        }
        py::array_t<uint8_t> packed(static_cast<py::ssize_t>(at[count]));
        uint8_t* out = packed.mutable_data();
        {
          py::gil_scoped_release release;
          std::memcpy(out, scratch.data(), at[count]);
        }
        return py::make_tuple(offsets, packed);
      },
      py::arg("records"), py::arg("rows"),
      "Packs records[rows[k]] as runs of repeated 32-bit words (record_packing.h), GIL released: (offsets, "
      "packed), record k being packed[offsets[k]:offsets[k + 1]].");

  m.def(
      "unpack_records",
      [](py::buffer packed, py::array_t<int64_t, py::array::c_style | py::array::forcecast> offsets,
         py::array_t<int64_t, py::array::c_style | py::array::forcecast> dest_rows,
         py::array_t<uint8_t, py::array::c_style> out) {
        py::buffer_info in = packed.request();
        if (in.itemsize != 1 || in.ndim != 1) throw shardmill::NativeError("packed must be a 1-D byte buffer");
        if (offsets.size() != dest_rows.size() + 1) {
          throw shardmill::NativeError("offsets must have one more entry than dest_rows");
        }
        if (out.ndim() != 2 || !out.writeable()) throw shardmill::NativeError("out must be a writable (rows, record_bytes) uint8 array");
        const uint8_t* data = static_cast<const uint8_t*>(in.ptr);
        const int64_t* at = offsets.data();
        const int64_t* rows = dest_rows.data();
        const int64_t count = dest_rows.size(), out_rows = out.shape(0), record_bytes = out.shape(1);
        uint8_t* target = out.mutable_data();
        arrow::Status status;
        {
          py::gil_scoped_release release;
          status = shardmill::UnpackRecords(data, in.size, at, count, record_bytes, rows, out_rows, target);
        }
        shardmill::ThrowIfError(status, "unpack");
      },
      py::arg("packed"), py::arg("offsets"), py::arg("dest_rows"), py::arg("out"),
      "Unpacks packed record k (packed[offsets[k]:offsets[k + 1]], from pack_records) into out[dest_rows[k]], "
      "GIL released; raises NativeError naming the first record that is not a valid packing.");

  m.def(
      "crc32",
      [](py::object data, uint32_t value) {
        Py_buffer view;
        if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
          PyErr_Clear();
          throw shardmill::NativeError("crc32 needs an object exposing a C-contiguous buffer");
        }
        uint32_t crc;
        {
          py::gil_scoped_release release;
          crc = libdeflate_crc32(value, view.buf, static_cast<size_t>(view.len));
        }
        PyBuffer_Release(&view);
        return crc;
      },
      py::arg("data"), py::arg("value") = 0,
      "CRC-32 (gzip's, as zlib.crc32) of a contiguous buffer, continuing from value; libdeflate's (carry-less "
      "multiplication where the CPU has it), GIL released.");

  m.def("lc0_tensors", &Lc0Tensors, py::arg("frames"), py::arg("convention") = "loader",
        py::arg("planes") = "float32", py::arg("threads") = 1, py::arg("copy_policy") = true,
        "lc0 records (rows, record_bytes) to training tensors (lc0_tensors.h): (dict of arrays, first bad row or "
        "-1, what is wrong with it). Rows before a bad one are converted. copy_policy=False leaves `policy` out "
        "(the records' own float32 probabilities can be viewed in place).");
}
