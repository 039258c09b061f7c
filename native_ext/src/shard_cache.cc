#include "shard_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include <arrow/filesystem/filesystem.h>
#include <arrow/io/interfaces.h>

#include "remote_filesystem.h"
#include "sha256.h"

namespace shardmill {

namespace {

constexpr int64_t kBlockBytes = 4 << 20;

// Closes its descriptor unless released.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

bool Flock(int fd, int operation) {
  while (flock(fd, operation) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

// Whether `path` still names the file `fd` is open on (eviction may have removed or replaced it).
bool SameFile(int fd, const std::string& path, struct stat* out = nullptr) {
  struct stat open_file {}, named {};
  if (fstat(fd, &open_file) != 0 || stat(path.c_str(), &named) != 0) return false;
  if (out) *out = open_file;
  return open_file.st_dev == named.st_dev && open_file.st_ino == named.st_ino;
}

// Whether the file's bytes are `bytes` long and hash to `sha256`; false on a read error too.
bool Matches(int fd, int64_t bytes, const std::string& sha256) {
  struct stat info {};
  if (fstat(fd, &info) != 0 || info.st_size != bytes) return false;
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<uint8_t> block(kBlockBytes);
  Sha256 hasher;
  int64_t offset = 0;
  while (offset < bytes) {
    const ssize_t n = pread(fd, block.data(), block.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    hasher.Update(block.data(), static_cast<size_t>(n));
    offset += n;
  }
  return hasher.HexDigest() == sha256;
}

bool WriteAll(int fd, const uint8_t* data, int64_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, static_cast<size_t>(size));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= n;
  }
  return true;
}

bool IsSha256(const std::string& hex) {
  return hex.size() == 64 &&
         std::all_of(hex.begin(), hex.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool EndsWith(const std::string& name, const std::string& suffix) {
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ShardCache::ShardCache(CacheOptions options, std::vector<ShardFile> shards)
    : options_(std::move(options)), shards_(std::move(shards)), entries_(shards_.size()) {}

ShardCache::~ShardCache() {
  Stop();
  for (auto& entry : entries_) {
    if (entry.pin >= 0) close(entry.pin);
  }
}

arrow::Result<std::shared_ptr<ShardCache>> ShardCache::Make(CacheOptions options, std::vector<ShardFile> shards) {
  if (options.directory.empty()) return arrow::Status::Invalid("the shard cache needs a directory");
  if (options.max_bytes <= 0) return arrow::Status::Invalid("cache max_bytes must be > 0, got ", options.max_bytes);
  if (options.ahead_windows < 0) return arrow::Status::Invalid("cache ahead_windows must be >= 0");
  if (options.fetch_threads < 1) return arrow::Status::Invalid("cache fetch_threads must be >= 1");
  for (const auto& shard : shards) {
    if (!IsSha256(shard.sha256)) {
      return arrow::Status::Invalid("shard ", shard.path,
                                    ": the manifest gives no SHA-256 to check a cached copy against");
    }
    if (shard.bytes < 0) return arrow::Status::Invalid("shard ", shard.path, ": the manifest gives no size");
  }
  std::error_code error;
  std::filesystem::create_directories(options.directory, error);
  if (error || access(options.directory.c_str(), W_OK | X_OK) != 0) {
    return arrow::Status::IOError("cache directory ", options.directory, " cannot be created or written",
                                  error ? ": " + error.message() : std::string());
  }
  return std::shared_ptr<ShardCache>(new ShardCache(std::move(options), std::move(shards)));
}

arrow::Status ShardCache::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!threads_.empty()) return arrow::Status::OK();
  stopping_ = false;
  for (int i = 0; i < options_.fetch_threads; ++i) threads_.emplace_back([this] { FetchLoop(); });
  return arrow::Status::OK();
}

void ShardCache::Stop() {
  bool started;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    started = !threads_.empty();
    stopping_ = started;
    cancel_ = started;
  }
  if (started) {
    changed_.notify_all();
    for (auto& thread : threads_) thread.join();
    threads_.clear();
    cancel_ = false;
  }
  // A stopped reader holds nothing: its copies may be evicted, and the directory unmounted. Held again
  // (without hashing them again) by the next Acquire.
  std::lock_guard<std::mutex> lock(mutex_);
  for (int64_t index : held_) ReleaseLocked(entries_[index]);
  held_.clear();
}

std::string ShardCache::PathOf(int64_t index, const char* suffix) const {
  return options_.directory + "/" + shards_[index].sha256 + suffix;
}

CacheStats ShardCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void ShardCache::HoldLocked(int64_t index, int pin, const Identity& identity) {
  Entry& entry = entries_[index];
  entry.state = State::kReady;
  entry.pin = pin;
  entry.identity = identity;
  held_.insert(index);
}

void ShardCache::ReleaseLocked(Entry& entry) {
  if (entry.pin >= 0) close(entry.pin);
  entry.pin = -1;
}

void ShardCache::Plan(const std::vector<int64_t>& shards) {
  std::lock_guard<std::mutex> lock(mutex_);
  plan_.clear();
  planned_.clear();
  for (int64_t index : shards) {
    if (index >= 0 && index < static_cast<int64_t>(shards_.size()) && planned_.insert(index).second) {
      plan_.push_back(index);
    }
  }
  for (auto it = held_.begin(); it != held_.end();) {
    if (planned_.count(*it)) {
      ++it;
    } else {
      ReleaseLocked(entries_[*it]);
      it = held_.erase(it);
    }
  }
  for (int64_t index : ahead_failed_) entries_[index].ahead_failed = false;
  ahead_failed_.clear();
  ahead_blocked_ = false;
  changed_.notify_all();
}

int64_t ShardCache::NextAheadLocked() const {
  if (ahead_blocked_) return -1;
  for (int64_t index : plan_) {
    const Entry& entry = entries_[index];
    if (entry.state == State::kAbsent && !entry.ahead_failed) return index;
  }
  return -1;
}

void ShardCache::FetchLoop() {
  while (true) {
    int64_t index = -1;
    Identity identity;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || (index = NextAheadLocked()) >= 0; });
      if (stopping_) return;
      entries_[index].state = State::kFetching;
      identity = entries_[index].identity;
    }
    int pin = -1;
    auto outcome = Materialize(index, /*needed=*/false, &pin, &identity);
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& entry = entries_[index];
    if (outcome.ok() && *outcome == Outcome::kPinned) {
      HoldLocked(index, pin, identity);
    } else {
      // No room, an unwritable directory, or the store failed: the reader's own Acquire fetches it
      // (and reports what fails then); nothing more ahead until the plan moves.
      entry.state = State::kAbsent;
      entry.ahead_failed = true;
      ahead_failed_.push_back(index);
      if (outcome.ok() && *outcome == Outcome::kNoRoom) ahead_blocked_ = true;
    }
    changed_.notify_all();
  }
}

