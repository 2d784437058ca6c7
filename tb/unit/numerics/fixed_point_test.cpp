// The fixed-point definitions (numerics/fixed_point.h) against the written rules computed a second
// way (exact_rules.h) and against double precision.
#include "numerics/fixed_point.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>

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

}  // namespace
}  // namespace tpu::numerics
