// ChooseCheckpointLayers against brute force over all 2^L subsets: the least
// total recompute seconds subject to ActivationPeak <= budget.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>

#include "planner/plan_search.h"

namespace llmplan {
namespace {

struct Optimum {
  bool feasible = false;
  double recompute = std::numeric_limits<double>::infinity();
  std::vector<bool> set;
};

Optimum BruteForce(const std::vector<LayerCheckpointCost>& layers, double head, double working, double budget) {
  const size_t n = layers.size();
  Optimum best;
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    std::vector<bool> ck(n);
    double cost = 0;
    for (size_t i = 0; i < n; ++i) {
      ck[i] = (mask >> i) & 1;
      if (ck[i]) cost += layers[i].recompute_seconds;
    }
    if (ActivationPeak(layers, ck, head, working) <= budget && cost < best.recompute) {
      best = {true, cost, ck};
    }
  }
  return best;
}

double Recompute(const std::vector<LayerCheckpointCost>& layers, const std::vector<bool>& ck) {
  double s = 0;
  for (size_t i = 0; i < ck.size(); ++i)
    if (ck[i]) s += layers[i].recompute_seconds;
  return s;
}

int Count(const std::vector<bool>& ck) {
  int n = 0;
  for (bool b : ck) n += b;
  return n;
}

TEST(CheckpointSelectionTest, ActivationPeakByHand) {
  // 3 blocks, full 10, checkpointed 1, working 5, head 2.
  std::vector<LayerCheckpointCost> l(3, {10, 1, 1});
  // Nothing checkpointed: end of forward 30 + 2 = 32; backward of block 2: 30 + 5 = 35.
  EXPECT_DOUBLE_EQ(ActivationPeak(l, {false, false, false}, 2, 5), 35);
  // Block 0 checkpointed: saved 1 + 10 + 10 = 21; backward of block 2: 21 + 5 = 26;
  // backward of block 0: 1 + (10 - 1) + 5 = 15.
  EXPECT_DOUBLE_EQ(ActivationPeak(l, {true, false, false}, 2, 5), 26);
  // Block 2 checkpointed: saved 21; backward of block 2 rebuilds it: 21 + 9 + 5 = 35 — no gain.
  EXPECT_DOUBLE_EQ(ActivationPeak(l, {false, false, true}, 2, 5), 35);
  // All: saved 3; end of forward 3 + 2 = 5; backward of block 2: 3 + 9 + 5 = 17.
  EXPECT_DOUBLE_EQ(ActivationPeak(l, {true, true, true}, 2, 5), 17);
  // A big head sets the peak at the end of the forward: 30 + 50 = 80.
  EXPECT_DOUBLE_EQ(ActivationPeak(l, {false, false, false}, 50, 5), 80);
}

TEST(CheckpointSelectionTest, IdenticalLayersNeverPickTheLastBlock) {
  // L = 8 identical blocks: full 10, input 1, working 5, head 0, 1 s each.
  // The peak is the last block's backward: sum of saved bytes + 5. Each
  // checkpointed block 0..6 sheds 9; block 7 sheds nothing (it is rebuilt at
  // the very moment of the peak). Peak with none = 80 + 5 = 85.
  const int L = 8;
  std::vector<LayerCheckpointCost> layers(L, {10, 1, 1.0});
  const double head = 0, working = 5;
  ASSERT_DOUBLE_EQ(ActivationPeak(layers, std::vector<bool>(L, false), head, working), 85);
  // Budgets needing k = 0..7 blocks: 85 - 9k. k = 7 is the most that helps (all but the last).
  for (int k = 0; k <= 7; ++k) {
    SCOPED_TRACE("k = " + std::to_string(k));
    const double budget = 85 - 9.0 * k;
    std::vector<bool> greedy = ChooseCheckpointLayers(layers, head, working, budget);
    Optimum opt = BruteForce(layers, head, working, budget);
    ASSERT_TRUE(opt.feasible);
    EXPECT_DOUBLE_EQ(opt.recompute, k);  // k blocks at 1 s
    EXPECT_LE(ActivationPeak(layers, greedy, head, working), budget);
    EXPECT_DOUBLE_EQ(Recompute(layers, greedy), opt.recompute);
    EXPECT_EQ(Count(greedy), k);
    EXPECT_FALSE(greedy[L - 1]) << "checkpointing the last block saves nothing";
  }
  // A budget below what all-but-last reaches (85 - 63 = 22) cannot be met; greedy
  // still checkpoints every block that lowers the peak, and not the last one.
  std::vector<bool> all = ChooseCheckpointLayers(layers, head, working, 10);
  EXPECT_FALSE(BruteForce(layers, head, working, 10).feasible);
  EXPECT_EQ(Count(all), 7);
  EXPECT_FALSE(all[L - 1]);
}

TEST(CheckpointSelectionTest, EqualSavingsUnequalCostsPickTheCheapest) {
  // L = 6, identical bytes (full 10, input 1), working 5: blocks 0..4 each shed
  // 9 bytes; recompute seconds differ. Peak with none = 60 + 5 = 65.
  const std::vector<double> seconds = {5, 1, 4, 2, 3, 9};
  std::vector<LayerCheckpointCost> layers;
  for (double s : seconds) layers.push_back({10, 1, s});
  const double head = 0, working = 5;
  // Two blocks needed (budget 65 - 18 = 47): the cheapest of 0..4 are 1 (1 s) and 3 (2 s).
  std::vector<bool> greedy = ChooseCheckpointLayers(layers, head, working, 47);
  EXPECT_EQ(greedy, (std::vector<bool>{false, true, false, true, false, false}));
  EXPECT_DOUBLE_EQ(Recompute(layers, greedy), 1 + 2);
  EXPECT_DOUBLE_EQ(BruteForce(layers, head, working, 47).recompute, 3);
  // Every budget: greedy equals the brute-force optimum.
  // Cheapest-first order over blocks 0..4: 1 (1), 3 (2), 4 (3), 2 (4), 0 (5): cumulative 1, 3, 6, 10, 15.
  const double cumulative[] = {0, 1, 3, 6, 10, 15};
  for (int k = 0; k <= 5; ++k) {
    const double budget = 65 - 9.0 * k;
    std::vector<bool> g = ChooseCheckpointLayers(layers, head, working, budget);
    Optimum opt = BruteForce(layers, head, working, budget);
    ASSERT_TRUE(opt.feasible) << k;
    EXPECT_DOUBLE_EQ(opt.recompute, cumulative[k]) << k;
    EXPECT_DOUBLE_EQ(Recompute(layers, g), opt.recompute) << k;
    EXPECT_LE(ActivationPeak(layers, g, head, working), budget) << k;
    EXPECT_FALSE(g[5]) << k;  // the last block (also the dearest) is never useful
  }
}

TEST(CheckpointSelectionTest, TenLayersVaryingCostsMatchBruteForce) {
  // L = 10 identical-byte blocks with pseudo-random costs; every reachable budget.
  std::vector<LayerCheckpointCost> layers;
  uint32_t x = 12345;
  for (int i = 0; i < 10; ++i) {
    x = x * 1103515245u + 12345u;
    layers.push_back({8, 2, 0.5 + (x >> 16) % 100 / 10.0});
  }
  const double head = 3, working = 4;
  const double none = ActivationPeak(layers, std::vector<bool>(10, false), head, working);  // 80 + 4 = 84
  ASSERT_DOUBLE_EQ(none, 84);
  for (int k = 0; k <= 9; ++k) {
    const double budget = none - 6.0 * k;  // each useful block sheds 8 - 2 = 6
    std::vector<bool> g = ChooseCheckpointLayers(layers, head, working, budget);
    Optimum opt = BruteForce(layers, head, working, budget);
    ASSERT_TRUE(opt.feasible) << k;
    EXPECT_LE(ActivationPeak(layers, g, head, working), budget) << k;
    EXPECT_NEAR(Recompute(layers, g), opt.recompute, 1e-12) << k;
  }
}

TEST(CheckpointSelectionTest, StartSetIsKept) {
  std::vector<LayerCheckpointCost> layers(5, {10, 1, 1});
  std::vector<bool> start = {false, false, true, false, false};
  std::vector<bool> g = ChooseCheckpointLayers(layers, 0, 5, 55 - 18, start);  // 50 + 5 = 55 with none
  EXPECT_TRUE(g[2]);
  EXPECT_EQ(Count(g), 2);  // block 2 plus one more
  std::vector<int> order = CheckpointOrder(layers, 0, 5, 55 - 18, start);
  EXPECT_EQ(order.size(), 1u);
  EXPECT_NE(order[0], 2);
  EXPECT_NE(order[0], 4);  // the last block
}


TEST(CheckpointSelectionTest, ThousandsOfLayersStayFast) {
  // Trying every candidate with a full ActivationPeak each round would be
  // O(L^3): about 9 s at L = 1024 and minutes at the 4,096 layers a config
  // may declare. The selection is O(L^2): well under a second here.
  const int L = 4096;
  std::vector<LayerCheckpointCost> layers(L, {10, 1, 1});
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int> order = CheckpointOrder(layers, 0, 5, 0.0);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0);
  // Every block but the last, each once.
  ASSERT_EQ(order.size(), static_cast<size_t>(L - 1));
  std::vector<bool> seen(L, false);
  for (int i : order) {
    ASSERT_GE(i, 0);
    ASSERT_LT(i, L - 1);
    EXPECT_FALSE(seen[i]);
    seen[i] = true;
  }
  // The first picks spread out: block 0, then the farthest from it, ...
  EXPECT_EQ(order[0], 0);
  EXPECT_EQ(order[1], L - 2);
}

}  // namespace
}  // namespace llmplan
