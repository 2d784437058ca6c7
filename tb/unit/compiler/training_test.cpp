// The training lowering (sw/compiler/training.h), read as instructions: how a kernel gradient's
// partial sums reach the running sum.
#include "sw/compiler/training.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "common/cli.h"
#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "sw/import/import.h"
#include "sw/ir/autodiff.h"
#include "sw/nn/weights.h"

namespace tpu::compiler {
namespace {

using test::source;

// A drain of a kernel gradient's partial (an fp32 activate, then an add that reads what it
// wrote) whose chunk spans every column of the gradient is contiguous in the running sum as in
// the partial: one eltwise over all its rows, not one per accumulator row.
TEST(TrainingLowering, AKernelGradientsWholeWidthPartialIsAddedWithOneEltwise) {
  const ChipConfig cfg = load_chip_config(source("configs/chips/v3.json"));
  const ir::Graph g = importers::load_model(source("configs/models/fashion_mnist_cnn.json"));
  const ir::TrainingGraph t = ir::differentiate(g);
  const nn::Weights w = nn::random_weights(g, 1);
  const TrainingProgram p = compile_training(g, t, w, nn::Optimizer{}, cfg, 1000);
  const auto& code = p.step.cores[0];
  std::size_t drains = 0;
  for (std::size_t i = 0; i + 1 < code.size(); ++i) {
    const auto* ac = std::get_if<isa::Activate>(&code[i]);
    const auto* add = std::get_if<isa::Eltwise>(&code[i + 1]);
    if (!ac || !add || add->op != isa::EltOp::Add || !(add->b == ac->dst)) continue;
    ++drains;
    // Both of the tutorial's kernels (3x3x1 x 64, 10816 x 10) are narrower than v3's array.
    ASSERT_LE(ac->cols, cfg.mxu.cols);
    EXPECT_EQ(add->count, std::uint64_t{ac->rows} * ac->cols) << "instruction " << i + 1;
    const auto* next = i + 2 < code.size() ? std::get_if<isa::Eltwise>(&code[i + 2]) : nullptr;
    if (next) {
      EXPECT_FALSE(next->op == isa::EltOp::Add && next->b.value() > ac->dst.value() &&
                   next->b.value() < ac->dst.value() + add->count * 4)
          << "instruction " << i + 2 << " adds another row of the same partial";
    }
  }
  EXPECT_GT(drains, 0u);
}

TrainingProgram compiled(const std::string& chip, const std::string& model, std::uint32_t batch,
                         ActivationHome home) {
  const ChipConfig cfg = load_chip_config(source("configs/chips/" + chip + ".json"));
  const ir::Graph g = importers::load_model(source(model));
  const ir::TrainingGraph t = ir::differentiate(g);
  return compile_training(g, t, nn::random_weights(g, 1), nn::Optimizer{}, cfg, batch, home);
}

// By default a pass's tensors stay in the unified buffer when an image's fit there: the
// tutorial's do, in micro-batches, and every kernel tile is read from the unified buffer.
TEST(TrainingLowering, ThePassStaysInTheUnifiedBufferWhenAnImageFits) {
  const TrainingProgram p =
      compiled("v3", "configs/models/fashion_mnist_cnn.json", 1000, ActivationHome::kAuto);
  EXPECT_FALSE(p.layout.off_chip);
  EXPECT_GT(p.layout.micro_batch, 0u);
  EXPECT_LT(p.layout.micro_batch, p.layout.share);
  for (const auto& inst : p.step.cores[0]) {
    if (const auto* rw = std::get_if<isa::ReadWeights>(&inst)) {
      EXPECT_EQ(rw->source, isa::WeightSource::UnifiedBuffer);
    }
  }
}

// Off-chip: the replica's share is one pass; the bf16 kernels are read from off-chip memory;
// every operation streams its operands in and its results out in chunks, and a kernel's gradient
// is summed chunk by chunk (the plan the reference follows names the chunk).
TEST(TrainingLowering, OffChipTensorsStreamThroughTheUnifiedBufferInChunks) {
  const ChipConfig cfg = load_chip_config(source("configs/chips/v3.json"));
  const TrainingProgram p =
      compiled("v3", "configs/models/fashion_mnist_cnn.json", 1000, ActivationHome::kOffChip);
  EXPECT_TRUE(p.layout.off_chip);
  EXPECT_EQ(p.layout.micro_batch, p.layout.share);
  std::size_t reads = 0, writes = 0;
  for (const auto& inst : p.step.cores[0]) {
    if (const auto* rw = std::get_if<isa::ReadWeights>(&inst)) {
      // A kernel's tiles come from memory; a kernel gradient's dz tiles from the arena.
      if (rw->source == isa::WeightSource::UnifiedBuffer) {
        EXPECT_FALSE(rw->transpose) << "a transposed kernel tile read from the unified buffer";
      }
    }
    reads += std::holds_alternative<isa::ReadMem>(inst);
    writes += std::holds_alternative<isa::WriteMem>(inst);
  }
  EXPECT_GT(reads, 20u);
  EXPECT_GT(writes, 10u);
  // The convolution's kernel gradient: in chunks of fewer images than the pass.
  ASSERT_EQ(p.layout.kernel_chunk.size(), 6u);
  EXPECT_GT(p.layout.kernel_chunk[0], 0u);
  EXPECT_LT(p.layout.kernel_chunk[0], p.layout.share);
  EXPECT_EQ(p.layout.plan().kernel_chunk, p.layout.kernel_chunk);
  EXPECT_LE(p.step.ub_bytes_used, cfg.unified_buffer.bytes);
}

// ResNet-50 at 32 images per TensorCore on v3: no image's tensors fit the 16 MiB unified buffer,
// so auto puts them off-chip; they fit the HBM with their lifetimes; forced into the unified
// buffer, the model is refused naming the bytes.
TEST(TrainingLowering, ResNet50sTensorsGoOffChipAndFitTheHbm) {
  const ChipConfig cfg = load_chip_config(source("configs/chips/v3.json"));
  const TrainingProgram p =
      compiled("v3", "configs/models/resnet50.json", 64, ActivationHome::kAuto);
  EXPECT_TRUE(p.layout.off_chip);
  EXPECT_EQ(p.layout.share, 32u);
  EXPECT_GT(p.layout.activation_bytes, cfg.unified_buffer.bytes);
  EXPECT_LT(p.layout.activation_bytes * p.layout.replicas, cfg.off_chip_memory.bytes);
  // A forward and a backward row per operation, and the loss, exchange and update.
  EXPECT_EQ(p.step.layers.size(), 1 + 2 * 176 + 3u);
  try {
    (void)compiled("v3", "configs/models/resnet50.json", 64, ActivationHome::kUnifiedBuffer);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("one image's tensors of a training pass take"),
              std::string::npos)
        << e.what();
  }
}

// The instructions a step's program runs under tag `id`, per core 0 (a tag lasts until the next).
std::vector<isa::Instruction> under_tag(const Program& p, std::uint32_t id) {
  std::vector<isa::Instruction> out;
  std::uint32_t tag = 0;
  for (const auto& inst : p.cores[0]) {
    if (const auto* t = std::get_if<isa::Tag>(&inst)) {
      tag = t->id;
      continue;
    }
    if (tag == id) out.push_back(inst);
  }
  return out;
}

// Off-chip, an elementwise chain runs in one pass of chunks: BatchNormalization's normalisation
// and the ReLU after it share their chunks, so the ReLU's forward moves no data (its input never
// leaves the unified buffer), and a convolution followed by its BatchNormalization takes the
// statistics' sums in its own chunks, so the BatchNormalization reads its input once, not twice.
TEST(TrainingLowering, OffChipElementwiseChainsShareTheirChunks) {
  const ir::Graph g = importers::load_model(source("configs/models/resnet_mini.json"));
  const TrainingProgram p =
      compiled("v3", "configs/models/resnet_mini.json", 64, ActivationHome::kOffChip);
  ASSERT_EQ(g.ops[2].kind, ir::OpKind::BatchNormalization);
  ASSERT_EQ(g.ops[3].kind, ir::OpKind::Activation);
  const auto relu = under_tag(p.step, 1 + 3);
  ASSERT_FALSE(relu.empty());
  for (const auto& inst : relu) EXPECT_TRUE(std::holds_alternative<isa::Map>(inst));
  // Per chunk of the chain: one read of x, one write of the ReLU's output; no pass for the sums.
  std::size_t reads = 0, writes = 0;
  for (const auto& inst : under_tag(p.step, 1 + 2)) {
    reads += std::holds_alternative<isa::ReadMem>(inst);
    writes += std::holds_alternative<isa::WriteMem>(inst);
  }
  EXPECT_GT(reads, 0u);
  EXPECT_EQ(reads, writes);
}

// Off-chip, an Add's backward passes its gradient to both operands by sharing its home: a
// projection block's Add (neither operand's gradient written again) moves no data.
TEST(TrainingLowering, AnAddsGradientIsSharedNotCopied) {
  const ir::Graph g = importers::load_model(source("configs/models/resnet_mini.json"));
  const TrainingProgram p =
      compiled("v3", "configs/models/resnet_mini.json", 64, ActivationHome::kOffChip);
  std::size_t add = 0;
  while (g.ops[add].name != "conv2_block1_add") ++add;
  for (const auto& inst : under_tag(p.step, static_cast<std::uint32_t>(1 + g.ops.size() + add))) {
    EXPECT_FALSE(std::holds_alternative<isa::ReadMem>(inst));
    EXPECT_FALSE(std::holds_alternative<isa::WriteMem>(inst));
  }
}

}  // namespace
}  // namespace tpu::compiler
