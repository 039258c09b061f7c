#include "lc0_tensors.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <system_error>
#include <thread>

namespace shardmill {

namespace {

constexpr uint64_t kAllSquares = ~uint64_t{0};

template <typename T>
T Load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// A record's fields in the V6 layout, whatever its version (the chunkparser's
// padding: fields a version lacks are zero; V3/V4 have no input format: 1).
struct Fields {
  uint32_t version = 0;
  uint32_t input_format = 0;
  const uint8_t* probabilities = nullptr;
  const uint8_t* planes = nullptr;
  uint8_t us_ooo = 0, us_oo = 0, them_ooo = 0, them_oo = 0;
  uint8_t side_to_move_or_enpassant = 0, rule50_count = 0, invariance_info = 0;
  int8_t dep_result = 0;
  // root_q, best_q, root_d, best_d, root_m, best_m, plies_left, result_q,
  // result_d, played_q, played_d, played_m, orig_q, orig_d, orig_m
  float f[15] = {};
  float q_st = 0, d_st = 0;
};
enum : int { kRootQ, kBestQ, kRootD, kBestD, kRootM, kBestM, kPliesLeft, kResultQ, kResultD, kPlayedQ, kPlayedD,
             kPlayedM, kOrigQ, kOrigD, kOrigM };

int64_t RecordSize(uint32_t version) {
  switch (version) {
    case 3: return 8276;
    case 4: return 8292;
    case 5: return 8308;
    case 6: return 8356;
    case 7: return 8396;
    default: return -1;
  }
}

std::string ParseFields(const uint8_t* r, int64_t record_bytes, Fields* out) {
  Fields f;
  f.version = Load<uint32_t>(r);
  const int64_t size = RecordSize(f.version);
  if (size < 0) return "unknown record version " + std::to_string(f.version);
  if (size != record_bytes) {
    return "a version " + std::to_string(f.version) + " record is " + std::to_string(size) +
           " bytes, but the column holds " + std::to_string(record_bytes) + "-byte records";
  }
  const int64_t shift = f.version <= 4 ? -4 : 0;  // V3/V4 have no input_format field
  f.input_format = f.version <= 4 ? 1 : Load<uint32_t>(r + 4);
  f.probabilities = r + 8 + shift;
  f.planes = r + 7440 + shift;
  const uint8_t* b = r + 8272 + shift;
  f.us_ooo = b[0], f.us_oo = b[1], f.them_ooo = b[2], f.them_oo = b[3];
  f.side_to_move_or_enpassant = b[4], f.rule50_count = b[5], f.invariance_info = b[6];
  f.dep_result = static_cast<int8_t>(b[7]);
  const int floats = f.version == 3 ? 0 : f.version == 4 ? 4 : f.version == 5 ? 7 : 15;
  std::memcpy(f.f, r + 8280 + shift, floats * sizeof(float));
  if (f.version >= 6) f.q_st = Load<float>(r + 8352);
  if (f.version >= 7) f.d_st = Load<float>(r + 8356);
  *out = f;
  return "";
}

// Each plane as (squares with a nonzero value, that value). Masks keep the
// records' bit order: square s is bit s ^ 7 (byte s / 8, the first square of
// a byte in its high bit), which is also numpy's packbits order.
struct Planes {
  uint64_t mask[kLc0Planes];
  float value[kLc0Planes];
  void Set(int plane, uint64_t m, float v) {
    mask[plane] = v == 0.0f ? 0 : m;
    value[plane] = v;
  }
  void Constant(int plane, float v) { Set(plane, kAllSquares, v); }
};

const std::array<uint8_t, 256>& ReversedBytes() {
  static const std::array<uint8_t, 256> table = [] {
    std::array<uint8_t, 256> t{};
    for (int b = 0; b < 256; ++b) {
      int r = 0;
      for (int j = 0; j < 8; ++j) r |= ((b >> j) & 1) << (7 - j);
      t[b] = static_cast<uint8_t>(r);
    }
    return t;
  }();
  return table;
}

// The bitboard planes, as stored (both references unpack square s from bit s ^ 7).
void BitboardPlanes(const Fields& f, Planes* p) {
  for (int plane = 0; plane < 104; ++plane) {
    uint64_t mask;
    std::memcpy(&mask, f.planes + plane * 8, 8);
    p->Set(plane, mask, 1.0f);
  }
}

// The mask of squares file 0..7 of one rank where bit j of `files` is file j.
uint64_t RankMask(uint8_t files, int rank) { return uint64_t{ReversedBytes()[files]} << (8 * rank); }

void LoaderPlanes(const Fields& f, Planes* p) {
  BitboardPlanes(f, p);
  p->Constant(104, static_cast<float>(f.us_ooo));
  p->Constant(105, static_cast<float>(f.us_oo));
  p->Constant(106, static_cast<float>(f.them_ooo));
  p->Constant(107, static_cast<float>(f.them_oo));
  p->Constant(108, static_cast<float>(f.side_to_move_or_enpassant));
  p->Constant(109, static_cast<float>(f.rule50_count) / 99.0f);
  p->Constant(110, 0.0f);
  p->Constant(111, 1.0f);
}

std::string ChunkparserPlanes(const Fields& f, Planes* p) {
  BitboardPlanes(f, p);
  const uint32_t format = f.input_format;
  if (format == 1 || format == 2) {
    // The chunkparser indexes its two flat planes with these bytes: anything but 0/1 fails there.
    const uint8_t flat[] = {f.us_ooo, f.us_oo, f.them_ooo, f.them_oo, f.side_to_move_or_enpassant};
    for (int i = format == 1 ? 0 : 4; i < 5; ++i) {
      if (flat[i] > 1) return "input format " + std::to_string(format) + ": byte " + std::to_string(8272 + i) +
                              " is " + std::to_string(flat[i]) + ", not 0 or 1";
    }
  }
  if (format == 1) {
    p->Constant(104, f.us_ooo);
    p->Constant(105, f.us_oo);
    p->Constant(106, f.them_ooo);
    p->Constant(107, f.them_oo);
    p->Constant(108, f.side_to_move_or_enpassant);
  } else if (format == 2 || format == 3 || format == 4 || format == 5 || format == 132 || format == 133) {
    // Castling rights as bit rows: bit j of the byte is file j, ours on the first rank, theirs on the last.
    p->Set(104, RankMask(f.us_ooo, 0) | RankMask(f.them_ooo, 7), 1.0f);
    p->Set(105, RankMask(f.us_oo, 0) | RankMask(f.them_oo, 7), 1.0f);
    p->Constant(106, 0.0f);
    p->Constant(107, 0.0f);
    if (format == 2) {
      p->Constant(108, f.side_to_move_or_enpassant);
    } else {
      p->Set(108, RankMask(f.side_to_move_or_enpassant, 7), 1.0f);  // the en-passant mask
    }
  } else {
    return "input format " + std::to_string(format) + " is not one the chunkparser converts (1, 2, 3, 4, 5, 132, 133)";
  }
  const double divisor = format > 3 ? 100.0 : 99.0;
  p->Constant(109, static_cast<float>(f.rule50_count / divisor));
  p->Constant(110, (format == 132 || format == 133) && f.invariance_info >= 128 ? 1.0f : 0.0f);
  p->Constant(111, 1.0f);
  return "";
}

uint16_t HalfOf(float value) {
  // Round to nearest even, as numpy's float32 -> float16.
  uint32_t x;
  std::memcpy(&x, &value, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs >= 0x7F800000) return static_cast<uint16_t>(sign | 0x7C00 | (abs > 0x7F800000 ? 0x200 : 0));
  if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // rounds past the largest half
  if (abs < 0x33000001) return static_cast<uint16_t>(sign);            // rounds to zero
  int32_t exponent = static_cast<int32_t>(abs >> 23) - 127 + 15;
  uint32_t mantissa = (abs & 0x7FFFFF) | 0x800000;
  int shift = exponent > 0 ? 13 : 14 - exponent;  // subnormal halves drop more bits
  if (exponent <= 0) exponent = 0;
  uint32_t half = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1))) ++half;
  // half holds the implicit bit for normals: fold it into the exponent field.
  uint32_t bits = exponent > 0 ? ((static_cast<uint32_t>(exponent) << 10) + (half - 0x400)) : half;
  return static_cast<uint16_t>(sign | bits);
}

