// SHA-256 against FIPS 180-4's examples and, for every split of the input into updates, against itself
// with the portable rounds (the SHA-instruction path runs where the CPU has it).
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sha256.h"

namespace {

using shardmill::Sha256;

std::string Digest(const std::string& text, Sha256::Engine engine = Sha256::Engine::kBest) {
  Sha256 hasher(engine);
  hasher.Update(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  return hasher.HexDigest();
}

TEST(Sha256, MatchesTheStandardsExamples) {
  for (auto engine : {Sha256::Engine::kBest, Sha256::Engine::kPortable}) {
    EXPECT_EQ(Digest("", engine), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(Digest("abc", engine), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(Digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", engine),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(Digest(std::string(1'000'000, 'a'), engine),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
}

TEST(Sha256, AnySplitIntoUpdatesGivesTheSameDigest) {
  std::mt19937_64 random(7);
  for (size_t size : {1, 55, 56, 63, 64, 65, 119, 120, 128, 1000, 4099}) {
    std::vector<uint8_t> data(size);
    for (auto& byte : data) byte = static_cast<uint8_t>(random());
    Sha256 whole(Sha256::Engine::kPortable);
    whole.Update(data.data(), data.size());
    const std::string expected = whole.HexDigest();
    for (int trial = 0; trial < 20; ++trial) {
      Sha256 pieces;
      size_t done = 0;
      while (done < size) {
        const size_t take = std::min<size_t>(size - done, random() % 150);
        pieces.Update(data.data() + done, take);
        done += take;
      }
      EXPECT_EQ(pieces.HexDigest(), expected) << size << " bytes";
    }
  }
}

}  // namespace
