// The fp32 activation definitions and softmax (numerics/activation.h) against float64
// evaluations of the same mathematical functions, with error bounds in ULPs.
//
// An error in ULPs is |got - exact| over the spacing of fp32 values in the binade holding the
// exact value (2^-149 among subnormals); u = 2^-24 is the unit roundoff, and a relative error e
// is under e / u ULP. The bounds follow from the roundings each definition makes: a basic fp32
// operation is within half an ULP (relative u); the C library's expf and expm1f are taken as
// within 1 ULP of the correctly rounded value and tanhf within 2 (the measure of glibc's "Known
// Maximum Errors in Math Functions"), so within 1.5 (relative 3u) and 2.5 ULP of the exact value.
// A C library outside them fails these tests; the chip and the reference would still agree bit
// for bit (one binary, one libm).
#include "numerics/activation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tb/unit/numerics/exact_rules.h"

namespace tpu::numerics {
namespace {

using exact::bits_of;

double ulp_error(float got, double exact) {
  const double a = std::fabs(exact);
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e): fp32 spacing 2^(e-24)
  const double ulp = a == 0.0 ? std::ldexp(1.0, -149) : std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(double{got} - exact) / ulp;
}

// Inputs for a function on [lo, hi]: a uniform grid and random fp32 values, plus the ends.
std::vector<float> sweep(float lo, float hi) {
  std::vector<float> v;
  constexpr int kGrid = 100000;
  for (int i = 0; i <= kGrid; ++i) v.push_back(lo + (hi - lo) * static_cast<float>(i) / kGrid);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> any(lo, hi);
  for (int i = 0; i < 100000; ++i) v.push_back(any(rng));
  // Small magnitudes, where a function near 0 is steep in relative terms.
  for (int k = -40; k <= 0; ++k)
    for (float s : {-1.0f, 1.0f}) v.push_back(std::clamp(s * std::ldexp(1.3f, k), lo, hi));
  return v;
}

template <class F, class Exact>
void expect_within_ulps(const std::vector<float>& xs, F f, Exact exact, double bound) {
  for (float x : xs) ASSERT_LE(ulp_error(f(x), exact(double{x})), bound) << "x = " << x;
}

TEST(Relu, IsExactPassesNanAndTurnsNegativeZeroIntoPositiveZero) {
  for (float x : sweep(-100.0f, 100.0f)) {
    EXPECT_EQ(relu(x), std::max(x, 0.0f));
    EXPECT_EQ(relu6(x), std::min(std::max(x, 0.0f), 6.0f));
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(relu(nan)));
  EXPECT_TRUE(std::isnan(relu6(nan)));
  EXPECT_EQ(bits_of(relu(-0.0f)), 0u);
  EXPECT_EQ(bits_of(relu6(-0.0f)), 0u);
  EXPECT_EQ(relu6(std::numeric_limits<float>::infinity()), 6.0f);
  EXPECT_EQ(relu(std::int8_t{-5}), 0);
  EXPECT_EQ(relu(std::int8_t{5}), 5);
  EXPECT_EQ(relu(std::int32_t{-5}), 0);
}

// alpha * x is one fp32 product, and the product of two fp32 values is exact in float64: the
// result is the float64 value rounded once, 0 ULP apart from its correct rounding.
TEST(LeakyRelu, IsTheCorrectlyRoundedProductBelowZero) {
  for (float alpha : {0.01f, 0.2f, 0.3f, 1.5f})
    for (float x : sweep(-1000.0f, 1000.0f)) {
      const float expected = x > 0.0f ? x : static_cast<float>(double{alpha} * x);
      ASSERT_EQ(bits_of(leaky_relu(x, alpha)), bits_of(expected)) << alpha << " " << x;
    }
  EXPECT_TRUE(std::isnan(leaky_relu(std::numeric_limits<float>::quiet_NaN(), 0.2f)));
  EXPECT_EQ(bits_of(leaky_relu(-0.0f, 0.2f)), bits_of(-0.0f));
}

// expm1f (relative 3u) times alpha (u): relative error below 4u, under 4 ULP.
TEST(Elu, IsWithin4UlpOfFloat64) {
  for (float alpha : {1.0f, 0.3f})
    expect_within_ulps(
        sweep(-90.0f, 20.0f), [alpha](float x) { return elu(x, alpha); },
        [alpha](double x) { return x > 0 ? x : double{alpha} * std::expm1(x); }, 4.0);
  EXPECT_EQ(elu(-std::numeric_limits<float>::infinity(), 1.0f), -1.0f);
  EXPECT_TRUE(std::isnan(elu(std::numeric_limits<float>::quiet_NaN(), 1.0f)));
}

// 1 / (1 + expf(-x)): expf's relative 3u shrinks by e / (1 + e) < 1 in the sum, which rounds
// once (u), and the division rounds once (u): relative error below 5u, under 5 ULP. Below
// x = -88.72 expf(-x) overflows to infinity and the result is +0, where the exact value is below
// 2^-127.
TEST(Sigmoid, IsWithin5UlpOfFloat64UntilExpOverflows) {
  expect_within_ulps(
      sweep(-88.7f, 88.7f), sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, 5.0);
  for (float x : {-88.8f, -100.0f, -std::numeric_limits<float>::infinity()})
    EXPECT_EQ(sigmoid(x), 0.0f) << x;
  EXPECT_EQ(sigmoid(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_TRUE(std::isnan(sigmoid(std::numeric_limits<float>::quiet_NaN())));
}

// tanhf alone: 2.5 ULP.
TEST(Tanh, IsWithin2AndAHalfUlpOfFloat64) {
  expect_within_ulps(
      sweep(-20.0f, 20.0f), tanh_act, [](double x) { return std::tanh(x); }, 2.5);
  EXPECT_EQ(bits_of(tanh_act(-0.0f)), bits_of(-0.0f));
  EXPECT_EQ(tanh_act(std::numeric_limits<float>::infinity()), 1.0f);
}

// Each output is expf(x_i - m) / sum. With inputs on a grid of 2^-10 within [-20, 20] every
// x_i - m is exact in fp32, so the errors are expf's in each term (relative 3u), the n - 1
// roundings of the sum in index order (relative (n - 1)u: Higham, Accuracy and Stability of
// Numerical Algorithms, §4.2) and the division's (u): relative error below (n + 6)u, under
// n + 6 ULP.
TEST(Softmax, IsWithinNPlus6UlpOfFloat64AndSumsToOne) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> grid(-20 * 1024, 20 * 1024);
  for (std::size_t n :
       {std::size_t{1}, std::size_t{2}, std::size_t{10}, std::size_t{37}, std::size_t{1000}})
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> in(n), out(n);
      for (float& f : in) f = std::ldexp(static_cast<float>(grid(rng)), -10);
      softmax_row(in.data(), out.data(), n);
      const double m = *std::max_element(in.begin(), in.end());
      double total = 0, sum = 0;
      for (float f : in) total += std::exp(f - m);
      for (std::size_t i = 0; i < n; ++i) {
        EXPECT_LE(ulp_error(out[i], std::exp(in[i] - m) / total), static_cast<double>(n + 6))
            << "n = " << n << " i = " << i;
        sum += out[i];
      }
      EXPECT_NEAR(sum, 1.0, static_cast<double>(n + 6) * std::ldexp(1.0, -24));
    }
}

TEST(Softmax, WorksInPlaceAndGivesOneForASingleValue) {
  std::vector<float> row = {3.0f, -1.0f, 0.5f};
  std::vector<float> apart(3);
  softmax_row(row.data(), apart.data(), row.size());
  softmax_row(row.data(), row.data(), row.size());
  for (std::size_t i = 0; i < row.size(); ++i) EXPECT_EQ(bits_of(row[i]), bits_of(apart[i]));
  const float one = 42.0f;
  float out = 0.0f;
  softmax_row(&one, &out, 1);
  EXPECT_EQ(out, 1.0f);
}

// The pre-activation: saturating int32 bias add, one conversion, one product; fp32 add then
// product.
TEST(PreActivation, SaturatesTheIntegerSumBeforeScaling) {
  const std::int32_t max = std::numeric_limits<std::int32_t>::max();
  EXPECT_EQ(scale_int(max, 1, 1.0f), static_cast<float>(max));
  EXPECT_EQ(scale_int(std::numeric_limits<std::int32_t>::min(), -1, 1.0f), -2147483648.0f);
  EXPECT_EQ(scale_int(-7, 3, 0.5f), -2.0f);
  EXPECT_EQ(scale_float(1.5f, -0.25f, 2.0f), 2.5f);
}

// The map instruction's x * a + b rounds twice: the product, then the sum (the float64 product
// and sum of fp32 values rounded to fp32 are the correctly rounded fp32 operations: Figueroa,
// "When is double rounding innocuous?", 1995). A fused multiply-add would round once:
// (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds to the even 1 + 2^-11, so minus 1 gives 2^-11, where
// a fused one gives 2^-11 + 2^-24.
TEST(Affine, RoundsTheProductThenTheSumWithoutFusing) {
  const float x = 1.0f + std::ldexp(1.0f, -12);
  EXPECT_EQ(affine(x, x, -1.0f), std::ldexp(1.0f, -11));
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> v(-100.0f, 100.0f);
  for (int i = 0; i < 1000000; ++i) {
    const float a = v(rng), b = v(rng), c = v(rng);
    const auto product = static_cast<float>(double{a} * b);
    ASSERT_EQ(bits_of(affine(a, b, c)), bits_of(static_cast<float>(double{product} + c)))
        << a << " " << b << " " << c;
  }
}

}  // namespace
}  // namespace tpu::numerics
