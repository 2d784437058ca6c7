// fp32 <-> symmetric int8 (numerics/quantize.h) against TFLite's quantize and dequantize kernel
// tests and against the written rule (docs/quantization.md) evaluated in double precision.
#include "numerics/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tb/unit/numerics/exact_rules.h"

namespace tpu::numerics {
namespace {

using exact::bits_of;

// The rule: the fp32 quotient (the float64 quotient of two fp32 values rounded to fp32 is the
// correctly rounded fp32 quotient: Figueroa, "When is double rounding innocuous?", 1995: 53 >=
// 2 * 24 + 2), rounded half away from zero by floor(|q| + 1/2) (exact in float64 for |q| < 2^29),
// saturated to [-127, 127]; NaN gives 0.
std::int32_t expected_quantize(float y, float scale) {
  const auto q = static_cast<float>(double{y} / double{scale});
  if (std::isnan(q)) return 0;
  if (std::fabs(q) >= 127.0f) return q > 0 ? 127 : -127;
  const double mag = std::floor(std::fabs(double{q}) + 0.5);
  return static_cast<std::int32_t>(q < 0 ? -mag : mag);
}

// TFLite tensorflow/lite/kernels/quantize_test.cc, QuantizeOpTest.INT8: scale 0.5 and zero point
// -1 give {-128, -127, -126, -125, -124, 123, 124, 125, 126, 127}. With zero point 0 each is one
// more, and the symmetric range saturates 64 / 0.5 = 128 at 127 as TFLite's zero point -1 did.
TEST(Quantize, MatchesTfliteQuantizeWithoutItsZeroPoint) {
  const std::vector<float> in = {-63.5f, -63, -62.5f, -62, -61.5f, 62, 62.5f, 63, 63.5f, 64};
  const std::vector<int> out = {-127, -126, -125, -124, -123, 124, 125, 126, 127, 127};
  for (std::size_t i = 0; i < in.size(); ++i) EXPECT_EQ(quantize_int8(in[i], 0.5f), out[i]) << i;
}

// TFLite tensorflow/lite/kernels/dequantize_test.cc, DequantizeOpTest.INT8: scale 0.5, zero
// point -1: {-128, ..., 126} -> {-63.5, ..., 63.5}; without the zero point the integers are one
// more (its 127 -> 64 would need 128, outside int8).
TEST(Dequantize, MatchesTfliteDequantizeWithoutItsZeroPoint) {
  const std::vector<int> in = {-127, -126, -125, -124, -123, 124, 125, 126, 127};
  const std::vector<float> out = {-63.5f, -63, -62.5f, -62, -61.5f, 62, 62.5f, 63, 63.5f};
  for (std::size_t i = 0; i < in.size(); ++i)
    EXPECT_EQ(dequantize_int8(static_cast<std::int8_t>(in[i]), 0.5f), out[i]) << i;
}

// q * scale is one fp32 product: the float64 product of an int8 and an fp32 value is exact, and
// rounding it to fp32 is the correctly rounded product.
TEST(Dequantize, IsOneRoundedProductForEveryInt8) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> log2_scale(-30.0f, 10.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const float scale = std::exp2(log2_scale(rng));
    for (int q = -128; q <= 127; ++q)
      ASSERT_EQ(bits_of(dequantize_int8(static_cast<std::int8_t>(q), scale)),
                bits_of(static_cast<float>(double{scale} * q)))
          << q << " * " << scale;
  }
}

TEST(Quantize, RoundsHalfAwayFromZeroAndSaturatesSymmetrically) {
  for (int k = -130; k <= 130; ++k) {
    const float tie = static_cast<float>(k) + 0.5f;
    EXPECT_EQ(quantize_int8(tie, 1.0f), expected_quantize(tie, 1.0f)) << tie;
  }
  EXPECT_EQ(quantize_int8(2.5f, 1.0f), 3);
  EXPECT_EQ(quantize_int8(-2.5f, 1.0f), -3);
  EXPECT_EQ(quantize_int8(-128.0f, 1.0f), -127);
  EXPECT_EQ(quantize_int8(-127.4f, 1.0f), -127);
  EXPECT_EQ(quantize_int8(126.5f, 1.0f), 127);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(quantize_int8(inf, 1.0f), 127);
  EXPECT_EQ(quantize_int8(-inf, 1.0f), -127);
  EXPECT_EQ(quantize_int8(3e38f, 1e-3f), 127) << "beyond the range of long";
  EXPECT_EQ(quantize_int8(std::numeric_limits<float>::quiet_NaN(), 1.0f), 0);
  EXPECT_EQ(quantize_int8(-0.0f, 1.0f), 0);
}

TEST(Quantize, FollowsTheWrittenRuleOnRandomValuesAndScales) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> v(-300.0f, 300.0f), log2_scale(-8.0f, 3.0f);
  for (int i = 0; i < 1000000; ++i) {
    const float y = v(rng), scale = std::exp2(log2_scale(rng));
    ASSERT_EQ(quantize_int8(y, scale), expected_quantize(y, scale)) << y << " / " << scale;
  }
}

}  // namespace
}  // namespace tpu::numerics
