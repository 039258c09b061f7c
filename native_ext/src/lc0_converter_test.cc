// lc0 as a RecordConverter: the registry makes it, its tensors are described for numpy, it converts the
// `frame` column as the lc0 kernel does, and refuses a column of another type.
#include <cstdint>
#include <cstring>
#include <vector>

#include <arrow/type.h>
#include <gtest/gtest.h>

#include "lc0_converter.h"

namespace {

using shardmill::ConverterKind;
using shardmill::PlaneEncoding;

TEST(Lc0Converter, TheRegistryMakesEachConventionAndNothingForNone) {
  auto none = shardmill::MakeRecordConverter({ConverterKind::kNone, PlaneEncoding::kFloat32});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  auto loader = shardmill::MakeRecordConverter({ConverterKind::kLc0Loader, PlaneEncoding::kFloat16});
  ASSERT_TRUE(loader.ok() && *loader);
  EXPECT_EQ((*loader)->column(), "frame");
  std::vector<std::string> names;
  for (const auto& spec : (*loader)->outputs()) names.push_back(spec.name);
  EXPECT_EQ(names, (std::vector<std::string>{"planes", "values"}));
  const auto& planes = (*loader)->outputs()[0];
  EXPECT_EQ(planes.dtype, "float16");
  EXPECT_EQ(planes.shape, (std::vector<int64_t>{112, 8, 8}));
  EXPECT_EQ(planes.row_bytes, 112 * 64 * 2);
  auto packed = shardmill::MakeRecordConverter({ConverterKind::kLc0Chunkparser, PlaneEncoding::kPacked});
  ASSERT_TRUE(packed.ok() && *packed);
  names.clear();
  for (const auto& spec : (*packed)->outputs()) names.push_back(spec.name);
  EXPECT_EQ(names, (std::vector<std::string>{"planes", "planes_scale", "wdl", "best_wdl", "plies_left"}));
  EXPECT_EQ((*packed)->outputs()[0].shape, (std::vector<int64_t>{112, 8}));
  EXPECT_EQ((*packed)->outputs()[4].shape, std::vector<int64_t>{});
}

TEST(Lc0Converter, ConvertsAsTheKernelAndRefusesAnotherColumnType) {
  shardmill::Lc0Converter converter(shardmill::Lc0Convention::kLoader, PlaneEncoding::kFloat32);
  EXPECT_TRUE(converter.CheckColumn(*arrow::fixed_size_binary(8356), 8356).ok());
  EXPECT_FALSE(converter.CheckColumn(*arrow::int64(), 8).ok());
  std::vector<uint8_t> record(8356, 0);
  const uint32_t version = 6, format = 1;
  std::memcpy(record.data(), &version, 4);
  std::memcpy(record.data() + 4, &format, 4);
  record[7440 + 1] = 0xFF;  // our pawns on rank 2
  std::vector<float> planes(112 * 64, -1), values(24, -1);
  std::vector<shardmill::RecordError> errors;
  converter.Convert(record.data(), 1, 8356, {reinterpret_cast<uint8_t*>(planes.data()),
                                             reinterpret_cast<uint8_t*>(values.data())}, &errors);
  EXPECT_TRUE(errors.empty());
  std::vector<float> want_planes(112 * 64), want_values(24);
  shardmill::Lc0Tensors out;
  out.planes = want_planes.data(), out.values = want_values.data();
  shardmill::ConvertLc0Records(record.data(), 1, 8356, shardmill::Lc0Convention::kLoader, PlaneEncoding::kFloat32,
                               out, &errors);
  EXPECT_EQ(planes, want_planes);
  EXPECT_EQ(std::memcmp(values.data(), want_values.data(), sizeof(float) * 24), 0);  // NaNs compared by bits
}

}  // namespace
