// Graph models (sw/nn/model): layers that name their inputs, Keras's model.to_json() in its
// Sequential and Functional forms, SCALE-Sim topology CSVs; and the new layers in the float and
// quantized references (BatchNormalization folding, Add on a shared int8 scale, ZeroPadding2D,
// GlobalAveragePooling2D), checked against definitions written here.
#include "sw/ir/graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hw/common/error.h"
#include "sw/compiler/compiler.h"
#include "sw/import/import.h"
#include "sw/nn/quantized.h"
#include "sw/nn/reference.h"
#include "sw/nn/weights.h"
#include "unit/import/layer_json.h"

namespace tpu::nn {
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
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kSource = TPUSIM_SOURCE_DIR;

using test::layer;

std::string error_of(const json& doc) {
  try {
    parse_model(doc, "test.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

std::string error_of_topology(const std::string& text) {
  try {
    parse_topology(text, "t.csv");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

std::size_t index_of(const Graph& m, const std::string& name) {
  for (std::size_t i = 0; i < m.ops.size(); ++i)
    if (m.ops[i].name == name) return i;
  ADD_FAILURE() << "no layer " << name;
  return 0;
}

// A residual pair in tpusim's own form: two convolutions of the input joined by an Add.
json residual_doc() {
  return json{
      {"name", "res"},
      {"input", {6, 6, 2}},
      {"layers",
       {layer("InputLayer", {{"name", "in"}, {"batch_input_shape", {nullptr, 6, 6, 2}}}),
        layer("Conv2D", {{"name", "a"}, {"filters", 3}, {"kernel_size", 3}, {"padding", "same"}},
              {"in"}),
        layer("Conv2D", {{"name", "b"}, {"filters", 3}, {"kernel_size", 1}}, {"in"}),
        layer("Add", {{"name", "sum"}}, {"a", "b"}),
        layer("Activation", {{"name", "out"}, {"activation", "relu"}}, {"sum"})}}};
}

TEST(GraphModel, InboundNodesNameEachLayersInputs) {
  const Graph m = parse_model(residual_doc(), "t");
  ASSERT_EQ(m.ops.size(), 4u);
  EXPECT_EQ(m.ops[0].inputs, std::vector<std::size_t>{kGraphInput});
  EXPECT_EQ(m.ops[1].inputs, std::vector<std::size_t>{kGraphInput});
  EXPECT_EQ(m.ops[2].inputs, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(m.ops[2].out, (Shape{6, 6, 3}));
  EXPECT_EQ(m.ops[3].inputs, std::vector<std::size_t>{2});
  const auto readers = consumers(m);
  EXPECT_EQ(readers[0], std::vector<std::size_t>{2});
}

TEST(GraphModel, LayersWithoutInboundNodesChainLikeSequential) {
  const Graph m = load_model(kSource + "/configs/models/fashion_mnist_cnn.json");
  for (std::size_t i = 0; i < m.ops.size(); ++i)
    EXPECT_EQ(m.ops[i].inputs, std::vector<std::size_t>{i == 0 ? kGraphInput : i - 1});
}

TEST(GraphModel, AddOfUnequalShapesAndUnknownInputsAreRefusedByName) {
  json doc = residual_doc();
  doc["layers"][2]["config"]["filters"] = 4;
  EXPECT_THAT(error_of(doc),
              AllOf(HasSubstr("layer sum (Add)"), HasSubstr("6x6x4"), HasSubstr("equal shapes")));
  doc = residual_doc();
  doc["layers"][3]["inbound_nodes"][0][1][0] = "later";
  EXPECT_THAT(error_of(doc), AllOf(HasSubstr("/layers/3/inbound_nodes"), HasSubstr("layer sum"),
                                   HasSubstr("listed before")));
}

TEST(GraphModel, ZeroPaddingAndGlobalPoolingShapesFollowKeras) {
  const Graph m =
      parse_model(json{{"name", "p"},
                       {"input", {5, 7, 3}},
                       {"layers",
                        {layer("ZeroPadding2D", {{"name", "z"}, {"padding", {{1, 2}, {3, 0}}}}),
                         layer("ZeroPadding2D", {{"name", "z2"}, {"padding", 2}}),
                         layer("GlobalAveragePooling2D", {{"name", "g"}})}}},
                  "t");
  EXPECT_EQ(m.ops[0].out, (Shape{5 + 1 + 2, 7 + 3 + 0, 3}));
  EXPECT_EQ(m.ops[1].out, (Shape{8 + 4, 10 + 4, 3}));
  EXPECT_EQ(m.ops[2].out, (Shape{1, 1, 3}));
}

TEST(KerasJson, FunctionalToJsonFixtureLoadsWithKerasShapes) {
  const Graph m = load_model(kSource + "/tb/system/run/data/keras_functional.json");
  EXPECT_EQ(m.name, "tiny_resnet");
  EXPECT_EQ(m.input, (Shape{20, 20, 3}));
  EXPECT_EQ(m.ops.size(), 20u) << "the InputLayer is the model's input, not a layer";
  const Op& pad = m.ops[index_of(m, "conv1_pad")];
  EXPECT_EQ(pad.out, (Shape{22, 22, 3}));
  const Op& pool = m.ops[index_of(m, "pool1_pool")];
  EXPECT_EQ(pool.out, (Shape{(22 - 3) / 2 + 1, (22 - 3) / 2 + 1, 16}));
  const Op& add = m.ops[index_of(m, "block_add")];
  EXPECT_EQ(add.inputs,
            (std::vector<std::size_t>{index_of(m, "block_0_bn"), index_of(m, "block_3_bn")}));
  const Op& bn = m.ops[index_of(m, "conv1_bn")];
  EXPECT_EQ(bn.kind, OpKind::BatchNormalization);
  EXPECT_FLOAT_EQ(bn.epsilon, 1.001e-5f);
  EXPECT_EQ(m.output(), (Shape{1, 1, 10}));
}

TEST(KerasJson, SequentialToJsonReadsTheInputFromItsInputLayerOrFirstLayer) {
  const json seq{{"class_name", "Sequential"},
                 {"config",
                  {{"name", "sequential"},
                   {"layers",
                    {layer("InputLayer", {{"batch_input_shape", {nullptr, 28, 28, 1}},
                                          {"dtype", "float32"},
                                          {"sparse", false},
                                          {"ragged", false},
                                          {"name", "input_1"}}),
                     layer("Flatten", {{"name", "flatten"}}),
                     layer("Dense", {{"name", "dense"}, {"units", 10}})}}}},
                 {"keras_version", "2.13.1"},
                 {"backend", "tensorflow"}};
  Graph m = parse_model(seq, "t");
  EXPECT_EQ(m.input, (Shape{28, 28, 1}));
  EXPECT_EQ(m.ops.size(), 2u);
  EXPECT_EQ(m.ops[1].out, (Shape{1, 1, 10}));
  // Older Keras records the input on the first layer instead of an InputLayer.
  const json old{
      {"class_name", "Sequential"},
      {"config",
       {{"name", "sequential"},
        {"layers",
         {layer("Flatten", {{"name", "flatten"}, {"batch_input_shape", {nullptr, 4, 4, 2}}}),
          layer("Dense", {{"name", "dense"}, {"units", 3}})}}}}};
  m = parse_model(old, "t");
  EXPECT_EQ(m.input, (Shape{4, 4, 2}));
}

TEST(KerasJson, Keras3InboundNodesAndTuplesAreRead) {
  auto tensor = [](const std::string& name) {
    return json{{"class_name", "__keras_tensor__"},
                {"config", {{"shape", {nullptr, 4, 4, 2}}, {"keras_history", {name, 0, 0}}}}};
  };
  json add = layer("Add", {{"name", "sum"}});
  add["inbound_nodes"] =
      json::array({json{{"args", json::array({json::array({tensor("in"), tensor("c")})})},
                        {"kwargs", json::object()}}});
  json c = layer("Conv2D", {{"name", "c"},
                            {"filters", 2},
                            {"kernel_size", {{"class_name", "__tuple__"}, {"items", {1, 1}}}}});
  c["inbound_nodes"] =
      json::array({json{{"args", json::array({tensor("in")})}, {"kwargs", json::object()}}});
  const json doc{
      {"class_name", "Functional"},
      {"config",
       {{"name", "k3"},
        {"layers",
         {layer("InputLayer", {{"name", "in"}, {"batch_shape", {nullptr, 4, 4, 2}}}), c, add}},
        {"input_layers", {"in", 0, 0}},
        {"output_layers", {"sum", 0, 0}}}}};
  const Graph m = parse_model(doc, "t");
  ASSERT_EQ(m.ops.size(), 2u);
  EXPECT_EQ(m.ops[0].kernel_h, 1u);
  EXPECT_EQ(m.ops[1].inputs, (std::vector<std::size_t>{kGraphInput, 0}));
}

TEST(KerasJson, UnsupportedLayersAndGraphsAreRefusedByName) {
  json doc = json::parse(R"({"class_name": "Functional", "config": {"name": "m", "layers": [
      {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 8]}},
      {"class_name": "Conv1D", "config": {"name": "c1", "filters": 2, "kernel_size": 3},
       "inbound_nodes": [[["in", 0, 0, {}]]]}],
      "input_layers": [["in", 0, 0]], "output_layers": [["c1", 0, 0]]}})");
  EXPECT_THAT(error_of(doc), AllOf(HasSubstr("layer c1 cannot run"), HasSubstr("\"Conv1D\""),
                                   HasSubstr("BatchNormalization")));
  doc = json::parse(R"({"class_name": "Functional", "config": {"name": "m", "layers": [
      {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 8]}},
      {"class_name": "Dense", "config": {"name": "d", "units": 2},
       "inbound_nodes": [[["in", 0, 0, {}]], [["in", 0, 0, {}]]]}]}})");
  EXPECT_THAT(error_of(doc), AllOf(HasSubstr("layer d"), HasSubstr("exactly one node")));
  doc = json::parse(R"({"class_name": "Functional", "config": {"name": "m", "layers": [
      {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 8]}},
      {"class_name": "Dense", "config": {"name": "d", "units": 2}, "inbound_nodes": [[["in", 0, 0, {}]]]},
      {"class_name": "Dense", "config": {"name": "e", "units": 2}, "inbound_nodes": [[["in", 0, 0, {}]]]}],
      "output_layers": [["d", 0, 0], ["e", 0, 0]]}})");
  EXPECT_THAT(error_of(doc), AllOf(HasSubstr("/config/output_layers"), HasSubstr("one output")));
  doc = json::parse(R"({"class_name": "Subclassed", "config": {}})");
  EXPECT_THAT(error_of(doc), AllOf(HasSubstr("/class_name"), HasSubstr("Functional")));
}

