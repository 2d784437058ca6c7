// The fixed-point definitions (numerics/fixed_point.h) against the written rules computed a second
// way (exact_rules.h), against double precision, and against the vectors gemmlowp, TFLite, ruy and
// GCC publish in their tests (each cited beside its cases).
#include "numerics/fixed_point.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "tb/unit/numerics/exact_rules.h"

namespace tpu::numerics {
namespace {

using exact::kI32Max;
using exact::kI32Min;

TEST(RoundingDivideByPot, RoundsHalfAwayFromZero) {
  for (std::int32_t x = -1000; x <= 1000; ++x)
    for (int e = 0; e <= 10; ++e)
      EXPECT_EQ(rounding_divide_by_pot(x, e), std::round(x / std::ldexp(1.0, e)))
          << x << " / 2^" << e;
  for (int e = 0; e <= kMaxRequantShift; ++e) {
    EXPECT_EQ(rounding_divide_by_pot(kI32Min, e), exact::round_div(kI32Min, std::int64_t{1} << e));
    EXPECT_EQ(rounding_divide_by_pot(kI32Max, e), exact::round_div(kI32Max, std::int64_t{1} << e));
  }
}

TEST(DoublingHighMul, RoundsHalfUpAndSaturatesOnlyMinTimesMin) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::int32_t> any(kI32Min, kI32Max);
  for (int i = 0; i < 20000; ++i) {
    const std::int32_t a = any(rng), b = any(rng);
    const std::int64_t expect =
        (a == kI32Min && b == kI32Min)
            ? kI32Max
            : exact::round_half_up(std::int64_t{a} * b, std::int64_t{1} << 31);
    EXPECT_EQ(saturating_rounding_doubling_high_mul(a, b), expect) << a << " * " << b;
  }
  // b = 2^30 halves a: odd a is an exact tie, which gemmlowp rounds toward +infinity.
  for (std::int32_t a = -101; a <= 101; ++a)
    EXPECT_EQ(saturating_rounding_doubling_high_mul(a, std::int32_t{1} << 30),
              std::floor(a / 2.0 + 0.5));
  EXPECT_EQ(saturating_rounding_doubling_high_mul(kI32Min, kI32Min), kI32Max);
}

TEST(Requantize, MatchesExactTwoStepRounding) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<std::int32_t> any(kI32Min, kI32Max);
  std::uniform_int_distribution<std::int32_t> small(-70000, 70000);
  std::uniform_int_distribution<std::int32_t> mult(std::int32_t{1} << 30, kI32Max);
  std::uniform_int_distribution<std::int32_t> shift(kMinRequantShift, kMaxRequantShift);
  for (int i = 0; i < 50000; ++i) {
    const std::int32_t x = (i % 2) ? any(rng) : small(rng);
    const std::int32_t m = mult(rng), s = shift(rng);
    EXPECT_EQ(requantize(x, m, s), exact::requantize(x, m, s)) << x << " m=" << m << " s=" << s;
  }
}

TEST(Requantize, IsWithinOneOfDoublePrecisionScaling) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<std::int32_t> acc(-2000000, 2000000);
  std::uniform_real_distribution<double> log2_scale(-24.0, 2.0);
  int exact = 0;
  for (int i = 0; i < 50000; ++i) {
    const std::int32_t x = acc(rng);
    const QuantizedMultiplier q = quantize_multiplier(std::exp2(log2_scale(rng)));
    const double real = x * (q.multiplier_q31 / 2147483648.0) * std::ldexp(1.0, -q.shift);
    const double ideal = std::min(std::max(std::round(real), -128.0), 127.0);
    const int got = requantize(x, q.multiplier_q31, q.shift);
    EXPECT_LE(std::abs(got - ideal), 1.0) << x << " scale " << real / x;
    // Two roundings differ from one only when the real value is within 2^-shift of a tie.
    const double frac = std::abs(real - std::trunc(real));
    if (std::abs(frac - 0.5) > std::ldexp(1.0, -std::max(q.shift, 0)) + 1e-9) {
      EXPECT_EQ(got, ideal) << x << " real " << real;
      ++exact;
    }
  }
  EXPECT_GT(exact, 40000);
}

