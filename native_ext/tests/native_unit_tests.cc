// Unit tests of the native reader's parts, without Python: the Feistel
// permutation, the epoch order, the window buffers and their cache, the
// recycling decode pool, PLAIN page reading, row placement, the reader
// assembled from them (coverage across ranks, views vs copies, resume), and
// the token job's kernels (blending indices, byte runs), and the lc0 tensor
// conversion.
//
// A self-contained harness (a fresh machine has no test framework to
// install): each TEST registers itself, CHECK records a failure with its
// line and goes on, and main prints "N passed, M failed" and exits non-zero
// on any failure. Run by `bash dev.sh test` (and under AddressSanitizer by
// `bash dev.sh asan`).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <parquet/arrow/writer.h>
#include <parquet/file_reader.h>

#include "epoch_order.h"
#include "feistel.h"
#include "large_buffer.h"
#include "lc0_tensors.h"
#include "plain_pages.h"
#include "blending.h"
#include "recycling_pool.h"
#include "row_placement.h"
#include "shard_reader.h"
#include "token_runs.h"

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

// Narrow rows (gathered) and wide rows (scattered, streamed where the CPU can).
TEST(RowPlacementPutsEveryRowInItsPlace) {
  using shardmill::ColumnSpec;
  using shardmill::DecodedGroup;
  const std::vector<ColumnSpec> columns = {{"a", arrow::fixed_size_binary(3), 3}, {"b", arrow::int64(), 8}};
  const std::vector<int64_t> group_rows = {5, 4};
  std::vector<std::shared_ptr<DecodedGroup>> groups;
  for (size_t g = 0; g < group_rows.size(); ++g) {
    auto group = std::make_shared<DecodedGroup>();
    for (const auto& column : columns) {
      auto buffer = arrow::AllocateBuffer(group_rows[g] * column.row_bytes);
      CHECK(buffer.ok());
      uint8_t* data = (*buffer)->mutable_data();
      for (int64_t i = 0; i < group_rows[g] * column.row_bytes; ++i) {
        data[i] = static_cast<uint8_t>(g * 100 + i / column.row_bytes * 7 + i % column.row_bytes + column.row_bytes);
      }
      group->buffers.push_back(std::move(*buffer));
    }
    groups.push_back(std::move(group));
  }
  const std::vector<RowLocation> locations = {{1, 3}, {0, 0}, {0, 4}, {1, 0}, {0, 2}};
  std::vector<std::vector<uint8_t>> dest = {std::vector<uint8_t>(5 * 3), std::vector<uint8_t>(5 * 8)};
  shardmill::GatherRows(groups, columns, locations.data(), 5, {dest[0].data(), dest[1].data()});
  for (size_t c = 0; c < columns.size(); ++c) {
    const int64_t width = columns[c].row_bytes;
    for (size_t j = 0; j < locations.size(); ++j) {
      const uint8_t* want = groups[locations[j].row_group]->buffers[c]->data() + locations[j].row * width;
      CHECK(std::memcmp(dest[c].data() + j * width, want, width) == 0);
    }
  }

  // Scatter: rows of a group at epoch positions 10..17 (shuffled), this rank
  // holding [12, 16); a 300-byte row to a destination not 64-byte aligned.
  const int64_t width = 300, rows = 8, start = 12, span = 4;
  const std::vector<int64_t> positions = {15, 10, 12, 17, 13, 11, 16, 14};
  std::vector<uint8_t> values(rows * width);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>(i * 13 + i / width);
  std::vector<uint8_t> storage(span * width + 64 + 1, 0xEE);
  uint8_t* out = storage.data() + 1;
  shardmill::ScatterRun(positions.data(), start, span, values.data(), rows, width, out);
  shardmill::StreamFence();
  for (int64_t k = 0; k < rows; ++k) {
    const int64_t place = positions[k] - start;
    if (place < 0 || place >= span) continue;
    CHECK(std::memcmp(out + place * width, values.data() + k * width, width) == 0);
  }
  CHECK(storage[0] == 0xEE && storage[span * width + 1] == 0xEE);  // nothing written outside the rank's rows
}

