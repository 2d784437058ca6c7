// Sparse softmax cross-entropy on one row of logits, with its gradient: the definition the vector
// unit's xent instruction and the training reference both follow. TensorFlow's
// SparseSoftmaxCrossEntropyWithLogits, which Keras uses for sparse categorical cross-entropy on a
// softmax output's logits (facts file, training-and-systems.md §1: no 1e-7 clipping).
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

// For n >= 1 logits z and label < n:
//   1. m = max z_c, scanning in c order as numerics::softmax_row does (a later value replaces m
//      only if m < it: equal values keep the first, a NaN at c = 0 stays, later NaNs are
//      skipped), and k = the index m was taken from, the first index of the maximum.
//   2. e_c = exp(z_c - m); s = sum of e_c in c order from +0.
//   3. grad_c = (e_c / s - (c == label ? 1 : 0)) * scale.
//   4. loss = log(s) - (z_label - m); correct = (label == k).
// `grad` may alias `z`: z_label and m are read before anything is written.
inline XentRow softmax_xent_row(const float* z, float* grad, std::size_t n, std::size_t label,
                                float scale) {
  float m = z[0];
  std::size_t k = 0;
  for (std::size_t c = 1; c < n; ++c)
    if (m < z[c]) m = z[c], k = c;  // std::max(m, z[c]), as softmax_row scans
  const float z_label = z[label];
  float s = 0.0f;
  for (std::size_t c = 0; c < n; ++c) {
    grad[c] = std::exp(z[c] - m);
    s += grad[c];
  }
  for (std::size_t c = 0; c < n; ++c) {
    const float one_hot = c == label ? 1.0f : 0.0f;
    grad[c] = (grad[c] / s - one_hot) * scale;
  }
  XentRow r;
  r.loss = std::log(s) - (z_label - m);
  r.correct = label == k ? 1.0f : 0.0f;
  return r;
}

}  // namespace tpu::numerics
