// The compiler's graph rewrites (sw/compiler/rewrite.h), each named after the rule it checks.
#include "sw/compiler/rewrite.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hw/common/error.h"
#include "sw/import/import.h"
#include "sw/ir/graph.h"
#include "sw/ir/ops.h"
#include "sw/nn/weights.h"
#include "unit/import/layer_json.h"

namespace tpu::compiler {
namespace {
using importers::load_model;
using importers::parse_model;
using importers::parse_topology;
using ir::Act;
using ir::Graph;
using ir::kGraphInput;
using ir::Op;
using ir::OpKind;
using ir::Padding;
using ir::Shape;

using nlohmann::json;
using ::testing::HasSubstr;

using nn::test::layer;

Graph functional(json layers) {
  layers.insert(layers.begin(),
                layer("InputLayer", {{"name", "in"}, {"batch_input_shape", {nullptr, 6, 6, 2}}}));
  return parse_model(
      json{{"class_name", "Functional"}, {"config", {{"name", "m"}, {"layers", layers}}}},
      "m.json");
}

std::vector<std::string> names(const Graph& m) {
  std::vector<std::string> v;
  for (const Op& l : m.ops) v.push_back(l.name);
  return v;
}

std::string error_of(const Graph& m) {
  try {
    remove_identities(m);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(RemoveIdentities, DropoutsLeaveAndTheirReadersReadTheirInputs) {
  const Graph m = functional(
      json::array({layer("GaussianNoise", {{"name", "noise"}, {"stddev", 0.1}}, {"in"}),
                   layer("Conv2D", {{"name", "a"}, {"filters", 2}, {"kernel_size", 1}}, {"noise"}),
                   layer("SpatialDropout2D", {{"name", "sd"}, {"rate", 0.2}}, {"a"}),
                   layer("Dropout", {{"name", "d2"}, {"rate", 0.2}}, {"sd"}),
                   layer("Conv2D", {{"name", "b"}, {"filters", 2}, {"kernel_size", 1}}, {"d2"}),
                   layer("Add", {{"name", "sum"}}, {"b", "d2"})}));
  ASSERT_EQ(m.ops.size(), 6u);
  EXPECT_EQ(m.ops[0].kind, OpKind::Dropout);
  EXPECT_EQ(m.ops[2].name, "sd");
  const Graph g = remove_identities(m);
  EXPECT_EQ(names(g), (std::vector<std::string>{"a", "b", "sum"}));
  EXPECT_EQ(g.ops[0].inputs, (std::vector<std::size_t>{kGraphInput}));
  EXPECT_EQ(g.ops[1].inputs, (std::vector<std::size_t>{0}));
  EXPECT_EQ(g.ops[2].inputs, (std::vector<std::size_t>{1, 0}));
  EXPECT_EQ(g.output(), m.output());
  EXPECT_EQ(g.macs_per_image(), m.macs_per_image());
}

TEST(RemoveIdentities, AnOutputDropoutGivesTheOutputToItsInputWhenThatIsTheLastLayerLeft) {
  const Graph m = functional(
      json::array({layer("Conv2D", {{"name", "a"}, {"filters", 2}, {"kernel_size", 1}}, {"in"}),
                   layer("Dropout", {{"name", "out"}, {"rate", 0.5}}, {"a"})}));
  EXPECT_EQ(names(remove_identities(m)), (std::vector<std::string>{"a"}));
  const Graph moved = functional(
      json::array({layer("Conv2D", {{"name", "a"}, {"filters", 2}, {"kernel_size", 1}}, {"in"}),
                   layer("Conv2D", {{"name", "b"}, {"filters", 2}, {"kernel_size", 1}}, {"in"}),
                   layer("Dropout", {{"name", "out"}, {"rate", 0.5}}, {"a"})}));
  EXPECT_THAT(error_of(moved), HasSubstr("layer out (Dropout), the model's output, is the "
                                         "identity at inference and reads a"));
}

TEST(RemoveIdentities, AModelOfIdentitiesComputesNothingAndIsRefused) {
  const Graph m = functional(json::array({layer("Dropout", {{"name", "d"}}, {"in"})}));
  EXPECT_THAT(error_of(m), HasSubstr("m.json: the model computes nothing at inference"));
}

TEST(RemoveIdentities, DropoutArgumentsAreCheckedAndTheirDefaultNamesFollowKeras) {
  auto parse = [](json l) {
    return parse_model(json{{"name", "m"}, {"input", {4, 4, 1}}, {"layers", {l}}}, "m.json");
  };
  EXPECT_EQ(parse(layer("SpatialDropout2D", json::object())).ops[0].name, "spatial_dropout2d");
  EXPECT_EQ(parse(layer("AlphaDropout", {{"rate", 0.1}, {"seed", 3}, {"noise_shape", nullptr}}))
                .ops[0]
                .name,
            "alpha_dropout");
  try {
    parse(layer("Dropout", {{"rate", 1.0}}));
    ADD_FAILURE() << "rate 1 accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/layers/0/config/rate = 1.0 (must be a number in [0, 1))"));
  }
  try {
    parse(layer("GaussianNoise", {{"stddev", -1}}));
    ADD_FAILURE() << "stddev -1 accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/layers/0/config/stddev = -1"));
  }
}

