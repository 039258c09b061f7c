// lc0 training tensors from raw records: the network's 112 input planes,
// the 1858-move policy and the value targets, as lczero-training builds them.
//
// Two conventions, each a re-statement of one public reference:
// - kLoader: lczero-training's C++ data loader (its TensorGenerator stage).
//   Reads V6 and V7 records (V6 widened to V7 with zeros, as its chunk
//   sources do: d_st = 0). Planes 0-103 from the bitboards; 104-107 the raw
//   castling bytes as plane values; 108 the raw side-to-move/en-passant
//   byte; 109 rule50 / 99 (float arithmetic); 110 zeros; 111 ones. Values:
//   6 rows x 4 — result [q, d, plies_left, NaN], best [q, d, m, NaN],
//   played [q, d, m, NaN], orig [q, d, m, NaN], root [q, d, m, NaN],
//   short-term [q_st, d_st, NaN, NaN]. (The loader's plies-until-progress
//   is not in any record: NaN, as the loader's "unknown".)
// - kChunkparser: the TensorFlow pipeline's convert_v6_to_tuple, after its
//   padding of V3/V4/V5 records to V6 (V3/V4: input format 1, the missing
//   floats zero). Planes 104-108 by input format: 1 castling and
//   side-to-move as 0/1 planes; 2 castling rights as bit rows (us on rank
//   1, them on rank 8), 106-107 zero, 108 side to move; 3/4/5/132/133 as 2
//   but 108 holds the en-passant mask on rank 8. 109 rule50 / 99 for input
//   formats <= 3, / 100 above (double arithmetic, then float); 110 ones for
//   formats 132/133 when invariance_info >= 128; 111 ones. Targets: WDL from
//   result q/d (V6) or from the V3-V5 result byte, best q/d as WDL, and
//   plies_left, which falls back to invariance_info when it is 0. V7
//   records, other input formats and values its assertions reject are
//   errors.
//
// Plane encodings: float32, float16 and bfloat16 hold the values; uint8 and
// packed hold 1 where a square's value is nonzero (packed: 8 squares a
// byte, the first square in the high bit, numpy's packbits order) and each
// plane's value in planes_scale, so the planes decode exactly as
// bits x scale (every plane takes one nonzero value).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <arrow/result.h>
#include <arrow/status.h>

#include "large_buffer.h"
#include "record_converter.h"

namespace shardmill {

enum class Lc0Convention { kLoader, kChunkparser };

constexpr int kLc0Planes = 112;
constexpr int kLc0PolicySize = 1858;
constexpr int kLoaderValueRows = 6;

// Output buffers for `rows` records; the ones a convention does not fill may be null.
struct Lc0Tensors {
  void* planes = nullptr;          // rows x 112 x 64 values (packed: rows x 112 x 8 bytes)
  float* planes_scale = nullptr;   // rows x 112: uint8 and packed encodings only
  float* policy = nullptr;         // rows x 1858; null: not copied (callers may view the records' own floats)
  float* values = nullptr;         // loader: rows x 6 x 4
  float* wdl = nullptr;            // chunkparser: rows x 3
  float* best_wdl = nullptr;       // chunkparser: rows x 3
  float* plies_left = nullptr;     // chunkparser: rows
};

// One output tensor of a conversion (the policy aside): its name and bytes per record.
struct Lc0Output {
  std::string name;
  int64_t row_bytes;
};

// The outputs a convention fills in an encoding, in a fixed order: planes,
// planes_scale (bit encodings), then values (loader) or wdl, best_wdl,
// plies_left (chunkparser).
std::vector<Lc0Output> Lc0Outputs(Lc0Convention convention, PlaneEncoding encoding);

// Lc0Tensors pointing at record `row` of buffers laid out as `outputs` (one per output, same order).
Lc0Tensors Lc0TensorsAt(const std::vector<Lc0Output>& outputs, const std::vector<uint8_t*>& buffers, int64_t row);

// Parses a convention ("loader", "chunkparser") and a plane encoding ("float32", "float16", "bfloat16",
// "uint8", "packed"); Invalid naming what is wrong with them.
arrow::Status ParseLc0Options(const std::string& convention_name, const std::string& planes_name,
                            Lc0Convention* convention, PlaneEncoding* encoding);


// Converts `rows` records of `record_bytes` each. A record a convention
// cannot convert gets zeros in every output and an entry in *errors; the
// others are converted whatever their neighbours.
void ConvertLc0Records(const uint8_t* records, int64_t rows, int64_t record_bytes, Lc0Convention convention,
                       PlaneEncoding encoding, const Lc0Tensors& out, std::vector<RecordError>* errors);

// A batch of records converted at once, every output in one block from the process's buffer cache (fresh
// arrays of this size were new mappings each batch, and zeroing their pages took a third of the time).
struct Lc0Batch {
  std::shared_ptr<LargeBuffer> block;  // owns every output
  std::vector<Lc0Output> outputs;      // Lc0Outputs(...), then "policy" when copied
  std::vector<uint8_t*> buffers;       // one per output, 64-byte aligned, inside block
  std::vector<RecordError> errors;  // every record that could not be converted, by row
};

// Converts `rows` records split over up to `threads` threads (fewer when threads can't be had);
// copy_policy also copies each record's policy into an output. OutOfMemory when the block can't be mapped.
arrow::Result<Lc0Batch> ConvertLc0Batch(const uint8_t* records, int64_t rows, int64_t record_bytes,
                                        Lc0Convention convention, PlaneEncoding encoding, int threads,
                                        bool copy_policy);

}  // namespace shardmill