TEST(KerasJson, EveryUnsupportedLayerIsNamedInOneMessage) {
  const json doc = json::parse(R"({"class_name": "Sequential", "config": {"name": "m", "layers": [
      {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 4, 8]}},
      {"class_name": "GRU", "config": {"name": "gru", "units": 8}},
      {"class_name": "Dense", "config": {"name": "d", "units": 8}},
      {"class_name": "Conv1D", "config": {"name": "c1", "filters": 2}},
      {"class_name": "Dense", "config": {"units": 2}},
      {"class_name": "Conv3D", "config": {"filters": 2}}]}})");
  const std::string e = error_of(doc);
  EXPECT_THAT(e, AllOf(HasSubstr("test.json: /config/layers/1/class_name: 3 layers cannot run: "
                                 "/config/layers/1 GRU (gru), /config/layers/3 Conv1D (c1), "
                                 "/config/layers/5 Conv3D"),
                       HasSubstr("tpusim supports InputLayer, Conv2D")));
  // The known layers between them are not the subject of the message.
  EXPECT_THAT(e, ::testing::Not(HasSubstr("(d)")));
}

TEST(Topology, ConvolutionRowsAreIndependentValidConvolutions) {
  const Graph m = load_model(kSource + "/tb/system/run/data/scalesim_conv.csv");
  EXPECT_EQ(m.name, "scalesim_conv");
  // Rows: Conv1 30x30x3, 3x3, 16 filters, stride 2; Conv2 14x14x16 3x3 40; CB2a_1 12x12x40 1x1 24.
  ASSERT_EQ(m.ops.size(), 5u) << "rows after the first read a constant of their own";
  EXPECT_EQ(m.input, (Shape{30, 30, 3}));
  const Op& c1 = m.ops[0];
  EXPECT_EQ(c1.out, (Shape{(30 - 3) / 2 + 1, (30 - 3) / 2 + 1, 16}));
  EXPECT_FALSE(c1.use_bias);
  const Op& c2 = m.ops[index_of(m, "Conv2")];
  ASSERT_EQ(c2.inputs.size(), 1u);
  const Op& src = m.ops[c2.inputs[0]];
  EXPECT_EQ(src.kind, OpKind::Constant);
  EXPECT_EQ(src.out, (Shape{14, 14, 16}));
  EXPECT_EQ(c2.out, (Shape{12, 12, 40}));
  EXPECT_NE(m.ops[c2.inputs[0]].seed, m.ops[m.ops[4].inputs[0]].seed);
}

