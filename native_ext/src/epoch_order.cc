#include "epoch_order.h"

#include <algorithm>

#include "keyed_hash.h"

namespace shardmill {

DatasetLayout::DatasetLayout(std::vector<int64_t> rows) : row_group_rows(std::move(rows)) {
  row_group_offsets.reserve(row_group_rows.size() + 1);
  row_group_offsets.push_back(0);
  for (int64_t n : row_group_rows) row_group_offsets.push_back(row_group_offsets.back() + n);
}

EpochWindow::EpochWindow(const DatasetLayout& layout, std::vector<int64_t> row_groups, int64_t start,
                         std::optional<FeistelPermutation> order)
    : row_groups_(std::move(row_groups)), start_(start), order_(std::move(order)) {
  group_starts_.reserve(row_groups_.size() + 1);
  group_starts_.push_back(0);
  for (int64_t g : row_groups_) group_starts_.push_back(group_starts_.back() + layout.row_group_rows[g]);
  rows_ = group_starts_.back();
}

void EpochWindow::LocateRange(int64_t first, int64_t count, RowLocation* out) const {
  constexpr int64_t kBlock = 1024;
  uint64_t offsets[kBlock];
  const int64_t groups = static_cast<int64_t>(row_groups_.size());
  for (int64_t done = 0; done < count; done += kBlock) {
    const int64_t m = std::min(kBlock, count - done);
    const uint64_t offset = static_cast<uint64_t>(first + done - start_);
    if (order_) {
      order_->ApplyRange(offset, m, offsets);
    } else {
      for (int64_t i = 0; i < m; ++i) offsets[i] = offset + static_cast<uint64_t>(i);
    }
    for (int64_t i = 0; i < m; ++i) {
      const int64_t row = static_cast<int64_t>(offsets[i]);
      int64_t index;
      if (groups <= 16) {
        // Branch-free count of the groups starting at or before the row: a
        // binary search mispredicts on every row of a shuffled window.
        index = 0;
        for (int64_t g = 1; g < groups; ++g) index += row >= group_starts_[g];
      } else {
        index = std::upper_bound(group_starts_.begin(), group_starts_.end(), row) - group_starts_.begin() - 1;
      }
      out[done + i] = {index, row - group_starts_[index]};
    }
  }
}

void EpochWindow::PositionsOfGroup(int64_t index, int64_t* out) const {
  const int64_t first = group_starts_[index];
  const int64_t count = group_rows(index);
  if (order_) {
    order_->InverseRange(static_cast<uint64_t>(first), count, reinterpret_cast<uint64_t*>(out));
    for (int64_t i = 0; i < count; ++i) out[i] += start_;
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = start_ + first + i;
  }
}

EpochOrder::EpochOrder(std::shared_ptr<const DatasetLayout> layout, uint64_t seed, int64_t epoch,
                       int64_t window_row_groups, bool shuffle)
    : layout_(std::move(layout)),
      seed_(seed),
      epoch_(epoch),
      window_row_groups_(std::max<int64_t>(1, window_row_groups)),
      shuffle_(shuffle) {
  int64_t groups = layout_->num_row_groups();
  if (shuffle_) {
    row_group_order_.emplace(static_cast<uint64_t>(groups),
                             HashWords(seed_, kStreamReaderRowGroups, {static_cast<uint64_t>(epoch_)}));
  }
  int64_t windows = (groups + window_row_groups_ - 1) / window_row_groups_;
  window_starts_.reserve(windows + 1);
  window_starts_.push_back(0);
  for (int64_t w = 0; w < windows; ++w) {
    int64_t rows = 0;
    int64_t end = std::min(groups, (w + 1) * window_row_groups_);
    for (int64_t slot = w * window_row_groups_; slot < end; ++slot) {
      rows += layout_->row_group_rows[PermutedRowGroup(slot)];
    }
    window_starts_.push_back(window_starts_.back() + rows);
  }
}

int64_t EpochOrder::PermutedRowGroup(int64_t slot) const {
  return row_group_order_ ? static_cast<int64_t>(row_group_order_->Apply(static_cast<uint64_t>(slot))) : slot;
}

int64_t EpochOrder::WindowOf(int64_t position) const {
  auto it = std::upper_bound(window_starts_.begin(), window_starts_.end(), position);
  return static_cast<int64_t>(it - window_starts_.begin()) - 1;
}

EpochWindow EpochOrder::Window(int64_t window) const {
  std::vector<int64_t> groups;
  int64_t end = std::min(layout_->num_row_groups(), (window + 1) * window_row_groups_);
  for (int64_t slot = window * window_row_groups_; slot < end; ++slot) groups.push_back(PermutedRowGroup(slot));
  int64_t start = window_starts_[window];
  std::optional<FeistelPermutation> order;
  if (shuffle_) {
    order.emplace(static_cast<uint64_t>(window_starts_[window + 1] - start),
                  HashWords(seed_, kStreamReaderWindow,
                            {static_cast<uint64_t>(epoch_), static_cast<uint64_t>(window)}));
  }
  return EpochWindow(*layout_, std::move(groups), start, std::move(order));
}

}  // namespace shardmill
