// The global order of one epoch over a dataset's row groups, and its windows.
//
// Row groups (numbered across all shards in manifest order) are permuted by a
// Feistel permutation keyed by (seed, epoch); consecutive runs of
// `window_row_groups` permuted row groups form windows, and the rows of each
// window are permuted again, keyed by (seed, epoch, window). The epoch is the
// concatenation of the shuffled windows. A reader's rank r of k reads epoch
// positions [r * (N / k), (r + 1) * (N / k)): ranks are disjoint, equal,
// cover all but at most k - 1 rows, and each decodes about 1/k of the row
// groups. Memory is O(row groups); nothing is O(rows).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "feistel.h"

namespace shardmill {

struct RowLocation {
  int64_t row_group;  // global row-group number
  int64_t row;        // row within that row group
};

// Rows per row group of every shard, flattened in manifest order.
struct DatasetLayout {
  std::vector<int64_t> row_group_rows;
  std::vector<int64_t> row_group_offsets;  // global index of each row group's first row (+ total)

  explicit DatasetLayout(std::vector<int64_t> rows);
  int64_t num_row_groups() const { return static_cast<int64_t>(row_group_rows.size()); }
  int64_t num_rows() const { return row_group_offsets.back(); }
};

// One window of an epoch: its row groups and the permutation of its rows.
class EpochWindow {
 public:
  EpochWindow(const DatasetLayout& layout, std::vector<int64_t> row_groups, int64_t start,
              std::optional<FeistelPermutation> order);
  int64_t start() const { return start_; }
  int64_t end() const { return start_ + rows_; }
  const std::vector<int64_t>& row_groups() const { return row_groups_; }
  // Where epoch positions first, ..., first + count - 1 (all within
  // [start(), end())) live, as (index into row_groups(), row), into out.
  void LocateRange(int64_t first, int64_t count, RowLocation* out) const;
  // The epoch positions of the rows of row_groups()[index], in row order
  // (the inverse of LocateRange), into out (group_rows(index) of them).
  void PositionsOfGroup(int64_t index, int64_t* out) const;
  int64_t group_rows(int64_t index) const { return group_starts_[index + 1] - group_starts_[index]; }

 private:
  std::vector<int64_t> row_groups_;
  std::vector<int64_t> group_starts_;  // prefix sums of rows, size + 1
  int64_t start_;
  int64_t rows_;
  std::optional<FeistelPermutation> order_;
};

class EpochOrder {
 public:
  EpochOrder(std::shared_ptr<const DatasetLayout> layout, uint64_t seed, int64_t epoch,
             int64_t window_row_groups, bool shuffle);

  int64_t epoch() const { return epoch_; }
  int64_t num_rows() const { return layout_->num_rows(); }
  int64_t num_windows() const { return static_cast<int64_t>(window_starts_.size()) - 1; }
  // The window holding epoch position `position` (0 <= position < num_rows()).
  int64_t WindowOf(int64_t position) const;
  EpochWindow Window(int64_t window) const;

 private:
  int64_t PermutedRowGroup(int64_t slot) const;

  std::shared_ptr<const DatasetLayout> layout_;
  uint64_t seed_;
  int64_t epoch_;
  int64_t window_row_groups_;
  bool shuffle_;
  std::optional<FeistelPermutation> row_group_order_;
  std::vector<int64_t> window_starts_;  // num_windows + 1 epoch positions
};

}  // namespace shardmill
