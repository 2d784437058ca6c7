// The vector unit's scalar functions, shared with the reference inference in sw/nn so that the
// chip and the reference round identically. Header-only, plain C++.
//
// Requantization follows gemmlowp/TFLite's fixed-point scheme (gemmlowp fixedpoint.h:
// SaturatingRoundingDoublingHighMul, RoundingDivideByPOT; TFLite MultiplyByQuantizedMultiplier),
// with one difference in convention: a positive `shift` here divides (shifts right), so
//   real scale = multiplier_q31 / 2^31 * 2^-shift.
// Quantized tensors are symmetric (zero point 0), which is why int8 ReLU is max(q, 0).
//
// Floating-point results depend on evaluation order and on no fused multiply-add: every
// operation here is one IEEE-754 fp32 operation rounded to nearest even, as ISO C++ mode
// (-std=c++17, CMAKE_CXX_EXTENSIONS OFF) compiles it on GCC (no -ffp-contract=fast). expf and
// tanhf come from the C library, so the chip and the reference agree when linked against the same
// libm (they are one binary).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "hw/common/bf16.h"
#include "hw/common/error.h"
#include "hw/isa/isa.h"

namespace tpu {

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

// gemmlowp SaturatingRoundingDoublingHighMul, bit for bit: round(a * b / 2^31) with ties toward
// +infinity (its nudge of 1 - 2^30 for negative products makes -2.5 round to -2; a tie needs
// a * b to be an odd multiple of 2^30); the only overflow, INT32_MIN * INT32_MIN, saturates to
// INT32_MAX. Kept as gemmlowp has it so that results match TFLite's int8 kernels.
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

// x * 2^exponent, saturated to int32; 0 <= exponent <= 31.
inline std::int32_t saturating_shift_left(std::int32_t x, int exponent) {
  assert(exponent >= 0 && exponent <= -kMinRequantShift);
  return saturate_int32(std::int64_t{x} * (std::int64_t{1} << exponent));
}

// int32 -> int8 with a Q31 multiplier and a shift in [kMinRequantShift, kMaxRequantShift]
// (TFLite MultiplyByQuantizedMultiplier: a left shift is applied before the multiply, a right
// shift after it), saturated to [-128, 127].
inline std::int8_t requantize(std::int32_t x, std::int32_t multiplier_q31, std::int32_t shift) {
  assert(shift >= kMinRequantShift && shift <= kMaxRequantShift);
  if (shift >= 0)
    return saturate_int8(
        rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier_q31), shift));
  return saturate_int8(
      saturating_rounding_doubling_high_mul(saturating_shift_left(x, -shift), multiplier_q31));
}

struct QuantizedMultiplier {
  std::int32_t multiplier_q31 = 0;  // in [2^30, 2^31) unless the scale rounds to zero
  std::int32_t shift = 0;           // in [kMinRequantShift, kMaxRequantShift]
};

// A positive real scale as (multiplier_q31, shift), like TFLite's QuantizeMultiplier: frexp
// gives scale = q * 2^e with q in [0.5, 1); the multiplier is round(q * 2^31) and shift = -e.
// Scales below about 2^-32 scale every int32 to zero and become {0, 0}, as in TFLite. Throws
// InputError for a scale that is not finite and positive or is 2^31 or more.
inline QuantizedMultiplier quantize_multiplier(double scale) {
  if (!std::isfinite(scale) || scale <= 0)
    throw InputError(
        fmt::format("quantize_multiplier: scale = {} (must be a finite number > 0)", scale));
  int e = 0;
  const double q = std::frexp(scale, &e);
  std::int64_t q_fixed = std::llround(q * 2147483648.0);
  if (q_fixed == (std::int64_t{1} << 31)) {
    q_fixed /= 2;
    ++e;
  }
  if (-e < kMinRequantShift)
    throw InputError(
        fmt::format("quantize_multiplier: scale = {} (must be < 2^31: a requantization left shift "
                    "is at most 31)",
                    scale));
  if (-e > kMaxRequantShift) return QuantizedMultiplier{0, 0};
  return QuantizedMultiplier{static_cast<std::int32_t>(q_fixed), -e};
}

// round(num / den) for den > 0, ties away from zero (int8 average pooling).
inline std::int32_t rounding_divide(std::int32_t num, std::int32_t den) {
  assert(den > 0);
  const std::int64_t n = num;
  const std::int64_t half = den / 2;
  return static_cast<std::int32_t>(n >= 0 ? (n + half) / den : -((-n + half) / den));
}