arrow::Result<std::string> ShardCache::Acquire(int64_t index) {
  if (index < 0 || index >= static_cast<int64_t>(shards_.size())) {
    return arrow::Status::IndexError("no shard ", index, " in the cache's dataset");
  }
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    Entry& entry = entries_[index];
    if (entry.state == State::kReady && entry.pin >= 0) return PathOf(index, ".parquet");
    if (entry.state == State::kUncached) return shards_[index].path;
    if (entry.state == State::kFetching) {
      changed_.wait(lock);
      continue;
    }
    // Absent, or cached but released: fetch it or hold it again (checked again unless it is the very
    // file this cache verified).
    entry.state = State::kFetching;
    Identity identity = entry.identity;
    lock.unlock();
    int pin = -1;
    auto outcome = Materialize(index, /*needed=*/true, &pin, &identity);
    lock.lock();
    Entry& done = entries_[index];
    changed_.notify_all();
    if (!outcome.ok()) {
      done.state = State::kAbsent;
      return outcome.status();
    }
    if (*outcome == Outcome::kUncached) {
      done.state = State::kUncached;
      ++stats_.uncached;
      return shards_[index].path;
    }
    HoldLocked(index, pin, identity);
  }
}

arrow::Result<ShardCache::Outcome> ShardCache::Materialize(int64_t index, bool needed, int* pin,
                                                           Identity* identity) {
  Descriptor lock(open(PathOf(index, ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.get() < 0 || !Flock(lock.get(), LOCK_EX)) return Outcome::kUncached;
  const std::string path = PathOf(index, ".parquet");
  const ShardFile& shard = shards_[index];
  for (int attempt = 0; attempt < 3; ++attempt) {
    Descriptor file(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (file.get() < 0) break;  // not cached
    struct stat info {};
    if (!Flock(file.get(), LOCK_SH) || !SameFile(file.get(), path, &info)) continue;  // evicted meanwhile
    const bool known = identity->valid && identity->device == info.st_dev && identity->inode == info.st_ino &&
                       info.st_size == shard.bytes;
    if (known || Matches(file.get(), shard.bytes, shard.sha256)) {
      futimens(file.get(), nullptr);  // most recently used
      *identity = {true, info.st_dev, info.st_ino};
      *pin = file.release();
      std::lock_guard<std::mutex> guard(mutex_);
      if (!known) ++stats_.verified;
      return Outcome::kPinned;
    }
    unlink(path.c_str());  // damaged: fetched again below
    std::lock_guard<std::mutex> guard(mutex_);
    ++stats_.corrupt;
    break;
  }
  return Download(index, needed, pin, identity);
}

arrow::Result<ShardCache::Outcome> ShardCache::Download(int64_t index, bool needed, int* pin, Identity* identity) {
  const ShardFile& shard = shards_[index];
  if (!Reserve(shard.sha256, shard.bytes, needed)) return Outcome::kNoRoom;
  struct Reservation {
    ShardCache* cache;
    const ShardFile& shard;
    bool committed = false;
    ~Reservation() {
      if (!committed) cache->Unreserve(shard.sha256, shard.bytes);
    }
  } reservation{this, shard};
  const std::string part = PathOf(index, ".part");
  Descriptor file(open(part.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (file.get() < 0 || !Flock(file.get(), LOCK_SH)) return Outcome::kUncached;
  auto in_shard = [&](const arrow::Status& status) {
    unlink(part.c_str());
    return status.WithMessage("shard ", shard.path, ": ", status.message());
  };
  std::string internal_path;
  auto fs = OpenFileSystem(shard.path, shard.remote, &internal_path);
  if (!fs.ok()) return in_shard(fs.status());
  auto input = (*fs)->OpenInputStream(internal_path);
  if (!input.ok()) return in_shard(input.status());
  std::vector<uint8_t> block(kBlockBytes);
  Sha256 hasher;
  int64_t total = 0;
  while (true) {
    if (cancel_) return in_shard(arrow::Status::Cancelled("the reader was stopped"));
    auto read = (*input)->Read(kBlockBytes, block.data());
    if (!read.ok()) return in_shard(read.status());
    if (*read == 0) break;
    total += *read;
    if (total > shard.bytes) break;
    hasher.Update(block.data(), static_cast<size_t>(*read));
    if (!WriteAll(file.get(), block.data(), *read)) {
      unlink(part.c_str());  // a full or failing disk: read from the store instead
      return Outcome::kUncached;
    }
  }
  if (total != shard.bytes || hasher.HexDigest() != shard.sha256) {
    return in_shard(arrow::Status::IOError("the store's bytes differ from the manifest's (",
                                           total == shard.bytes ? "SHA-256" : "size", ")"));
  }
  const std::string path = PathOf(index, ".parquet");
  if (!CommitDownload(shard, part, path)) return Outcome::kUncached;
  reservation.committed = true;
  struct stat info {};
  if (fstat(file.get(), &info) != 0) return Outcome::kUncached;
  *identity = {true, info.st_dev, info.st_ino};
  *pin = file.release();
  std::lock_guard<std::mutex> guard(mutex_);
  ++stats_.downloads;
  stats_.downloaded_bytes += total;
  return Outcome::kPinned;
}

void ShardCache::Unreserve(const std::string& key, int64_t bytes) {
  std::lock_guard<std::mutex> room(room_mutex_);
  UnreserveLocked(key, bytes);
}

void ShardCache::UnreserveLocked(const std::string& key, int64_t bytes) {
  downloading_.erase(key);
  reserved_ -= bytes;
}

bool ShardCache::CommitDownload(const ShardFile& shard, const std::string& part, const std::string& path) {
  // The rename and the end of the reservation under one lock: a download counts once when another is
  // making room, as the reservation before the rename and as a cached file after it, never as both.
  std::lock_guard<std::mutex> room(room_mutex_);
  UnreserveLocked(shard.sha256, shard.bytes);
  if (rename(part.c_str(), path.c_str()) == 0) return true;
  unlink(part.c_str());
  return false;
}

bool ShardCache::Reserve(const std::string& key, int64_t bytes, bool needed) {
  std::lock_guard<std::mutex> room(room_mutex_);
  const bool fits = MakeRoomLocked(bytes);
  if (!fits && !needed) return false;
  downloading_.insert(key);
  reserved_ += bytes;
  return true;
}

bool ShardCache::MakeRoomLocked(int64_t bytes) {
  // This process's downloads count at their full size (their .part files are skipped), another
  // process's at the size their .part has reached.
  bytes += reserved_;
  struct Cached {
    std::string path;
    int64_t bytes;
    timespec used;
  };
  std::vector<Cached> cached;
  std::vector<std::string> parts;
  int64_t total = 0;
  DIR* dir = opendir(options_.directory.c_str());
  if (!dir) return false;
  while (const dirent* item = readdir(dir)) {
    const std::string name = item->d_name;
    const bool is_shard = EndsWith(name, ".parquet");
    if (!is_shard && !EndsWith(name, ".part")) continue;
    if (!is_shard && downloading_.count(name.substr(0, name.size() - 5))) continue;
    const std::string path = options_.directory + "/" + name;
    struct stat info {};
    if (stat(path.c_str(), &info) != 0) continue;
    total += info.st_size;
    if (is_shard) {
      cached.push_back({path, info.st_size, info.st_mtim});
    } else {
      parts.push_back(name.substr(0, name.size() - 5));
    }
  }
  closedir(dir);
  // A download a process left behind when it died: no one holds its shard's lock.
  for (const auto& key : parts) {
    Descriptor lock(open((options_.directory + "/" + key + ".lock").c_str(), O_RDWR | O_CLOEXEC));
    if (lock.get() < 0 || flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;
    const std::string part = options_.directory + "/" + key + ".part";
    struct stat info {};
    if (stat(part.c_str(), &info) == 0 && unlink(part.c_str()) == 0) total -= info.st_size;
  }
  std::sort(cached.begin(), cached.end(), [](const Cached& a, const Cached& b) {
    return a.used.tv_sec != b.used.tv_sec ? a.used.tv_sec < b.used.tv_sec : a.used.tv_nsec < b.used.tv_nsec;
  });
  int64_t evicted = 0;
  for (const auto& file : cached) {
    if (total + bytes <= options_.max_bytes) break;
    Descriptor fd(open(file.path.c_str(), O_RDONLY | O_CLOEXEC));
    // Held (a shared flock) by a reader of this or another process: not evicted.
    if (fd.get() < 0 || flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    if (SameFile(fd.get(), file.path) && unlink(file.path.c_str()) == 0) {
      total -= file.bytes;
      ++evicted;
    }
  }
  std::lock_guard<std::mutex> guard(mutex_);
  stats_.evicted += evicted;
  return total + bytes <= options_.max_bytes;
}

}  // namespace shardmill