uint16_t BfloatOf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

// Per mask byte, the 8 squares it covers (the first in its high bit) as values of T (1 or 0): one
// copy per 8 squares.
template <typename T>
struct UnitTable {
  explicit UnitTable(T one) : unit(one) {
    for (int b = 0; b < 256; ++b) {
      for (int j = 0; j < 8; ++j) squares[b][j] = (b >> (7 - j)) & 1 ? one : T{};
    }
  }
  T unit;
  T squares[256][8];
};

// Writes 64 values of one plane: value where the mask has a bit, zero elsewhere.
template <typename T>
void WritePlane(uint64_t mask, T value, const UnitTable<T>& table, T* out) {
  if (mask == 0) {
    std::memset(out, 0, 64 * sizeof(T));
  } else if (mask == kAllSquares) {
    std::fill_n(out, 64, value);
  } else if (value == table.unit) {
    for (int k = 0; k < 8; ++k) std::memcpy(out + 8 * k, table.squares[(mask >> (8 * k)) & 0xFF], 8 * sizeof(T));
  } else {
    for (int s = 0; s < 64; ++s) out[s] = (mask >> (s ^ 7)) & 1 ? value : T{};
  }
}

template <typename T>
void WritePlanes(const Planes& p, const UnitTable<T>& table, T (*encode)(float), T* dst) {
  for (int i = 0; i < kLc0Planes; ++i) WritePlane<T>(p.mask[i], encode(p.value[i]), table, dst + i * 64);
}