TEST(ActivationLayers, ReluAndSoftmaxLayersReadAsTheActivationTheyStandFor) {
  auto parse = [](json l) {
    const Graph m = parse_model(
        json{{"name", "m"}, {"input", {1, 1, 8}}, {"layers", {std::move(l)}}}, "m.json");
    EXPECT_EQ(m.ops[0].kind, OpKind::Activation);
    return m.ops[0];
  };
  EXPECT_EQ(parse(layer("ReLU", json::object())).activation, Act::Relu);
  EXPECT_EQ(parse(layer("ReLU", json::object())).name, "re_lu");
  EXPECT_EQ(parse(layer("ReLU", {{"max_value", 6.0}, {"negative_slope", 0}})).activation,
            Act::Relu6);
  EXPECT_EQ(parse(layer("Softmax", {{"axis", -1}})).activation, Act::Softmax);
  auto error = [](json l) {
    try {
      parse_model(json{{"name", "m"}, {"input", {1, 1, 8}}, {"layers", {std::move(l)}}}, "m.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no InputError)");
  };
  const Op leaky = parse(layer("ReLU", {{"negative_slope", 0.25}}));
  EXPECT_EQ(leaky.activation, Act::LeakyRelu);
  EXPECT_EQ(leaky.alpha, 0.25f);
  EXPECT_THAT(error(layer("ReLU", {{"negative_slope", 0.1}, {"max_value", 6}})),
              HasSubstr("/layers/0/config/max_value = 6 (must be null with a negative_slope"));
  EXPECT_THAT(error(layer("ReLU", {{"max_value", 1.0}})),
              HasSubstr("/layers/0/config/max_value = 1.0 (must be null or 6"));
  EXPECT_THAT(error(layer("ReLU", {{"threshold", 0.5}})), HasSubstr("/layers/0/config/threshold"));
  EXPECT_THAT(error(layer("Softmax", {{"axis", 1}})),
              HasSubstr("/layers/0/config/axis = 1 (must be -1"));
}

TEST(ReshapeArguments, TargetShapesAreOneToThreeDimensionsWithAtMostOneWildcard) {
  auto error = [](json target) {
    try {
      parse_model(json{{"name", "m"},
                       {"input", {4, 4, 1}},
                       {"layers", {layer("Reshape", {{"target_shape", target}})}}},
                  "m.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no InputError)");
  };
  EXPECT_THAT(error({-1, -1}), HasSubstr("m.json: /layers/0/config/target_shape = [-1,-1] (must "
                                         "be 1 to 3 dimensions per image"));
  EXPECT_THAT(error(json::array()), HasSubstr("/layers/0/config/target_shape"));
  EXPECT_THAT(error({1, 1, 1, 16}), HasSubstr("/layers/0/config/target_shape"));
  EXPECT_THAT(error({0, 16}), HasSubstr("/layers/0/config/target_shape"));
  EXPECT_THAT(error({3, -1}), HasSubstr("m.json: /layers/0/config/target_shape = [3,-1] (the "
                                        "input 4x4x1 has 16 elements per image"));
  EXPECT_EQ(error({2, -1}), "(no InputError)");
}

// The rewrite passes, each on the smallest graph that shows its rule.

Module rewritten(const Graph& g, std::uint64_t seed = 7) {
  return rewrite(g, nn::random_weights(g, seed), DType::Bf16);
}

json conv(const std::string& name, const std::string& input, json extra = json::object()) {
  json cfg = {{"name", name}, {"filters", 3}, {"kernel_size", 3}};
  cfg.update(extra);
  return layer("Conv2D", cfg, {input});
}

TEST(FoldBatchNorm, FoldsBatchNormIntoPrecedingConv) {
  const Graph g = functional(json::array(
      {conv("c", "in"), layer("BatchNormalization", {{"name", "bn"}, {"epsilon", 0.01}}, {"c"})}));
  nn::Weights w = nn::random_weights(g, 3);
  for (std::uint32_t c = 0; c < 3; ++c) {
    w.layers[1].gamma[c] = 0.5f + static_cast<float>(c);
    w.layers[1].beta[c] = -0.25f * static_cast<float>(c);
    w.layers[1].moving_mean[c] = 0.1f * static_cast<float>(c + 1);
    w.layers[1].moving_variance[c] = 2.0f + static_cast<float>(c);
  }
  Module m = start(g, w);
  fold_batch_norm(m);
  ASSERT_EQ(names(m.graph), std::vector<std::string>{"c"});
  EXPECT_EQ(m.graph.ops[0].value_of, 1u) << "its value is the normalisation's";
  EXPECT_EQ(m.graph.ops[0].origin, 0u) << "its work counts toward the convolution's row";
  const nn::LayerWeights& bn = w.layers[1];
  for (std::uint32_t c = 0; c < 3; ++c) {
    const float inv = bn.gamma[c] / std::sqrt(bn.moving_variance[c] + 0.01f);
    EXPECT_EQ(m.weights.layers[0].bias[c],
              w.layers[0].bias[c] * inv + (bn.beta[c] - bn.moving_mean[c] * inv));
    for (std::size_t k = c; k < w.layers[0].kernel.size(); k += 3)
      EXPECT_EQ(m.weights.layers[0].kernel[k], w.layers[0].kernel[k] * inv);
  }
}

TEST(FoldBatchNorm, KeepsBatchNormAfterPooling) {
  const Graph g =
      functional(json::array({layer("MaxPooling2D", {{"name", "p"}}, {"in"}),
                              layer("BatchNormalization", {{"name", "lonely_bn"}}, {"p"})}));
  Module m = start(g, nn::random_weights(g, 1));
  fold_batch_norm(m);
  EXPECT_EQ(names(m.graph), (std::vector<std::string>{"p", "lonely_bn"}))
      << "it runs as a per-channel scale and shift";
}

TEST(SplitInt8Activations, ASigmoidBeforeTheLastLayerMovesToItsOwnMapOnInt8Chips) {
  const Graph g = functional(json::array(
      {conv("c", "in", {{"activation", "sigmoid"}}), layer("Flatten", {{"name", "f"}}, {"c"}),
       layer("Dense", {{"name", "d"}, {"units", 3}, {"activation", "softmax"}}, {"f"})}));
  const Module m = rewrite(g, nn::random_weights(g, 2), DType::Int8);
  EXPECT_EQ(names(m.graph), (std::vector<std::string>{"c", "c/activation", "f", "d"}));
  EXPECT_EQ(m.graph.ops[0].activation, Act::Linear);
  EXPECT_EQ(m.graph.ops[0].value_of, ir::kNoOp) << "the linear value was never observed";
  EXPECT_EQ(m.graph.ops[1].activation, Act::Sigmoid);
  EXPECT_EQ(m.graph.ops[1].value_of, 0u) << "the activated value is the imported layer's";
  EXPECT_EQ(m.graph.ops[3].activation, Act::Softmax) << "the last layer keeps its fp32 softmax";
  EXPECT_EQ(names(rewrite(g, nn::random_weights(g, 2), DType::Bf16).graph),
            (std::vector<std::string>{"c", "f", "d"}))
      << "bf16 chips apply it in Activate";
}

TEST(FuseActivations, FusesReluIntoConvThroughMaxPoolAndFlatten) {
  const Graph g = functional(
      json::array({conv("c", "in"), layer("MaxPooling2D", {{"name", "p"}}, {"c"}),
                   layer("Flatten", {{"name", "f"}}, {"p"}),
                   layer("Activation", {{"name", "r"}, {"activation", "relu"}}, {"f"})}));
  const Module m = rewritten(g);
  EXPECT_EQ(names(m.graph), (std::vector<std::string>{"c", "p", "f"}));
  EXPECT_EQ(m.graph.ops[0].activation, Act::Relu);
}

TEST(FuseActivations, KeepsSigmoidAfterMaxPool) {
  const Graph g = functional(
      json::array({conv("c", "in"), layer("MaxPooling2D", {{"name", "p"}}, {"c"}),
                   layer("Activation", {{"name", "s"}, {"activation", "sigmoid"}}, {"p"})}));
  EXPECT_EQ(names(rewritten(g).graph), (std::vector<std::string>{"c", "p", "s"}))
      << "max pooling commutes only with non-decreasing functions";
}

TEST(FuseActivations, KeepsAnActivationWhoseProducerHasAnotherReader) {
  const Graph g =
      functional(json::array({conv("c", "in", {{"padding", "same"}, {"filters", 2}}),
                              layer("Activation", {{"name", "r"}, {"activation", "relu"}}, {"c"}),
                              layer("Add", {{"name", "sum"}}, {"r", "c"})}));
  const Module m = rewritten(g);
  EXPECT_EQ(names(m.graph), (std::vector<std::string>{"c", "r", "sum"}));
  EXPECT_EQ(m.graph.ops[0].activation, Act::Linear) << "the Add reads the value before the ReLU";
}

TEST(RemoveLinearActivations, ReadersReadTheActivationsInput) {
  const Graph g = functional(json::array(
      {conv("c", "in"), layer("Activation", {{"name", "lin"}, {"activation", "linear"}}, {"c"}),
       layer("MaxPooling2D", {{"name", "p"}}, {"lin"})}));
  const Module m = rewritten(g);
  EXPECT_EQ(names(m.graph), (std::vector<std::string>{"c", "p"}));
  EXPECT_EQ(m.graph.ops[1].inputs, std::vector<std::size_t>{0});
  EXPECT_EQ(m.graph.ops[1].origin, 2u) << "origins name the operations of the graph given";
}

TEST(FoldZeroPadding, ConvolutionsReadTheUnpaddedTensorWithTheZerosAsTheirOwnPadding) {
  const Graph g = functional(json::array(
      {layer("ZeroPadding2D", {{"name", "pad"}, {"padding", json{{1, 2}, {0, 3}}}}, {"in"}),
       conv("c", "pad", {{"padding", "same"}, {"strides", 2}})}));
  const Op& before = g.ops[1];
  const ir::Pads same = ir::window_pads(before);
  const Module m = rewritten(g);
  ASSERT_EQ(names(m.graph), std::vector<std::string>{"c"});
  const Op& c = m.graph.ops[0];
  EXPECT_EQ(c.inputs, std::vector<std::size_t>{kGraphInput});
  EXPECT_EQ(c.padding, Padding::Explicit);
  EXPECT_EQ(c.in, g.input);
  EXPECT_EQ(
      (std::vector<std::uint32_t>{c.pad_top, c.pad_bottom, c.pad_left, c.pad_right}),
      (std::vector<std::uint32_t>{1 + same.top, 2 + same.bottom, 0 + same.left, 3 + same.right}));
  EXPECT_EQ(c.out, before.out) << "the explicit padding gives the shape the model had";
}

TEST(FoldZeroPadding, KeepsAPaddingThatAPoolReads) {
  const Graph g = functional(json::array(
      {layer("ZeroPadding2D", {{"name", "pad"}}, {"in"}), conv("c", "pad", {{"filters", 2}}),
       layer("MaxPooling2D", {{"name", "p"}, {"pool_size", 3}, {"strides", 1}}, {"pad"}),
       layer("Add", {{"name", "sum"}}, {"c", "p"})}));
  const Module m = rewritten(g);
  EXPECT_EQ(names(m.graph), (std::vector<std::string>{"pad", "c", "p", "sum"}));
  EXPECT_EQ(m.graph.ops[1].padding, Padding::Valid);
}

TEST(SplitSeparable, BecomesADepthwiseThenAPointwiseConvolutionUnderItsOwnName) {
  const Graph g = functional(json::array({layer("SeparableConv2D",
                                                {{"name", "sep"},
                                                 {"filters", 5},
                                                 {"kernel_size", 3},
                                                 {"depth_multiplier", 2},
                                                 {"padding", "same"},
                                                 {"activation", "relu"}},
                                                {"in"})}));
  const nn::Weights w = nn::random_weights(g, 4);
  const Module m = rewrite(g, w, DType::Bf16);
  ASSERT_EQ(names(m.graph), (std::vector<std::string>{"sep/depthwise", "sep"}));
  const Op& dw = m.graph.ops[0];
  const Op& pw = m.graph.ops[1];
  EXPECT_EQ(dw.kind, OpKind::DepthwiseConv2D);
  EXPECT_EQ(dw.out, (Shape{6, 6, 4}));
  EXPECT_EQ(dw.activation, Act::Linear);
  EXPECT_FALSE(dw.use_bias);
  EXPECT_EQ(dw.value_of, ir::kNoOp) << "a tensor the model never had calibrates on its own";
  EXPECT_EQ(dw.origin, 0u);
  EXPECT_EQ(pw.kind, OpKind::Conv2D);
  EXPECT_EQ(pw.inputs, std::vector<std::size_t>{0});
  EXPECT_EQ(pw.kernel_h, 1u);
  EXPECT_EQ(pw.activation, Act::Relu);
  EXPECT_EQ(pw.out, g.ops[0].out);
  EXPECT_EQ(m.weights.layers[0].kernel, w.layers[0].kernel);
  EXPECT_EQ(m.weights.layers[1].kernel, w.layers[0].pointwise);
  EXPECT_EQ(m.weights.layers[1].bias, w.layers[0].bias);
}

TEST(FoldZeroPadding, DepthwiseConvolutionsTakeThePaddingToo) {
  const Graph g = functional(json::array(
      {layer("ZeroPadding2D", {{"name", "pad"}, {"padding", json{{0, 1}, {0, 1}}}}, {"in"}),
       layer("DepthwiseConv2D", {{"name", "dw"}, {"kernel_size", 3}, {"strides", 2}}, {"pad"})}));
  const Module m = rewritten(g);
  ASSERT_EQ(names(m.graph), std::vector<std::string>{"dw"});
  EXPECT_EQ(m.graph.ops[0].pad_bottom, 1u);
  EXPECT_EQ(m.graph.ops[0].out, g.ops[1].out);
}

TEST(Rewrite, RunsThePassesInTheirDocumentedOrderAndShowsEach) {
  const Graph g = functional(json::array({conv("c", "in")}));
  std::vector<std::string> seen;
  rewrite(g, nn::random_weights(g, 1), DType::Bf16,
          [&](std::string_view pass, const Module&) { seen.emplace_back(pass); });
  EXPECT_EQ(seen,
            (std::vector<std::string>{"split-separable", "fold-batch-norm", "fuse-activations",
                                      "remove-linear-activations", "fold-zero-padding"}));
}

}  // namespace
}  // namespace tpu::compiler