TEST(Topology, GemmRowsAreMByKTimesKByN) {
  const Graph m = parse_topology("Layer, M, N, K,\nfc, 64, 200, 300,\n", "g.csv");
  ASSERT_EQ(m.ops.size(), 1u);
  EXPECT_EQ(m.input, (Shape{64, 1, 300}));
  EXPECT_EQ(m.ops[0].out, (Shape{64, 1, 200}));
  EXPECT_EQ(m.ops[0].macs(), std::uint64_t{64} * 200 * 300);
}

TEST(Topology, MalformedFilesNameTheLineAndTheLayer) {
  EXPECT_THAT(error_of_topology("a, b, c\n1, 2, 3\n"), HasSubstr("line 1"));
  EXPECT_THAT(error_of_topology("Layer, M, N, K,\nfc, 64, 0, 3,\n"),
              AllOf(HasSubstr("line 2"), HasSubstr("layer fc"), HasSubstr("N")));
  EXPECT_THAT(error_of_topology("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter "
                                "Width, Channels, Num Filter, Strides,\nc, 4, 4, 5, 5, 1, 1, 1,\n"),
              AllOf(HasSubstr("layer c"), HasSubstr("larger than")));
  EXPECT_THAT(
      error_of_topology("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter "
                        "Width, Channels, Num Filter, Strides,\nDP1, 8, 8, 3, 3, 4, 1, 1,\n"),
      AllOf(HasSubstr("layer DP1"), HasSubstr("depthwise")));
}

