// Unit tests of the native reader's parts, without Python: the Feistel
// permutation, the epoch order, the window buffers and their cache, the
// recycling decode pool and PLAIN page reading.
//
// A self-contained harness (a fresh machine has no test framework to
// install): each TEST registers itself, CHECK records a failure with its
// line and goes on, and main prints "N passed, M failed" and exits non-zero
// on any failure. Run by `bash dev.sh test` (and under AddressSanitizer by
// `bash dev.sh asan`).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <arrow/api.h>
#include <arrow/io/memory.h>
#include <parquet/arrow/writer.h>
#include <parquet/file_reader.h>

#include "epoch_order.h"
#include "feistel.h"
#include "large_buffer.h"
#include "plain_pages.h"
#include "recycling_pool.h"

namespace {

struct TestCase {
  std::string name;
  std::function<void()> body;
};

std::vector<TestCase>& Registry() {
  static std::vector<TestCase> tests;
  return tests;
}

int failures_in_test = 0;

struct Register {
  Register(const char* name, std::function<void()> body) { Registry().push_back({name, std::move(body)}); }
};

#define TEST(name)                              \
  void name();                                  \
  const Register register_##name(#name, name);  \
  void name()

#define CHECK(condition)                                                                      \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      ++failures_in_test;                                                                     \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #condition << std::endl; \
    }                                                                                         \
  } while (0)

using shardmill::DatasetLayout;
using shardmill::EpochOrder;
using shardmill::FeistelPermutation;
using shardmill::LargeBuffer;
using shardmill::RowLocation;

TEST(FeistelIsABijectionForEverySize) {
  for (uint64_t n : {0ull, 1ull, 2ull, 3ull, 7ull, 8ull, 100ull, 1000ull, 65539ull}) {
    FeistelPermutation perm(n, 12345);
    CHECK(perm.size() == n);
    std::vector<uint64_t> image(n);
    for (uint64_t x = 0; x < n; ++x) image[x] = perm.Apply(x);
    std::vector<uint64_t> sorted = image;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t x = 0; x < n; ++x) CHECK(sorted[x] == x);
  }
}

TEST(FeistelRangesAgreeWithApplyAndInvertIt) {
  const uint64_t n = 5003;
  FeistelPermutation perm(n, 99);
  std::vector<uint64_t> forward(n), backward(n);
  perm.ApplyRange(0, static_cast<int64_t>(n), forward.data());
  for (uint64_t x = 0; x < n; ++x) CHECK(forward[x] == perm.Apply(x));
  perm.InverseRange(0, static_cast<int64_t>(n), backward.data());
  for (uint64_t x = 0; x < n; ++x) CHECK(backward[forward[x]] == x);
  std::vector<uint64_t> middle(100);
  perm.ApplyRange(1234, 100, middle.data());
  for (uint64_t i = 0; i < 100; ++i) CHECK(middle[i] == forward[1234 + i]);
}

TEST(FeistelKeysSelectDifferentPermutations) {
  FeistelPermutation a(1000, 1), b(1000, 2);
  int same = 0;
  for (uint64_t x = 0; x < 1000; ++x) same += a.Apply(x) == b.Apply(x);
  CHECK(same < 20);  // about 1 expected by chance
}

// Every epoch position maps to one (row group, row), all rows covered once.
void CheckEpochCoversEveryRowOnce(const std::vector<int64_t>& rows, int64_t window_row_groups, bool shuffle,
                                  int64_t epoch) {
  auto layout = std::make_shared<const DatasetLayout>(rows);
  EpochOrder order(layout, 7, epoch, window_row_groups, shuffle);
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  CHECK(order.num_rows() == total);
  std::set<std::pair<int64_t, int64_t>> seen;
  int64_t position = 0;
  for (int64_t w = 0; w < order.num_windows(); ++w) {
    auto window = order.Window(w);
    CHECK(window.start() == position);
    const int64_t count = window.end() - window.start();
    std::vector<RowLocation> where(static_cast<size_t>(count));
    if (count > 0) window.LocateRange(window.start(), count, where.data());
    for (int64_t i = 0; i < count; ++i) {
      const int64_t group = window.row_groups()[static_cast<size_t>(where[i].row_group)];
      CHECK(where[i].row >= 0 && where[i].row < rows[static_cast<size_t>(group)]);
      CHECK(seen.insert({group, where[i].row}).second);
      CHECK(order.WindowOf(window.start() + i) == w);
    }
    // PositionsOfGroup is LocateRange's inverse.
    for (int64_t index = 0; index < static_cast<int64_t>(window.row_groups().size()); ++index) {
      std::vector<int64_t> positions(static_cast<size_t>(window.group_rows(index)));
      window.PositionsOfGroup(index, positions.data());
      for (int64_t r = 0; r < window.group_rows(index); ++r) {
        RowLocation back;
        window.LocateRange(positions[static_cast<size_t>(r)], 1, &back);
        CHECK(back.row_group == index && back.row == r);
      }
    }
    position = window.end();
  }
  CHECK(position == total && static_cast<int64_t>(seen.size()) == total);
}