float Identity(float v) { return v; }
uint8_t One(float) { return 1; }

void EncodePlanes(const Planes& p, PlaneEncoding encoding, int64_t row, const Lc0Tensors& out) {
  static const UnitTable<float> floats(1.0f);
  static const UnitTable<uint16_t> halves(HalfOf(1.0f));
  static const UnitTable<uint16_t> bfloats(BfloatOf(1.0f));
  static const UnitTable<uint8_t> bytes(1);
  const int64_t values = row * kLc0Planes * 64;
  switch (encoding) {
    case PlaneEncoding::kFloat32:
      WritePlanes<float>(p, floats, Identity, static_cast<float*>(out.planes) + values);
      return;
    case PlaneEncoding::kFloat16:
      WritePlanes<uint16_t>(p, halves, HalfOf, static_cast<uint16_t*>(out.planes) + values);
      return;
    case PlaneEncoding::kBfloat16:
      WritePlanes<uint16_t>(p, bfloats, BfloatOf, static_cast<uint16_t*>(out.planes) + values);
      return;
    case PlaneEncoding::kUint8:
      WritePlanes<uint8_t>(p, bytes, One, static_cast<uint8_t*>(out.planes) + values);
      break;
    case PlaneEncoding::kPacked:
      std::memcpy(static_cast<uint8_t*>(out.planes) + row * kLc0Planes * 8, p.mask, sizeof(p.mask));
      break;
  }
  std::memcpy(out.planes_scale + row * kLc0Planes, p.value, sizeof(p.value));
}

void LoaderTargets(const Fields& f, int64_t row, const Lc0Tensors& out) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float rows[kLoaderValueRows][4] = {
      {f.f[kResultQ], f.f[kResultD], f.f[kPliesLeft], kNaN},
      {f.f[kBestQ], f.f[kBestD], f.f[kBestM], kNaN},
      {f.f[kPlayedQ], f.f[kPlayedD], f.f[kPlayedM], kNaN},
      {f.f[kOrigQ], f.f[kOrigD], f.f[kOrigM], kNaN},
      {f.f[kRootQ], f.f[kRootD], f.f[kRootM], kNaN},
      {f.q_st, f.d_st, kNaN, kNaN},
  };
  std::memcpy(out.values + row * kLoaderValueRows * 4, rows, sizeof(rows));
}

