// Elementwise operations and pooling averages on int8 and bf16: the definitions the vector unit
// and the quantized reference both follow. bf16 operations compute in fp32 and round once to
// bf16 (numerics/bf16.h), as Eigen's and TensorFlow's bfloat16 arithmetic does.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "numerics/bf16.h"
#include "numerics/fixed_point.h"

namespace tpu::numerics {

// int8: saturating add and subtract; mul = saturate(round((a * b) / 2^shift)), ties away from
// zero, 0 <= shift <= 31.
inline std::int8_t add_int8(std::int8_t a, std::int8_t b) { return saturate_int8(a + b); }
inline std::int8_t sub_int8(std::int8_t a, std::int8_t b) { return saturate_int8(a - b); }
inline std::int8_t mul_int8(std::int8_t a, std::int8_t b, int shift) {
  return saturate_int8(rounding_divide_by_pot(a * b, shift));
}
// int8 mul onto another scale: the exact int32 product requantized as Activate requantizes an
// accumulator (real scale multiplier_q31 / 2^31 * 2^-shift, shift in [kMinRequantShift,
// kMaxRequantShift]), for operands and a result on three different scales (an LSTM's gate
// products). TFLite's int8 Mul kernel does the same with zero offsets
// (reference_integer_ops::MulElementwise: MultiplyByQuantizedMultiplier of input1 * input2).
inline std::int8_t mul_int8_requant(std::int8_t a, std::int8_t b, std::int32_t multiplier_q31,
                                    std::int32_t shift) {
  return requantize(a * b, multiplier_q31, shift);
}

// max/min in fp32; a NaN operand gives the quiet NaN, and equal operands (including +0 and -0)
// give the first one.
inline float max_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
  return b > a ? b : a;
}
inline float min_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
  return b < a ? b : a;
}

inline Bf16 add_bf16(Bf16 a, Bf16 b) { return to_bf16(to_float(a) + to_float(b)); }
inline Bf16 sub_bf16(Bf16 a, Bf16 b) { return to_bf16(to_float(a) - to_float(b)); }
inline Bf16 mul_bf16(Bf16 a, Bf16 b) { return to_bf16(to_float(a) * to_float(b)); }
inline Bf16 max_bf16(Bf16 a, Bf16 b) { return to_bf16(max_float(to_float(a), to_float(b))); }
inline Bf16 min_bf16(Bf16 a, Bf16 b) { return to_bf16(min_float(to_float(a), to_float(b))); }

// Average pooling: the window's sum (int32 for int8, fp32 in window order for bf16) divided by
// the window size n <= kMaxAvgPoolWindow (2^24: the int8 sum fits in int32 and n is exact in
// fp32); int8 rounds half away from zero, bf16 divides in fp32 and rounds to nearest even.
inline constexpr std::int32_t kMaxAvgPoolWindow = std::int32_t{1} << 24;
inline std::int8_t avg_int8(std::int32_t sum, std::int32_t n) {
  return saturate_int8(rounding_divide(sum, n));
}
inline Bf16 avg_bf16(float sum, std::int32_t n) { return to_bf16(sum / static_cast<float>(n)); }
// fp32 average pooling: the fp32 sum in window order divided by n in fp32, not rounded further.
inline float avg_float(float sum, std::int32_t n) { return sum / static_cast<float>(n); }

}  // namespace tpu::numerics
