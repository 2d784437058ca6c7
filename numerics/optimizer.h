// Optimizer steps on fp32 weights, as XLA fuses them on a TPU: the definitions the vector unit's
// update instruction and the training reference both follow (facts file,
// training-and-systems.md §1-2: float32 master weights and slots, the update in float32).
//
// Every step is one fp32 operation rounded on its own, in the order written, with no fused
// multiply-add (numerics/activation.h explains why the build never contracts them); sqrtf is
// correctly rounded (IEEE 754), so unlike exp these results do not depend on the C library.
#pragma once

#include <cmath>
#include <cstdint>

namespace tpu::numerics {

// Plain SGD: w - lr * g.
inline float sgd_step(float w, float g, float lr) { return w - lr * g; }

// Keras SGD with momentum (nesterov off): m = momentum * m - lr * g; w = w + m.
inline void momentum_step(float& w, float& m, float g, float lr, float momentum) {
  m = momentum * m - lr * g;
  w = w + m;
}

// Adam as tf2xla compiles ResourceApplyAdam (tensorflow/compiler/tf2xla/kernels/
// training_ops.cc), epsilon added to sqrt(v), not to sqrt(v-hat):
//   alpha = (lr * sqrt(1 - beta2_power)) / (1 - beta1_power)        once per step
//   m = m + (g - m) * (1 - beta1)
//   v = v + (g * g - v) * (1 - beta2)
//   w = w - (m * alpha) / (sqrt(v) + epsilon)
// with beta1_power = beta1^t, beta2_power = beta2^t, t = iterations + 1 (adam_powers).
inline float adam_alpha(float lr, float beta1_power, float beta2_power) {
  return (lr * std::sqrt(1.0f - beta2_power)) / (1.0f - beta1_power);
}
inline void adam_step(float& w, float& m, float& v, float g, float alpha, float beta1, float beta2,
                      float epsilon) {
  m = m + (g - m) * (1.0f - beta1);
  v = v + (g * g - v) * (1.0f - beta2);
  w = w - (m * alpha) / (std::sqrt(v) + epsilon);
}

// The host's part of an Adam step: beta^t for step t = iterations + 1 >= 1, each computed in
// float64 and rounded once to fp32 (TF keeps the powers as fp32 variables the host side
// computes; the chip only reads them).
struct AdamPowers {
  float beta1_power = 1.0f;
  float beta2_power = 1.0f;
};
inline AdamPowers adam_powers(float beta1, float beta2, std::uint64_t t) {
  AdamPowers p;
  p.beta1_power = static_cast<float>(std::pow(static_cast<double>(beta1), static_cast<double>(t)));
  p.beta2_power = static_cast<float>(std::pow(static_cast<double>(beta2), static_cast<double>(t)));
  return p;
}

}  // namespace tpu::numerics