// --- References ----------------------------------------------------------------------------

Graph conv_bn_model() {
  return parse_model(
      json{{"name", "cb"},
           {"input", {5, 5, 3}},
           {"layers",
            {layer("Conv2D",
                   {{"name", "c"}, {"filters", 4}, {"kernel_size", 3}, {"padding", "same"}}),
             layer("BatchNormalization", {{"name", "bn"}, {"epsilon", 0.01}}),
             layer("Activation", {{"name", "r"}, {"activation", "relu"}}),
             layer("GlobalAveragePooling2D", {{"name", "g"}})}}},
      "t");
}

Weights conv_bn_weights(const Graph& m) {
  Weights w = random_weights(m, 3);
  LayerWeights& bn = w.layers[1];
  for (std::uint32_t c = 0; c < 4; ++c) {
    bn.gamma[c] = 0.5f + 0.25f * static_cast<float>(c);
    bn.beta[c] = 0.1f * static_cast<float>(c) - 0.2f;
    bn.moving_mean[c] = 0.05f * static_cast<float>(c);
    bn.moving_variance[c] = 0.3f + static_cast<float>(c);
  }
  for (std::uint32_t c = 0; c < 4; ++c) w.layers[0].bias[c] = 0.01f * static_cast<float>(c);
  return w;
}

