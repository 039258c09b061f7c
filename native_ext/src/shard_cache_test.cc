// The shard cache on local "remote" shards: fetched once and named by digest, found again by another
// cache (another process), a damaged copy fetched again, a store whose bytes differ refused, least
// recently used unheld copies evicted to stay within max_bytes, one download for concurrent readers,
// and a reader serving the same rows through the cache as without it.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "shard_cache.h"
#include "shards_on_disk.h"

namespace {

using shardmill::CacheOptions;
using shardmill::ShardCache;
using shardmill::testing::ShardsOnDisk;

struct CacheDir {
  std::string path = std::filesystem::temp_directory_path() / ("shard-cache-" + std::to_string(getpid()) + "-" +
                                                                std::to_string(counter++));
  ~CacheDir() { std::filesystem::remove_all(path); }
  std::vector<std::string> Shards() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path)) {
      if (entry.path().extension() == ".parquet") names.push_back(entry.path().filename());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  static inline int counter = 0;
};

std::shared_ptr<ShardCache> MakeCache(const CacheDir& dir, const ShardsOnDisk& data, int64_t max_bytes = 1 << 30,
                                      std::vector<shardmill::ShardFile> shards = {}) {
  CacheOptions options;
  options.directory = dir.path;
  options.max_bytes = max_bytes;
  auto cache = ShardCache::Make(options, shards.empty() ? data.shards : shards);
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  return cache.ok() ? *cache : nullptr;
}

TEST(ShardCache, FetchesAShardOnceAndNamesItByItsDigest) {
  ShardsOnDisk data({{100, 100}, {50}}, 64);
  CacheDir dir;
  auto cache = MakeCache(dir, data);
  auto path = cache->Acquire(1);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(*path, dir.path + "/" + data.shards[1].sha256 + ".parquet");
  EXPECT_EQ(ShardsOnDisk::Contents(*path), ShardsOnDisk::Contents(data.shards[1].path));
  ASSERT_TRUE(cache->Acquire(1).ok());
  EXPECT_EQ(cache->stats().downloads, 1);
  EXPECT_EQ(cache->stats().downloaded_bytes, data.shards[1].bytes);
}

TEST(ShardCache, AnotherCacheOnTheDirectoryVerifiesInsteadOfFetching) {
  ShardsOnDisk data({{100}}, 64);
  CacheDir dir;
  ASSERT_TRUE(MakeCache(dir, data)->Acquire(0).ok());
  auto second = MakeCache(dir, data);
  ASSERT_TRUE(second->Acquire(0).ok());
  EXPECT_EQ(second->stats().downloads, 0);
  EXPECT_EQ(second->stats().verified, 1);
}

TEST(ShardCache, ADamagedCopyIsFetchedAgain) {
  ShardsOnDisk data({{100}}, 64);
  CacheDir dir;
  auto path = MakeCache(dir, data)->Acquire(0);
  ASSERT_TRUE(path.ok());
  {
    FILE* f = std::fopen(path->c_str(), "r+b");
    std::fseek(f, data.shards[0].bytes / 2, SEEK_SET);
    std::fputc(~std::fgetc(f) & 0xff, f);  // one byte flipped in place
    std::fclose(f);
  }
  auto second = MakeCache(dir, data);
  ASSERT_TRUE(second->Acquire(0).ok());
  EXPECT_EQ(second->stats().corrupt, 1);
  EXPECT_EQ(second->stats().downloads, 1);
  EXPECT_EQ(ShardsOnDisk::Contents(*path), ShardsOnDisk::Contents(data.shards[0].path));
}

TEST(ShardCache, DownloadsLeftByADeadProcessAreReplacedOrRemoved) {
  ShardsOnDisk data({{100}, {100}}, 64);
  CacheDir dir;
  std::filesystem::create_directories(dir.path);
  for (const auto& shard : data.shards) {  // what a reader killed mid-download leaves (its locks went with it)
    FILE* f = std::fopen((dir.path + "/" + shard.sha256 + ".part").c_str(), "wb");
    std::fputs("half a shard", f);
    std::fclose(f);
    std::fclose(std::fopen((dir.path + "/" + shard.sha256 + ".lock").c_str(), "wb"));
  }
  auto path = MakeCache(dir, data)->Acquire(0);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(ShardsOnDisk::Contents(*path), ShardsOnDisk::Contents(data.shards[0].path));
  for (const auto& shard : data.shards) {
    EXPECT_FALSE(std::filesystem::exists(dir.path + "/" + shard.sha256 + ".part"));
  }
}