// A temporary directory of shards: row i has id i and a `width`-byte frame derived from i.
struct ShardsOnDisk {
  std::string dir;
  std::vector<shardmill::ShardFile> shards;
  ShardsOnDisk(const std::vector<std::vector<int64_t>>& row_groups_per_shard, int width) {
    char pattern[] = "/tmp/native-unit-XXXXXX";
    dir = mkdtemp(pattern);
    int64_t next_id = 0;
    for (size_t s = 0; s < row_groups_per_shard.size(); ++s) {
      shardmill::ShardFile shard{dir + "/shard-" + std::to_string(s) + ".parquet", row_groups_per_shard[s]};
      auto out = arrow::io::FileOutputStream::Open(shard.path);
      CHECK(out.ok());
      auto schema = arrow::schema({arrow::field("id", arrow::int64(), false),
                                   arrow::field("frame", arrow::fixed_size_binary(width), false)});
      auto writer = parquet::arrow::FileWriter::Open(*schema, arrow::default_memory_pool(), *out,
                                                     parquet::WriterProperties::Builder().disable_dictionary()->build());
      CHECK(writer.ok());
      for (int64_t rows : row_groups_per_shard[s]) {
        arrow::Int64Builder ids;
        arrow::FixedSizeBinaryBuilder frames(arrow::fixed_size_binary(width));
        for (int64_t r = 0; r < rows; ++r, ++next_id) {
          CHECK(ids.Append(next_id).ok());
          CHECK(frames.Append(Frame(next_id, width).data()).ok());
        }
        std::shared_ptr<arrow::Array> id_array, frame_array;
        CHECK(ids.Finish(&id_array).ok() && frames.Finish(&frame_array).ok());
        CHECK((*writer)->WriteTable(*arrow::Table::Make(schema, {id_array, frame_array}), rows + 1).ok());
      }
      CHECK((*writer)->Close().ok());
      shards.push_back(std::move(shard));
    }
  }
  ~ShardsOnDisk() {
    for (const auto& shard : shards) std::remove(shard.path.c_str());
    rmdir(dir.c_str());
  }
  static std::vector<uint8_t> Frame(int64_t id, int width) {
    std::vector<uint8_t> frame(static_cast<size_t>(width));
    for (int b = 0; b < width; ++b) frame[static_cast<size_t>(b)] = static_cast<uint8_t>(id * 7 + b * 3 + id / 251);
    return frame;
  }
};

// One batch served: (epoch, record index per row), checking every column against the record.
struct Served {
  int64_t epoch;
  std::vector<int64_t> records;
};

// Reads up to `batches` batches (all if negative), views where possible, copies otherwise.
std::vector<Served> ReadBatches(shardmill::ShardReader& reader, int width, int64_t batches = -1) {
  std::vector<Served> served;
  while (batches < 0 || static_cast<int64_t>(served.size()) < batches) {
    auto plan = reader.PlanNext();
    if (plan.epoch < 0) break;
    std::vector<uint64_t> seeds(static_cast<size_t>(plan.rows));
    std::vector<int64_t> ids(static_cast<size_t>(plan.rows)), records(static_cast<size_t>(plan.rows));
    std::vector<uint8_t> frames(static_cast<size_t>(plan.rows * width));
    auto view = reader.ViewNext(plan, seeds.data());
    CHECK(view.ok());
    if (!view.ok()) break;
    if (view->owner) {
      std::memcpy(ids.data(), view->columns[0], plan.rows * sizeof(int64_t));
      std::memcpy(frames.data(), view->columns[1], plan.rows * width);
      std::memcpy(records.data(), view->record_index, plan.rows * sizeof(int64_t));
    } else {
      CHECK(reader.FillNext(plan, {reinterpret_cast<uint8_t*>(ids.data()), frames.data()}, records.data(),
                            seeds.data()).ok());
    }
    for (int64_t r = 0; r < plan.rows; ++r) {
      CHECK(ids[r] == records[r]);
      CHECK(std::memcmp(frames.data() + r * width, ShardsOnDisk::Frame(ids[r], width).data(), width) == 0);
    }
    served.push_back({plan.epoch, std::move(records)});
  }
  return served;
}

