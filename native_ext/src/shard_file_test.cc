// A shard's Parquet file checked against the manifest, its columns bound by name and type, and the
// dataset's row groups numbered across shards and decoded through the recycling pool.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shard_file.h"
#include "shards_on_disk.h"

namespace {

using shardmill::ColumnSpec;
using shardmill::ShardFile;
using shardmill::ShardGroups;
using shardmill::ShardHandle;
using shardmill::testing::ShardsOnDisk;

bool Mentions(const arrow::Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST(ShardFile, OpenChecksTheFooterAgainstTheManifestsCounts) {
  ShardsOnDisk data({{30, 20}}, 8);
  EXPECT_TRUE(ShardHandle::Open(data.shards[0]).ok());
  for (const auto& wrong : std::vector<std::vector<int64_t>>{{30, 21}, {30}, {30, 20, 0}, {20, 30}}) {
    auto opened = ShardHandle::Open(ShardFile{data.shards[0].path, wrong});
    ASSERT_FALSE(opened.ok());
    EXPECT_TRUE(Mentions(opened.status(), "row group")) << opened.status().ToString();
  }
  EXPECT_FALSE(ShardHandle::Open(ShardFile{data.dir + "/missing.parquet", {1}}).ok());
}

TEST(ShardFile, BindRefusesAMissingColumnAndAnotherType) {
  ShardsOnDisk data({{10}}, 8);
  auto handle = ShardHandle::Open(data.shards[0]);
  ASSERT_TRUE(handle.ok());
  EXPECT_TRUE((*handle)->Bind({{"id", arrow::int64(), 8}, {"frame", arrow::fixed_size_binary(8), 8}}).ok());
  auto missing = (*handle)->Bind({{"nope", arrow::int64(), 8}});
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(Mentions(missing, "nope")) << missing.ToString();
  auto other_type = (*handle)->Bind({{"frame", arrow::fixed_size_binary(9), 9}});
  EXPECT_FALSE(other_type.ok());
  EXPECT_TRUE(Mentions(other_type, "frame")) << other_type.ToString();
}

TEST(ShardFile, GroupsNumberTheRowGroupsAcrossShardsAndDecodeEachOne) {
  const int width = 12;
  ShardsOnDisk data({{30, 20}, {0, 25}, {7}}, width);  // an empty row group in the middle
  const std::vector<ColumnSpec> columns = {{"id", arrow::int64(), 8}, {"frame", arrow::fixed_size_binary(width), width}};
  ShardGroups groups(data.shards, columns);
  auto handles = groups.NewHandles();
  const std::vector<int64_t> rows = {30, 20, 0, 25, 7};
  int64_t next_id = 0;
  for (int64_t g = 0; g < static_cast<int64_t>(rows.size()); ++g) {
    auto decoded = groups.Decode(g, &handles);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ASSERT_EQ(decoded->size(), 2u);
    for (int64_t r = 0; r < rows[g]; ++r, ++next_id) {
      int64_t id = 0;
      std::memcpy(&id, (*decoded)[0]->data() + r * 8, 8);
      EXPECT_EQ(id, next_id);
      EXPECT_EQ(std::memcmp((*decoded)[1]->data() + r * width, ShardsOnDisk::Frame(next_id, width).data(), width), 0);
    }
  }
  EXPECT_EQ(next_id, 82);
}

TEST(ShardFile, AShardThatDisagreesWithTheManifestIsAnErrorNamingIt) {
  ShardsOnDisk data({{30}, {20}}, 8);
  std::vector<ShardFile> shards = data.shards;
  shards[1].row_group_rows = {21};
  ShardGroups groups(shards, {{"id", arrow::int64(), 8}});
  auto handles = groups.NewHandles();
  EXPECT_TRUE(groups.Decode(0, &handles).ok());
  auto failed = groups.Decode(1, &handles);
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(Mentions(failed.status(), "shard-1.parquet")) << failed.status().ToString();
}

}  // namespace
