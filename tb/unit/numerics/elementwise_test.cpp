// The int8 and bf16 elementwise definitions and pooling averages (numerics/elementwise.h): bf16
// arithmetic against Eigen's, TensorFlow's and PyTorch's published cases, int8 against the
// written rule over every operand pair.
#include "numerics/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "numerics/bf16.h"
#include "tb/unit/numerics/exact_rules.h"

namespace tpu::numerics {
namespace {

using exact::bits_of;

Bf16 bf(float f) { return to_bf16(f); }

// Eigen test/bfloat16_float.cpp, test_arithmetic (the exact cases); Eigen's test_conversion and
// TensorFlow's Bfloat16Test.Epsilon: 1 + epsilon (2^-7) is above 1, and 1 + epsilon / 2 is the
// tie between 1 and 1 + 2^-7 that rounds to the even 1; PyTorch c10/test/util/bfloat16_test.cpp,
// BFloat16Math.Addition (3.125 + 3.125) and .Subtraction (7.625 - 5).
TEST(Bf16Arithmetic, MatchesEigenTensorflowAndPytorchCases) {
  EXPECT_EQ(to_float(add_bf16(bf(2), bf(2))), 4.0f);
  EXPECT_EQ(to_float(add_bf16(bf(2), bf(-2))), 0.0f);
  EXPECT_EQ(to_float(mul_bf16(bf(2.0f), bf(-5.5f))), -11.0f);
  const Bf16 epsilon{0x3c00};
  EXPECT_GT(to_float(add_bf16(epsilon, bf(1.0f))), 1.0f);
  EXPECT_EQ(to_float(add_bf16(bf(to_float(epsilon) / 2.0f), bf(1.0f))), 1.0f);
  EXPECT_EQ(bits_of(to_float(add_bf16(Bf16{0x4048}, Bf16{0x4048}))), 0x40c80000u);
  EXPECT_EQ(bits_of(to_float(add_bf16(Bf16{0x40f4}, bf(-5.0f)))), 0x40280000u);
  EXPECT_EQ(bits_of(to_float(sub_bf16(Bf16{0x40f4}, bf(5.0f)))), 0x40280000u);
}

// sub computes in fp32 and rounds once to bf16, as add does: every difference of a sample of
// operands against the frexp rounding of the fp32 difference (the float64 difference of two bf16
// values in these binades is exact, and rounding it to fp32 is the one fp32 subtraction).
TEST(Bf16Arithmetic, DifferencesRoundOnceToNearestEven) {
  for (std::uint32_t a = 0x3f00; a < 0x4300; a += 3)
    for (std::uint32_t b = 0x3c00; b < 0x4100; b += 5) {
      const Bf16 x{static_cast<std::uint16_t>(a)}, y{static_cast<std::uint16_t>(b)};
      const auto difference = static_cast<float>(double{to_float(x)} - to_float(y));
      ASSERT_EQ(bits_of(to_float(sub_bf16(x, y))), bits_of(exact::bf16(difference)))
          << a << " " << b;
    }
}

// add and mul compute in fp32 (exact for two bf16 operands' product; the sum rounds once) and
// round once to bf16: every product of a sample of operands against the frexp rounding of the
// double product.
TEST(Bf16Arithmetic, ProductsRoundOnceToNearestEven) {
  for (std::uint32_t a = 0x3f00; a < 0x4100; a += 3)
    for (std::uint32_t b = 0xbf00; b < 0xc100; b += 5) {
      const Bf16 x{static_cast<std::uint16_t>(a)}, y{static_cast<std::uint16_t>(b)};
      const auto product = static_cast<float>(double{to_float(x)} * to_float(y));
      ASSERT_EQ(bits_of(to_float(mul_bf16(x, y))), bits_of(exact::bf16(product))) << a << " " << b;
    }
}

// max and min: a NaN operand gives NaN; equal operands, +0 and -0 included, give the first.
TEST(Bf16Arithmetic, MaxAndMinPropagateNanAndKeepTheFirstOfEqualOperands) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(to_float(max_bf16(bf(nan), bf(1.0f)))));
  EXPECT_TRUE(std::isnan(to_float(max_bf16(bf(1.0f), bf(nan)))));
  EXPECT_TRUE(std::isnan(to_float(min_bf16(bf(nan), bf(1.0f)))));
  EXPECT_TRUE(std::isnan(to_float(min_bf16(bf(1.0f), bf(nan)))));
  EXPECT_EQ(max_bf16(bf(-0.0f), bf(0.0f)).bits, 0x8000);
  EXPECT_EQ(max_bf16(bf(0.0f), bf(-0.0f)).bits, 0x0000);
  EXPECT_EQ(min_bf16(bf(-0.0f), bf(0.0f)).bits, 0x8000);
  EXPECT_EQ(to_float(max_bf16(bf(-3.0f), bf(2.0f))), 2.0f);
  EXPECT_EQ(to_float(min_bf16(bf(-3.0f), bf(2.0f))), -3.0f);
}

