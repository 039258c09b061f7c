// The decode threads: every window of a rank's slice arranged in epoch order ahead of the consumer,
// whatever the thread count and prefetch depth, from any resume point; a bad shard fails its window.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "epoch_order.h"
#include "shards_on_disk.h"
#include "window_prefetch.h"

namespace {

using shardmill::ColumnSpec;
using shardmill::DatasetLayout;
using shardmill::EpochOrder;
using shardmill::RowLocation;
using shardmill::ShardGroups;
using shardmill::WindowPrefetcher;
using shardmill::testing::ShardsOnDisk;

struct Prefetch {
  std::shared_ptr<const DatasetLayout> layout;
  std::unique_ptr<WindowPrefetcher> prefetcher;
};

Prefetch Make(const ShardsOnDisk& data, const shardmill::ReaderOptions& options, int64_t rank_start, int64_t rank_end) {
  std::vector<int64_t> rows;
  for (const auto& shard : options.shards) rows.insert(rows.end(), shard.row_group_rows.begin(), shard.row_group_rows.end());
  Prefetch p;
  p.layout = std::make_shared<DatasetLayout>(std::move(rows));
  auto groups = std::make_unique<ShardGroups>(options.shards, std::vector<ColumnSpec>{{"id", arrow::int64(), 8}});
  p.prefetcher = std::make_unique<WindowPrefetcher>(options, p.layout, std::move(groups), rank_start, rank_end);
  return p;
}

// The record index of every epoch position, as EpochOrder defines it.
std::vector<int64_t> Expected(const DatasetLayout& layout, std::shared_ptr<const DatasetLayout> shared, uint64_t seed,
                              int64_t epoch, int64_t window_row_groups) {
  EpochOrder order(shared, seed, epoch, window_row_groups, true);
  std::vector<int64_t> records(static_cast<size_t>(layout.num_rows()));
  for (int64_t w = 0; w < order.num_windows(); ++w) {
    auto window = order.Window(w);
    std::vector<RowLocation> where(static_cast<size_t>(window.end() - window.start()));
    window.LocateRange(window.start(), window.end() - window.start(), where.data());
    for (size_t i = 0; i < where.size(); ++i) {  // LocateRange numbers row groups within the window
      records[window.start() + i] = layout.row_group_offsets[window.row_groups()[where[i].row_group]] + where[i].row;
    }
  }
  return records;
}

TEST(WindowPrefetch, ArrangesEveryRowOfTheSliceInEpochOrder) {
  ShardsOnDisk data({{40, 17, 33}, {0}, {25, 60}, {9}}, 4);  // 184 rows
  for (int threads : {1, 3}) {
    for (int64_t prefetch : {0, 2}) {
      auto options = shardmill::testing::OptionsFor(data);
      options.num_threads = threads;
      options.prefetch_windows = prefetch;
      auto p = Make(data, options, 50, 150);
      for (int64_t start : {0, 37}) {  // from the slice's start, and resumed inside it
        ASSERT_TRUE(p.prefetcher->Start(1, start).ok());
        auto expected = Expected(*p.layout, p.layout, options.seed, 1, options.window_row_groups);
        int64_t position = 50 + start;
        while (position < 150) {
          auto slot = p.prefetcher->ReadyWindow(1, position, position);
          ASSERT_TRUE(slot.ok()) << slot.status().ToString();
          const auto& window = **slot;
          ASSERT_TRUE(window.arranged_start <= position && position < window.arranged_end);
          const auto* ids = reinterpret_cast<const int64_t*>(window.arranged[0].data());
          const auto* records = reinterpret_cast<const int64_t*>(window.arranged_index.data());
          auto ready = p.prefetcher->ReadyWindow(1, position, window.arranged_end - 1);
          ASSERT_TRUE(ready.ok());
          for (int64_t q = position; q < window.arranged_end; ++q) {
            const int64_t row = q - window.arranged_start;
            EXPECT_EQ(records[row], expected[q]) << "position " << q;
            EXPECT_EQ(ids[row], expected[q]);  // the id column holds the record index
          }
          position = window.arranged_end;
        }
        p.prefetcher->Stop();
        p.prefetcher->Stop();  // idempotent
      }
    }
  }
}

TEST(WindowPrefetch, ABadShardFailsOnlyTheWindowsThatNeedIt) {
  ShardsOnDisk data({{30}, {20}}, 8);
  auto options = shardmill::testing::OptionsFor(data);
  options.shuffle = false;
  options.window_row_groups = 1;
  options.shards[1].row_group_rows = {21};  // the file holds 20
  auto p = Make(data, options, 0, 51);
  ASSERT_TRUE(p.prefetcher->Start(0, 0).ok());
  auto first = p.prefetcher->ReadyWindow(0, 0, 29);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = p.prefetcher->ReadyWindow(0, 30, 30);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("shard-1.parquet"), std::string::npos) << second.status().ToString();
}

}  // namespace