shardmill::ReaderOptions OptionsFor(const ShardsOnDisk& data) {
  shardmill::ReaderOptions options;
  options.shards = data.shards;
  options.columns = {"id", "frame"};
  options.batch_size = 23;
  options.num_epochs = 2;
  options.seed = 5;
  options.window_row_groups = 2;
  options.prefetch_windows = 1;
  return options;
}

std::unique_ptr<shardmill::ShardReader> Started(const shardmill::ReaderOptions& options) {
  auto reader = shardmill::ShardReader::Make(options);
  CHECK(reader.ok());
  if (!reader.ok()) return nullptr;
  CHECK((*reader)->Start().ok());
  return std::move(*reader);
}

// Narrow rows take the gather path, wide rows the scatter path: both must
// serve each epoch's rows once across ranks, the same whatever the thread
// count, and continue exactly from a restored (epoch, position).
TEST(ReaderServesEveryRowOnceAcrossRanksAndResumesExactly) {
  for (int width : {4, 600}) {
    ShardsOnDisk data({{40, 17, 33}, {0}, {25, 60}, {9}}, width);  // 184 rows, an empty row group
    const int64_t total = 184;
    auto options = OptionsFor(data);
    options.shard_count = 3;
    std::map<int64_t, std::set<int64_t>> seen_per_epoch;
    for (int64_t rank = 0; rank < 3; ++rank) {
      options.shard_index = rank;
      options.num_threads = 1;
      auto one = Started(options);
      options.num_threads = 3;
      auto three = Started(options);
      if (!one || !three) return;
      CHECK(one->rows_per_epoch() == total / 3);
      auto a = ReadBatches(*one, width), b = ReadBatches(*three, width);
      CHECK(a.size() == b.size());
      for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) CHECK(a[i].records == b[i].records);
      for (const auto& batch : a) {
        for (int64_t record : batch.records) CHECK(seen_per_epoch[batch.epoch].insert(record).second);
      }
    }
    CHECK(seen_per_epoch.size() == 2);
    for (const auto& [epoch, seen] : seen_per_epoch) {
      CHECK(static_cast<int64_t>(seen.size()) == total / 3 * 3);
      CHECK(*seen.rbegin() < total && *seen.begin() >= 0);
    }

    // Resume: a reader restored at (epoch, position) serves what the first would have.
    options.shard_index = 1;
    auto reference = Started(options);
    auto all = ReadBatches(*reference, width);
    auto first = Started(options);
    ReadBatches(*first, width, 5);
    options.start_epoch = first->epoch();
    options.start_position = first->position();
    first->Stop();
    first->Stop();  // idempotent
    auto resumed = Started(options);
    auto rest = ReadBatches(*resumed, width);
    CHECK(rest.size() + 5 == all.size());
    for (size_t i = 0; i < rest.size() && i + 5 < all.size(); ++i) CHECK(rest[i].records == all[i + 5].records);
  }
}

