// Adding an operation kind means adding its entry to each per-layer table: the operation table
// (shape, arity, MACs), the float semantics and the chip semantics of the references, and the
// lowering of the code generator. A kind missing from any of them fails here.
#include <gtest/gtest.h>

#include "sw/compiler/compiler.h"
#include "sw/ir/ops.h"
#include "sw/nn/quantized.h"
#include "sw/nn/reference.h"

namespace tpu::ir {
namespace {

TEST(OpTables, EveryKindHasFloatSemanticsChipSemanticsAndALowering) {
  for (const OpInfo& op : op_infos()) {
    EXPECT_TRUE(nn::has_float_semantics(op.kind)) << op.name << ": no float semantics";
    EXPECT_NE(find_entry(nn::chip_semantics(), op.kind), nullptr)
        << op.name << ": no chip semantics";
    EXPECT_TRUE(compiler::has_lowering(op.kind)) << op.name << ": no lowering";
  }
}

TEST(OpTables, AViewComputesNothingOnTheChip) {
  for (const OpInfo& op : op_infos())
    if (op.view) {
      EXPECT_EQ(find_entry(nn::chip_semantics(), op.kind)->run, nullptr) << op.name;
    }
}

}  // namespace
}  // namespace tpu::ir