TEST(Requantize, SaturatesToInt8AndShiftsLeftBeforeMultiplying) {
  const std::int32_t half = std::int32_t{1} << 30;  // 0.5 in Q31
  EXPECT_EQ(requantize(1000, half, 0), 127);
  EXPECT_EQ(requantize(-1000, half, 0), -128);
  // Negative shift: x * 2^3 first (saturating at int32), then x 0.5.
  EXPECT_EQ(requantize(5, half, -3), std::round(5 * 8 * 0.5));
  EXPECT_EQ(requantize(kI32Max, kI32Max, kMinRequantShift), 127);
  EXPECT_EQ(requantize(kI32Min, kI32Max, kMinRequantShift), -128);
  // A right shift rounds half away from zero: +-6 * 0.5 = +-3, / 2 = +-1.5 -> +-2.
  EXPECT_EQ(requantize(6, half, 1), std::round(1.5));
  EXPECT_EQ(requantize(-6, half, 1), std::round(-1.5));
  // Ties of the Q31 product itself round toward +infinity (gemmlowp): -3 * 0.5 -> -1.
  EXPECT_EQ(requantize(3, half, 0), std::floor(1.5 + 0.5));
  EXPECT_EQ(requantize(-3, half, 0), std::floor(-1.5 + 0.5));
  for (std::int32_t x = -300; x <= 300; ++x)
    for (std::int32_t s = kMinRequantShift; s <= kMaxRequantShift; ++s)
      EXPECT_EQ(requantize(x, half, s), exact::requantize(x, half, s)) << x << " " << s;
}

TEST(QuantizeMultiplier, RepresentsTheScaleToQ31Precision) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> log2_scale(-30.0, 30.0);
  for (int i = 0; i < 10000; ++i) {
    const double scale = std::exp2(log2_scale(rng));
    const QuantizedMultiplier q = quantize_multiplier(scale);
    EXPECT_GE(q.multiplier_q31, std::int32_t{1} << 30);
    EXPECT_GE(q.shift, kMinRequantShift);
    EXPECT_LE(q.shift, kMaxRequantShift);
    const double back = q.multiplier_q31 / 2147483648.0 * std::ldexp(1.0, -q.shift);
    EXPECT_LE(std::abs(back - scale) / scale, std::ldexp(1.0, -31)) << scale;
  }
  EXPECT_EQ(quantize_multiplier(std::ldexp(1.0, -40)).multiplier_q31, 0);
}

TEST(QuantizeMultiplier, ScalesThatAreNotPositiveFiniteAndBelow2To31AreOutsideItsDomain) {
  EXPECT_THROW((void)quantize_multiplier(0.0), std::domain_error);
  EXPECT_THROW((void)quantize_multiplier(-1.0), std::domain_error);
  EXPECT_THROW((void)quantize_multiplier(std::nan("")), std::domain_error);
  EXPECT_THROW((void)quantize_multiplier(std::ldexp(1.0, 31)), std::domain_error);
}

// ---- published vectors ----

// gemmlowp test/test_fixedpoint.cc, MakeTestValsInt32: +-2^i + {-2..2} for i < 31, the ends of
// the int32 range, and 1000 draws of a default-seeded std::mt19937 (the same draws as gemmlowp's
// test gets from the same standard library).
std::vector<std::int32_t> gemmlowp_test_values() {
  std::vector<std::int32_t> v;
  for (int i = 0; i < 31; i++)
    for (std::int32_t d = -2; d <= 2; ++d) {
      v.push_back((std::int32_t{1} << i) + d);
      v.push_back(-(std::int32_t{1} << i) + d);
    }
  for (std::int32_t d = 0; d <= 2; ++d) {
    v.push_back(kI32Min + d);
    v.push_back(kI32Max - d);
  }
  std::mt19937 random_engine;
  std::uniform_int_distribution<std::int32_t> uniform(kI32Min, kI32Max);
  for (int i = 0; i < 1000; i++) v.push_back(uniform(random_engine));
  return v;
}

// gemmlowp test/test_fixedpoint.cc, RoundingDivideByPOTOp: for exponents 0..31 the result equals
// std::round(x / 2^exponent) in double, with tolerance 0.
TEST(RoundingDivideByPot, MatchesGemmlowpRoundingDivideByPotTestValues) {
  for (std::int32_t x : gemmlowp_test_values())
    for (int e = 0; e < 32; e++)
      EXPECT_EQ(rounding_divide_by_pot(x, e),
                static_cast<std::int32_t>(std::round(static_cast<double>(x) / (1ll << e))))
          << x << " / 2^" << e;
}