TEST(EpochOrderCoversEveryRowExactlyOnce) {
  const std::vector<int64_t> rows = {5, 0, 7, 3, 16, 1, 9, 0, 4, 12, 8};
  for (bool shuffle : {true, false}) {
    for (int64_t window : {1, 3, 4, 100}) {
      for (int64_t epoch : {0, 1, 5}) CheckEpochCoversEveryRowOnce(rows, window, shuffle, epoch);
    }
  }
}

TEST(EpochsDifferAndUnshuffledOrderIsTheManifestOrder) {
  const std::vector<int64_t> rows = {10, 10, 10, 10, 10, 10};
  auto layout = std::make_shared<const DatasetLayout>(rows);
  auto first_groups = [&](int64_t epoch, bool shuffle) {
    EpochOrder order(layout, 3, epoch, 2, shuffle);
    std::vector<int64_t> groups;
    for (int64_t w = 0; w < order.num_windows(); ++w) {
      const auto window = order.Window(w);  // row_groups() refers into it
      for (int64_t g : window.row_groups()) groups.push_back(g);
    }
    return groups;
  };
  CHECK(first_groups(0, false) == std::vector<int64_t>({0, 1, 2, 3, 4, 5}));
  bool differ = false;
  for (int64_t epoch = 1; epoch < 5; ++epoch) differ |= first_groups(0, true) != first_groups(epoch, true);
  CHECK(differ);
  auto order = EpochOrder(layout, 3, 0, 2, false);
  RowLocation where;
  order.Window(0).LocateRange(0, 1, &where);
  CHECK(where.row_group == 0 && where.row == 0);
}

TEST(LargeBuffersAreRoundedWritableAndCachedAfterUse) {
  LargeBuffer::ReleaseCached();
  {
    LargeBuffer buffer = LargeBuffer::Take(1000);
    CHECK(buffer.data() != nullptr);
    CHECK(buffer.capacity() >= 1000 && buffer.capacity() % LargeBuffer::kRoundBytes == 0);
    CHECK(reinterpret_cast<uintptr_t>(buffer.data()) % LargeBuffer::kAlignment == 0);
    std::memset(buffer.data(), 0xAB, static_cast<size_t>(buffer.capacity()));
    LargeBuffer moved = std::move(buffer);
    CHECK(buffer.data() == nullptr && moved.data() != nullptr);
  }
  CHECK(LargeBuffer::CachedBytes() == LargeBuffer::kRoundBytes);
  uint8_t* reused = nullptr;
  {
    LargeBuffer again = LargeBuffer::Take(10);  // the cached block fits: no new mapping
    reused = again.data();
    CHECK(again.capacity() == LargeBuffer::kRoundBytes && LargeBuffer::CachedBytes() == 0);
  }
  CHECK(reused != nullptr);
  CHECK(LargeBuffer::ReleaseCached() == LargeBuffer::kRoundBytes && LargeBuffer::CachedBytes() == 0);
}

TEST(RecyclingPoolReusesFreedBlocksAndKeepsContentOnReallocate) {
  shardmill::RecyclingPool pool(arrow::default_memory_pool(), 1 << 20);
  uint8_t* block = nullptr;
  CHECK(pool.Allocate(2 << 20, 64, &block).ok() && block != nullptr);
  std::memset(block, 7, 2 << 20);
  CHECK(pool.Reallocate(2 << 20, 3 << 20, 64, &block).ok());
  CHECK(block[0] == 7 && block[(2 << 20) - 1] == 7);
  pool.Free(block, 3 << 20, 64);
  uint8_t* again = nullptr;
  CHECK(pool.Allocate(3 << 20, 64, &again).ok());
  CHECK(again == block);  // the freed block came back
  pool.Free(again, 3 << 20, 64);
  uint8_t* small = nullptr;
  CHECK(pool.Allocate(100, 64, &small).ok() && small != nullptr);  // below the recycling size: upstream
  pool.Free(small, 100, 64);
}

