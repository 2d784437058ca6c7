// The model loader (sw/nn/model): Keras's layer classes and arguments, Keras's shape rules, and
// errors that name the file, the JSON pointer and what is allowed (STYLE "Configuration").
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hw/common/error.h"
#include "sw/import/import.h"
#include "sw/ir/graph.h"

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

const std::string kShipped =
    std::string(TPUSIM_SOURCE_DIR) + "/configs/models/fashion_mnist_cnn.json";

// Keras's conv_output_length, written out independently of the loader.
std::uint32_t keras_out(std::uint32_t in, std::uint32_t k, std::uint32_t s, bool same) {
  return same ? (in + s - 1) / s : (in - k) / s + 1;
}

std::uint64_t params(const Op& l) {
  if (l.kind == OpKind::Conv2D)
    return std::uint64_t{l.kernel_h} * l.kernel_w * l.in.c * l.out.c + (l.use_bias ? l.out.c : 0);
  if (l.kind == OpKind::Dense) return l.in.size() * l.out.c + (l.use_bias ? l.out.c : 0);
  return 0;
}

json layer(const std::string& cls, json config) {
  return json{{"class_name", cls}, {"config", std::move(config)}};
}

json model_doc(json layers, json input = json::array({28, 28, 1})) {
  return json{{"name", "m"}, {"input", std::move(input)}, {"layers", std::move(layers)}};
}

