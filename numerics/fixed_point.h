// Integer arithmetic of the int8 chips: saturation and gemmlowp/TFLite's fixed-point
// requantization (gemmlowp fixedpoint/fixedpoint.h: SaturatingRoundingDoublingHighMul,
// RoundingDivideByPOT; TFLite quantization_util: QuantizeMultiplier,
// MultiplyByQuantizedMultiplier). The definitions the vector unit and the quantized reference both
// follow; tested against the published vectors of gemmlowp, TFLite, ruy and GCC's NEON tests
// (tb/unit/numerics/).
//
// One difference in convention from TFLite: a positive `shift` here divides (shifts right), so
//   real scale = multiplier_q31 / 2^31 * 2^-shift,
// the sign the ISA's Activate field has (docs/isa.md). Quantized tensors are symmetric (zero
// point 0).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace tpu::numerics {

// Requantization shifts: gemmlowp's RoundingDivideByPOT takes exponents 0..31, and a left shift
// of more than 31 saturates every nonzero int32.
inline constexpr std::int32_t kMinRequantShift = -31;
inline constexpr std::int32_t kMaxRequantShift = 31;

inline std::int32_t saturate_int32(std::int64_t v) {
  return static_cast<std::int32_t>(std::clamp<std::int64_t>(
      v, std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()));
}

inline std::int8_t saturate_int8(std::int64_t v) {
  return static_cast<std::int8_t>(std::clamp<std::int64_t>(v, -128, 127));
}

// An integer accumulator plus its bias, saturated to int32 before anything else reads it.
inline std::int32_t add_bias(std::int32_t acc, std::int32_t bias) {
  return saturate_int32(std::int64_t{acc} + bias);
}

// gemmlowp SaturatingRoundingDoublingHighMul (the NEON instruction VQRDMULH), bit for bit:
// round(a * b / 2^31) with ties toward +infinity (its nudge of 1 - 2^30 for negative products
// makes -2.5 round to -2; a tie needs a * b to be an odd multiple of 2^30); the only overflow,
// INT32_MIN * INT32_MIN, saturates to INT32_MAX.
inline std::int32_t saturating_rounding_doubling_high_mul(std::int32_t a, std::int32_t b) {
  if (a == std::numeric_limits<std::int32_t>::min() && a == b)
    return std::numeric_limits<std::int32_t>::max();
  const std::int64_t ab = std::int64_t{a} * b;
  const std::int64_t nudge = ab >= 0 ? (std::int64_t{1} << 30) : (1 - (std::int64_t{1} << 30));
  return static_cast<std::int32_t>((ab + nudge) / (std::int64_t{1} << 31));
}

// gemmlowp RoundingDivideByPOT: round(x / 2^exponent), ties away from zero; 0 <= exponent <= 31.
inline std::int32_t rounding_divide_by_pot(std::int32_t x, int exponent) {
  assert(exponent >= 0 && exponent <= kMaxRequantShift);
  const std::int64_t mask = (std::int64_t{1} << exponent) - 1;
  const std::int64_t remainder = std::int64_t{x} & mask;
  const std::int64_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  return static_cast<std::int32_t>((std::int64_t{x} >> exponent) + (remainder > threshold ? 1 : 0));
}

// x * 2^exponent, saturated to int32; 0 <= exponent <= 31. TFLite shifts without saturating (an
// overflow there is undefined behaviour); saturation is the defined result nearest to it.
inline std::int32_t saturating_shift_left(std::int32_t x, int exponent) {
  assert(exponent >= 0 && exponent <= -kMinRequantShift);
  return saturate_int32(std::int64_t{x} * (std::int64_t{1} << exponent));
}

// TFLite MultiplyByQuantizedMultiplier (its double-rounding form): a left shift is applied
// before the doubling high multiply, a right shift after it; shift in [kMinRequantShift,
// kMaxRequantShift], positive to the right.
inline std::int32_t multiply_by_quantized_multiplier(std::int32_t x, std::int32_t multiplier_q31,
                                                     std::int32_t shift) {
  assert(shift >= kMinRequantShift && shift <= kMaxRequantShift);
  if (shift >= 0)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier_q31), shift);
  return saturating_rounding_doubling_high_mul(saturating_shift_left(x, -shift), multiplier_q31);
}

// int32 -> int8: multiply_by_quantized_multiplier, saturated to [-128, 127].
inline std::int8_t requantize(std::int32_t x, std::int32_t multiplier_q31, std::int32_t shift) {
  return saturate_int8(multiply_by_quantized_multiplier(x, multiplier_q31, shift));
}

struct QuantizedMultiplier {
  std::int32_t multiplier_q31 = 0;  // in [2^30, 2^31) unless the scale rounds to zero
  std::int32_t shift = 0;           // in [kMinRequantShift, kMaxRequantShift]
};

// A positive real scale as (multiplier_q31, shift), like TFLite's QuantizeMultiplier: frexp
// gives scale = q * 2^e with q in [0.5, 1); the multiplier is round(q * 2^31), ties away from
// zero, and shift = -e. Scales below about 2^-32 scale every int32 to zero and become {0, 0},
// as in TFLite. Symmetric requantization scales are positive, so a scale that is not finite and
// positive, or is 2^31 or more (a left shift past 31), is outside the domain: std::domain_error.
inline QuantizedMultiplier quantize_multiplier(double scale) {
  if (!std::isfinite(scale) || scale <= 0)
    throw std::domain_error(
        fmt::format("quantize_multiplier: scale = {} (must be a finite number > 0)", scale));
  int e = 0;
  const double q = std::frexp(scale, &e);
  std::int64_t q_fixed = std::llround(q * 2147483648.0);
  if (q_fixed == (std::int64_t{1} << 31)) {
    q_fixed /= 2;
    ++e;
  }
  if (-e < kMinRequantShift)
    throw std::domain_error(
        fmt::format("quantize_multiplier: scale = {} (must be < 2^31: a requantization left shift "
                    "is at most 31)",
                    scale));
  if (-e > kMaxRequantShift) return QuantizedMultiplier{0, 0};
  return QuantizedMultiplier{static_cast<std::int32_t>(q_fixed), -e};
}

// round(num / den) for den > 0, ties away from zero.
inline std::int32_t rounding_divide(std::int32_t num, std::int32_t den) {
  assert(den > 0);
  const std::int64_t n = num;
  const std::int64_t half = den / 2;
  return static_cast<std::int32_t>(n >= 0 ? (n + half) / den : -((-n + half) / den));
}

}  // namespace tpu::numerics
