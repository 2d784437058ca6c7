// fp32 <-> symmetric int8 on a per-tensor scale: the conversions of the vector unit's map
// instruction, and the rule the reference quantizes its inputs and weights by (docs/
// quantization.md: q = clamp(round(x / s), -127, 127)). Zero point 0: real 0 is q = 0.
//
// tb/unit/numerics/quantize_test.cpp checks both against TFLite's quantize and dequantize
// kernel tests and against the written rule in double precision.
#pragma once

#include <cmath>
#include <cstdint>

namespace tpu::numerics {

// The symmetric int8 range: -128 is never produced, so negating a quantized value stays in range.
inline constexpr std::int32_t kInt8SymmetricMax = 127;

// q * scale, one fp32 product.
inline float dequantize_int8(std::int8_t q, float scale) { return static_cast<float>(q) * scale; }

// y / scale in fp32 (one division), rounded half away from zero (std::round, as lround in the
// reference's input quantization), saturated to [-127, 127]; NaN gives 0. The saturation is made
// on the fp32 quotient, so infinities and values past the range of long saturate too (lround's
// result is unspecified there).
inline std::int8_t quantize_int8(float y, float scale) {
  const float q = y / scale;
  constexpr auto kMax = static_cast<float>(kInt8SymmetricMax);
  if (std::isnan(q)) return 0;
  if (q >= kMax) return static_cast<std::int8_t>(kInt8SymmetricMax);
  if (q <= -kMax) return static_cast<std::int8_t>(-kInt8SymmetricMax);
  return static_cast<std::int8_t>(std::round(q));
}

}  // namespace tpu::numerics