// Average pooling: the window's sum (int32 for int8, fp32 in window order for bf16) divided by
// the window size n <= kMaxAvgPoolWindow (2^24: the int8 sum fits in int32 and n is exact in
// fp32); int8 rounds half away from zero, bf16 divides in fp32 and rounds to nearest even.
inline constexpr std::int32_t kMaxAvgPoolWindow = std::int32_t{1} << 24;
inline std::int8_t avg_int8(std::int32_t sum, std::int32_t n) {
  return saturate_int8(rounding_divide(sum, n));
}
inline Bf16 avg_bf16(float sum, std::int32_t n) { return to_bf16(sum / static_cast<float>(n)); }

// Activation functions on fp32. ReLU passes NaN through and turns -0 into +0.
inline float relu(float x) {
  if (std::isnan(x)) return x;
  return x > 0.0f ? x : 0.0f;
}
inline float relu6(float x) {
  if (std::isnan(x)) return x;
  return x > 6.0f ? 6.0f : (x > 0.0f ? x : 0.0f);
}
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float tanh_act(float x) { return std::tanh(x); }

// Elementwise activation on fp32; Softmax is a row function (softmax_row) and is not accepted.
inline float activate_float(isa::ActFunc f, float x) {
  switch (f) {
    case isa::ActFunc::None: return x;
    case isa::ActFunc::Relu: return relu(x);
    case isa::ActFunc::Relu6: return relu6(x);
    case isa::ActFunc::Sigmoid: return sigmoid(x);
    case isa::ActFunc::Tanh: return tanh_act(x);
    case isa::ActFunc::Softmax: break;
  }
  assert(false && "softmax is a row function");
  return x;
}

// ReLU on quantized values: with zero point 0, real 0 is q = 0.
inline std::int8_t relu(std::int8_t q) { return std::max<std::int8_t>(q, 0); }
inline std::int32_t relu(std::int32_t q) { return std::max<std::int32_t>(q, 0); }

// Softmax over n >= 1 values in fp32: subtract the row maximum, expf each, sum in index order,
// divide each by the sum. `out` may alias `in`.
inline void softmax_row(const float* in, float* out, std::size_t n) {
  float m = in[0];
  for (std::size_t i = 1; i < n; ++i) m = std::max(m, in[i]);
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = std::exp(in[i] - m);
    sum += out[i];
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = out[i] / sum;
}

// Activate's pre-activation values (isa::Activate): the integer accumulator plus bias saturates
// to int32 before anything else; float paths compute in fp32.
inline std::int32_t add_bias(std::int32_t acc, std::int32_t bias) {
  return saturate_int32(std::int64_t{acc} + bias);
}
inline float scale_int(std::int32_t acc, std::int32_t bias, float scale) {
  return static_cast<float>(add_bias(acc, bias)) * scale;
}
inline float scale_float(float acc, float bias, float scale) { return (acc + bias) * scale; }

// int8 elementwise: saturating add; mul = saturate(round((a * b) / 2^shift)), ties away from
// zero, 0 <= shift <= 31.
inline std::int8_t add_int8(std::int8_t a, std::int8_t b) { return saturate_int8(a + b); }
inline std::int8_t mul_int8(std::int8_t a, std::int8_t b, int shift) {
  return saturate_int8(rounding_divide_by_pot(a * b, shift));
}

// bf16 max/min compare in fp32; a NaN operand gives NaN, and equal operands (including +0 and
// -0) give the first one.
inline float max_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
  return b > a ? b : a;
}
inline float min_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
  return b < a ? b : a;
}

// bf16 elementwise: computed in fp32, rounded to nearest even (hw/common/bf16.h).
inline Bf16 add_bf16(Bf16 a, Bf16 b) { return to_bf16(to_float(a) + to_float(b)); }
inline Bf16 mul_bf16(Bf16 a, Bf16 b) { return to_bf16(to_float(a) * to_float(b)); }
inline Bf16 max_bf16(Bf16 a, Bf16 b) { return to_bf16(max_float(to_float(a), to_float(b))); }
inline Bf16 min_bf16(Bf16 a, Bf16 b) { return to_bf16(min_float(to_float(a), to_float(b))); }

}  // namespace tpu
