// tpusim train: Keras's model.fit on the host, in the chip's training arithmetic. Each step is
// the training reference's (nn::reference_step, docs/training.md "The arithmetic of a step"):
// bf16 MXU operands summed in fp32 in the MXU's order, fp32 elementwise work, Adam as TensorFlow
// compiles it for TPUs. So there is one trainer: `tpusim fit` runs the same step as instructions
// on a simulated chip and checks its weights against this arithmetic after every step; `tpusim
// train` runs it alone, fast, on one replica with the whole batch in one pass (128-row tiles, as
// v2, v3 and v4's MXUs). It produces the weights tpusim ships (docs/weights.md "Training").
// Single-threaded with a fixed order of sums: a seed gives the same weights bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "sw/data/idx.h"
#include "sw/ir/graph.h"
#include "sw/nn/weights.h"

namespace tpu::train {

// The defaults are the settings of the shipped weights (configs/weights/fashion_mnist_cnn.json).
struct TrainOptions {
  std::uint32_t epochs = 10;
  std::uint32_t batch = 32;  // Keras's default batch size
  // Keras's Adam defaults (keras.optimizers.Adam), rounded to fp32 for the step.
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-7;
  // Seeds the Glorot-uniform initial weights (nn::random_weights) and, through a separate
  // stream, the per-epoch shuffle.
  std::uint64_t seed = 1;
  // Multiplies the pixels while training only. The returned weights fold the factor into the
  // first weighted layer's kernel (the same function, as that layer is linear in its input), so
  // they always take raw 0-255 pixels, as the tutorial's network does. 1 trains on raw pixels
  // exactly as the tutorial; that stalls near 87.5% top-1 (docs/weights.md "Training"), so the
  // default, which produced the shipped weights, is 1/255.
  float input_scale = 1.0f / 255.0f;
};

struct EpochStats {
  std::uint32_t epoch = 0;  // 1-based
  // Over the epoch's training batches, each sample counted once with the weights of its batch
  // (what Keras prints as loss and sparse_categorical_accuracy).
  double loss = 0.0;
  double accuracy = 0.0;
  // On the validation set after the epoch, when one is given.
  std::optional<double> val_loss, val_accuracy;
  double seconds = 0.0;  // wall time of the epoch, validation included
};

struct Progress {
  std::uint32_t epoch = 0, epochs = 0;   // epoch is 1-based
  std::uint64_t batch = 0, batches = 0;  // batches done in this epoch, batches per epoch
  double loss = 0.0, accuracy = 0.0;     // running means over this epoch's samples so far
  std::optional<EpochStats> epoch_done;  // set on the last call of each epoch
};
using ProgressFn = std::function<void(const Progress&)>;

struct TrainResult {
  nn::Weights weights;
  std::vector<EpochStats> epochs;
};

// Trains `m` from Glorot-uniform weights on `data` (pixels cast to float, times input_scale). The
// model must end in a softmax over a flat output (fused with the loss), have a gradient rule for
// every layer (ir::differentiate) and take rows x cols x 1 images of the data set. `progress` is
// called after every batch. Throws InputError for options, models or data it cannot train.
TrainResult train(const ir::Graph& m, const data::Dataset& data, const TrainOptions& opt,
                  const data::Dataset* validation = nullptr, const ProgressFn& progress = {});

// Mean loss and top-1 accuracy of `w` on `data` with raw pixels (trained weights already hold
// their input scale), in the trainer's forward pass and loss (nn::reference_evaluate).
struct Evaluation {
  double loss = 0.0, accuracy = 0.0;
};
Evaluation evaluate(const ir::Graph& m, const nn::Weights& w, const data::Dataset& data);

}  // namespace tpu::train
