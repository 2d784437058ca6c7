// Lowering of a training step (docs/training.md, "The step on the chip"): the forward graph, the
// loss and the backward pass of an ir::TrainingGraph, the gradient sum across the TensorCores and
// the optimizer update, as instructions — in the arithmetic order nn::reference_step follows, so
// that the chip's master weights match it bit for bit after every step.
//
// Each TensorCore is a replica: it takes global batch / tensor_cores images of every step, runs
// them in micro-batches sized to its unified buffer (forward, loss, backward), keeps its fp32
// gradient sums in the unified buffer, adds the other replicas' sums through off-chip memory
// behind a cross-core barrier, and applies the same update to its own fp32 master weights and
// optimizer state in off-chip memory.
#pragma once

#include <cstdint>
#include <vector>

#include "hw/config/chip_config.h"
#include "sw/compiler/program.h"
#include "sw/ir/autodiff.h"
#include "sw/nn/training_reference.h"
#include "sw/nn/weights.h"

namespace tpu::compiler {

// Where a pass's per-image tensors (every operation's value and gradient) live
// (docs/training.md, "Memory"): in the unified buffer, a micro-batch at a time, or in off-chip
// memory, the replica's whole share streamed through the unified buffer in chunks of images, one
// operation at a time; kAuto takes the unified buffer when one image's tensors fit there.
enum class ActivationHome { kAuto, kUnifiedBuffer, kOffChip };

// Where a step's data lives.
struct TrainingLayout {
  std::uint32_t replicas = 1;  // TensorCores of every chip: chips x cores
  std::uint32_t cores = 1;  // TensorCores per chip; replica r is core r % cores of chip r / cores
  std::vector<std::uint32_t> chip_dims;  // the chips' torus (row-major, the first the slowest)
  std::uint32_t share = 0;               // images per replica per step
  // Replicas with programs and host images: all of them, or the first chips' (scale-out).
  std::uint32_t programmed = 1;
  std::uint32_t micro_batch = 0;  // images per forward and backward pass
  std::uint32_t tile_rows = 0;    // mxu.rows
  // The pass's tensors, the bf16 kernels and the kernels' gradient sums in off-chip memory.
  bool off_chip = false;
  std::uint64_t activation_bytes = 0;  // off_chip: per replica, the pass's tensors at their peak
  // Per operation: images per partial sum of its kernel's gradient (0: the whole pass).
  std::vector<std::uint32_t> kernel_chunk;
  // Host memory, rewritten by the host before every step: the images (bf16, NHWC) of replica r at
  // images_addr + (r * share + i) * image_bytes; their labels (int32) at labels_addr + 4 * image;
  // the optimizer's record (fp32 values, docs/isa.md `update`) at optimizer_addr; the chip writes
  // each image's {loss, correct} (2 x fp32) at records_addr + 8 * image.
  std::uint64_t images_addr = 0, labels_addr = 0, optimizer_addr = 0, records_addr = 0;
  std::uint64_t image_bytes = 0, optimizer_bytes = 0, host_bytes = 0;
  // Off-chip memory, the same addresses on every chip: per core of the chip, per trainable
  // parameter (TrainingGraph::parameters order), its replica's fp32 master values and optimizer
  // slots; per core, its gradient sums for the exchange (with off_chip, a kernel's running sum
  // during the step too).
  struct Home {
    std::uint64_t w = 0, m = 0, v = 0;  // m, v unused (0) when the optimizer has no such slot
    std::uint64_t elements = 0;
  };
  std::vector<std::vector<Home>> params;  // [core][parameter]
  std::vector<std::uint64_t> exchange;    // [core]: its gradient sums, parameters in order
  std::uint64_t all_reduce = 0;           // several chips: the chip's sums, then the total
  // Several chips, overlap: the gradient's buckets (docs/systems.md, "Overlap"), each the element
  // where one ends, ascending, the last the gradient's size; each all-reduced on its own
  // (sw/nn/all_reduce.h) as soon as the last pass's backward has finished its gradients. Empty:
  // one all-reduce after the backward pass.
  std::vector<std::uint64_t> buckets;
  float label_smoothing = 0.0f;  // the loss's (nn::TrainPlan::label_smoothing)
  // Distributed BatchNormalization (nn::TrainPlan::bn_group): replicas per group, and the box of
  // chip_dims a group's chips take (collectives.h group_box; empty: the group is one chip's).
  std::uint32_t bn_group = 1;
  std::vector<std::uint32_t> bn_dims;
  // The chip's ICI semaphores the groups' all-reduces take (after the gradient's; none on one
  // chip).
  std::uint32_t bn_first_semaphore = 0, bn_semaphores = 0;
  [[nodiscard]] nn::TrainPlan plan() const {
    return {tile_rows, replicas,        micro_batch, kernel_chunk, chip_dims,
            buckets,   label_smoothing, bn_group,    bn_dims};
  }
  [[nodiscard]] std::uint32_t chips() const { return replicas / cores; }
};

struct TrainingProgram {
  TrainingLayout layout;
  // Programs have a core per programmed replica (chip-major); every chip's memory image is the
  // same.
  // Once, before the first step: the memory image (every replica's master weights, zeroed
  // optimizer state) and a program that prepares the first step's bf16 kernels.
  Program setup;
  // One step; the host streams it again for every step.
  Program step;
  // Forward and loss only, on a global batch of images (validation): the loss records, no
  // update.
  Program evaluate;
};

// `programmed_chips`: programs (and host room for images) only for the first chips' cores, the
// rest of the system's replicas taken as identical to them (fit's scale-out mode); 0: every chip.
// `bucket_bytes`: on several chips, the gradient's all-reduce in buckets of at least this many
// bytes, each issued as soon as the backward pass has finished its gradients (docs/systems.md,
// "Overlap"); 0, or a gradient that makes one bucket: one all-reduce after the backward pass.
// `label_smoothing`: the loss's (nn::TrainPlan::label_smoothing), in [0, 1).
// `bn_group`: replicas per distributed BatchNormalization group (nn::TrainPlan::bn_group): 1, or
// a multiple of the chip's TensorCores whose chips make a box of the torus (group_box); the step
// is then one pass per replica.
// Throws InputError naming the model and what does not fit or cannot be lowered yet.
TrainingProgram compile_training(const ir::Graph& g, const ir::TrainingGraph& t,
                                 const nn::Weights& w, const nn::Optimizer& opt,
                                 const ChipConfig& cfg, std::uint32_t global_batch,
                                 ActivationHome home = ActivationHome::kAuto,
                                 const std::vector<std::uint32_t>& chip_dims = {},
                                 std::uint32_t programmed_chips = 0, std::uint64_t bucket_bytes = 0,
                                 float label_smoothing = 0.0f, std::uint32_t bn_group = 1);

}  // namespace tpu::compiler