std::string ChunkparserTargets(const Fields& f, int64_t row, const Lc0Tensors& out) {
  float* wdl = out.wdl + row * 3;
  if (f.version == 6) {
    const double q = f.f[kResultQ], d = f.f[kResultD];
    wdl[0] = static_cast<float>(0.5 * (1.0 - d + q));
    wdl[1] = static_cast<float>(d);
    wdl[2] = static_cast<float>(0.5 * (1.0 - d - q));
  } else {
    const int result = f.dep_result;
    if (result < -1 || result > 1) return "result byte " + std::to_string(result) + " is not -1, 0 or 1";
    wdl[0] = result == 1, wdl[1] = result == 0, wdl[2] = result == -1;
  }
  const double best_q = f.f[kBestQ], best_d = f.f[kBestD];
  if (!(-1.0 <= best_q && best_q <= 1.0 && 0.0 <= best_d && best_d <= 1.0)) {
    return "best_q " + std::to_string(best_q) + " / best_d " + std::to_string(best_d) +
           " outside [-1, 1] / [0, 1]";
  }
  float* best = out.best_wdl + row * 3;
  best[0] = static_cast<float>(0.5 * (1.0 - best_d + best_q));
  best[1] = static_cast<float>(best_d);
  best[2] = static_cast<float>(0.5 * (1.0 - best_d - best_q));
  const float plies = f.f[kPliesLeft];
  out.plies_left[row] = plies == 0.0f ? static_cast<float>(f.invariance_info) : plies;
  return "";
}

int64_t PlaneBytesPerRecord(PlaneEncoding encoding) {
  switch (encoding) {
    case PlaneEncoding::kFloat32: return kLc0Planes * 64 * 4;
    case PlaneEncoding::kFloat16:
    case PlaneEncoding::kBfloat16: return kLc0Planes * 64 * 2;
    case PlaneEncoding::kUint8: return kLc0Planes * 64;
    case PlaneEncoding::kPacked: return kLc0Planes * 8;
  }
  return 0;
}

void ZeroRow(const Lc0Tensors& out, PlaneEncoding encoding, int64_t row) {
  const int64_t plane_bytes = PlaneBytesPerRecord(encoding);
  std::memset(static_cast<uint8_t*>(out.planes) + row * plane_bytes, 0, plane_bytes);
  auto zero = [row](float* p, int64_t width) {
    if (p) std::memset(p + row * width, 0, width * sizeof(float));
  };
  zero(out.planes_scale, kLc0Planes);
  zero(out.policy, kLc0PolicySize);
  zero(out.values, kLoaderValueRows * 4);
  zero(out.wdl, 3);
  zero(out.best_wdl, 3);
  zero(out.plies_left, 1);
}

}  // namespace

std::vector<Lc0Output> Lc0Outputs(Lc0Convention convention, PlaneEncoding encoding) {
  std::vector<Lc0Output> outputs = {{"planes", PlaneBytesPerRecord(encoding)}};
  if (encoding == PlaneEncoding::kUint8 || encoding == PlaneEncoding::kPacked) {
    outputs.push_back({"planes_scale", kLc0Planes * 4});
  }
  if (convention == Lc0Convention::kLoader) {
    outputs.push_back({"values", kLoaderValueRows * 4 * 4});
  } else {
    outputs.push_back({"wdl", 3 * 4});
    outputs.push_back({"best_wdl", 3 * 4});
    outputs.push_back({"plies_left", 4});
  }
  return outputs;
}

Lc0Tensors Lc0TensorsAt(const std::vector<Lc0Output>& outputs, const std::vector<uint8_t*>& buffers, int64_t row) {
  Lc0Tensors out;
  for (size_t i = 0; i < outputs.size() && i < buffers.size(); ++i) {
    uint8_t* at = buffers[i] + row * outputs[i].row_bytes;
    const std::string& name = outputs[i].name;
    auto* floats = reinterpret_cast<float*>(at);
    if (name == "planes") out.planes = at;
    if (name == "planes_scale") out.planes_scale = floats;
    if (name == "values") out.values = floats;
    if (name == "wdl") out.wdl = floats;
    if (name == "best_wdl") out.best_wdl = floats;
    if (name == "plies_left") out.plies_left = floats;
  }
  return out;
}

arrow::Status ParseLc0Options(const std::string& convention_name, const std::string& planes_name,
                            Lc0Convention* convention, PlaneEncoding* encoding) {
  if (convention_name == "loader") {
    *convention = Lc0Convention::kLoader;
  } else if (convention_name == "chunkparser") {
    *convention = Lc0Convention::kChunkparser;
  } else {
    return arrow::Status::Invalid("the lc0 convention must be loader or chunkparser, got '", convention_name, "'");
  }
  const std::pair<const char*, PlaneEncoding> encodings[] = {
      {"float32", PlaneEncoding::kFloat32}, {"float16", PlaneEncoding::kFloat16},
      {"bfloat16", PlaneEncoding::kBfloat16}, {"uint8", PlaneEncoding::kUint8}, {"packed", PlaneEncoding::kPacked}};
  for (const auto& [name, value] : encodings) {
    if (planes_name == name) {
      *encoding = value;
      return arrow::Status::OK();
    }
  }
  return arrow::Status::Invalid("planes must be float32, float16, bfloat16, uint8 or packed, got '", planes_name, "'");
}

