// The activations' backward on fp32: the gradient of the loss with respect to an activation's
// input, from the activation's OUTPUT y (what the forward pass kept) and the incoming gradient dy.
// The definitions the vector unit's eltwise *_grad ops (docs/isa.md §4.9) and a training
// reference both follow. Every operation is one IEEE-754 fp32 operation rounded to nearest even,
// in the order written, with no fused multiply-add (numerics/activation.h says how the build
// guarantees that). tb/unit/numerics/gradient_test.cpp checks them against vectors computed
// outside this code (tb/unit/numerics/gradient_vectors.py).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace tpu::numerics {

// relu: dy where y > 0, else +0 (a select, not TensorFlow ReluGrad's dy * (x > 0), which gives
// -0 or NaN for a negative or non-finite dy where x <= 0). y > 0 exactly where the input x was
// > 0, so the output serves in place of the input. A NaN y gives +0: the compare is false.
inline float relu_grad(float y, float dy) { return y > 0.0f ? dy : 0.0f; }

// relu6: dy where 0 < y < 6, else +0 (TensorFlow's Relu6Grad mask, as a select). At y = 6 the
// input may have been 6 or above; like TensorFlow the gradient is 0 there.
inline float relu6_grad(float y, float dy) { return (y > 0.0f && y < 6.0f) ? dy : 0.0f; }

// sigmoid: dy * (y * (1 - y)), three roundings in that order (TensorFlow's SigmoidGrad computes
// dy * y * (1 - y); the order here is the written one).
inline float sigmoid_grad(float y, float dy) { return dy * (y * (1.0f - y)); }

// tanh: dy * (1 - y * y), three roundings in that order (TensorFlow's TanhGrad).
inline float tanh_grad(float y, float dy) { return dy * (1.0f - y * y); }

// Pooling's backward (TensorFlow's MaxPoolGrad and AvgPoolGrad, select-and-scatter).
//
// max: the window position that receives dy: the first maximum of the window's values v[0..n)
// (n >= 1, window order), compared in fp32 as max pooling compares, or the first NaN if there
// is one (max pooling's result is then NaN, which no position equals).
inline std::size_t max_pool_grad_position(const float* v, std::size_t n) {
  std::size_t at = 0;
  for (std::size_t k = 0; k < n; ++k) {
    if (std::isnan(v[k])) return k;
    if (v[k] > v[at]) at = k;
  }
  return at;
}
// avg: each of the window's n >= 1 positions receives dy / n, one fp32 division (n <= 2^24 is
// exact in fp32).
inline float avg_pool_grad_share(float dy, std::int32_t n) { return dy / static_cast<float>(n); }

}  // namespace tpu::numerics
