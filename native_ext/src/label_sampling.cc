#include "label_sampling.h"

#include <algorithm>
#include <cmath>

#include "keyed_hash.h"

namespace shardmill {

namespace {

constexpr uint64_t kStreamLabelReservoir = 9;  // STREAM_LABEL_RESERVOIR in keyed_hash.py
constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;

class GapDraws {
 public:
  GapDraws(uint64_t seed, uint64_t key, uint64_t gap) : seed_(seed), key_(key), gap_(gap) {}
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * kTwoToMinus53; }
  int64_t Below(int64_t n) { return static_cast<int64_t>(((Next() >> 32) * static_cast<uint64_t>(n)) >> 32); }
  int64_t count() const { return counter_; }

 private:
  uint64_t Next() { return HashWords(seed_, kStreamLabelReservoir, {key_, gap_, ++counter_}); }
  uint64_t seed_, key_, gap_;
  uint64_t counter_ = 0;
};

int64_t RoundHalfUp(double x) { return static_cast<int64_t>(std::floor(x + 0.5)); }

}  // namespace

int64_t ReservoirSample(int64_t m, int64_t k, uint64_t seed, uint64_t partition_key, uint64_t gap,
                        std::vector<int64_t>* out) {
  if (k <= 0 || m <= 0) return 0;
  if (m <= k) {
    for (int64_t i = 0; i < m; ++i) out->push_back(i);
    return 0;
  }
  GapDraws draws(seed, partition_key, gap);
  std::vector<int64_t> reservoir(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) reservoir[i] = i;
  double w = std::exp(std::log(draws.Uniform()) / static_cast<double>(k));
  int64_t i = k - 1;
  while (true) {
    double skip = std::floor(std::log(draws.Uniform()) / std::log1p(-w));
    if (static_cast<double>(i) + skip + 1 >= static_cast<double>(m)) break;
    i += static_cast<int64_t>(skip) + 1;
    reservoir[draws.Below(k)] = i;
    w *= std::exp(std::log(draws.Uniform()) / static_cast<double>(k));
  }
  std::sort(reservoir.begin(), reservoir.end());
  out->insert(out->end(), reservoir.begin(), reservoir.end());
  return draws.count();
}

LabelSample SampleLabels(const uint8_t* is_target, int64_t n, double ratio, bool adaptive, uint64_t seed,
                         uint64_t partition_key) {
  LabelSample result;
  int64_t gap_start = 0;
  int64_t gap = 0;
  int64_t targets_emitted = 0;
  std::vector<int64_t> chosen;
  for (int64_t pos = 0; pos <= n; ++pos) {
    const bool end = pos == n;
    if (!end && !is_target[pos]) continue;
    // The gap [gap_start, pos) closes at a target (or at the end of the partition).
    const int64_t k = adaptive ? std::max<int64_t>(0, RoundHalfUp(ratio * static_cast<double>(targets_emitted + 1) -
                                                                  static_cast<double>(result.non_targets_out)))
                               : RoundHalfUp(ratio);
    result.reservoir_sizes.push_back(k);
    chosen.clear();
    result.draws += ReservoirSample(pos - gap_start, k, seed, partition_key, static_cast<uint64_t>(gap), &chosen);
    for (int64_t offset : chosen) result.emitted.push_back(gap_start + offset);
    result.non_targets_out += static_cast<int64_t>(chosen.size());
    if (!end) {
      result.emitted.push_back(pos);
      ++targets_emitted;
    }
    gap_start = pos + 1;
    ++gap;
  }
  return result;
}

}  // namespace shardmill
