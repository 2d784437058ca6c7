// bf16 conversion (numerics/bf16.h) against the vectors TensorFlow, Eigen and PyTorch publish in
// their bfloat16 tests, and against an independent rounding on every bf16 neighbourhood.
#include "numerics/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "tb/unit/numerics/exact_rules.h"

namespace tpu {
namespace {

using exact::bits_of;
using exact::float_of;

// TensorFlow's and Eigen's test helper: a float from its sign, exponent and the high 7 and low 16
// bits of its significand.
float binary_to_float(std::uint32_t sign, std::uint32_t exponent, std::uint32_t high_mantissa,
                      std::uint32_t low_mantissa) {
  return float_of((sign << 31) + (exponent << 23) + (high_mantissa << 16) + low_mantissa);
}

// PyTorch c10/test/util/bfloat16_test.cpp, BFloat16Test.BFloat16RNETest: input bits and the
// round-to-nearest-even result.
TEST(Bf16, RoundsToNearestEvenOnPytorchVectors) {
  struct Case {
    std::uint32_t input;
    std::uint16_t rne;
  };
  const Case cases[] = {{0x3F848000, 0x3F84},
                        {0x3F848010, 0x3F85},
                        {0x3F850000, 0x3F85},
                        {0x3F858000, 0x3F86},
                        {0x3FFF8000, 0x4000}};
  for (const Case& c : cases) EXPECT_EQ(to_bf16(float_of(c.input)).bits, c.rne) << c.input;
}

// TensorFlow tensorflow/core/framework/bfloat16_test.cc, Bfloat16Test.TruncateTest, the
// expected_rounding column of the version with truncate_to_bfloat16 and round_to_bfloat16 (before
// TensorFlow's bfloat16 became Eigen's, whose conversion flushes subnormals to zero). Its two
// subnormal inputs round like any other value: a tie stays on the even 0x48, and 0x7f above the
// halfway point carries into the smallest normal number.
TEST(Bf16, RoundsToNearestEvenOnTensorflowVectorsSubnormalsIncluded) {
  struct Case {
    float input, expected;
  };
  const Case cases[] = {{binary_to_float(0, 0b10000000, 0b1001000, 0b1111010111000011),
                         binary_to_float(0, 0b10000000, 0b1001001, 0b0000000000000000)},
                        {binary_to_float(1, 0b10000000, 0b1001000, 0b1111010111000011),
                         binary_to_float(1, 0b10000000, 0b1001001, 0b0000000000000000)},
                        {binary_to_float(0, 0b10000000, 0b1001000, 0b1000000000000000),
                         binary_to_float(0, 0b10000000, 0b1001000, 0b0000000000000000)},
                        {binary_to_float(1, 0b10000000, 0b1001000, 0b1100000000000000),
                         binary_to_float(1, 0b10000000, 0b1001001, 0b0000000000000000)},
                        {binary_to_float(0, 0b10000000, 0b1001000, 0b0000000000000000),
                         binary_to_float(0, 0b10000000, 0b1001000, 0b0000000000000000)},
                        {binary_to_float(0, 0b10000000, 0b1001000, 0b0100000000000000),
                         binary_to_float(0, 0b10000000, 0b1001000, 0b0000000000000000)},
                        {binary_to_float(0, 0b00000000, 0b1001000, 0b1000000000000000),
                         binary_to_float(0, 0b00000000, 0b1001000, 0b0000000000000000)},
                        {binary_to_float(0, 0b00000000, 0b1111111, 0b1100000000000000),
                         binary_to_float(0, 0b00000001, 0b0000000, 0b0000000000000000)}};
  for (const Case& c : cases)
    EXPECT_EQ(bits_of(round_bf16(c.input)), bits_of(c.expected)) << std::hex << bits_of(c.input);
  // Its NaN inputs (a signalling NaN, and all significand bits set) need only stay NaN.
  EXPECT_TRUE(std::isnan(round_bf16(binary_to_float(0, 0b11111111, 0b0000000, 0b1))));
  EXPECT_TRUE(std::isnan(round_bf16(binary_to_float(0, 0b11111111, 0b1111111, 0xffff))));
}

// Eigen test/bfloat16_float.cpp, test_conversion: conversions from float (an overflow past the
// largest finite value rounds to infinity; midpoints between neighbours go to the even one) and
// back, signed zeros, and the NaN whose bits it pins.
TEST(Bf16, MatchesEigenConversionVectors) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(to_bf16(0.5f).bits, 0x3f00);
  EXPECT_EQ(to_bf16(0.33333f).bits, 0x3eab);
  EXPECT_EQ(to_bf16(3.38e38f).bits, 0x7f7e);
  EXPECT_EQ(to_bf16(3.40e38f).bits, 0x7f80);
  const float val1 = to_float(Bf16{0x3c00}), val2 = to_float(Bf16{0x3c01});
  const float val3 = to_float(Bf16{0x3c02});
  EXPECT_EQ(to_bf16(0.5f * (val1 + val2)).bits, 0x3c00);
  EXPECT_EQ(to_bf16(0.5f * (val2 + val3)).bits, 0x3c02);
  EXPECT_EQ(to_bf16(-1.0f).bits, 0xbf80);
  EXPECT_EQ(to_bf16(2.0f).bits, 0x4000);
  EXPECT_EQ(to_bf16(3.0f).bits, 0x4040);
  EXPECT_EQ(to_bf16(12.0f).bits, 0x4140);
  EXPECT_EQ(to_bf16(0.0f).bits, 0x0000);
  EXPECT_EQ(to_bf16(-0.0f).bits, 0x8000);
  EXPECT_EQ(to_float(Bf16{0x0000}), 0.0f);
  EXPECT_EQ(to_float(Bf16{0x3f80}), 1.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {-inf, -1.0f, -0.5f, -0.0f, 0.0f, 0.5f, 1.0f, inf})
    EXPECT_EQ(bits_of(round_bf16(v)), bits_of(v)) << v;
  EXPECT_TRUE(std::isinf(to_float(Bf16{0xff80})));
  EXPECT_TRUE(std::isnan(to_float(Bf16{0xffc0})));
  EXPECT_TRUE(std::isinf(to_float(Bf16{0x7f80})));
  EXPECT_TRUE(std::isnan(to_float(Bf16{0x7fc0})));
  EXPECT_EQ(to_bf16(binary_to_float(0x0, 0xff, 0x40, 0x0)).bits, 0x7fc0);
  EXPECT_EQ(to_bf16(binary_to_float(0x1, 0xff, 0x40, 0x0)).bits, 0xffc0);
}

// PyTorch c10/test/util/bfloat16_test.cpp, BFloat16Conversion.NaN and .Inf; Eigen's
// test_numtraits: a converted quiet NaN keeps the quiet bit (0x0040).
TEST(Bf16, KeepsNanQuietAndInfinityInfinite) {
  EXPECT_TRUE(std::isnan(to_float(to_bf16(float_of(0x7fffffff)))));
  EXPECT_TRUE(std::isinf(to_float(to_bf16(float_of(0x7f800000)))));
  EXPECT_NE(to_bf16(std::numeric_limits<float>::quiet_NaN()).bits & 0x0040, 0);
  // A signalling NaN (quiet bit clear, payload only in the low half) stays NaN: the quiet bit is
  // set, where rounding the bits alone would give infinity.
  EXPECT_EQ(to_bf16(float_of(0x7f800001)).bits, 0x7fc0);
  EXPECT_EQ(to_bf16(float_of(0xff800001)).bits, 0xffc0);
}

// Every bf16 value widens to the fp32 value with those top 16 bits and converts back to itself
// (NaNs come back quiet).
TEST(Bf16, EveryValueRoundTripsThroughFp32) {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const Bf16 h{static_cast<std::uint16_t>(b)};
    ASSERT_EQ(bits_of(to_float(h)), b << 16);
    const bool nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
    ASSERT_EQ(to_bf16(to_float(h)).bits, nan ? (b | 0x40) : b) << std::hex << b;
  }
}

// Around every normal bf16 value of either sign below the largest: the value itself, the halfway
// point to the next one, and one fp32 step either side of each, against the frexp rounding of
// exact_rules.h.
TEST(Bf16, MatchesAnIndependentRoundingAroundEveryNormalValue) {
  for (std::uint32_t b = 0x0080; b < 0x7f7f; ++b)
    for (std::uint32_t sign : {0u, 0x80000000u})
      for (std::uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
        const float x = float_of(sign | (b << 16) | low);
        ASSERT_EQ(bits_of(round_bf16(x)), bits_of(exact::bf16(x))) << std::hex << bits_of(x);
      }
}

}  // namespace
}  // namespace tpu