// A shard whose footer disagrees with the stated counts: an error for the
// batch that needs it, never an abort; a stopped reader refuses batches.
TEST(ReaderReportsBadShardsAsErrorsOfTheirBatches) {
  ShardsOnDisk data({{30}, {20}}, 8);
  auto options = OptionsFor(data);
  options.shuffle = false;
  options.window_row_groups = 1;
  options.columns = {"id"};
  options.shards[1].row_group_rows = {21};  // the file holds 20
  auto reader = Started(options);
  if (!reader) return;
  arrow::Status failure;
  int64_t rows = 0;
  while (true) {
    auto plan = reader->PlanNext();
    if (plan.epoch < 0) break;
    std::vector<uint64_t> seeds(static_cast<size_t>(plan.rows));
    auto view = reader->ViewNext(plan, seeds.data());
    if (!view.ok()) {
      failure = view.status();
      break;
    }
    if (!view->owner) {
      std::vector<int64_t> ids(static_cast<size_t>(plan.rows)), records(static_cast<size_t>(plan.rows));
      failure = reader->FillNext(plan, {reinterpret_cast<uint8_t*>(ids.data())}, records.data(),
                                 seeds.data());
      if (!failure.ok()) break;
    }
    rows += plan.rows;
  }
  CHECK(rows == 23);  // the first shard's whole batches; then the second shard's window fails
  CHECK(!failure.ok() && failure.message().find("shard-1.parquet") != std::string::npos);
  reader->Stop();
  auto plan = reader->PlanNext();
  std::vector<uint64_t> seeds(static_cast<size_t>(plan.rows));
  CHECK(!reader->ViewNext(plan, seeds.data()).ok());
}

}  // namespace

// Megatron's greedy blending: shares track the weights within one sample,
// ties go to the first dataset, and each dataset's samples are taken in order.
TEST(BlendingIndicesFollowTheWeightsGreedily) {
  const std::vector<double> weights = {0.5, 0.3, 0.2};
  const int64_t size = 10000;
  std::vector<int16_t> index(size);
  std::vector<int64_t> sample(size);
  shardmill::BuildBlendingIndices(weights.data(), 3, size, index.data(), sample.data());
  std::vector<int64_t> taken(3, 0);
  for (int64_t i = 0; i < size; ++i) {
    CHECK(index[i] >= 0 && index[i] < 3);
    CHECK(sample[i] == taken[index[i]]);
    ++taken[index[i]];
    for (int d = 0; d < 3; ++d) CHECK(std::abs(static_cast<double>(taken[d]) - weights[d] * (i + 1)) <= 1.0);
  }
  const std::vector<double> equal = {0.5, 0.5};
  std::vector<int16_t> tie_index(4);
  std::vector<int64_t> tie_sample(4);
  shardmill::BuildBlendingIndices(equal.data(), 2, 4, tie_index.data(), tie_sample.data());
  CHECK((tie_index == std::vector<int16_t>{0, 1, 0, 1}));
}

TEST(CopyRunsCopiesBackToBackAndRefusesRunsOutsideTheSource) {
  std::vector<uint8_t> src(100);
  std::iota(src.begin(), src.end(), 0);
  std::vector<uint8_t> dest(10, 0xFF);
  const std::vector<int64_t> starts = {90, 5, 0}, lengths = {4, 3, 2};
  CHECK(shardmill::CopyRuns(src.data(), 100, starts.data(), lengths.data(), 3, dest.data(), 10).empty());
  CHECK((std::vector<uint8_t>(dest.begin(), dest.begin() + 9) == std::vector<uint8_t>{90, 91, 92, 93, 5, 6, 7, 0, 1}));
  CHECK(dest[9] == 0xFF);
  const int64_t huge = int64_t{1} << 62;
  for (auto [start, length] : std::vector<std::pair<int64_t, int64_t>>{{98, 3}, {-1, 1}, {huge, huge}, {0, -2}}) {
    std::vector<uint8_t> untouched(10, 0xAA);
    const std::string error = shardmill::CopyRuns(src.data(), 100, &start, &length, 1, untouched.data(), 10);
    CHECK(error.find("outside the 100-byte source") != std::string::npos);
    CHECK(untouched == std::vector<uint8_t>(10, 0xAA));  // nothing copied before the check
  }
  const int64_t start = 0, length = 11;
  CHECK(!shardmill::CopyRuns(src.data(), 100, &start, &length, 1, dest.data(), 10).empty());
}

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
  std::vector<shardmill::Lc0RecordError> errors;
  shardmill::ConvertLc0Records(records, rows, 8356, convention, encoding, out, &errors);
  *bad = errors.empty() ? -1 : errors.front().row;
  return errors.empty() ? "" : errors.front().what;
}