std::shared_ptr<arrow::Buffer> ParquetOf(const std::shared_ptr<arrow::Table>& table, bool dictionary) {
  auto sink = arrow::io::BufferOutputStream::Create();
  CHECK(sink.ok());
  if (!sink.ok()) return nullptr;
  auto properties = parquet::WriterProperties::Builder();
  properties.data_pagesize(4096);
  properties.write_batch_size(64);  // the page size is checked between write batches
  if (!dictionary) properties.disable_dictionary();
  CHECK(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), *sink, 1000, properties.build()).ok());
  auto buffer = (*sink)->Finish();
  CHECK(buffer.ok());
  return buffer.ok() ? *buffer : nullptr;
}

TEST(PlainPagesHandOnEveryValueInRowOrder) {
  const int64_t rows = 2500, width = 12;
  arrow::FixedSizeBinaryBuilder builder(arrow::fixed_size_binary(static_cast<int32_t>(width)));
  std::vector<uint8_t> value(width);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < width; ++b) value[static_cast<size_t>(b)] = static_cast<uint8_t>(r * 31 + b);
    CHECK(builder.Append(value.data()).ok());
  }
  std::shared_ptr<arrow::Array> array;
  CHECK(builder.Finish(&array).ok());
  auto field = arrow::field("frame", arrow::fixed_size_binary(static_cast<int32_t>(width)), false);
  auto table = arrow::Table::Make(arrow::schema({field}), {array});
  for (bool dictionary : {false, true}) {
    auto reader = parquet::ParquetFileReader::Open(std::make_shared<arrow::io::BufferReader>(
        ParquetOf(table, dictionary)));
    CHECK(reader->metadata()->num_row_groups() == 3);
    int64_t group_start = 0;
    for (int g = 0; g < reader->metadata()->num_row_groups(); ++g) {
      auto group = reader->RowGroup(g);
      const int64_t group_rows = reader->metadata()->RowGroup(g)->num_rows();
      std::vector<uint8_t> got(static_cast<size_t>(group_rows * width), 0);
      int64_t calls = 0;
      auto read = shardmill::ReadPlainColumn(*group, 0, width, group_rows,
                                             [&](int64_t first, const uint8_t* values, int64_t count) {
                                               ++calls;
                                               std::memcpy(got.data() + first * width, values,
                                                           static_cast<size_t>(count * width));
                                             });
      CHECK(read.ok());
      if (dictionary) {
        CHECK(read.ok() && !*read);  // a dictionary page: left to Arrow
        continue;
      }
      CHECK(read.ok() && *read && calls > 1);  // several pages, each handed on
      for (int64_t r = 0; r < group_rows; ++r) {
        for (int64_t b = 0; b < width; ++b) {
          CHECK(got[static_cast<size_t>(r * width + b)] == static_cast<uint8_t>((group_start + r) * 31 + b));
        }
      }
      group_start += group_rows;
    }
  }
}

TEST(DefinitionLevelsOfAllDefinedValuesAreRecognised) {
  // RLE run: header (count << 1) = 20, then the value byte 1: 10 values defined.
  const uint8_t all_defined[] = {20, 1};
  const uint8_t one_null[] = {3, 0xEF};  // bit-packed group of 8: one 0 bit
  CHECK(shardmill::AllLevelsDefined(all_defined, sizeof(all_defined), 10));
  CHECK(!shardmill::AllLevelsDefined(all_defined, sizeof(all_defined), 11));
  CHECK(!shardmill::AllLevelsDefined(one_null, sizeof(one_null), 8));
}

}  // namespace

int main() {
  int passed = 0, failed = 0;
  for (const auto& test : Registry()) {
    failures_in_test = 0;
    test.body();
    if (failures_in_test) {
      ++failed;
      std::cerr << "FAILED " << test.name << std::endl;
    } else {
      ++passed;
    }
  }
  std::cout << "native unit tests: " << passed << " passed, " << failed << " failed" << std::endl;
  return failed ? 1 : 0;
}
