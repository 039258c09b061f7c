// The order of an epoch: every row once, windows, epochs that differ, the manifest order unshuffled.
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "epoch_order.h"

namespace {

using shardmill::DatasetLayout;
using shardmill::EpochOrder;
using shardmill::RowLocation;
// Every epoch position maps to one (row group, row), all rows covered once.
void CheckEpochCoversEveryRowOnce(const std::vector<int64_t>& rows, int64_t window_row_groups, bool shuffle,
                                  int64_t epoch) {
  auto layout = std::make_shared<const DatasetLayout>(rows);
  EpochOrder order(layout, 7, epoch, window_row_groups, shuffle);
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  EXPECT_TRUE(order.num_rows() == total);
  std::set<std::pair<int64_t, int64_t>> seen;
  int64_t position = 0;
  for (int64_t w = 0; w < order.num_windows(); ++w) {
    auto window = order.Window(w);
    EXPECT_TRUE(window.start() == position);
    const int64_t count = window.end() - window.start();
    std::vector<RowLocation> where(static_cast<size_t>(count));
    if (count > 0) window.LocateRange(window.start(), count, where.data());
    for (int64_t i = 0; i < count; ++i) {
      const int64_t group = window.row_groups()[static_cast<size_t>(where[i].row_group)];
      EXPECT_TRUE(where[i].row >= 0 && where[i].row < rows[static_cast<size_t>(group)]);
      EXPECT_TRUE(seen.insert({group, where[i].row}).second);
      EXPECT_TRUE(order.WindowOf(window.start() + i) == w);
    }
    // PositionsOfGroup is LocateRange's inverse.
    for (int64_t index = 0; index < static_cast<int64_t>(window.row_groups().size()); ++index) {
      std::vector<int64_t> positions(static_cast<size_t>(window.group_rows(index)));
      window.PositionsOfGroup(index, positions.data());
      for (int64_t r = 0; r < window.group_rows(index); ++r) {
        RowLocation back;
        window.LocateRange(positions[static_cast<size_t>(r)], 1, &back);
        EXPECT_TRUE(back.row_group == index && back.row == r);
      }
    }
    position = window.end();
  }
  EXPECT_TRUE(position == total && static_cast<int64_t>(seen.size()) == total);
}

TEST(EpochOrder, CoversEveryRowExactlyOnce) {
  const std::vector<int64_t> rows = {5, 0, 7, 3, 16, 1, 9, 0, 4, 12, 8};
  for (bool shuffle : {true, false}) {
    for (int64_t window : {1, 3, 4, 100}) {
      for (int64_t epoch : {0, 1, 5}) CheckEpochCoversEveryRowOnce(rows, window, shuffle, epoch);
    }
  }
}

TEST(EpochOrder, EpochsDifferAndUnshuffledOrderIsTheManifestOrder) {
  const std::vector<int64_t> rows = {10, 10, 10, 10, 10, 10};
  auto layout = std::make_shared<const DatasetLayout>(rows);
  auto first_groups = [&](int64_t epoch, bool shuffle) {
    EpochOrder order(layout, 3, epoch, 2, shuffle);
    std::vector<int64_t> groups;
    for (int64_t w = 0; w < order.num_windows(); ++w) {
      const auto window = order.Window(w);  // row_groups() refers into it
      for (int64_t g : window.row_groups()) groups.push_back(g);
    }
    return groups;
  };
  EXPECT_TRUE(first_groups(0, false) == std::vector<int64_t>({0, 1, 2, 3, 4, 5}));
  bool differ = false;
  for (int64_t epoch = 1; epoch < 5; ++epoch) differ |= first_groups(0, true) != first_groups(epoch, true);
  EXPECT_TRUE(differ);
  auto order = EpochOrder(layout, 3, 0, 2, false);
  RowLocation where;
  order.Window(0).LocateRange(0, 1, &where);
  EXPECT_TRUE(where.row_group == 0 && where.row == 0);
}

}  // namespace