// gemmlowp test/test_fixedpoint.cc, test_mul<0, 0>: over every pair of its test values the
// product of two Q0.31 numbers is within 1 of FromDouble(a * b), the double product rounded and
// clamped to int32.
TEST(DoublingHighMul, IsWithinOneOfGemmlowpsDoubleProductOnItsTestValues) {
  const std::vector<std::int32_t> v = gemmlowp_test_values();
  for (std::int32_t a : v)
    for (std::int32_t b : v) {
      const double ab = (a / 2147483648.0) * (b / 2147483648.0);
      const double expected =
          std::min(std::max(std::round(ab * 2147483648.0), double{kI32Min}), double{kI32Max});
      ASSERT_LE(std::abs(saturating_rounding_doubling_high_mul(a, b) - expected), 1.0)
          << a << " * " << b;
    }
}

// gemmlowp's SaturatingRoundingDoublingHighMul "is equivalent to the VQRDMULH instruction in ARM
// NEON" (fixedpoint/fixedpoint.h). GCC's tests of that instruction
// (gcc/testsuite/gcc.target/aarch64/advsimd-intrinsics/vqrdmulh.c): 0x80000000 * 0x80000000
// saturates to 0x7fffffff, and 0x80000000 * 0x80000001 rounds to 0x7fffffff without saturating.
TEST(DoublingHighMul, MatchesGccVqrdmulhSaturationAndRoundingVectors) {
  EXPECT_EQ(saturating_rounding_doubling_high_mul(kI32Min, kI32Min), 0x7fffffff);
  EXPECT_EQ(saturating_rounding_doubling_high_mul(kI32Min, kI32Min + 1), 0x7fffffff);
  EXPECT_EQ(saturating_rounding_doubling_high_mul(kI32Min + 1, kI32Min), 0x7fffffff);
}

// ruy ruy/apply_multiplier_test.cc, ApplyMultiplierTest.SaturatingRoundingDoublingHighMul
// (multiplier exponent 0): the tie -562.5 rounds upward to -562, not away from zero.
TEST(DoublingHighMul, MatchesRuyVectorsIncludingTheNegativeTie) {
  struct Case {
    std::int32_t x, multiplier, expected;
  };
  const std::int32_t max = kI32Max;
  const Case cases[] = {{1000, max, 1000},
                        {1000, 1 << 30, 500},
                        {1000, 1 << 29, 250},
                        {1000, (1 << 30) + (1 << 29), 750},
                        {1000, (1 << 30) + (1 << 28), 625},
                        {1000, (1 << 30) + (1 << 27), 563},
                        {1000, (1 << 30) + (1 << 26), 531},
                        {-1000, max, -1000},
                        {-1000, 1 << 30, -500},
                        {-1000, 1 << 29, -250},
                        {-1000, (1 << 30) + (1 << 29), -750},
                        {-1000, (1 << 30) + (1 << 28), -625},
                        {-1000, (1 << 30) + (1 << 27), -562},
                        {-1000, (1 << 30) + (1 << 26), -531}};
  for (const Case& c : cases) {
    EXPECT_EQ(saturating_rounding_doubling_high_mul(c.x, c.multiplier), c.expected)
        << c.x << " * " << c.multiplier;
    EXPECT_EQ(multiply_by_quantized_multiplier(c.x, c.multiplier, 0), c.expected);
  }
}

// ruy ruy/apply_multiplier_test.cc, ApplyMultiplierTest.RoundingRightShift, LeftShift and the
// uniform and per-channel ApplyMultiplier cases. ruy's exponent shifts left when positive; ours
// shifts right, so shift = -exponent. One published value is not ours: ruy's rounding right shift
// breaks the tie -62.5 upward (-62) where gemmlowp's RoundingDivideByPOT, which TFLite and this
// model use, goes away from zero (-63).
TEST(Requantize, MatchesRuyShiftVectorsAndBreaksNegativeTiesAwayFromZeroAsGemmlowpDoes) {
  struct Case {
    std::int32_t x, multiplier, exponent, expected;
  };
  const std::int32_t max = kI32Max;
  const Case cases[] = {{1000, max, -1, 500},    {1000, max, -2, 250},   {1000, max, -3, 125},
                        {1000, max, -4, 63},     {1000, max, -5, 31},    {1000, max, -6, 16},
                        {-1000, max, -1, -500},  {-1000, max, -2, -250}, {-1000, max, -3, -125},
                        {-1000, max, -5, -31},   {-1000, max, -6, -16},  {1000, max, 1, 2000},
                        {1000, max, 2, 4000},    {1000, max, 3, 8000},   {-1000, max, 1, -2000},
                        {-1000, max, 2, -4000},  {-1000, max, 3, -8000}, {1000, 1 << 30, -1, 250},
                        {1000, 1 << 25, 3, 125}, {1000, max, 0, 1000},   {1000, 1 << 30, 0, 500}};
  for (const Case& c : cases)
    EXPECT_EQ(multiply_by_quantized_multiplier(c.x, c.multiplier, -c.exponent), c.expected)
        << c.x << " * " << c.multiplier << " * 2^" << c.exponent;
  // ruy: -62 (ties upward); gemmlowp and TFLite: -63.
  EXPECT_EQ(multiply_by_quantized_multiplier(-1000, max, 4), -63);
  EXPECT_EQ(rounding_divide_by_pot(-1000, 4), -63);
}