void ConvertLc0Records(const uint8_t* records, int64_t rows, int64_t record_bytes, Lc0Convention convention,
                       PlaneEncoding encoding, const Lc0Tensors& out, std::vector<RecordError>* errors) {
  Planes planes;
  for (int64_t row = 0; row < rows; ++row) {
    const uint8_t* record = records + row * record_bytes;
    Fields f;
    std::string error = record_bytes >= 4 ? ParseFields(record, record_bytes, &f) : "records shorter than 4 bytes";
    if (error.empty()) {
      if (convention == Lc0Convention::kLoader) {
        if (f.version != 6 && f.version != 7) {
          error = "a version " + std::to_string(f.version) + " record: the loader convention reads V6 and V7";
        } else {
          LoaderPlanes(f, &planes);
          LoaderTargets(f, row, out);
        }
      } else if (f.version == 7) {
        error = "a version 7 record: the chunkparser convention reads V3 to V6";
      } else {
        error = ChunkparserPlanes(f, &planes);
        if (error.empty()) error = ChunkparserTargets(f, row, out);
      }
    }
    if (!error.empty()) {
      ZeroRow(out, encoding, row);
      errors->push_back({row, std::move(error)});
      continue;
    }
    EncodePlanes(planes, encoding, row, out);
    if (out.policy) std::memcpy(out.policy + row * kLc0PolicySize, f.probabilities, kLc0PolicySize * sizeof(float));
  }
}

arrow::Result<Lc0Batch> ConvertLc0Batch(const uint8_t* records, int64_t rows, int64_t record_bytes,
                                        Lc0Convention convention, PlaneEncoding encoding, int threads,
                                        bool copy_policy) {
  Lc0Batch batch;
  batch.outputs = Lc0Outputs(convention, encoding);
  if (copy_policy) batch.outputs.push_back({"policy", kLc0PolicySize * 4});
  int64_t total = 64;
  for (const auto& output : batch.outputs) total += (rows * output.row_bytes + 63) / 64 * 64;
  batch.block = std::make_shared<LargeBuffer>(LargeBuffer::Take(total));
  if (!batch.block->data()) return arrow::Status::OutOfMemory("cannot map ", total, " bytes for a batch of lc0 tensors");
  int64_t offset = 0;
  for (const auto& output : batch.outputs) {
    batch.buffers.push_back(batch.block->data() + offset);
    offset += (rows * output.row_bytes + 63) / 64 * 64;
  }
  const int parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, rows / 64)));
  std::vector<std::vector<RecordError>> errors(static_cast<size_t>(parts));
  auto run = [&](int part) {
    const int64_t begin = rows * part / parts, end = rows * (part + 1) / parts;
    Lc0Tensors out = Lc0TensorsAt(batch.outputs, batch.buffers, begin);
    if (copy_policy) out.policy = reinterpret_cast<float*>(batch.buffers.back()) + begin * kLc0PolicySize;
    try {
      ConvertLc0Records(records + begin * record_bytes, end - begin, record_bytes, convention, encoding, out,
                        &errors[static_cast<size_t>(part)]);
      for (auto& error : errors[static_cast<size_t>(part)]) error.row += begin;
    } catch (const std::exception& e) {  // memory: never past a thread's edge (that would terminate)
      errors[static_cast<size_t>(part)].push_back({begin, e.what()});
    }
  };
  std::vector<std::thread> helpers;
  try {
    for (int part = 1; part < parts; ++part) helpers.emplace_back(run, part);
  } catch (const std::system_error&) {
    for (int part = static_cast<int>(helpers.size()) + 1; part < parts; ++part) run(part);  // no thread to be had
  }
  run(0);
  for (auto& helper : helpers) helper.join();
  for (auto& part : errors) batch.errors.insert(batch.errors.end(), part.begin(), part.end());
  return batch;
}

}  // namespace shardmill
