// The operation table (sw/nn/ops.h): one entry per layer kind, the shapes Keras computes, and the
// argument a shape problem blames.
#include "sw/ir/ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace tpu::ir {
namespace {

using ::testing::HasSubstr;

Op layer(OpKind kind) {
  Op l;
  l.name = "l";
  l.kind = kind;
  return l;
}

Shape inferred(Op l, const std::vector<Shape>& inputs) {
  if (auto problem = infer_shapes(l, inputs)) ADD_FAILURE() << problem->message;
  return l.out;
}

ShapeProblem problem_of(Op l, const std::vector<Shape>& inputs) {
  auto problem = infer_shapes(l, inputs);
  if (!problem) {
    ADD_FAILURE() << "no problem";
    return {};
  }
  return *problem;
}

TEST(OpTable, EveryLayerKindHasExactlyOneEntryAndItsKerasName) {
  const std::vector<OpKind> all = {OpKind::Conv2D,
                                   OpKind::MaxPooling2D,
                                   OpKind::AveragePooling2D,
                                   OpKind::Activation,
                                   OpKind::Flatten,
                                   OpKind::Reshape,
                                   OpKind::Dense,
                                   OpKind::BatchNormalization,
                                   OpKind::ZeroPadding2D,
                                   OpKind::GlobalAveragePooling2D,
                                   OpKind::GlobalMaxPooling2D,
                                   OpKind::Add,
                                   OpKind::Dropout,
                                   OpKind::Constant,
                                   OpKind::DepthwiseConv2D,
                                   OpKind::SeparableConv2D,
                                   OpKind::Concatenate,
                                   OpKind::Multiply,
                                   OpKind::Subtract,
                                   OpKind::PReLU,
                                   OpKind::Embedding,
                                   OpKind::LSTM};
  EXPECT_EQ(op_infos().size(), all.size());
  std::set<std::string_view> names;
  for (OpKind k : all) {
    EXPECT_EQ(op_info(k).kind, k);
    names.insert(name_of(k));
  }
  EXPECT_EQ(names.size(), all.size());
  EXPECT_EQ(name_of(OpKind::GlobalAveragePooling2D), "GlobalAveragePooling2D");
}

TEST(OpTable, ValidWindowsKeepTheWindowsThatFitAndSameIsCeilOfInputOverStride) {
  Op conv = layer(OpKind::Conv2D);
  conv.filters = 16;
  conv.kernel_h = conv.kernel_w = 3;
  conv.stride_h = conv.stride_w = 2;
  EXPECT_EQ(inferred(conv, {{28, 27, 3}}), (Shape{13, 13, 16}));
  conv.padding = Padding::Same;
  EXPECT_EQ(inferred(conv, {{28, 27, 3}}), (Shape{14, 14, 16}));
  Op pool = layer(OpKind::MaxPooling2D);
  pool.kernel_h = pool.kernel_w = pool.stride_h = pool.stride_w = 2;
  EXPECT_EQ(inferred(pool, {{7, 7, 5}}), (Shape{3, 3, 5}));
}

TEST(OpTable, AWindowLargerThanAValidInputBlamesTheWindowArgument) {
  Op conv = layer(OpKind::Conv2D);
  conv.filters = 1;
  conv.kernel_h = 5;
  const ShapeProblem p = problem_of(conv, {{4, 9, 1}});
  EXPECT_EQ(p.argument, "kernel_size");
  EXPECT_THAT(p.message, HasSubstr("the 5x1 window does not fit the 4x9x1 input"));
  Op pool = layer(OpKind::AveragePooling2D);
  pool.kernel_w = 3;
  EXPECT_EQ(problem_of(pool, {{4, 2, 1}}).argument, "pool_size");
}

TEST(OpTable, InputCountsOutsideAKindsArityBlameTheInputs) {
  const ShapeProblem one = problem_of(layer(OpKind::Dense), {{1, 1, 2}, {1, 1, 2}});
  EXPECT_EQ(one.argument, kInputsArgument);
  EXPECT_EQ(one.message, "layer l (Dense) takes 1 input, it names 2");
  const ShapeProblem add = problem_of(layer(OpKind::Add), {{1, 1, 2}});
  EXPECT_EQ(add.message, "layer l (Add) takes 2 or more inputs, it names 1");
}

TEST(OpTable, AddNeedsEqualShapesAndNamesTheFirstThatDiffers) {
  EXPECT_EQ(inferred(layer(OpKind::Add), {{2, 2, 3}, {2, 2, 3}, {2, 2, 3}}), (Shape{2, 2, 3}));
  const ShapeProblem p = problem_of(layer(OpKind::Add), {{2, 2, 3}, {2, 2, 3}, {2, 2, 4}});
  EXPECT_EQ(p.argument, kInputsArgument);
  EXPECT_THAT(p.message, HasSubstr("input 2 is 2x2x4, input 0 is 2x2x3"));
}

TEST(OpTable, DenseNeedsAFlatInputAndBlamesItsClass) {
  Op d = layer(OpKind::Dense);
  d.filters = 10;
  EXPECT_EQ(inferred(d, {{1, 1, 784}}), (Shape{1, 1, 10}));
  EXPECT_EQ(problem_of(d, {{28, 28, 1}}).argument, kClassArgument);
}

TEST(OpTable, PaddingFlatteningAndGlobalPoolingFollowKeras) {
  Op pad = layer(OpKind::ZeroPadding2D);
  pad.pad_top = 1, pad.pad_bottom = 2, pad.pad_left = 3, pad.pad_right = 0;
  EXPECT_EQ(inferred(pad, {{4, 4, 2}}), (Shape{7, 7, 2}));
  pad.pad_bottom = kMaxDim;
  EXPECT_EQ(problem_of(pad, {{4, 4, 2}}).argument, "padding");
  EXPECT_EQ(inferred(layer(OpKind::Flatten), {{3, 4, 5}}), (Shape{1, 1, 60}));
  EXPECT_EQ(inferred(layer(OpKind::GlobalAveragePooling2D), {{3, 4, 5}}), (Shape{1, 1, 5}));
  EXPECT_EQ(inferred(layer(OpKind::GlobalMaxPooling2D), {{3, 4, 5}}), (Shape{1, 1, 5}));
  EXPECT_EQ(inferred(layer(OpKind::BatchNormalization), {{3, 4, 5}}), (Shape{3, 4, 5}));
}

TEST(OpTable, ReshapeFillsItsOneWildcardKeepsTheElementCountAndIsAView) {
  Op r = layer(OpKind::Reshape);
  r.target_shape = {-1};
  EXPECT_EQ(inferred(r, {{28, 28, 1}}), (Shape{1, 1, 784}));
  r.target_shape = {4, -1};
  EXPECT_EQ(inferred(r, {{6, 6, 4}}), (Shape{1, 4, 36}));
  r.target_shape = {-1};  // as Flatten: one dimension past a side's 65536 limit
  EXPECT_EQ(inferred(r, {{224, 224, 3}}), (Shape{1, 1, 150528}));
  r.target_shape = {2, 3, 4};
  EXPECT_EQ(inferred(r, {{1, 1, 24}}), (Shape{2, 3, 4}));
  r.target_shape = {5, -1};
  const ShapeProblem p = problem_of(r, {{1, 1, 24}});
  EXPECT_EQ(p.argument, "target_shape");
  EXPECT_THAT(p.message, HasSubstr("the input 1x1x24 has 24 elements per image"));
  r.target_shape = {5, 5};
  EXPECT_EQ(problem_of(r, {{1, 1, 24}}).argument, "target_shape");
  EXPECT_TRUE(r.is_view());
  EXPECT_TRUE(layer(OpKind::Flatten).is_view());
  EXPECT_FALSE(layer(OpKind::Activation).is_view());
}

TEST(OpTable, MacsCountTheMxusMultiplyAccumulatesOnly) {
  Op conv = layer(OpKind::Conv2D);
  conv.filters = 8;
  conv.kernel_h = conv.kernel_w = 3;
  ASSERT_FALSE(infer_shapes(conv, {{5, 5, 2}}));
  EXPECT_EQ(conv.macs(), 3u * 3 * 8 * 3 * 3 * 2);  // out 3x3x8, each 3x3x2 products
  Op dense = layer(OpKind::Dense);
  dense.filters = 10;
  ASSERT_FALSE(infer_shapes(dense, {{1, 1, 784}}));
  EXPECT_EQ(dense.macs(), 7840u);
  Op pool = layer(OpKind::MaxPooling2D);
  pool.kernel_h = pool.kernel_w = pool.stride_h = pool.stride_w = 2;
  ASSERT_FALSE(infer_shapes(pool, {{4, 4, 1}}));
  EXPECT_EQ(pool.macs(), 0u);
  EXPECT_TRUE(dense.has_weights());
  EXPECT_TRUE(layer(OpKind::BatchNormalization).has_parameters());
  EXPECT_FALSE(layer(OpKind::BatchNormalization).has_weights());
}

}  // namespace
}  // namespace tpu::ir
