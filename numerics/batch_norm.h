// BatchNormalization in training mode on fp32, per channel over the rows of a pass (every image
// and pixel), as XLA expands BatchNormTraining and BatchNormGrad for the TPU (its
// BatchNormExpander): mean and variance from the sums of x and x², the variance as
// E[x²] − E[x]², rsqrt(variance + ε), and the backward formula written with the forward's
// statistics. The definitions a training reference and the chip's lowering both follow
// (docs/training.md, "BatchNormalization in training mode"). Every operation is one IEEE-754 fp32
// operation rounded to nearest even, in the order written, with no fused multiply-add
// (numerics/activation.h says how the build guarantees that). tb/unit/numerics/batch_norm_test.cpp
// checks them against vectors computed outside this code (tb/unit/numerics/batch_norm_vectors.py).
#pragma once

#include <cmath>

namespace tpu::numerics {

// 1/√x rounded once to fp32: the quotient and the root are taken in float64 (exact enough that
// the one rounding to fp32 decides), so every implementation that follows this gives the same
// bits. +inf for +0, NaN below 0.
inline float rsqrt(float x) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))); }

// A channel's statistics from its sums over `count` rows: sum = Σx and squares = Σ(x·x), each
// summed in row order from +0 (the caller's loop or a `reduce`).
struct BatchStats {
  float mean = 0.0f;      // sum / count
  float variance = 0.0f;  // squares / count − mean·mean
  float var_eps = 0.0f;   // variance + ε
  float rsqrt = 0.0f;     // rsqrt(variance + ε)
};
inline BatchStats batch_stats(float sum, float squares, float count, float epsilon) {
  BatchStats s;
  s.mean = sum / count;
  const float square_mean = squares / count;
  s.variance = square_mean - s.mean * s.mean;
  s.var_eps = s.variance + epsilon;
  s.rsqrt = rsqrt(s.var_eps);
  return s;
}

// y = ((x − mean) · rsqrt) · γ + β.
inline float batch_norm(float x, const BatchStats& s, float gamma, float beta) {
  return ((x - s.mean) * s.rsqrt) * gamma + beta;
}

// The backward of a channel, from its statistics and two sums over the pass's rows (row order
// from +0): dbeta = Σ dy and dot = Σ (dy · (x − mean)).
//   dγ = dot · rsqrt
//   k  = (γ · rsqrt) / count
//   dx = k · ((dy · count − dbeta) − ((x − mean) · dot) / (variance + ε))
inline float batch_norm_gamma_grad(float dot, const BatchStats& s) { return dot * s.rsqrt; }
inline float batch_norm_input_scale(float gamma, const BatchStats& s, float count) {
  return (gamma * s.rsqrt) / count;
}
inline float batch_norm_input_grad(float x, float dy, const BatchStats& s, float count, float dbeta,
                                   float dot, float k) {
  return k * ((dy * count - dbeta) - ((x - s.mean) * dot) / s.var_eps);
}

// Training's update of a moving statistic (Keras 3's BatchNormalization: moving_mean * momentum +
// mean * (1 - momentum), and the same for the variance with the pass's biased variance);
// `rest` is 1 - momentum, rounded to fp32 once.
inline float moving_average(float moving, float batch, float momentum, float rest) {
  return moving * momentum + batch * rest;
}

}  // namespace tpu::numerics