// TFLite tensorflow/lite/kernels/internal/quantization_util_test.cc,
// MultiplyByQuantizedMultiplierInt32 (the double-rounding build, TFLite's default):
// QuantizeMultiplier then MultiplyByQuantizedMultiplier for the non-negative multipliers (ours are
// never negative), and its largest case, x and the multiplier both INT32_MAX with a right shift of
// 3, whose expected value the test computes as TfLiteRound(x * multiplier / 2^34) = 268435456.
TEST(Requantize, MatchesTfliteMultiplyByQuantizedMultiplierVectors) {
  const auto quant_and_multiply = [](std::int32_t x, double multiplier) {
    const QuantizedMultiplier q = quantize_multiplier(multiplier);
    return multiply_by_quantized_multiplier(x, q.multiplier_q31, q.shift);
  };
  EXPECT_EQ(quant_and_multiply(0, 0.1), 0);
  EXPECT_EQ(quant_and_multiply(10000, 0.00097656), 10);
  EXPECT_EQ(quant_and_multiply(-10000, 0.00097656), -10);
  EXPECT_EQ(quant_and_multiply(kI32Min, 0.00001), -21475);
  EXPECT_EQ(quant_and_multiply(kI32Max, 0.00001), 21475);
  // quant_and_multiply(1, 0) = 0: TFLite's QuantizeMultiplier(0) is (0, 0) (its
  // QuantizeMultiplierArray test); ours refuses a zero scale, so the pair is given directly.
  EXPECT_EQ(multiply_by_quantized_multiplier(1, 0, 0), 0);
  EXPECT_EQ(multiply_by_quantized_multiplier(kI32Max, kI32Max, 3), 268435456);
  EXPECT_EQ(multiply_by_quantized_multiplier(-kI32Max, kI32Max, 3), -268435456);
}

// TFLite tensorflow/lite/kernels/internal/quantization_util_test.cc: QuantizeMultiplier's pairs in
// QuantizeMultiplierSmallerThanOneExp, QuantizeMultiplierGreaterThanOne,
// QuantizeMultiplierUnderflow and the positive scales of QuantizeMultiplierArray (TFLite's shift is
// our -shift). Around powers of two a multiplier that would round to 2^31 becomes 2^30 with the
// next exponent, and scales under 2^-32 flush to (0, 0).
TEST(QuantizeMultiplier, MatchesTfliteQuantizeMultiplierVectors) {
  struct Case {
    double scale;
    std::int32_t multiplier, tflite_shift;
  };
  const Case cases[] = {{0.25, 1073741824, -1},
                        {0.50 - 5e-9, 2147483627, -1},
                        {0.50 - 1e-10, 1073741824, 0},
                        {0.50, 1073741824, 0},
                        {0.75, 1610612736, 0},
                        {1 - 1e-9, 2147483646, 0},
                        {1 + 1e-11, 1073741824, 1},
                        {1.25, 1342177280, 1},
                        {1.50, 1610612736, 1},
                        {1.75, 1879048192, 1},
                        {2 - 1e-9, 2147483647, 1},
                        {2 - 1e-11, 1073741824, 2},
                        {2, 1073741824, 2},
                        {std::ldexp(1.0f, -31), 1073741824, -30},
                        {std::ldexp(1.0f, -32), 1073741824, -31},
                        {std::ldexp(0.99f, -32), 0, 0},
                        {std::ldexp(1.0f, -33), 0, 0},
                        {0.125, 1073741824, -2},
                        {1, 1073741824, 1},
                        {4, 1073741824, 3}};
  for (const Case& c : cases) {
    const QuantizedMultiplier q = quantize_multiplier(c.scale);
    EXPECT_EQ(q.multiplier_q31, c.multiplier) << c.scale;
    EXPECT_EQ(q.shift, -c.tflite_shift) << c.scale;
  }
}

}  // namespace
}  // namespace tpu::numerics
