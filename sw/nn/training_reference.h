// The training step as the chip computes it (docs/training.md, "The arithmetic of a step"):
// bf16 MXU operands with fp32 products summed in the MXU's order, fp32 elementwise work, fp32
// master weights and optimizer state, replicas that each take a share of the global batch and
// add their gradients in replica order. It follows the documented order, not the chip model's
// code, so that the chip's weights can be checked against it bit for bit after every step; the
// scalar functions it shares with the chip (rounding, activations, the loss, the optimizer) live
// in numerics/.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "sw/ir/autodiff.h"
#include "sw/ir/graph.h"
#include "sw/nn/weights.h"

namespace tpu::nn {

// How the step is cut up; every choice changes the order of sums, so the reference takes the
// compiler's.
struct TrainPlan {
  std::uint32_t tile_rows = 128;  // mxu.rows: a matmul's contraction runs in chunks of this
  std::uint32_t replicas = 1;     // TensorCores, each taking global batch / replicas images
  std::uint32_t micro_batch = 0;  // images of one forward and backward pass; 0: a whole share
  // Per operation (by index): the images of one partial sum of its kernel's gradient, each partial
  // added to the running sum in turn; 0, or no entry: the whole pass.
  std::vector<std::uint32_t> kernel_chunk{};
  // The chips the replicas lie on, as the dimensions of their torus (all_reduce.h); empty: one
  // chip, whose cores are the replicas.
  std::vector<std::uint32_t> chip_dims{};
  // The all-reduce's buckets (all_reduce.h): the element where each ends; empty: one.
  std::vector<std::uint64_t> buckets{};
  // The loss's label smoothing E (Keras's label_smoothing): targets (1 - E)·onehot + E / classes
  // in training and validation alike (numerics::softmax_xent_row); 0: the one-hot labels.
  float label_smoothing = 0.0f;
  // Distributed BatchNormalization (docs/training.md): the replicas in groups of `bn_group`
  // consecutive ones; each BatchNormalization's statistics, and its backward's two sums, over the
  // group's rows: every replica's sums over its own rows (row order from +0), the group's vectors
  // of them all-reduced as all_reduce.h sums a gradient, over the box `bn_dims` of chip_dims its
  // chips take (empty: a group of one chip's cores). 1: each replica's own statistics. A group
  // needs one pass per step (micro_batch the share).
  std::uint32_t bn_group = 1;
  std::vector<std::uint32_t> bn_dims{};
};

enum class OptimizerKind { Sgd, Momentum, Adam, Lars };
struct Optimizer {
  OptimizerKind kind = OptimizerKind::Adam;
  // Keras's defaults (keras.optimizers.Adam; SGD's momentum 0.9 when asked for).
  float learning_rate = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-7f;
  float momentum = 0.9f;
  // LARS (numerics/optimizer.h): MLPerf ResNet-50's weight decay 1e-4 (training-and-systems.md
  // §4) and tf.contrib.opt.LARSOptimizer's default eeta 0.001.
  float weight_decay = 1e-4f, lars_eta = 1e-3f;
  // Linear warm-up of the learning rate over this many steps, then learning_rate
  // (numerics::warmup_learning_rate); 0: none.
  std::uint64_t warmup_steps = 0;
};

// Whether LARS scales a parameter's step by its trust ratio and decays it: every parameter but
// those MLPerf's skip list {"batch_normalization", "bias"} names (biases, BatchNormalization's
// gamma and beta), which take plain momentum.
constexpr bool lars_scales(ir::Param p) {
  return p != ir::Param::Bias && p != ir::Param::Gamma && p != ir::Param::Beta;
}

// A BatchNormalization's moving statistics (Keras's moving_mean and moving_variance).
struct MovingStats {
  std::vector<float> mean, variance;
};
using Moving = std::map<std::size_t, MovingStats>;  // per BatchNormalization operation

struct TrainState {
  Weights weights;                       // fp32 master weights
  std::vector<std::vector<float>> m, v;  // per TrainingGraph::parameters entry; empty if unused
  std::uint64_t iterations = 0;          // steps taken (Keras's optimizer.iterations)
  // Per replica (empty until the first step: the weights' then): each replica updates its own
  // moving statistics from its passes' and validates with them, as TensorFlow's sync-on-read
  // variables do under TPUStrategy.
  std::vector<Moving> moving;
};
TrainState initial_state(const ir::Graph& g, const ir::TrainingGraph& t, Weights w,
                         const Optimizer& opt);

// The state's weights with replica r's moving statistics in its BatchNormalizations (what a model
// saved after training holds); the weights' own before the first step.
Weights weights_with_moving(const TrainState& s, std::size_t r = 0);

// Per image of the global batch, in batch order: the cross-entropy and 1 when the first argmax
// of the logits is the label (else 0), as the chip's loss records hold them.
struct StepRecords {
  std::vector<float> loss, correct;
};

// One step on `global_batch` images (float pixels, which the chip receives as bf16) and their
// labels: updates `s` in place. `gradients`, when given, receives each parameter's summed
// gradient (TrainingGraph::parameters order) before the update. Throws std::invalid_argument when
// the batch does not split into the plan's replicas and micro-batches.
StepRecords reference_step(const ir::Graph& g, const ir::TrainingGraph& t, const TrainPlan& plan,
                           const Optimizer& opt, TrainState& s, const float* images,
                           const std::int32_t* labels, std::size_t global_batch,
                           std::vector<std::vector<float>>* gradients = nullptr);

// Forward only, for validation: the loss records of `n` images with the weights (and their
// moving statistics), in micro-batches of the plan's size on one replica (the order of sums the
// chip's forward uses).
StepRecords reference_evaluate(const ir::Graph& g, const ir::TrainingGraph& t,
                               const TrainPlan& plan, const Weights& w, const float* images,
                               const std::int32_t* labels, std::size_t n);
// The same for the first `n` images of a global batch of `global_batch` split over the plan's
// replicas, each validated with its replica's moving statistics.
StepRecords reference_evaluate(const ir::Graph& g, const ir::TrainingGraph& t,
                               const TrainPlan& plan, const TrainState& s, const float* images,
                               const std::int32_t* labels, std::size_t n, std::size_t global_batch);

}  // namespace tpu::nn
