// BatchNormalization's training-mode arithmetic (numerics/batch_norm.h) against vectors computed
// outside this code with numpy's float32 in XLA's order (tb/unit/numerics/data/
// make_batch_norm_vectors.py), bit for bit, and against float64 for its meaning.
#include "numerics/batch_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tb/unit/numerics/data/batch_norm_vectors.h"
#include "tb/unit/numerics/exact_rules.h"

namespace tpu::numerics {
namespace {

using exact::bits_of;
using exact::float_of;

TEST(BatchNormNumerics, MatchesTheVectorsRoundedOnceInXlasOrder) {
  constexpr int n = vectors::kBatchNormRows;
  for (const auto& c : vectors::kBatchNormCases) {
    float sum = 0.0f, squares = 0.0f;
    for (int r = 0; r < n; ++r) {
      const float x = float_of(c.x[r]);
      sum += x;
      squares += x * x;
    }
    const float count = static_cast<float>(n);
    const BatchStats s = batch_stats(sum, squares, count, float_of(c.epsilon));
    const float gamma = float_of(c.gamma), beta = float_of(c.beta);
    float dbeta = 0.0f, dot = 0.0f;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(bits_of(batch_norm(float_of(c.x[r]), s, gamma, beta)), c.y[r]) << "row " << r;
      dbeta += float_of(c.dy[r]);
      dot += float_of(c.dy[r]) * (float_of(c.x[r]) - s.mean);
    }
    EXPECT_EQ(bits_of(dbeta), c.dbeta);
    EXPECT_EQ(bits_of(batch_norm_gamma_grad(dot, s)), c.dgamma);
    const float k = batch_norm_input_scale(gamma, s, count);
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(bits_of(batch_norm_input_grad(float_of(c.x[r]), float_of(c.dy[r]), s, count, dbeta,
                                              dot, k)),
                c.dx[r])
          << "row " << r;
  }
}

TEST(BatchNormNumerics, RsqrtIsOneOverTheRootRoundedOnce) {
  EXPECT_EQ(rsqrt(4.0f), 0.5f);
  EXPECT_EQ(rsqrt(0.25f), 2.0f);
  EXPECT_TRUE(std::isinf(rsqrt(0.0f)));
  EXPECT_TRUE(std::isnan(rsqrt(-1.0f)));
  for (float x : {1e-5f, 3.0f, 1.001e-5f, 12345.678f}) {
    const double want = 1.0 / std::sqrt(static_cast<double>(x));
    EXPECT_EQ(rsqrt(x), static_cast<float>(want)) << x;
  }
}

TEST(BatchNormNumerics, NormalisesAChannelToMeanZeroAndVarianceOne) {
  const std::vector<float> x = {1.0f, 2.0f, 4.0f, 8.0f, -3.0f};
  float sum = 0.0f, squares = 0.0f;
  for (float v : x) sum += v, squares += v * v;
  const BatchStats s = batch_stats(sum, squares, 5.0f, 1e-7f);
  double mean = 0.0, var = 0.0;
  for (float v : x) mean += batch_norm(v, s, 1.0f, 0.0f);
  mean /= 5.0;
  for (float v : x) var += std::pow(batch_norm(v, s, 1.0f, 0.0f) - mean, 2.0);
  EXPECT_NEAR(mean, 0.0, 1e-6);
  EXPECT_NEAR(var / 5.0, 1.0, 1e-5);
}

}  // namespace
}  // namespace tpu::numerics