TEST(Lc0TensorsFollowTheLoaderAndTheChunkparser) {
  using shardmill::Lc0Convention;
  using shardmill::PlaneEncoding;
  auto record = V6Record(3, 1 << 4, 99);
  std::vector<float> planes(112 * 64), policy(1858), values(24), wdl(3), best(3), plies(1);
  shardmill::Lc0Tensors out;
  out.planes = planes.data(), out.policy = policy.data(), out.values = values.data();
  int64_t bad = -1;
  CHECK(Convert(record.data(), 1, Lc0Convention::kLoader, PlaneEncoding::kFloat32, out,
                                     &bad).empty());
  for (int s = 0; s < 64; ++s) CHECK(planes[s] == (s >= 8 && s < 16 ? 1.0f : 0.0f));
  for (int s = 0; s < 64; ++s) CHECK(planes[5 * 64 + s] == (s == 4 ? 1.0f : 0.0f));
  CHECK(planes[104 * 64] == 1.0f && planes[105 * 64 + 63] == 128.0f);  // raw castling bytes
  CHECK(planes[108 * 64 + 7] == 16.0f && planes[109 * 64] == 1.0f && planes[111 * 64 + 9] == 1.0f);
  CHECK(values[0] == -1.0f && std::isnan(values[3]) && values[4] == 0.5f && values[5] == 0.25f);
  CHECK(policy[7] == 0.5f);

  out.values = nullptr, out.wdl = wdl.data(), out.best_wdl = best.data(), out.plies_left = plies.data();
  CHECK(Convert(record.data(), 1, Lc0Convention::kChunkparser, PlaneEncoding::kFloat32,
                                     out, &bad).empty());
  CHECK(planes[104 * 64 + 0] == 1.0f && planes[104 * 64 + 1] == 0.0f);  // us_ooo bit 0: a1
  CHECK(planes[105 * 64 + 7] == 1.0f);                                   // us_oo bit 7: h1
  for (int s = 0; s < 64; ++s) CHECK(planes[108 * 64 + s] == (s == 60 ? 1.0f : 0.0f));  // en passant on e8
  CHECK(planes[109 * 64] == static_cast<float>(99 / 99.0));
  CHECK(wdl[0] == 0.0f && wdl[1] == 0.0f && wdl[2] == 1.0f);
  CHECK(best[0] == 0.625f && best[1] == 0.25f && best[2] == 0.125f);

  std::vector<uint16_t> halves(112 * 64);
  std::vector<float> scale(112);
  out.planes = halves.data();
  CHECK(Convert(record.data(), 1, Lc0Convention::kChunkparser, PlaneEncoding::kFloat16,
                                     out, &bad).empty());
  CHECK(halves[8] == 0x3C00 && halves[0] == 0 && halves[109 * 64] == 0x3C00);
  auto rule50 = V6Record(4, 0, 50);  // 50 / 100 = 0.5: 0x3800
  CHECK(Convert(rule50.data(), 1, Lc0Convention::kChunkparser, PlaneEncoding::kFloat16,
                                     out, &bad).empty());
  CHECK(halves[109 * 64] == 0x3800);

  std::vector<uint8_t> packed(112 * 8);
  out.planes = packed.data(), out.planes_scale = scale.data(), out.values = values.data();
  CHECK(Convert(record.data(), 1, Lc0Convention::kLoader, PlaneEncoding::kPacked, out,
                                     &bad).empty());
  CHECK(packed[1] == 0xFF && packed[0] == 0 && packed[5 * 8] == 0x08);  // numpy packbits order: the stored bytes
  CHECK(scale[105] == 128.0f && packed[105 * 8] == 0xFF);

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
  CHECK(bad == 1 && error.find("input format 9") != std::string::npos);
  CHECK(packed_two[1] == 0xFF);  // the good record before it is converted
  CHECK(std::all_of(packed_two.begin() + 112 * 8, packed_two.end(), [](uint8_t b) { return b == 0; }));  // zeros
}

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
