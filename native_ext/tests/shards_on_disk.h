// Test data for the reader's parts: a temporary directory of Parquet shards whose rows are known
// (row i: id i, a `width`-byte frame derived from i), and helpers that read batches back checking them.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>

#include "sha256.h"
#include "shard_file.h"
#include "shard_reader.h"

namespace shardmill::testing {

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
      EXPECT_TRUE(out.ok());
      auto schema = arrow::schema({arrow::field("id", arrow::int64(), false),
                                   arrow::field("frame", arrow::fixed_size_binary(width), false)});
      auto writer = parquet::arrow::FileWriter::Open(*schema, arrow::default_memory_pool(), *out,
                                                     parquet::WriterProperties::Builder().disable_dictionary()->build());
      EXPECT_TRUE(writer.ok());
      for (int64_t rows : row_groups_per_shard[s]) {
        arrow::Int64Builder ids;
        arrow::FixedSizeBinaryBuilder frames(arrow::fixed_size_binary(width));
        for (int64_t r = 0; r < rows; ++r, ++next_id) {
          EXPECT_TRUE(ids.Append(next_id).ok());
          EXPECT_TRUE(frames.Append(Frame(next_id, width).data()).ok());
        }
        std::shared_ptr<arrow::Array> id_array, frame_array;
        EXPECT_TRUE(ids.Finish(&id_array).ok() && frames.Finish(&frame_array).ok());
        EXPECT_TRUE((*writer)->WriteTable(*arrow::Table::Make(schema, {id_array, frame_array}), rows + 1).ok());
      }
      EXPECT_TRUE((*writer)->Close().ok());
      const std::string bytes = Contents(shard.path);
      Sha256 hasher;
      hasher.Update(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      shard.sha256 = hasher.HexDigest();
      shard.bytes = static_cast<int64_t>(bytes.size());
      shards.push_back(std::move(shard));
    }
  }
  ~ShardsOnDisk() {
    for (const auto& shard : shards) std::remove(shard.path.c_str());
    rmdir(dir.c_str());
  }
  static std::string Contents(const std::string& path) {
    std::string bytes;
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      char block[65536];
      size_t n;
      while ((n = std::fread(block, 1, sizeof(block), f)) > 0) bytes.append(block, n);
      std::fclose(f);
    }
    return bytes;
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
inline std::vector<Served> ReadBatches(shardmill::ShardReader& reader, int width, int64_t batches = -1) {
  std::vector<Served> served;
  while (batches < 0 || static_cast<int64_t>(served.size()) < batches) {
    auto plan = reader.PlanNext();
    if (plan.epoch < 0) break;
    std::vector<uint64_t> seeds(static_cast<size_t>(plan.rows));
    std::vector<int64_t> ids(static_cast<size_t>(plan.rows)), records(static_cast<size_t>(plan.rows));
    std::vector<uint8_t> frames(static_cast<size_t>(plan.rows * width));
    auto view = reader.ViewNext(plan, seeds.data());
    EXPECT_TRUE(view.ok());
    if (!view.ok()) break;
    if (view->owner) {
      std::memcpy(ids.data(), view->columns[0], plan.rows * sizeof(int64_t));
      std::memcpy(frames.data(), view->columns[1], plan.rows * width);
      std::memcpy(records.data(), view->record_index, plan.rows * sizeof(int64_t));
    } else {
      EXPECT_TRUE(reader.FillNext(plan, {reinterpret_cast<uint8_t*>(ids.data()), frames.data()}, records.data(),
                            seeds.data()).ok());
    }
    for (int64_t r = 0; r < plan.rows; ++r) {
      EXPECT_TRUE(ids[r] == records[r]);
      EXPECT_TRUE(std::memcmp(frames.data() + r * width, ShardsOnDisk::Frame(ids[r], width).data(), width) == 0);
    }
    served.push_back({plan.epoch, std::move(records)});
  }
  return served;
}

inline shardmill::ReaderOptions OptionsFor(const ShardsOnDisk& data) {
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

inline std::unique_ptr<shardmill::ShardReader> Started(const shardmill::ReaderOptions& options) {
  auto reader = shardmill::ShardReader::Make(options);
  EXPECT_TRUE(reader.ok());
  if (!reader.ok()) return nullptr;
  EXPECT_TRUE((*reader)->Start().ok());
  return std::move(*reader);
}

}  // namespace shardmill::testing
