// Activation functions and softmax on fp32, and the fp32 value an accumulator stands for before
// them: the definitions the vector unit and the quantized reference both follow.
//
// Floating-point results depend on evaluation order and on no fused multiply-add: every
// operation here is one IEEE-754 fp32 operation rounded to nearest even, as GCC compiles it with
// -ffp-contract=off (every target of ours has it: CMakeLists.txt). expf, expm1f
// and tanhf come from the C library, so the chip and the reference agree when linked against the
// same libm (they are one binary). tb/unit/numerics/activation_test.cpp bounds each function's
// error in ULPs against a float64 evaluation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "numerics/fixed_point.h"

namespace tpu::numerics {

// The pre-activation: an integer accumulator plus bias saturates to int32 (add_bias), then
// converts to fp32 (round to nearest even) and scales; a float accumulator adds its bias and
// scales in fp32.
inline float scale_int(std::int32_t acc, std::int32_t bias, float scale) {
  return static_cast<float>(add_bias(acc, bias)) * scale;
}
inline float scale_float(float acc, float bias, float scale) { return (acc + bias) * scale; }
// The map instruction's per-channel step before its function: x * a + b, two fp32 operations
// (not a fused multiply-add). A standalone BatchNormalization is a = gamma / sqrt(var + eps),
// b = beta - mean * a.
inline float affine(float x, float a, float b) { return x * a + b; }

// ReLU passes NaN through and turns -0 into +0.
inline float relu(float x) {
  if (std::isnan(x)) return x;
  return x > 0.0f ? x : 0.0f;
}
inline float relu6(float x) {
  if (std::isnan(x)) return x;
  return x > 6.0f ? 6.0f : (x > 0.0f ? x : 0.0f);
}
// Keras's LeakyReLU and ELU: x above 0, else alpha * x and alpha * (e^x - 1); NaN stays NaN, -0
// stays -0 for alpha > 0. ELU uses expm1, which keeps its relative precision near 0 where
// e^x - 1 would cancel.
inline float leaky_relu(float x, float alpha) { return x > 0.0f ? x : alpha * x; }
inline float elu(float x, float alpha) { return x > 0.0f ? x : alpha * std::expm1(x); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float tanh_act(float x) { return std::tanh(x); }

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

}  // namespace tpu::numerics
