// The fp32 activation definitions and softmax (numerics/activation.h) against float64
// evaluations.
#include "numerics/activation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace tpu::numerics {
namespace {

TEST(Softmax, RowSumsToOneAndMatchesDoublePrecision) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> v(-20.0f, 20.0f);
  std::vector<float> in(37), out(37);
  for (float& f : in) f = v(rng);
  softmax_row(in.data(), out.data(), in.size());
  const double m = *std::max_element(in.begin(), in.end());
  double total = 0, sum = 0;
  for (float f : in) total += std::exp(f - m);
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_NEAR(out[i], std::exp(in[i] - m) / total, 1e-6);
    sum += out[i];
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

}  // namespace
}  // namespace tpu::numerics
