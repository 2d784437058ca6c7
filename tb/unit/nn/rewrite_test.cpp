// Rewrites before a model runs (sw/nn/rewrite.h): identities at inference leave the graph and
// their readers read what they read.
#include "sw/nn/rewrite.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hw/common/error.h"
#include "sw/import/import.h"
#include "sw/ir/graph.h"
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
using ::testing::HasSubstr;

using test::layer;

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
    inference_graph(m);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(InferenceGraph, DropoutsLeaveAndTheirReadersReadTheirInputs) {
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
  const Graph g = inference_graph(m);
  EXPECT_EQ(names(g), (std::vector<std::string>{"a", "b", "sum"}));
  EXPECT_EQ(g.ops[0].inputs, (std::vector<std::size_t>{kGraphInput}));
  EXPECT_EQ(g.ops[1].inputs, (std::vector<std::size_t>{0}));
  EXPECT_EQ(g.ops[2].inputs, (std::vector<std::size_t>{1, 0}));
  EXPECT_EQ(g.output(), m.output());
  EXPECT_EQ(g.macs_per_image(), m.macs_per_image());
}

TEST(InferenceGraph, AnOutputDropoutGivesTheOutputToItsInputWhenThatIsTheLastLayerLeft) {
  const Graph m = functional(
      json::array({layer("Conv2D", {{"name", "a"}, {"filters", 2}, {"kernel_size", 1}}, {"in"}),
                   layer("Dropout", {{"name", "out"}, {"rate", 0.5}}, {"a"})}));
  EXPECT_EQ(names(inference_graph(m)), (std::vector<std::string>{"a"}));
  const Graph moved = functional(
      json::array({layer("Conv2D", {{"name", "a"}, {"filters", 2}, {"kernel_size", 1}}, {"in"}),
                   layer("Conv2D", {{"name", "b"}, {"filters", 2}, {"kernel_size", 1}}, {"in"}),
                   layer("Dropout", {{"name", "out"}, {"rate", 0.5}}, {"a"})}));
  EXPECT_THAT(error_of(moved), HasSubstr("layer out (Dropout), the model's output, is the "
                                         "identity at inference and reads a"));
}

TEST(InferenceGraph, AModelOfIdentitiesComputesNothingAndIsRefused) {
  const Graph m = functional(json::array({layer("Dropout", {{"name", "d"}}, {"in"})}));
  EXPECT_THAT(error_of(m), HasSubstr("m.json: the model computes nothing at inference"));
}

TEST(InferenceGraph, DropoutArgumentsAreCheckedAndTheirDefaultNamesFollowKeras) {
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
  EXPECT_THAT(error(layer("ReLU", {{"negative_slope", 0.1}})),
              HasSubstr("/layers/0/config/negative_slope = 0.1 (must be 0: a leaky ReLU"));
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

}  // namespace
}  // namespace tpu::nn
