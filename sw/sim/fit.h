// One training run on one chip, as Keras's model.fit (docs/training.md, "The host loop"): the
// model differentiated, the step compiled for the chip's TensorCores as replicas, the Fashion-MNIST
// training set streamed a global batch per step in a new shuffled order every epoch, the loss
// records read back after every step, validation on the test set, and — with the check on — the
// training reference run on the same batches beside the chip, whose master weights must match it
// bit for bit after every step. The report splits every step by the tags of its instructions
// (docs/training.md, "The report's step split"). One simulation per process.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "hw/config/system_config.h"
#include "sw/nn/training_reference.h"
#include "sw/nn/weights.h"

namespace tpu::sim {

struct FitOptions {
  std::string model = "configs/models/fashion_mnist_cnn.json";
  std::string data_dir;    // default: the Debian dataset-fashion-mnist directory
  std::uint64_t seed = 1;  // Glorot-uniform initial weights and the per-epoch shuffle
  std::uint32_t epochs = 5;
  std::uint32_t steps_per_epoch = 60;
  std::uint32_t batch = 0;  // global; 0: the training images // steps_per_epoch (Keras)
  // Validate after every this many epochs, as Keras (none when it exceeds the epochs); 0: after
  // the last epoch.
  std::uint32_t validation_freq = 0;
  nn::Optimizer optimizer;
  // The learning rate's linear warm-up in epochs (Goyal et al. 5, Google's v3-2048 ResNet-50
  // run 25): optimizer.warmup_steps = floor(warmup_epochs x steps_per_epoch) when > 0, as
  // MLPerf's reference rounds it (docs/training.md, "Warm-up").
  double warmup_epochs = 0.0;
  // The loss's label smoothing in [0, 1) (Keras's label_smoothing; 0.1 in the big-batch
  // ResNet-50 runs): nn::TrainPlan::label_smoothing.
  float label_smoothing = 0.0f;
  // Distributed BatchNormalization: replicas (TensorCores) per group whose statistics are one
  // (nn::TrainPlan::bn_group; 8 in Google's v3-2048 ResNet-50 run); 1: each replica's own.
  std::uint32_t bn_group = 1;
  // Start from this weights file (fine-tuning) instead of Keras's initialisers with `seed`.
  std::string weights;
  // Where the pass's tensors live (docs/training.md, "Memory"): the unified buffer when they fit
  // (auto), else off-chip memory; or either, forced (compiler::ActivationHome).
  enum class Activations { kAuto, kUnifiedBuffer, kOffChip } activations = Activations::kAuto;
  bool check = true;  // the reference beside the chip, bit for bit after every step
  // Scale-out (docs/systems.md, "Scale-out"): on a system of several chips, chip 0 alone is
  // simulated, its peers taken as identical and its ICI writes mirrored back to it: timing only
  // (no check, no loss, accuracy or validation).
  bool scale_out = false;
  // On several chips, the gradient's all-reduce in buckets of at least this many bytes, each
  // issued as soon as the backward pass has finished its gradients, so that it overlaps the rest
  // of the backward pass (docs/systems.md, "Overlap"); 0: one all-reduce after the backward
  // pass. 25 MiB is PyTorch DistributedDataParallel's default bucket (bucket_cap_mb).
  std::uint64_t bucket_bytes = std::uint64_t{25} << 20;
  // Time to train (docs/training.md, "Time to train"): this many epochs of `dataset_images`
  // images (0: the training images fit reads; random inputs need it given) at the median step.
  std::uint32_t epochs_to_train = 0;
  std::uint64_t dataset_images = 0;
  // Cycles, split, bytes, counts and energy only (SimOptions): no losses or weights computed, so
  // no check; the report says "outputs_computed": false (docs/training.md, "Timing only").
  bool timing_only = false;
  // A Chrome trace-event JSON of the first and the last step is wanted for this file.
  std::string trace;
  // Fault injection for tests: called with the step number and the reference's state after
  // each checked step, before the chip's weights are compared with it.
  std::function<void(std::uint64_t step, nn::TrainState&)> reference_fault;
  // Called with each line Keras would print ("Epoch 1/5", "60/60 - ..."), as it happens.
  std::function<void(const std::string&)> log;
};

struct FitResult {
  nlohmann::ordered_json report;  // tpusim.fit/1 (docs/report.md)
  std::string trace_json;  // when FitOptions::trace names a file: its content (docs/trace.md)
  nn::Weights weights;     // the chip's, after the last step (none when timing only)
};

// Throws InputError for bad inputs and ProgramError when the chip stops; a step whose weights
// differ from the reference's is a bug in tpusim (std::logic_error naming the step, the replica,
// the parameter and the element).
FitResult fit_session(const SystemConfig& sys, const FitOptions& opt);

}  // namespace tpu::sim
