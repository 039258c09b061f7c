// lc0 records to training tensors in the loader and chunkparser conventions, every encoding, errors by row.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lc0_tensors.h"

namespace {
// A V6 record: white pawns on rank 2 (stored bitboard bytes have their bits reversed), the given
// side-to-move/en-passant byte, rule50 and input format.
std::vector<uint8_t> V6Record(uint32_t input_format, uint8_t stm_or_ep, uint8_t rule50) {
  std::vector<uint8_t> r(8356, 0);
  const uint32_t version = 6;
  std::memcpy(r.data(), &version, 4);
  std::memcpy(r.data() + 4, &input_format, 4);
  const float policy = 0.5f;
  std::memcpy(r.data() + 8 + 4 * 7, &policy, 4);
  r[7440 + 1] = 0xFF;          // plane 0 (our pawns), byte 1: rank 2
  r[7440 + 5 * 8] = 0x08;      // plane 5 (our king), byte 0, bit 3: e1
  r[8272] = 1, r[8273] = 0x80;  // castling us_ooo, us_oo
  r[8276] = stm_or_ep, r[8277] = rule50;
  const float result_q = -1.0f, best_q = 0.5f, best_d = 0.25f;
  std::memcpy(r.data() + 8308, &result_q, 4);
  std::memcpy(r.data() + 8284, &best_q, 4);
  std::memcpy(r.data() + 8292, &best_d, 4);
  return r;
}

// The first error of a conversion ("" if none) and its row.
std::string Convert(const uint8_t* records, int64_t rows, shardmill::Lc0Convention convention,
                    shardmill::PlaneEncoding encoding, const shardmill::Lc0Tensors& out, int64_t* bad) {
  std::vector<shardmill::RecordError> errors;
  shardmill::ConvertLc0Records(records, rows, 8356, convention, encoding, out, &errors);
  *bad = errors.empty() ? -1 : errors.front().row;
  return errors.empty() ? "" : errors.front().what;
}

TEST(Lc0Tensors, FollowTheLoaderAndTheChunkparser) {
  using shardmill::Lc0Convention;
  using shardmill::PlaneEncoding;
  auto record = V6Record(3, 1 << 4, 99);
  std::vector<float> planes(112 * 64), policy(1858), values(24), wdl(3), best(3), plies(1);
  shardmill::Lc0Tensors out;
  out.planes = planes.data(), out.policy = policy.data(), out.values = values.data();
  int64_t bad = -1;
  EXPECT_TRUE(Convert(record.data(), 1, Lc0Convention::kLoader, PlaneEncoding::kFloat32, out,
                                     &bad).empty());
  for (int s = 0; s < 64; ++s) EXPECT_TRUE(planes[s] == (s >= 8 && s < 16 ? 1.0f : 0.0f));
  for (int s = 0; s < 64; ++s) EXPECT_TRUE(planes[5 * 64 + s] == (s == 4 ? 1.0f : 0.0f));
  EXPECT_TRUE(planes[104 * 64] == 1.0f && planes[105 * 64 + 63] == 128.0f);  // raw castling bytes
  EXPECT_TRUE(planes[108 * 64 + 7] == 16.0f && planes[109 * 64] == 1.0f && planes[111 * 64 + 9] == 1.0f);
  EXPECT_TRUE(values[0] == -1.0f && std::isnan(values[3]) && values[4] == 0.5f && values[5] == 0.25f);
  EXPECT_TRUE(policy[7] == 0.5f);

  out.values = nullptr, out.wdl = wdl.data(), out.best_wdl = best.data(), out.plies_left = plies.data();
  EXPECT_TRUE(Convert(record.data(), 1, Lc0Convention::kChunkparser, PlaneEncoding::kFloat32,
                                     out, &bad).empty());
  EXPECT_TRUE(planes[104 * 64 + 0] == 1.0f && planes[104 * 64 + 1] == 0.0f);  // us_ooo bit 0: a1
  EXPECT_TRUE(planes[105 * 64 + 7] == 1.0f);                                   // us_oo bit 7: h1
  for (int s = 0; s < 64; ++s) EXPECT_TRUE(planes[108 * 64 + s] == (s == 60 ? 1.0f : 0.0f));  // en passant on e8
  EXPECT_TRUE(planes[109 * 64] == static_cast<float>(99 / 99.0));
  EXPECT_TRUE(wdl[0] == 0.0f && wdl[1] == 0.0f && wdl[2] == 1.0f);
  EXPECT_TRUE(best[0] == 0.625f && best[1] == 0.25f && best[2] == 0.125f);

  std::vector<uint16_t> halves(112 * 64);
  std::vector<float> scale(112);
  out.planes = halves.data();
  EXPECT_TRUE(Convert(record.data(), 1, Lc0Convention::kChunkparser, PlaneEncoding::kFloat16,
                                     out, &bad).empty());
  EXPECT_TRUE(halves[8] == 0x3C00 && halves[0] == 0 && halves[109 * 64] == 0x3C00);
  auto rule50 = V6Record(4, 0, 50);  // 50 / 100 = 0.5: 0x3800
  EXPECT_TRUE(Convert(rule50.data(), 1, Lc0Convention::kChunkparser, PlaneEncoding::kFloat16,
                                     out, &bad).empty());
  EXPECT_TRUE(halves[109 * 64] == 0x3800);

  std::vector<uint8_t> packed(112 * 8);
  out.planes = packed.data(), out.planes_scale = scale.data(), out.values = values.data();
  EXPECT_TRUE(Convert(record.data(), 1, Lc0Convention::kLoader, PlaneEncoding::kPacked, out,
                                     &bad).empty());
  EXPECT_TRUE(packed[1] == 0xFF && packed[0] == 0 && packed[5 * 8] == 0x08);  // numpy packbits order: the stored bytes
  EXPECT_TRUE(scale[105] == 128.0f && packed[105 * 8] == 0xFF);

  auto bad_format = V6Record(9, 0, 0);
  std::vector<uint8_t> two(bad_format);
  two.insert(two.begin(), record.begin(), record.end());
  std::vector<uint8_t> packed_two(2 * 112 * 8, 0xAA);
  std::vector<float> scale_two(2 * 112), wdl_two(6), best_two(6), plies_two(2);
  shardmill::Lc0Tensors out_two;
  out_two.planes = packed_two.data(), out_two.planes_scale = scale_two.data();
  out_two.wdl = wdl_two.data(), out_two.best_wdl = best_two.data(), out_two.plies_left = plies_two.data();
  const std::string error = Convert(two.data(), 2, Lc0Convention::kChunkparser, PlaneEncoding::kPacked, out_two,
                                    &bad);
  EXPECT_TRUE(bad == 1 && error.find("input format 9") != std::string::npos);
  EXPECT_TRUE(packed_two[1] == 0xFF);  // the good record before it is converted
  EXPECT_TRUE(std::all_of(packed_two.begin() + 112 * 8, packed_two.end(), [](uint8_t b) { return b == 0; }));  // zeros
}

}  // namespace
