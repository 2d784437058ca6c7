// The training step in float64, straight from the definitions (docs/training.md, "Checking the
// gradient rules"): the forward, the loss and the backward operations of a TrainingGraph, each
// computed by its textbook formula with no rounding to speak of. It checks the gradient rules
// (ir/autodiff.h) against central finite differences of loss64, and is the yardstick the chip's
// bf16/fp32 gradients are measured against; it is not bit-exact with anything.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "sw/ir/autodiff.h"
#include "sw/ir/graph.h"
#include "sw/nn/weights.h"

namespace tpu::nn {

struct Float64Step {
  double loss = 0.0;      // mean over the images of the cross-entropy
  double accuracy = 0.0;  // share of images whose first argmax is the label
  // Per trainable parameter (TrainingGraph::parameters, as ParameterGradient ids): dLoss/dp,
  // of the mean loss, in the parameter's Keras layout.
  std::map<ir::TensorId, std::vector<double>> gradients;
};

// `x` holds n images of g.input.size() values (NHWC), `labels` n class ids in [0, classes).
// The loss is the mean over the n images (the global batch) of sparse categorical
// cross-entropy on the logits.
double loss64(const ir::Graph& g, const Weights& w, const float* x, const std::int32_t* labels,
              std::size_t n);
Float64Step step64(const ir::Graph& g, const ir::TrainingGraph& t, const Weights& w, const float* x,
                   const std::int32_t* labels, std::size_t n);

}  // namespace tpu::nn