std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * static_cast<float>(i));
  return v;
}

TEST(FloatReference, BatchNormalizationZeroPaddingAndGlobalPoolingMatchTheirDefinitions) {
  const Graph m = conv_bn_model();
  const Weights w = conv_bn_weights(m);
  const auto x = ramp(m.input.size(), 1.0f);
  std::vector<std::vector<float>> outs(m.ops.size());
  forward_float(m, w, x.data(), 1,
                [&](std::size_t i, const float* v, std::size_t n) { outs[i].assign(v, v + n); });
  for (std::size_t k = 0; k < outs[0].size(); ++k) {
    const std::size_t c = k % 4;
    const LayerWeights& bn = w.layers[1];
    const double want = (outs[0][k] - bn.moving_mean[c]) /
                            std::sqrt(double{bn.moving_variance[c]} + 0.01) * bn.gamma[c] +
                        bn.beta[c];
    EXPECT_NEAR(outs[1][k], want, 1e-5);
  }
  for (std::size_t c = 0; c < 4; ++c) {
    double sum = 0;
    for (std::size_t p = 0; p < 25; ++p) sum += std::max(0.0f, outs[1][p * 4 + c]);
    EXPECT_NEAR(outs[3][c], sum / 25, 1e-5);
  }
  const Graph zp =
      parse_model(json{{"name", "z"},
                       {"input", {2, 2, 1}},
                       {"layers", {layer("ZeroPadding2D", {{"padding", {{1, 0}, {0, 2}}}})}}},
                  "t");
  const std::vector<float> in = {1, 2, 3, 4};
  const auto out = forward_float(zp, random_weights(zp, 1), in.data(), 1);
  EXPECT_EQ(out, (std::vector<float>{0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0}));
}

TEST(QuantizedReference, BatchNormalizationFoldsIntoTheConvolutionBeforeIt) {
  const Graph m = conv_bn_model();
  const Weights w = conv_bn_weights(m);
  const auto x = ramp(m.input.size(), 1.0f);
  const QuantizedModel q = compiler::prepare(m, w, DType::Bf16, 128, x.data(), 1);
  ASSERT_EQ(q.graph.ops.size(), 2u) << "the BN folds and the ReLU after it fuses too";
  EXPECT_EQ(q.graph.ops[0].activation, Act::Relu);
  const LayerWeights& bn = w.layers[1];
  for (std::uint32_t c = 0; c < 4; ++c) {
    const float inv = bn.gamma[c] / std::sqrt(bn.moving_variance[c] + 0.01f);
    EXPECT_FLOAT_EQ(q.layers[0].bias_f32[c],
                    w.layers[0].bias[c] * inv + (bn.beta[c] - bn.moving_mean[c] * inv));
  }
  const auto fq = forward_quantized(q, x.data(), 1);
  const auto ff = forward_float(m, w, x.data(), 1);
  for (std::size_t c = 0; c < 4; ++c) EXPECT_NEAR(fq[c], ff[c], 0.02 * (std::fabs(ff[c]) + 0.05));
}

