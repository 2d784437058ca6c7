// Optimizer steps on fp32 weights, as XLA fuses them on a TPU: the definitions the vector unit's
// update instruction and the training reference both follow (facts file,
// training-and-systems.md §1-2: float32 master weights and slots, the update in float32).
//
// Every step is one fp32 operation rounded on its own, in the order written, with no fused
// multiply-add (numerics/activation.h explains why the build never contracts them); sqrtf is
// correctly rounded (IEEE 754), so unlike exp these results do not depend on the C library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
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

// LARS, layer-wise adaptive rate scaling (You, Gitman, Ginsburg, "Large Batch Training of
// Convolutional Networks", 2017), as TensorFlow's tf.contrib.opt.LARSOptimizer computes it
// (tensorflow/contrib/opt/python/training/lars_optimizer.py, epsilon 0, nesterov off) -- the
// optimizer of Google's MLPerf ResNet-50 submissions on TPU pods (training-and-systems.md §3-4).
// Per weight tensor, from the sums of squares of its weights and its gradient:
//   w_norm = sqrt(w_sumsq), g_norm = sqrt(g_sumsq)
//   trust = (eta * w_norm) / (g_norm + weight_decay * w_norm)   if w_norm > 0 and g_norm > 0
//         = 1                                                   otherwise (also for NaN norms)
//   scaled_lr = lr * trust
// then per element the weight decay joins the gradient and TF's ApplyMomentum runs with
// learning rate 1 on the scaled gradient: g' = g + weight_decay * w;
// accum = accum * momentum + g' * scaled_lr; w = w - accum. So the momentum slot carries updates
// already scaled by each step's trust ratio (not m = momentum * m + g'; w -= scaled_lr * m).
// tpusim's slot holds m = -accum, the sign Keras's momentum slot has: m = momentum * m -
// scaled_lr * g'; w = w + m. Negation is exact and IEEE rounding is symmetric, so w is bit for
// bit TF's; and lars_step is momentum_step on g' with scaled_lr.
// The tensors MLPerf's skip list names (biases, BatchNormalization's gamma and beta) take
// momentum_step with lr itself: no trust ratio, no weight decay (TF's `skip_list`).
inline float lars_scaled_lr(float lr, float eta, float weight_decay, float w_sumsq, float g_sumsq) {
  const float w_norm = std::sqrt(w_sumsq), g_norm = std::sqrt(g_sumsq);
  const float trust =
      w_norm > 0.0f && g_norm > 0.0f ? (eta * w_norm) / (g_norm + weight_decay * w_norm) : 1.0f;
  return lr * trust;
}
inline void lars_step(float& w, float& m, float g, float scaled_lr, float momentum,
                      float weight_decay) {
  momentum_step(w, m, g + weight_decay * w, scaled_lr, momentum);
}

// A LARS norm's sum of squares of x[0 .. n), in the order the chip's reduce sum_squares runs
// it: the elements dealt round-robin to kLarsNormLanes lane sums, each from +0 adding x*x (the
// product rounded, then the add) in increasing index; then the lanes that got an element added
// from +0 in lane order. TF leaves the order of tf.norm's sum unspecified; this one is tpusim's.
inline constexpr std::size_t kLarsNormLanes = 128;
inline float lars_sum_squares(const float* x, std::size_t n) {
  float lanes[kLarsNormLanes] = {};
  for (std::size_t j = 0; j < n; ++j) {
    const float sq = x[j] * x[j];
    lanes[j % kLarsNormLanes] = lanes[j % kLarsNormLanes] + sq;
  }
  float s = 0.0f;
  for (std::size_t c = 0; c < std::min(n, kLarsNormLanes); ++c) s = s + lanes[c];
  return s;
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

// Linear learning-rate warm-up (Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet
// in 1 Hour", 2017, §2.2: 5 epochs; Google's v3-2048 ResNet-50 run: 25, facts file §4): step t
// (the steps taken including this one, from 1) of a warm-up of `warmup_steps` steps runs at
// base * t / warmup_steps, computed in float64 and rounded to fp32 once; from step warmup_steps
// on (and with no warm-up, 0 steps) at the base rate. MLPerf's TensorFlow reference multiplies
// by the global step before its increment, so its first step runs at 0; here the first step
// already moves the weights, and the last step of the warm-up reaches the base rate.
inline float warmup_learning_rate(float base, std::uint64_t t, std::uint64_t warmup_steps) {
  if (t >= warmup_steps) return base;
  return static_cast<float>(static_cast<double>(base) * static_cast<double>(t) /
                            static_cast<double>(warmup_steps));
}

}  // namespace tpu::numerics
