// The system's gradient sum (sw/nn/all_reduce.h): each chip's cores in order, then the chips'
// sums over the torus, each element in the fold order its chunk and half give it.
#include "sw/nn/all_reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

namespace tpu::nn {
namespace {

using Grads = std::vector<std::vector<float>>;

// One chip: its cores' gradients added in core order, ((g0 + g1) + g2), bit for bit.
TEST(AllReduce, OneChipAddsItsCoresInOrder) {
  const Grads g = {{1e8f, 1.0f}, {1.0f, 1e8f}, {-1e8f, -1e8f}};
  const std::vector<float> sum = all_reduce(g, 3, {});
  EXPECT_EQ(sum[0], (1e8f + 1.0f) + -1e8f);  // 1 is lost to 1e8's rounding: 0
  EXPECT_EQ(sum[1], (1.0f + 1e8f) + -1e8f);
  EXPECT_EQ(sum[0], 0.0f);
}

// A ring of 3 chips, one core each, 6 elements: chunk j = elements 2j, 2j + 1; the first of each
// travels + from chip j + 1, the second - from chip j - 1, both ending at chip j.
TEST(AllReduce, EachChunkHalfFoldsAlongItsRingDirectionEndingAtItsOwner) {
  const float a = 1.0f, b = 1e-8f, c = -1.0f;
  // chip values per element: element e of chip k.
  const Grads g = {{a, a, b, b, c, c}, {b, c, c, a, a, b}, {c, b, a, c, b, a}};
  const std::vector<float> sum = all_reduce(g, 1, {3});
  const auto h = [&](int chip, int e) {
    return g[static_cast<std::size_t>(chip)][static_cast<std::size_t>(e)];
  };
  // Element 0: chunk 0, first half: chips 1, 2, 0.
  EXPECT_EQ(sum[0], (h(1, 0) + h(2, 0)) + h(0, 0));
  // Element 1: chunk 0, second half: chips 2, 1, 0 (- from chip 0 - 1 = 2).
  EXPECT_EQ(sum[1], (h(2, 1) + h(1, 1)) + h(0, 1));
  // Element 2: chunk 1, first half: chips 2, 0, 1.
  EXPECT_EQ(sum[2], (h(2, 2) + h(0, 2)) + h(1, 2));
  // Element 5: chunk 2, second half: chips 1, 0, 2.
  EXPECT_EQ(sum[5], (h(1, 5) + h(0, 5)) + h(2, 5));
  // The order matters: the same three values in another order give another sum.
  EXPECT_NE((b + c) + a, (a + c) + b);
}

// A 2 x 2 torus of chips with 2 cores: the cores first, then dimension 0's rings, then dimension
// 1's over the chunk each chip holds; within rounding of the exact sum, and the same whatever
// the gradient length (empty chunks included).
TEST(AllReduce, ATorusSumIsTheSumToRounding) {
  for (std::size_t size : {0u, 1u, 3u, 7u, 64u, 1001u}) {
    std::mt19937 rng(static_cast<unsigned>(size));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Grads g(8, std::vector<float>(size));
    for (auto& v : g)
      for (float& x : v) x = u(rng);
    const std::vector<float> sum = all_reduce(g, 2, {2, 2});
    ASSERT_EQ(sum.size(), size);
    for (std::size_t e = 0; e < size; ++e) {
      double exact = 0;
      for (const auto& v : g) exact += v[e];
      EXPECT_NEAR(sum[e], exact, 1e-5) << size << " " << e;
    }
  }
}

// The chips' order in a 2 x 2 torus with one core each, element by element (4 elements: part 0 is
// everything; dimension 0 cuts it into chunks {0, 1} (chip row 0) and {2, 3} (row 1); halves of
// one element each; dimension 1 cuts each chip's one-element... region further).
TEST(AllReduce, ATwoDimensionalTorusReducesDimensionZeroFirst) {
  const float a = 1e8f, b = 1.0f, c = -1e8f, d = 3.0f;
  // Chip (x, y) is chip 2x + y.
  const Grads g = {{a, b, c, d}, {b, c, d, a}, {c, d, a, b}, {d, a, b, c}};
  const std::vector<float> sum = all_reduce(g, 1, {2, 2});
  const auto h = [&](int chip, int e) {
    return g[static_cast<std::size_t>(chip)][static_cast<std::size_t>(e)];
  };
  // Element 0: dimension 0 ring {chip 0, chip 2} (and {1, 3}); chunk 0 = {0, 1}, its first half
  // {0} travels + from member 1: (h(2) + h(0)) on the y = 0 ring, (h(3) + h(1)) on y = 1. Then
  // dimension 1 ring {chip 0, chip 1} over region {0, 1}: chunk 0 = {0}, first half empty,
  // second half {0} travels - from member 1: (s(1) + s(0)).
  const float y0 = h(2, 0) + h(0, 0), y1 = h(3, 0) + h(1, 0);
  EXPECT_EQ(sum[0], y1 + y0);
}

// Buckets: each bucket all-reduced as a vector of its own. On rings of two chips (v2-8, v3-8:
// 2 x 2) every element's sum is the same whichever cuts it lies in (a + b = b + a), so bucketed
// and unbucketed sums agree bit for bit; on a ring of 3 the member that starts an element's sum
// follows the bucket's cuts.
TEST(AllReduce, BucketsOnRingsOfTwoLeaveEverySumAsItWas) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Grads g(8, std::vector<float>(1000));
  for (auto& v : g)
    for (float& x : v) x = u(rng) * std::pow(10.0f, u(rng) * 4);
  const std::vector<float> whole = all_reduce(g, 2, {2, 2});
  const std::vector<float> bucketed = all_reduce(g, 2, {2, 2}, {333, 334, 900, 1000});
  for (std::size_t e = 0; e < whole.size(); ++e) ASSERT_EQ(bucketed[e], whole[e]) << e;
}

TEST(AllReduce, EachBucketIsCutAsAVectorOfItsOwn) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Grads g(3, std::vector<float>(12));
  for (auto& v : g)
    for (float& x : v) x = u(rng) * std::pow(10.0f, u(rng) * 6);
  const std::vector<float> bucketed = all_reduce(g, 1, {3}, {5, 12});
  for (const auto& [begin, end] : {std::pair{0, 5}, std::pair{5, 12}}) {
    Grads part;
    for (const auto& v : g) part.emplace_back(v.begin() + begin, v.begin() + end);
    const std::vector<float> own = all_reduce(part, 1, {3});
    for (int e = begin; e < end; ++e)
      EXPECT_EQ(bucketed[std::size_t(e)], own[std::size_t(e - begin)]) << e;
  }
  EXPECT_THROW(all_reduce(g, 1, {3}, {5, 11}), std::invalid_argument);  // not the whole vector
  EXPECT_THROW(all_reduce(g, 1, {3}, {5, 5, 12}), std::invalid_argument);
}

}  // namespace
}  // namespace tpu::nn
