// The training lowering (sw/compiler/training.h), read as instructions: how a kernel gradient's
// partial sums reach the running sum.
#include "sw/compiler/training.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "hw/config/chip_config.h"
#include "sw/import/import.h"
#include "sw/ir/autodiff.h"
#include "sw/nn/weights.h"

namespace tpu::compiler {
namespace {

std::string source(const std::string& rel) { return std::string(TPUSIM_SOURCE_DIR) + "/" + rel; }

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

}  // namespace
}  // namespace tpu::compiler
