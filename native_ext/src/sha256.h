// SHA-256 (FIPS 180-4), incrementally: the manifest names every shard's digest, and a cached copy of a
// shard is used only once its bytes hash to it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace shardmill {

class Sha256 {
 public:
  // kPortable: the plain rounds even where the CPU has SHA instructions (the tests compare the two).
  enum class Engine { kBest, kPortable };
  explicit Sha256(Engine engine = Engine::kBest);
  void Update(const uint8_t* data, size_t size);
  // The digest as 64 lowercase hex digits (as manifests write it); the hasher is spent afterwards.
  std::string HexDigest();

 private:
  void Compress(const uint8_t* block, size_t blocks);

  bool portable_;
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> pending_{};
  size_t pending_size_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace shardmill