TEST(Int8Elementwise, AddSaturatesEveryPair) {
  for (int a = -128; a <= 127; ++a)
    for (int b = -128; b <= 127; ++b)
      ASSERT_EQ(add_int8(static_cast<std::int8_t>(a), static_cast<std::int8_t>(b)),
                exact::clamp(a + b, -128, 127))
          << a << " + " << b;
}

TEST(Int8Elementwise, SubSaturatesEveryPair) {
  for (int a = -128; a <= 127; ++a)
    for (int b = -128; b <= 127; ++b)
      ASSERT_EQ(sub_int8(static_cast<std::int8_t>(a), static_cast<std::int8_t>(b)),
                exact::clamp(a - b, -128, 127))
          << a << " - " << b;
}

// The product is exact in int32 (|a * b| <= 2^14), then requantized by the written rule: every
// pair for multipliers at the ends of the Q31 range and between, with shifts of either sign
// (left shifts saturate products of 2^14 and more at shift -17).
TEST(Int8Elementwise, MulWithAMultiplierRequantizesTheExactProductForEveryPair) {
  const std::int32_t multipliers[] = {std::int32_t{1} << 30, exact::kI32Max, 1518500250, 1};
  for (const std::int32_t m : multipliers)
    for (const std::int32_t shift : {kMinRequantShift, -17, -1, 0, 1, 7, 14, kMaxRequantShift})
      for (int a = -128; a <= 127; ++a)
        for (int b = -128; b <= 127; ++b)
          ASSERT_EQ(
              mul_int8_requant(static_cast<std::int8_t>(a), static_cast<std::int8_t>(b), m, shift),
              exact::requantize(a * b, m, shift))
              << a << " * " << b << " m " << m << " shift " << shift;
}

TEST(Int8Elementwise, MulRoundsHalfAwayFromZeroAfterTheShiftForEveryPair) {
  for (int shift = 0; shift <= kMaxRequantShift; ++shift)
    for (int a = -128; a <= 127; ++a)
      for (int b = -128; b <= 127; ++b)
        ASSERT_EQ(mul_int8(static_cast<std::int8_t>(a), static_cast<std::int8_t>(b), shift),
                  exact::clamp(exact::round_div(a * b, std::int64_t{1} << shift), -128, 127))
            << a << " * " << b << " >> " << shift;
}

TEST(Average, Int8RoundsHalfAwayFromZeroAndBf16DividesInFp32) {
  for (std::int32_t n = 1; n <= 49; ++n)
    for (std::int32_t sum = -128 * n; sum <= 127 * n; ++sum)
      ASSERT_EQ(avg_int8(sum, n), exact::round_div(sum, n)) << sum << " / " << n;
  for (std::int32_t n = 1; n <= 49; ++n)
    for (float sum : {-7.25f, 0.1f, 1.0f, 3.0f, 1000.5f})
      EXPECT_EQ(bits_of(to_float(avg_bf16(sum, n))),
                bits_of(exact::bf16(sum / static_cast<float>(n))))
          << sum << " / " << n;
}

}  // namespace
}  // namespace tpu::numerics