TEST(QuantizedReference, BatchNormalizationWithoutAConvolutionIsAPerChannelScaleAndShift) {
  const Graph m =
      parse_model(json{{"name", "b"},
                       {"input", {2, 2, 3}},
                       {"layers", {layer("BatchNormalization", {{"name", "lonely_bn"}})}}},
                  "t");
  Weights w = random_weights(m, 1);
  for (std::uint32_t c = 0; c < 3; ++c) {
    w.layers[0].gamma[c] = 1.5f + static_cast<float>(c);
    w.layers[0].beta[c] = 0.25f * static_cast<float>(c);
    w.layers[0].moving_mean[c] = -0.5f;
    w.layers[0].moving_variance[c] = 2.0f;
  }
  const auto x = ramp(m.input.size(), 1.0f);
  const QuantizedModel q = compiler::prepare(m, w, DType::Bf16, 128, x.data(), 1);
  const auto fq = forward_quantized(q, x.data(), 1);
  const auto ff = forward_float(m, w, x.data(), 1);
  for (std::size_t k = 0; k < ff.size(); ++k)
    EXPECT_NEAR(fq[k], ff[k], 0.01 * (1 + std::fabs(ff[k])));
}

TEST(QuantizedReference, Int8AddOperandsShareOneScaleThatCoversTheSum) {
  const Graph m = parse_model(residual_doc(), "t");
  const Weights w = random_weights(m, 5);
  const auto cal = ramp(16 * m.input.size(), 2.0f);
  const QuantizedModel q = compiler::prepare(m, w, DType::Int8, 256, cal.data(), 16);
  ASSERT_EQ(q.graph.ops.size(), 4u) << "a ReLU after an Add stays";
  EXPECT_EQ(q.layers[0].out_scale, q.layers[1].out_scale);
  EXPECT_EQ(q.layers[2].out_scale, q.layers[0].out_scale);
  float sum_range = 0;
  Graph upto_add = m;
  upto_add.ops.resize(3);
  Weights wa = w;
  wa.layers.resize(3);
  const auto fsum = forward_float(upto_add, wa, cal.data(), 16);
  for (float v : fsum) sum_range = std::max(sum_range, std::fabs(v));
  EXPECT_GE(q.layers[2].out_scale * 127.0f, sum_range * (1 - 1e-6f));
  // The quantized network tracks the float one within a few int8 steps.
  const auto fq = forward_quantized(q, cal.data(), 16);
  const auto ff = forward_float(m, w, cal.data(), 16);
  for (std::size_t k = 0; k < ff.size(); ++k) EXPECT_NEAR(fq[k], ff[k], 4 * q.layers[2].out_scale);
}

TEST(QuantizedReference, KerasFixtureTracksTheFloatModelInBf16) {
  const Graph m = load_model(kSource + "/tb/system/run/data/keras_functional.json");
  const Weights w = random_weights(m, 9);
  const auto x = ramp(2 * m.input.size(), 1.0f);
  const QuantizedModel q = compiler::prepare(m, w, DType::Bf16, 128, x.data(), 2);
  auto has = [&](const std::string& name) {
    return std::any_of(q.graph.ops.begin(), q.graph.ops.end(),
                       [&](const Op& op) { return op.name == name; });
  };
  EXPECT_TRUE(has("pool1_pad")) << "a padding a pool reads is materialised";
  EXPECT_FALSE(has("conv1_pad")) << "a padding only convolutions read becomes their window padding";
  const auto fq = forward_quantized(q, x.data(), 2);
  const auto ff = forward_float(m, w, x.data(), 2);
  ASSERT_EQ(fq.size(), ff.size());
  for (std::size_t k = 0; k < ff.size(); ++k) EXPECT_NEAR(fq[k], ff[k], 0.02);
}

