// A local cache of a remote dataset's shards: whole shard files in a directory on this host, fetched
// ahead of the reader's order, used only once their bytes hash to the manifest's SHA-256, shared by every
// reader process of the host, bounded in size.
//
// Names: `<sha256>.parquet` (content-addressed: a new output's changed shard is a new name, an unchanged
// one is shared), `<sha256>.lock` (taken exclusively while one process fetches or checks that shard:
// one download per shard per host), `<sha256>.part` (a download in progress).
// Sharing: a process holds a shared flock on every cached file it reads now or will read next (its plan);
// eviction takes an exclusive flock without waiting, so it removes only files no process holds, least
// recently used first (mtime, set on every use). A file removed while a reader still has it open stays
// readable through that descriptor (POSIX), so eviction never breaks a read in flight.
// Bound: max_bytes caps the files fetched ahead. A shard needed now is fetched even when everything
// cached is held (the excess goes as soon as those shards leave the plans).
// Failure: the store's own failure or a download whose bytes differ from the manifest's digest is the
// read's error; a cache directory that cannot be written (full, read-only) is not: that shard is read from
// the store instead (Stats::uncached).
//
// Threads start in Start(), never in the constructor; Stop() is idempotent and the destructor calls it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <arrow/result.h>
#include <arrow/status.h>

#include "shard_file.h"

namespace shardmill {

struct CacheOptions {
  std::string directory;      // empty: no cache
  int64_t max_bytes = 0;      // cached shard bytes this process fetches ahead up to (> 0)
  int64_t ahead_windows = 4;  // windows beyond the decoded ones whose shards are fetched ahead
  int fetch_threads = 2;      // concurrent downloads ahead of the decode threads
};

// Counts of this cache object (one reader), for reports and tests.
struct CacheStats {
  int64_t downloads = 0;          // shards fetched from the store
  int64_t downloaded_bytes = 0;
  int64_t verified = 0;           // shards found on disk (fetched earlier, or by another process) and checked
  int64_t corrupt = 0;            // cached files whose bytes did not match: removed and fetched again
  int64_t evicted = 0;            // files removed to make room
  int64_t uncached = 0;           // shards read from the store because the directory could not take them
};

class ShardCache {
 public:
  // `shards` each with the manifest's sha256 and bytes. Creates the directory; starts nothing.
  static arrow::Result<std::shared_ptr<ShardCache>> Make(CacheOptions options, std::vector<ShardFile> shards);
  ~ShardCache();
  ShardCache(const ShardCache&) = delete;
  ShardCache& operator=(const ShardCache&) = delete;

  arrow::Status Start();
  // Stops the fetch threads and releases every held copy (idempotent).
  void Stop();

  // The path to open shard `index` at: its verified cached copy (fetched now if it is not cached, or
  // waiting for the fetch under way here or in another process), held until it leaves the plan; the
  // store's own path when the directory could not take it.
  arrow::Result<std::string> Acquire(int64_t index);
  // The shards the reader reads next, in the order it reads them: they are fetched ahead in that order
  // (as far as max_bytes allows) and held; the others are released to eviction.
  void Plan(const std::vector<int64_t>& shards);
  CacheStats stats() const;
  const CacheOptions& options() const { return options_; }

 private:
  enum class State { kAbsent, kFetching, kReady, kUncached };
  // The cached file this object verified: held again without hashing it again while it is that file.
  struct Identity {
    bool valid = false;
    dev_t device = 0;
    ino_t inode = 0;
  };
  struct Entry {
    State state = State::kAbsent;
    int pin = -1;               // a descriptor of the cached file holding a shared flock (held), or -1
    Identity identity;
    bool ahead_failed = false;  // a fetch ahead failed or found no room: Acquire fetches it (until the next plan)
  };
  // The outcome of materializing one shard.
  enum class Outcome { kPinned, kNoRoom, kUncached };

  ShardCache(CacheOptions options, std::vector<ShardFile> shards);
  std::string PathOf(int64_t index, const char* suffix) const;
  // Makes shard `index`'s cached copy exist and holds it (*pin): found and verified (unless it is
  // *identity), or fetched. `needed`: fetched even without room. Runs without mutex_ (kFetching marks the
  // shard as this thread's); the shard's lock file serializes it with other processes.
  arrow::Result<Outcome> Materialize(int64_t index, bool needed, int* pin, Identity* identity);
  // Downloads shard `index` into a held, verified file at its cache path.
  arrow::Result<Outcome> Download(int64_t index, bool needed, int* pin, Identity* identity);
  // Reserves room for a download of `bytes` (evicting unheld files, least recently used first); false
  // when they do not fit, unless `needed`.
  bool Reserve(const std::string& key, int64_t bytes, bool needed);
  void Unreserve(const std::string& key, int64_t bytes);
  void UnreserveLocked(const std::string& key, int64_t bytes);  // room_mutex_ held
  // Renames a finished download's `part` to `path` and ends its reservation; false (and `part` removed)
  // when the rename fails.
  bool CommitDownload(const ShardFile& shard, const std::string& part, const std::string& path);
  // Evicts unheld files until `bytes` more than the reserved ones fit; whether they do.
  bool MakeRoomLocked(int64_t bytes);
  // The next planned shard to fetch ahead, or -1.
  int64_t NextAheadLocked() const;
  void FetchLoop();
  // Shard `index` is cached and held through `pin` (a descriptor with a shared flock).
  void HoldLocked(int64_t index, int pin, const Identity& identity);
  void ReleaseLocked(Entry& entry);

  const CacheOptions options_;
  const std::vector<ShardFile> shards_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Entry> entries_;
  std::vector<int64_t> plan_;
  std::unordered_set<int64_t> planned_;
  std::unordered_set<int64_t> held_;   // entries with a pin
  std::vector<int64_t> ahead_failed_;  // entries marked ahead_failed
  bool ahead_blocked_ = false;         // the cache is full of held files: nothing more ahead until the plan moves
  CacheStats stats_;
  std::mutex room_mutex_;  // one eviction pass at a time in this process; guards the two below
  std::unordered_set<std::string> downloading_;  // keys of this process's downloads under way
  int64_t reserved_ = 0;                         // their sizes
  bool stopping_ = false;
  std::atomic<bool> cancel_ = false;  // downloads under way give up (Stop)
  std::vector<std::thread> threads_;
};

}  // namespace shardmill