TEST(ShardCache, AStoreWhoseBytesDifferFromTheManifestIsAnErrorNamingTheShard) {
  ShardsOnDisk data({{100}}, 64);
  CacheDir dir;
  auto shards = data.shards;
  shards[0].sha256 = std::string(64, '0');
  auto path = MakeCache(dir, data, 1 << 30, shards)->Acquire(0);
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.status().message().find(data.shards[0].path), std::string::npos) << path.status().ToString();
  EXPECT_NE(path.status().message().find("SHA-256"), std::string::npos);
  EXPECT_TRUE(dir.Shards().empty());
}

TEST(ShardCache, EvictsTheLeastRecentlyUsedUnheldCopiesToStayWithinItsBound) {
  ShardsOnDisk data({{200}, {200}, {200}, {200}}, 256);
  int64_t largest = 0;
  for (const auto& shard : data.shards) largest = std::max(largest, shard.bytes);
  CacheDir dir;
  auto cache = MakeCache(dir, data, 2 * largest + 1);
  cache->Plan({0, 1});
  ASSERT_TRUE(cache->Acquire(0).ok());
  ASSERT_TRUE(cache->Acquire(1).ok());
  // Both held: a third shard needed now is fetched over the bound, nothing held is removed.
  ASSERT_TRUE(cache->Acquire(2).ok());
  EXPECT_EQ(dir.Shards().size(), 3u);
  EXPECT_EQ(cache->stats().evicted, 0);
  // Shard 1 leaves the plan (released), 0 was used less recently but is held: 1 goes for shard 3.
  cache->Plan({0, 3});
  ASSERT_TRUE(cache->Acquire(3).ok());
  EXPECT_GE(cache->stats().evicted, 1);
  EXPECT_TRUE(std::filesystem::exists(dir.path + "/" + data.shards[0].sha256 + ".parquet"));
  EXPECT_TRUE(std::filesystem::exists(dir.path + "/" + data.shards[3].sha256 + ".parquet"));
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/" + data.shards[1].sha256 + ".parquet"));
}

TEST(ShardCache, FetchesThePlanAheadOfTheReaderUpToItsBound) {
  ShardsOnDisk data({{200}, {200}, {200}, {200}}, 256);
  CacheDir dir;
  auto cache = MakeCache(dir, data, data.shards[0].bytes + data.shards[1].bytes + data.shards[2].bytes / 2);
  ASSERT_TRUE(cache->Start().ok());
  cache->Plan({0, 1, 2, 3});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);  // a loaded CI machine
  while (cache->stats().downloads < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  cache->Stop();
  EXPECT_EQ(cache->stats().downloads, 2);  // the first two fit; held, they are not evicted for the rest
  EXPECT_EQ(dir.Shards().size(), 2u);
}

TEST(ShardCache, ConcurrentReadersOfOneShardDownloadItOnce) {
  ShardsOnDisk data({{400}}, 512);
  CacheDir dir;
  std::vector<std::shared_ptr<ShardCache>> caches;  // separate caches: as separate processes, through the lock file
  for (int i = 0; i < 4; ++i) caches.push_back(MakeCache(dir, data));
  std::vector<std::thread> threads;
  for (auto& cache : caches) {
    threads.emplace_back([&cache] { EXPECT_TRUE(cache->Acquire(0).ok()); });
  }
  for (auto& thread : threads) thread.join();
  int64_t downloads = 0;
  for (auto& cache : caches) downloads += cache->stats().downloads;
  EXPECT_EQ(downloads, 1);
}

TEST(ShardCache, RefusesShardsWithoutADigestAndADirectoryItCannotCreate) {
  ShardsOnDisk data({{10}}, 8);
  CacheDir dir;
  auto shards = data.shards;
  shards[0].sha256 = "";
  CacheOptions options;
  options.directory = dir.path;
  options.max_bytes = 1 << 20;
  EXPECT_FALSE(ShardCache::Make(options, shards).ok());
  options.directory = data.shards[0].path + "/cache";  // below a file
  auto made = ShardCache::Make(options, data.shards);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find(options.directory), std::string::npos);
}

TEST(ShardCache, AReaderServesTheSameRowsThroughTheCache) {
  ShardsOnDisk data({{100, 100}, {100}, {50, 50}}, 64);
  CacheDir dir;
  auto read = [&](bool cached) {
    shardmill::ReaderOptions options = shardmill::testing::OptionsFor(data);
    if (cached) {
      options.cache.directory = dir.path;
      options.cache.max_bytes = 1 << 30;
    }
    auto reader = shardmill::ShardReader::Make(options);
    EXPECT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_TRUE((*reader)->Start().ok());
    auto served = shardmill::testing::ReadBatches(**reader, 64);
    if (cached) EXPECT_EQ((*reader)->cache()->stats().downloads, 3);
    std::vector<int64_t> records;
    for (const auto& batch : served) records.insert(records.end(), batch.records.begin(), batch.records.end());
    return records;
  };
  EXPECT_EQ(read(true), read(false));
  EXPECT_EQ(dir.Shards().size(), 3u);
}

}  // namespace