std::string error_of(const json& doc) {
  try {
    parse_model(doc, "test.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(ShippedModel, IsTheTutorialNetworkWithKerasShapes) {
  const Graph m = load_model(kShipped);
  // The tutorial (docs/models.md): Conv2D(64, 3x3, valid) -> MaxPooling2D(2) -> relu -> Flatten ->
  // Dense(10)
  // -> softmax on 28x28x1 images.
  ASSERT_EQ(m.ops.size(), 6u);
  EXPECT_EQ(m.input, (Shape{28, 28, 1}));
  const Op& conv = m.ops[0];
  EXPECT_EQ(conv.kind, OpKind::Conv2D);
  EXPECT_EQ(conv.filters, 64u);
  EXPECT_EQ(conv.activation, Act::Linear);
  EXPECT_TRUE(conv.use_bias);
  const std::uint32_t conv_side = keras_out(m.input.h, conv.kernel_h, conv.stride_h, false);
  EXPECT_EQ(conv.out, (Shape{conv_side, conv_side, conv.filters}));
  const Op& pool = m.ops[1];
  EXPECT_EQ(pool.kind, OpKind::MaxPooling2D);
  const std::uint32_t pool_side = keras_out(conv_side, pool.kernel_h, pool.stride_h, false);
  EXPECT_EQ(pool.out, (Shape{pool_side, pool_side, conv.filters}));
  EXPECT_EQ(m.ops[2].kind, OpKind::Activation);
  EXPECT_EQ(m.ops[2].activation, Act::Relu);
  EXPECT_EQ(m.ops[2].out, pool.out);
  EXPECT_EQ(m.ops[3].kind, OpKind::Flatten);
  EXPECT_EQ(m.ops[3].out, (Shape{1, 1, static_cast<std::uint32_t>(pool.out.size())}));
  const Op& dense = m.ops[4];
  EXPECT_EQ(dense.kind, OpKind::Dense);
  EXPECT_EQ(dense.out, (Shape{1, 1, 10}));
  EXPECT_EQ(m.ops[5].activation, Act::Softmax);
  EXPECT_EQ(m.output(), (Shape{1, 1, 10}));

  // The tutorial (docs/models.md): "Parameters: 64·9 + 64 = 640 and 10816·10 + 10 = 108,170".
  EXPECT_EQ(params(conv), 64u * 9 + 64);
  EXPECT_EQ(params(dense), 10816u * 10 + 10);
  EXPECT_EQ(m.file, kShipped);
}

TEST(ShippedModel, MacsAreOutputsTimesFanIn) {
  const Graph m = load_model(kShipped);
  std::uint64_t total = 0;
  for (const Op& l : m.ops) {
    std::uint64_t expected = 0;
    if (l.kind == OpKind::Conv2D)
      expected = l.out.size() * std::uint64_t{l.kernel_h} * l.kernel_w * l.in.c;
    else if (l.kind == OpKind::Dense)
      expected = l.in.size() * l.out.c;
    EXPECT_EQ(l.macs(), expected) << l.name;
    total += expected;
  }
  EXPECT_EQ(m.macs_per_image(), total);
  EXPECT_EQ(m.ops[0].macs(), 26u * 26 * 64 * 9);
  EXPECT_EQ(m.ops[4].macs(), 10816u * 10);
}

TEST(ModelJson, UnnamedLayersGetKerasUniqueNames) {
  const json doc = model_doc(json::array({
      layer("Conv2D", {{"filters", 4}, {"kernel_size", 3}}),
      layer("Conv2D", {{"filters", 4}, {"kernel_size", 3}}),
      layer("MaxPooling2D", json::object()),
      layer("AveragePooling2D", json::object()),
      layer("Activation", {{"activation", "relu"}}),
      layer("Flatten", json::object()),
      layer("Dense", {{"units", 8}, {"name", "dense_1"}}),
      layer("Dense", {{"units", 8}}),
      layer("Dense", {{"units", 3}}),
      layer("Activation", {{"activation", "softmax"}}),
  }));
  const Graph m = parse_model(doc, "test.json");
  std::vector<std::string> names;
  for (const Op& l : m.ops) names.push_back(l.name);
  // An explicit name is never taken by a default one: the first unnamed Dense becomes "dense",
  // the next skips "dense_1".
  EXPECT_EQ(names, (std::vector<std::string>{"conv2d", "conv2d_1", "max_pooling2d",
                                             "average_pooling2d", "activation", "flatten",
                                             "dense_1", "dense", "dense_2", "activation_1"}));
}

TEST(ModelJson, IntegerArgumentsMeanTheSameOnBothAxes) {
  const Graph a = parse_model(
      model_doc(
          json::array({layer("Conv2D", {{"filters", 2}, {"kernel_size", 3}, {"strides", 2}})})),
      "a");
  const Graph b = parse_model(
      model_doc(json::array(
          {layer("Conv2D", {{"filters", 2}, {"kernel_size", {3, 3}}, {"strides", {2, 2}}})})),
      "b");
  EXPECT_EQ(a.ops[0].kernel_h, b.ops[0].kernel_h);
  EXPECT_EQ(a.ops[0].kernel_w, b.ops[0].kernel_w);
  EXPECT_EQ(a.ops[0].stride_h, b.ops[0].stride_h);
  EXPECT_EQ(a.ops[0].stride_w, b.ops[0].stride_w);
  EXPECT_EQ(a.ops[0].out, b.ops[0].out);
  EXPECT_EQ(a.ops[0].out.h, keras_out(28, 3, 2, false));
}

TEST(ModelJson, ConvDefaultsAreKeras) {
  const Graph m = parse_model(
      model_doc(json::array({layer("Conv2D", {{"filters", 2}, {"kernel_size", 3}})})), "test.json");
  const Op& l = m.ops[0];
  EXPECT_EQ(l.stride_h, 1u);
  EXPECT_EQ(l.stride_w, 1u);
  EXPECT_EQ(l.padding, Padding::Valid);
  EXPECT_TRUE(l.use_bias);
  EXPECT_EQ(l.activation, Act::Linear);
}

TEST(ModelJson, PoolingStridesDefaultToThePoolSize) {
  const Graph m = parse_model(
      model_doc(json::array({layer("MaxPooling2D", {{"pool_size", {3, 2}}}),
                             layer("AveragePooling2D", {{"strides", nullptr}}),
                             layer("MaxPooling2D", {{"pool_size", 2}, {"strides", 1}})})),
      "test.json");
  EXPECT_EQ(m.ops[0].stride_h, 3u);
  EXPECT_EQ(m.ops[0].stride_w, 2u);
  EXPECT_EQ(m.ops[0].out, (Shape{keras_out(28, 3, 3, false), keras_out(28, 2, 2, false), 1}));
  // Keras's default pool_size is 2.
  EXPECT_EQ(m.ops[1].kernel_h, 2u);
  EXPECT_EQ(m.ops[1].stride_h, 2u);
  const Shape in2 = m.ops[1].out;
  EXPECT_EQ(m.ops[2].out, (Shape{keras_out(in2.h, 2, 1, false), keras_out(in2.w, 2, 1, false), 1}));
}

TEST(ModelJson, SamePaddingGivesCeilOfInputOverStride) {
  const Graph m = parse_model(
      model_doc(json::array({layer("Conv2D", {{"filters", 3},
                                              {"kernel_size", 5},
                                              {"strides", {2, 3}},
                                              {"padding", "same"}}),
                             layer("MaxPooling2D", {{"pool_size", 3}, {"padding", "same"}})}),
                json::array({9, 11, 2})),
      "test.json");
  EXPECT_EQ(m.ops[0].out, (Shape{keras_out(9, 5, 2, true), keras_out(11, 5, 3, true), 3}));
  EXPECT_EQ(m.ops[1].out, (Shape{keras_out(m.ops[0].out.h, 3, 3, true),
                                 keras_out(m.ops[0].out.w, 3, 3, true), 3}));
}

TEST(ModelJson, KerasTrainingKeysAreAcceptedAndIgnored) {
  const json doc = model_doc(json::array({
      json{{"module", "keras.layers"},
           {"class_name", "Conv2D"},
           {"registered_name", nullptr},
           {"build_config", {{"input_shape", {nullptr, 28, 28, 1}}}},
           {"config",
            {{"name", "c"},
             {"trainable", true},
             {"dtype", "float32"},
             {"batch_input_shape", {nullptr, 28, 28, 1}},
             {"filters", 2},
             {"kernel_size", 3},
             {"data_format", "channels_last"},
             {"dilation_rate", {1, 1}},
             {"groups", 1},
             {"activation", nullptr},
             {"kernel_initializer", {{"class_name", "GlorotUniform"}}},
             {"bias_initializer", {{"class_name", "Zeros"}}},
             {"kernel_regularizer", nullptr},
             {"bias_regularizer", nullptr},
             {"activity_regularizer", nullptr},
             {"kernel_constraint", nullptr},
             {"bias_constraint", nullptr}}}},
      layer("Flatten", {{"trainable", true}, {"dtype", "float32"}, {"data_format", nullptr}}),
      layer("Dense", {{"units", 3}, {"input_shape", {1352}}, {"kernel_initializer", "zeros"}}),
  }));
  const Graph m = parse_model(doc, "test.json");
  EXPECT_EQ(m.ops[0].name, "c");
  EXPECT_EQ(m.ops[0].activation, Act::Linear);
  EXPECT_EQ(m.ops[2].out, (Shape{1, 1, 3}));
}

TEST(ModelJson, EveryActivationNameIsRead) {
  const std::vector<std::pair<std::string, Act>> acts = {
      {"linear", Act::Linear},   {"relu", Act::Relu}, {"relu6", Act::Relu6},
      {"sigmoid", Act::Sigmoid}, {"tanh", Act::Tanh}, {"softmax", Act::Softmax}};
  for (const auto& [name, act] : acts) {
    const Graph m =
        parse_model(model_doc(json::array({layer("Activation", {{"activation", name}})})), "t");
    EXPECT_EQ(m.ops[0].activation, act) << name;
    EXPECT_EQ(name_of(act), name);
  }
}

struct BadCase {
  const char* what;
  json doc;
  std::vector<std::string> message;  // substrings the error must hold
};

std::vector<BadCase> bad_cases() {
  const json conv = layer("Conv2D", {{"filters", 4}, {"kernel_size", 3}});
  return {
      {"unknown class",
       model_doc(json::array({conv, layer("Conv3D", {{"filters", 1}})})),
       {"/layers/1/class_name", "\"Conv3D\"", "Conv2D", "MaxPooling2D", "Dense"}},
      {"unknown key",
       model_doc(
           json::array({layer("Conv2D", {{"filters", 4}, {"kernel_size", 3}, {"fitlers", 4}})})),
       {"/layers/0/config/fitlers", "unknown key for Conv2D", "kernel_size", "kernel_initializer"}},
      {"unknown key beside the config",
       model_doc(json::array({json{{"class_name", "Flatten"}, {"cfg", 1}}})),
       {"/layers/0/cfg", "unknown key"}},
      {"unknown top-level key",
       json{{"name", "m"}, {"input", {28, 28, 1}}, {"layers", {conv}}, {"optimizer", "adam"}},
       {"/optimizer", "unknown key", "layers"}},
      {"zero kernel",
       model_doc(json::array({layer("Conv2D", {{"filters", 4}, {"kernel_size", 0}})})),
       {"/layers/0/config/kernel_size", "= 0", "integer in [1, 65536] or a pair"}},
      {"kernel of one value in a list",
       model_doc(json::array({layer("Conv2D", {{"filters", 4}, {"kernel_size", {3}}})})),
       {"/layers/0/config/kernel_size", "[3]", "pair"}},
      {"kernel of three values",
       model_doc(json::array({layer("Conv2D", {{"filters", 4}, {"kernel_size", {3, 3, 3}}})})),
       {"/layers/0/config/kernel_size", "pair"}},
      {"kernel as a string",
       model_doc(json::array({layer("Conv2D", {{"filters", 4}, {"kernel_size", "3"}})})),
       {"/layers/0/config/kernel_size", "\"3\""}},
      {"kernel as a fraction",
       model_doc(json::array({layer("Conv2D", {{"filters", 4}, {"kernel_size", 3.0}})})),
       {"/layers/0/config/kernel_size", "3.0"}},
      {"negative stride",
       model_doc(json::array(
           {layer("Conv2D", {{"filters", 4}, {"kernel_size", 3}, {"strides", {1, -1}}})})),
       {"/layers/0/config/strides", "pair"}},
      {"missing filters",
       model_doc(json::array({layer("Conv2D", {{"kernel_size", 3}})})),
       {"/layers/0/config/filters is missing", "integer in [1, 65536]"}},
      {"missing units",
       model_doc(json::array({layer("Flatten", json::object()), layer("Dense", json::object())})),
       {"/layers/1/config/units is missing"}},
      {"window larger than the input",
       model_doc(json::array({conv, layer("Conv2D", {{"filters", 4}, {"kernel_size", 27}})})),
       {"/layers/1/config/kernel_size", "27x27 window does not fit the 26x26x4 input",
        "\"valid\""}},
      {"conv after flatten",
       model_doc(json::array({layer("Flatten", json::object()), conv})),
       {"/layers/1/config/kernel_size", "does not fit the 1x1x784 input"}},
      {"dense on a 3-D input",
       model_doc(json::array({conv, layer("Dense", {{"units", 10}})})),
       {"/layers/1/class_name", "Dense needs a flat input", "26x26x4", "Flatten"}},
      {"duplicate name",
       model_doc(json::array(
           {layer("Flatten", {{"name", "x"}}), layer("Dense", {{"name", "x"}, {"units", 2}})})),
       {"/layers/1/config/name", "\"x\"", "unique", "/layers/0"}},
      {"slash in a name",
       model_doc(json::array({layer("Flatten", {{"name", "a/b"}})})),
       {"/layers/0/config/name", "without '/'"}},
      {"unknown activation",
       model_doc(json::array({layer("Activation", {{"activation", "gelu"}})})),
       {"/layers/0/config/activation", "\"gelu\"", "relu6", "softmax"}},
      {"activation layer without activation",
       model_doc(json::array({layer("Activation", json::object())})),
       {"/layers/0/config/activation is missing"}},
      {"unknown padding",
       model_doc(json::array(
           {layer("Conv2D", {{"filters", 1}, {"kernel_size", 1}, {"padding", "causal"}})})),
       {"/layers/0/config/padding", "\"causal\"", "\"valid\" or \"same\""}},
      {"channels first",
       model_doc(json::array({layer("MaxPooling2D", {{"data_format", "channels_first"}})})),
       {"/layers/0/config/data_format", "channels_last"}},
      {"dilation",
       model_doc(json::array(
           {layer("Conv2D", {{"filters", 1}, {"kernel_size", 3}, {"dilation_rate", 0}})})),
       {"/layers/0/config/dilation_rate", "= 0"}},
      {"groups",
       model_doc(
           json::array({layer("Conv2D", {{"filters", 2}, {"kernel_size", 3}, {"groups", 2}})})),
       {"/layers/0/config/groups", "must be 1"}},
      {"use_bias as a string",
       model_doc(json::array({layer("Flatten", json::object()),
                              layer("Dense", {{"units", 2}, {"use_bias", "yes"}})})),
       {"/layers/1/config/use_bias", "true or false"}},
      {"input shape that disagrees",
       model_doc(json::array({layer(
           "Conv2D",
           {{"filters", 1}, {"kernel_size", 3}, {"batch_input_shape", {nullptr, 32, 32, 3}}})})),
       {"/layers/0/config/batch_input_shape", "28x28x1"}},
      {"no layers", model_doc(json::array()), {"/layers", "non-empty array"}},
      {"input of rank 4",
       model_doc(json::array({conv}), json::array({1, 28, 28, 1})),
       {"/input", "[h, w, c], [steps, features] or [n]"}},
      {"zero input", model_doc(json::array({conv}), json::array({28, 0, 1})), {"/input/1", "= 0"}},
      {"missing name", json{{"input", {28, 28, 1}}, {"layers", {conv}}}, {"/name is missing"}},
      {"not an object", json::array({1, 2}), {"test.json: / =", "JSON object"}},
      {"kernel too large for 32-bit sizes",
       model_doc(
           json::array({layer("Flatten", json::object()), layer("Dense", {{"units", 65536}})}),
           json::array({65536, 64, 1})),
       {"/layers/1/config", "more than 2147483648"}},
  };
}

TEST(ModelJson, MalformedModelsAreRefusedWithFilePointerAndAllowedValues) {
  for (const BadCase& c : bad_cases()) {
    const std::string msg = error_of(c.doc);
    EXPECT_THAT(msg, HasSubstr("test.json: ")) << c.what;
    for (const std::string& part : c.message) EXPECT_THAT(msg, HasSubstr(part)) << c.what;
  }
}

class ModelFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("tpusim_model_" + std::to_string(getpid()) + ".json"))
                .string();
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void write(const std::string& text) { std::ofstream(path_) << text; }
  std::string load_error() {
    try {
      load_model(path_);
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no InputError)";
  }
  std::string path_;
};

TEST_F(ModelFile, MissingFileIsNamed) {
  EXPECT_THAT(load_error(),
              AllOf(HasSubstr(path_), HasSubstr("cannot read the model (no such file")));
}

TEST_F(ModelFile, InvalidJsonIsNamed) {
  write("{\"name\": \"m\", ");
  EXPECT_THAT(load_error(), AllOf(HasSubstr(path_), HasSubstr("not valid JSON")));
}

TEST_F(ModelFile, DeepNestingIsRefusedBeforeParsing) {
  write(std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_THAT(load_error(), AllOf(HasSubstr(path_), HasSubstr("nested")));
}

TEST_F(ModelFile, ErrorsNameTheFile) {
  write(
      R"({"name": "m", "input": [28, 28, 1], "layers": [{"class_name": "Conv3D", "config": {}}]})");
  EXPECT_THAT(load_error(),
              AllOf(HasSubstr(path_ + ": /layers/0/class_name"), HasSubstr("Conv3D")));
}

}  // namespace
}  // namespace tpu::nn