// The quantized reference computes what the layer means: bf16 rounding apart, it tracks the
// float reference (which the double-precision tests pin) for dilated, depthwise and separable
// windows and for Embedding lookups.
TEST(QuantizedReference, DilatedDepthwiseAndEmbeddingModelsTrackTheFloatModelInBf16) {
  for (const char* file : {"dilated_mix.json", "depthwise_mix.json", "vector_mix.json"}) {
    const Graph m = load_model(kSource + "/tb/system/run/data/" + file);
    const Weights w = random_weights(m, 9);
    const auto x = ramp(3 * m.input.size(), 1.0f);
    const QuantizedModel q = compiler::prepare(m, w, DType::Bf16, 128, x.data(), 3);
    const auto fq = forward_quantized(q, x.data(), 3);
    const auto ff = forward_float(m, w, x.data(), 3);
    ASSERT_EQ(fq.size(), ff.size());
    for (std::size_t k = 0; k < ff.size(); ++k) EXPECT_NEAR(fq[k], ff[k], 0.03) << file;
  }
  const Graph e = load_model(kSource + "/tb/system/run/data/embedding_mix.json");
  const Weights w = random_weights(e, 9);
  std::vector<float> ids(2 * e.input.size());
  for (std::size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<float>((k * 37) % 300);
  const QuantizedModel q = compiler::prepare(e, w, DType::Bf16, 128, ids.data(), 2);
  const auto fq = forward_quantized(q, ids.data(), 2);
  const auto ff = forward_float(e, w, ids.data(), 2);
  for (std::size_t k = 0; k < ff.size(); ++k) EXPECT_NEAR(fq[k], ff[k], 0.01);
}

// An LSTM as the chip steps it (gates on fp32, h quantized between steps) tracks Keras's cell.
TEST(QuantizedReference, StackedLstmsTrackTheFloatModel) {
  const Graph m =
      parse_model(json{{"name", "l"},
                       {"input", {5, 3}},
                       {"layers",
                        {layer("LSTM", {{"name", "a"}, {"units", 6}, {"return_sequences", true}}),
                         layer("LSTM", {{"name", "b"}, {"units", 4}}),
                         layer("Dense", {{"name", "d"}, {"units", 3}})}}},
                  "t");
  const Weights w = random_weights(m, 4);
  const auto x = ramp(8 * m.input.size(), 1.0f);
  const auto ff = forward_float(m, w, x.data(), 8);
  for (const auto& [type, tolerance] :
       {std::pair{DType::Bf16, 0.03}, std::pair{DType::Int8, 0.1}}) {
    const QuantizedModel q = compiler::prepare(m, w, type, 128, x.data(), 8);
    const auto fq = forward_quantized(q, x.data(), 8);
    ASSERT_EQ(fq.size(), ff.size());
    for (std::size_t k = 0; k < ff.size(); ++k)
      EXPECT_NEAR(fq[k], ff[k], tolerance) << name_of(type) << " output " << k;
  }
}

TEST(Calibration, LargeModelsCalibrateOnFewerImagesWithinTheMacBudget) {
  const Graph big = load_model(kSource + "/configs/models/resnet50.json");
  EXPECT_EQ(calibration_images(big),
            std::max<std::size_t>(1, kCalibrationMacs / big.macs_per_image()));
  const Graph small = load_model(kSource + "/configs/models/fashion_mnist_cnn.json");
  EXPECT_EQ(calibration_images(small), kCalibrationImages);
}

TEST(ResNet50, HasKerasApplicationsStructureAndMacs) {
  const Graph m = load_model(kSource + "/configs/models/resnet50.json");
  EXPECT_EQ(m.input, (Shape{224, 224, 3}));
  std::size_t convs = 0, adds = 0, bns = 0;
  for (const Op& l : m.ops) {
    convs += l.kind == OpKind::Conv2D;
    adds += l.kind == OpKind::Add;
    bns += l.kind == OpKind::BatchNormalization;
  }
  // 1 stem convolution, 16 bottleneck blocks of 3, 4 projection shortcuts (He et al. Table 1).
  EXPECT_EQ(convs, 1u + 16 * 3 + 4);
  EXPECT_EQ(adds, 16u);
  EXPECT_EQ(bns, convs);
  EXPECT_EQ(m.output(), (Shape{1, 1, 1000}));
  // He et al. Table 1: 3.8e9 FLOPs (multiply-adds); Keras's variant strides the 1x1 conv.
  EXPECT_NEAR(static_cast<double>(m.macs_per_image()), 3.9e9, 0.3e9);
}

}  // namespace
}  // namespace tpu::nn
