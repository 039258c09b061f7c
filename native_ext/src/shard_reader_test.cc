// The reader assembled from its parts: every row once across ranks, any thread count, exact resume, bad shards as errors.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shard_reader.h"
#include "shards_on_disk.h"

namespace {

using namespace shardmill::testing;
// Narrow rows take the gather path, wide rows the scatter path: both must
// serve each epoch's rows once across ranks, the same whatever the thread
// count, and continue exactly from a restored (epoch, position).
TEST(ShardReader, ReaderServesEveryRowOnceAcrossRanksAndResumesExactly) {
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
      EXPECT_TRUE(one->rows_per_epoch() == total / 3);
      auto a = ReadBatches(*one, width), b = ReadBatches(*three, width);
      EXPECT_TRUE(a.size() == b.size());
      for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) EXPECT_TRUE(a[i].records == b[i].records);
      for (const auto& batch : a) {
        for (int64_t record : batch.records) EXPECT_TRUE(seen_per_epoch[batch.epoch].insert(record).second);
      }
    }
    EXPECT_TRUE(seen_per_epoch.size() == 2);
    for (const auto& [epoch, seen] : seen_per_epoch) {
      EXPECT_TRUE(static_cast<int64_t>(seen.size()) == total / 3 * 3);
      EXPECT_TRUE(*seen.rbegin() < total && *seen.begin() >= 0);
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
    EXPECT_TRUE(rest.size() + 5 == all.size());
    for (size_t i = 0; i < rest.size() && i + 5 < all.size(); ++i) EXPECT_TRUE(rest[i].records == all[i + 5].records);
  }
}

// A shard whose footer disagrees with the stated counts: an error for the
// batch that needs it, never an abort; a stopped reader refuses batches.
TEST(ShardReader, ReaderReportsBadShardsAsErrorsOfTheirBatches) {
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
  EXPECT_TRUE(rows == 23);  // the first shard's whole batches; then the second shard's window fails
  EXPECT_TRUE(!failure.ok() && failure.message().find("shard-1.parquet") != std::string::npos);
  reader->Stop();
  auto plan = reader->PlanNext();
  std::vector<uint64_t> seeds(static_cast<size_t>(plan.rows));
  EXPECT_TRUE(!reader->ViewNext(plan, seeds.data()).ok());
}

}  // namespace
