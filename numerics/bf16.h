// bfloat16: the top 16 bits of an IEEE-754 binary32. Conversion from fp32 rounds to nearest,
// ties to even, as the TPU's MXU input path does; subnormals round like any other value (no
// flush to zero); NaN stays NaN, quieted, with its sign and top payload bits.
//
// The element type of every bf16 chip, so its names stay in namespace tpu, where code across
// the tree spells them (tb/unit/numerics/bf16_test.cpp checks it against TensorFlow's, Eigen's
// and PyTorch's published vectors).
#pragma once

#include <cstdint>
#include <cstring>

namespace tpu {

struct Bf16 {
  std::uint16_t bits = 0;
};

inline float to_float(Bf16 h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A NaN (exponent all ones, mantissa not zero: magnitude bits above infinity's) keeps its sign
// and top payload bits, quieted; any other value rounds to nearest, ties to even, by adding 0x7fff
// plus the lsb it keeps. A select rather than a branch, so that loops over many values vectorise.
inline Bf16 to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const std::uint32_t top = u >> 16;
  const std::uint32_t rounded = (u + 0x7fffu + (top & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return Bf16{static_cast<std::uint16_t>(nan ? (top | 0x0040u) : rounded)};
}

// Rounds an fp32 value to the nearest bf16-representable fp32 value.
inline float round_bf16(float f) { return to_float(to_bf16(f)); }

}  // namespace tpu
