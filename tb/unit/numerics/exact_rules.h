// The written numeric rules (docs/quantization.md) computed a second way, for tests: exact
// integer arithmetic with quotients and remainders, or double precision, never the code of
// numerics/. The numerics tests check the library against them, and the vector unit's tests check
// the chip's kernels against them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace tpu::exact {

inline constexpr std::int32_t kI32Min = std::numeric_limits<std::int32_t>::min();
inline constexpr std::int32_t kI32Max = std::numeric_limits<std::int32_t>::max();

// round(n / d) for d > 0, ties away from zero, by integer quotient and remainder.
inline std::int64_t round_div(std::int64_t n, std::int64_t d) {
  const std::int64_t mag = n < 0 ? -n : n;
  std::int64_t q = mag / d;
  if (2 * (mag % d) >= d) ++q;
  return n < 0 ? -q : q;
}

// floor(n / d + 1/2) for d > 0: round to nearest, ties toward +infinity.
inline std::int64_t round_half_up(std::int64_t n, std::int64_t d) {
  const std::int64_t t = 2 * n + d, dd = 2 * d;
  return t / dd - ((t % dd != 0 && t < 0) ? 1 : 0);
}

inline std::int64_t clamp(std::int64_t v, std::int64_t lo, std::int64_t hi) {
  return std::min(std::max(v, lo), hi);
}

// The requantization rule: a left shift (negative `shift`) saturates to int32 first; the Q31
// product is rounded to int32 (ties toward +infinity, as gemmlowp's doubling high multiply does),
// then divided by 2^shift (ties away from zero); before the int8 saturation.
inline std::int64_t multiply_by_quantized_multiplier(std::int32_t x, std::int32_t m,
                                                     std::int32_t shift) {
  std::int64_t v = x;
  if (shift < 0) v = clamp(v * (std::int64_t{1} << -shift), kI32Min, kI32Max);
  std::int64_t hi =
      (v == kI32Min && m == kI32Min) ? kI32Max : round_half_up(v * m, std::int64_t{1} << 31);
  if (shift > 0) hi = round_div(hi, std::int64_t{1} << shift);
  return hi;
}

inline std::int32_t requantize(std::int32_t x, std::int32_t m, std::int32_t shift) {
  return static_cast<std::int32_t>(clamp(multiply_by_quantized_multiplier(x, m, shift), -128, 127));
}

// fp32 -> nearest bf16-representable value, ties to even, via frexp on the significand: 8
// significant bits. Normal numbers only.
inline float bf16(float f) {
  if (f == 0.0f || !std::isfinite(f)) return f;
  int e = 0;
  const double m = std::frexp(static_cast<double>(f), &e);
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8));
}

// fp32 values and their bit patterns, for comparisons that must tell -0 from +0 and NaNs apart.
inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace tpu::exact
