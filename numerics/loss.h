// Sparse softmax cross-entropy on one row of logits, with its gradient: the definition the vector
// unit's xent instruction and the training reference both follow. TensorFlow's
// SparseSoftmaxCrossEntropyWithLogits, which Keras uses for sparse categorical cross-entropy on a
// softmax output's logits (facts file, training-and-systems.md §1: no 1e-7 clipping), with
// Keras's label smoothing (CategoricalCrossentropy's label_smoothing: the targets become
// (1 - E) * onehot + E / classes; the big-batch ResNet-50 runs use E = 0.1, facts file §4).
//
// Every step is one fp32 operation in the order written, with no fused multiply-add (as
// numerics/activation.h explains); expf and logf come from the C library. The softmax part is
// numerics::softmax_row's, step for step.
#pragma once

#include <cmath>
#include <cstddef>

namespace tpu::numerics {

// One example's loss and whether its label is the prediction (1.0f) or not (0.0f): the record
// xent writes per row.
struct XentRow {
  float loss = 0.0f;
  float correct = 0.0f;
};

// The label smoothings the loss is defined for (below): 0 <= E < 1 (a NaN is none of them).
constexpr bool valid_label_smoothing(float e) { return e >= 0.0f && e < 1.0f; }

// For n >= 1 logits z, label < n and label smoothing E (valid_label_smoothing):
//   1. m = max z_c, scanning in c order as numerics::softmax_row does (a later value replaces m
//      only if m < it: equal values keep the first, a NaN at c = 0 stays, later NaNs are
//      skipped), and k = the index m was taken from, the first index of the maximum.
//   2. The targets: off = E / float(n); on = (1 - E) + off; t_c = (c == label ? on : off).
//      E = 0 gives on = 1, off = +0: the one-hot labels.
//   3. e_c = exp(z_c - m); s = sum of e_c in c order from +0; with E > 0, q = sum of
//      t_c * (z_c - m) in c order from +0 (the product rounded, then the add); with E = 0,
//      q = z_label - m.
//   4. grad_c = (e_c / s - t_c) * scale.
//   5. loss = log(s) - q (= sum_c t_c * (log(s) - (z_c - m)), the targets summing to 1);
//      correct = (label == k).
// `grad` may alias `z`: each z_c is read before grad_c is written.
inline XentRow softmax_xent_row(const float* z, float* grad, std::size_t n, std::size_t label,
                                float scale, float smoothing = 0.0f) {
  float m = z[0];
  std::size_t k = 0;
  for (std::size_t c = 1; c < n; ++c)
    if (m < z[c]) m = z[c], k = c;  // std::max(m, z[c]), as softmax_row scans
  const float off = smoothing / static_cast<float>(n);
  const float on = (1.0f - smoothing) + off;
  float q = smoothing == 0.0f ? z[label] - m : 0.0f;
  float s = 0.0f;
  for (std::size_t c = 0; c < n; ++c) {
    if (smoothing != 0.0f) q += (c == label ? on : off) * (z[c] - m);
    grad[c] = std::exp(z[c] - m);
    s += grad[c];
  }
  for (std::size_t c = 0; c < n; ++c) {
    const float target = c == label ? on : off;
    grad[c] = (grad[c] / s - target) * scale;
  }
  XentRow r;
  r.loss = std::log(s) - q;
  r.correct = label == k ? 1.0f : 0.0f;
  return r;
}

}  // namespace tpu::numerics
