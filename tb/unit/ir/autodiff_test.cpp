// Autodiff (sw/ir/autodiff.h): the backward pass each gradient rule builds, checked two ways —
// its shape for the tutorial's network, and its numbers (the float64 semantics of
// sw/nn/float64_training.h) against central finite differences of the loss on small models of
// every kind that has a rule.
#include "sw/ir/autodiff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "hw/common/error.h"
#include "sw/import/import.h"
#include "sw/nn/float64_training.h"
#include "sw/nn/weights.h"

namespace tpu::ir {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

const std::string kSource = TPUSIM_SOURCE_DIR;

Graph model_of(json layers, json input) {
  return importers::parse_model(
      json{{"name", "t"}, {"input", std::move(input)}, {"layers", std::move(layers)}}, "t.json");
}
json layer(const std::string& cls, json config) {
  return json{{"class_name", cls}, {"config", std::move(config)}};
}

std::vector<std::string> describe_all(const Graph& g, const TrainingGraph& t) {
  std::vector<std::string> out;
  for (const GradOp& o : t.ops) {
    std::string line = std::string(name_of(o.kind)) + " -> " + describe(g, o.output);
    if (o.accumulate) line += " (+=)";
    out.push_back(line);
  }
  return out;
}

TEST(Autodiff, TheTutorialsNetworkHasItsBackwardPassInReverseOrder) {
  const Graph g = importers::load_model(kSource + "/configs/models/fashion_mnist_cnn.json");
  const TrainingGraph t = differentiate(g);
  EXPECT_EQ(t.loss_op, g.ops.size() - 1);
  EXPECT_EQ(t.logits, (TensorId{Role::Value, 4}));  // the Dense's output feeds the softmax
  EXPECT_THAT(
      describe_all(g, t),
      ::testing::ElementsAre(
          "softmax_cross_entropy -> gradient of dense", "bias_grad -> gradient of dense/bias",
          "dense_kernel_grad -> gradient of dense/kernel",
          "dense_input_grad -> gradient of flatten", "pass -> gradient of activation",
          "activation_grad -> gradient of max_pooling2d", "pool_grad -> gradient of conv2d",
          "bias_grad -> gradient of conv2d/bias", "conv_kernel_grad -> gradient of conv2d/kernel"));
  ASSERT_EQ(t.parameters.size(), 4u);
  EXPECT_EQ(t.parameters[0], (TensorId{Role::Parameter, 0, Param::Kernel}));
  EXPECT_EQ(t.parameters[3], (TensorId{Role::Parameter, 4, Param::Bias}));
}

TEST(Autodiff, ATensorReadTwiceSumsItsGradientsInTheOrderTheyRun) {
  const Graph g = model_of(
      json::array(
          {layer("Dense", {{"name", "a"}, {"units", 4}}),
           layer("Dense", {{"name", "b"}, {"units", 4}}),
           json{{"class_name", "Add"},
                {"config", {{"name", "sum"}}},
                {"inbound_nodes", json::array({json::array({json::array({"a", 0, 0, {}}),
                                                            json::array({"b", 0, 0, {}})})})}},
           layer("Dense", {{"name", "out"}, {"units", 3}, {"activation", "softmax"}})}),
      json::array({5}));
  const TrainingGraph t = differentiate(g);
  // a feeds both b and the Add: the Add's pass writes a's gradient, b's input gradient adds.
  EXPECT_THAT(
      describe_all(g, t),
      ::testing::ElementsAre(
          "softmax_cross_entropy -> gradient of out before its "
          "activation",
          "bias_grad -> gradient of out/bias", "dense_kernel_grad -> gradient of out/kernel",
          "dense_input_grad -> gradient of sum", "pass -> gradient of a", "pass -> gradient of b",
          "bias_grad -> gradient of b/bias", "dense_kernel_grad -> gradient of b/kernel",
          "dense_input_grad -> gradient of a (+=)", "bias_grad -> gradient of a/bias",
          "dense_kernel_grad -> gradient of a/kernel"));
  EXPECT_EQ(t.logits, (TensorId{Role::PreActivation, 3}));
}

TEST(Autodiff, AViewOfTheImagesGetsNoGradient) {
  const Graph g = model_of(
      json::array({layer("Flatten", {{"name", "f"}}),
                   layer("Dense", {{"name", "d"}, {"units", 3}, {"activation", "softmax"}})}),
      json::array({2, 2, 1}));
  // The Dense reads a Flatten of the images: neither needs a gradient.
  EXPECT_THAT(describe_all(g, differentiate(g)),
              ::testing::ElementsAre("softmax_cross_entropy -> gradient of d before its activation",
                                     "bias_grad -> gradient of d/bias",
                                     "dense_kernel_grad -> gradient of d/kernel"));
}

// ResNet's stem: a ZeroPadding2D of the images feeds the first convolution, which therefore has
// no input gradient (nothing lies behind the padding but the images); a second ZeroPadding2D
// feeds the max pool, and its gradient is the pool's without the border (crop).
TEST(Autodiff, NothingComputedFromTheImagesAloneGetsAGradient) {
  const Graph g = model_of(
      json::array({layer("ZeroPadding2D", {{"name", "p0"}, {"padding", 1}}),
                   layer("Conv2D", {{"name", "c"}, {"filters", 2}, {"kernel_size", {3, 3}}}),
                   layer("ZeroPadding2D", {{"name", "p1"}, {"padding", 1}}),
                   layer("MaxPooling2D", {{"name", "m"}, {"pool_size", {2, 2}}}),
                   layer("Flatten", {{"name", "f"}}),
                   layer("Dense", {{"name", "d"}, {"units", 3}, {"activation", "softmax"}})}),
      json::array({4, 4, 1}));
  EXPECT_THAT(describe_all(g, differentiate(g)),
              ::testing::ElementsAre(
                  "softmax_cross_entropy -> gradient of d before its activation",
                  "bias_grad -> gradient of d/bias", "dense_kernel_grad -> gradient of d/kernel",
                  "dense_input_grad -> gradient of f", "pass -> gradient of m",
                  "pool_grad -> gradient of p1", "crop -> gradient of c",
                  "bias_grad -> gradient of c/bias", "conv_kernel_grad -> gradient of c/kernel"));
}

TEST(Autodiff, EveryLayerThatCannotBeTrainedIsNamedInOneMessage) {
  const Graph g = model_of(
      json::array({layer("Conv2D", {{"name", "c"}, {"filters", 2}, {"kernel_size", {3, 3}}}),
                   layer("DepthwiseConv2D", {{"name", "dw"}, {"kernel_size", {3, 3}}}),
                   layer("Activation", {{"name", "e"}, {"activation", "elu"}}),
                   layer("Dropout", {{"name", "drop"}, {"rate", 0.5}}),
                   layer("Flatten", {{"name", "f"}}),
                   layer("Dense", {{"name", "d"}, {"units", 3}, {"activation", "softmax"}})}),
      json::array({6, 6, 1}));
  try {
    (void)differentiate(g);
    FAIL() << "no error";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_THAT(m, HasSubstr("t.json: fit cannot train 3 layers:"));
    EXPECT_THAT(m, HasSubstr("layer dw (DepthwiseConv2D): fit has no gradient rule"));
    EXPECT_THAT(m, HasSubstr("layer e (Activation): fit has no gradient rule for the elu"));
    EXPECT_THAT(m, HasSubstr("layer drop (Dropout): fit does not apply Dropout's random mask"));
  }
}

TEST(Autodiff, AModelThatDoesNotEndInASoftmaxIsRefusedNamingItsLastLayer) {
  const Graph g =
      model_of(json::array({layer("Dense", {{"name", "d"}, {"units", 3}})}), json::array({4}));
  try {
    (void)differentiate(g);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("t.json: fit trains a classifier"));
    EXPECT_THAT(e.what(), HasSubstr("d (Dense) is not"));
  }
}

// Central finite differences of the float64 loss against the float64 backward pass, for a
// sample of every parameter's entries.
void expect_gradients_match_finite_differences(const Graph& g, std::uint64_t seed,
                                               std::size_t images = 3) {
  const TrainingGraph t = differentiate(g);
  nn::Weights w = nn::random_weights(g, seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& lw : w.layers)
    for (float& b : lw.bias) b = 0.3f * u(rng);  // nonzero biases exercise their gradients
  std::vector<float> x(images * g.input.size());
  for (float& v : x) v = u(rng);
  std::vector<std::int32_t> labels(images);
  for (auto& l : labels) l = static_cast<std::int32_t>(rng() % g.output().size());
  const nn::Float64Step step = nn::step64(g, t, w, x.data(), labels.data(), images);
  EXPECT_TRUE(std::isfinite(step.loss));
  for (const TensorId& p : t.parameters) {
    const std::vector<double>& grad = step.gradients.at({Role::ParameterGradient, p.op, p.param});
    std::vector<float>& values = nn::tensor_of(w.layers[p.op], p.param);
    ASSERT_EQ(grad.size(), values.size()) << describe(g, p);
    const std::size_t stride = std::max<std::size_t>(1, values.size() / 23);
    for (std::size_t e = 0; e < values.size(); e += stride) {
      const float keep = values[e];
      const double h = 1e-4;
      values[e] = static_cast<float>(keep + h);
      const double hi = nn::loss64(g, w, x.data(), labels.data(), images);
      values[e] = static_cast<float>(keep - h);
      const double lo = nn::loss64(g, w, x.data(), labels.data(), images);
      values[e] = keep;
      // The perturbation as stored in fp32.
      const double step_size =
          double(static_cast<float>(keep + h)) - double(static_cast<float>(keep - h));
      const double fd = (hi - lo) / step_size;
      EXPECT_NEAR(grad[e], fd, 1e-5 + 1e-4 * std::abs(fd)) << describe(g, p) << "[" << e << "]";
    }
  }
}

TEST(AutodiffFiniteDifferences, TheTutorialsNetworkShrunk) {
  expect_gradients_match_finite_differences(
      model_of(
          json::array({layer("Conv2D", {{"name", "c"}, {"filters", 4}, {"kernel_size", {3, 3}}}),
                       layer("MaxPooling2D", {{"name", "p"}, {"pool_size", {2, 2}}}),
                       layer("Activation", {{"name", "r"}, {"activation", "relu"}}),
                       layer("Flatten", {{"name", "f"}}),
                       layer("Dense", {{"name", "d"}, {"units", 5}}),
                       layer("Activation", {{"name", "s"}, {"activation", "softmax"}})}),
          json::array({8, 8, 2})),
      1);
}

TEST(AutodiffFiniteDifferences, StridedSamePaddedDilatedConvolutionsAndAveragePooling) {
  expect_gradients_match_finite_differences(
      model_of(
          json::array({layer("Conv2D", {{"name", "c1"},
                                        {"filters", 3},
                                        {"kernel_size", {3, 3}},
                                        {"strides", {2, 2}},
                                        {"padding", "same"},
                                        {"activation", "tanh"}}),
                       layer("Conv2D", {{"name", "c2"},
                                        {"filters", 3},
                                        {"kernel_size", {2, 2}},
                                        {"dilation_rate", {2, 2}},
                                        {"activation", "sigmoid"}}),
                       layer("AveragePooling2D", {{"name", "p"},
                                                  {"pool_size", {2, 2}},
                                                  {"strides", {1, 1}},
                                                  {"padding", "same"}}),
                       layer("GlobalAveragePooling2D", {{"name", "g"}}),
                       layer("Dense", {{"name", "d"}, {"units", 4}, {"activation", "softmax"}})}),
          json::array({9, 9, 2})),
      2);
}

// The second convolution's input gradient (stride 2, valid: the last row and column of its input
// are read by no window and get zero) carries the first's kernel gradient (fit's two_conv.json,
// shrunk; tanh keeps every path differentiable at the sample).
TEST(AutodiffFiniteDifferences, AStridedValidConvolutionAfterASamePaddedOne) {
  expect_gradients_match_finite_differences(
      model_of(
          json::array({layer("Conv2D", {{"name", "c1"},
                                        {"filters", 3},
                                        {"kernel_size", {3, 3}},
                                        {"padding", "same"},
                                        {"activation", "tanh"}}),
                       layer("Conv2D", {{"name", "c2"},
                                        {"filters", 4},
                                        {"kernel_size", {3, 3}},
                                        {"strides", {2, 2}},
                                        {"activation", "tanh"}}),
                       layer("Flatten", {{"name", "f"}}),
                       layer("Dense", {{"name", "d"}, {"units", 3}, {"activation", "softmax"}})}),
          json::array({8, 8, 2})),
      4);
}

TEST(AutodiffFiniteDifferences, DenseLayersWithRelu6ASharedTensorAndGlobalMaxPooling) {
  expect_gradients_match_finite_differences(
      model_of(
          json::array(
              {layer("Conv2D", {{"name", "c"}, {"filters", 3}, {"kernel_size", {2, 2}}}),
               layer("GlobalMaxPooling2D", {{"name", "g"}}),
               layer("Dense", {{"name", "a"}, {"units", 6}, {"activation", "relu6"}}),
               layer("Dense", {{"name", "b"}, {"units", 6}}),
               json{{"class_name", "Add"},
                    {"config", {{"name", "sum"}}},
                    {"inbound_nodes", json::array({json::array({json::array({"a", 0, 0, {}}),
                                                                json::array({"b", 0, 0, {}})})})}},
               layer("Dense", {{"name", "out"}, {"units", 3}, {"activation", "softmax"}})}),
          json::array({5, 5, 2})),
      3);
}

TEST(AutodiffFiniteDifferences, BatchNormalizationInTrainingModeWithAndWithoutScaleAndCenter) {
  expect_gradients_match_finite_differences(
      model_of(
          json::array(
              {layer("Conv2D",
                     {{"name", "c"}, {"filters", 3}, {"kernel_size", {2, 2}}, {"use_bias", false}}),
               layer("BatchNormalization", {{"name", "bn1"}, {"epsilon", 1.001e-5}}),
               layer("Activation", {{"name", "r"}, {"activation", "relu"}}),
               layer("Flatten", {{"name", "f"}}), layer("Dense", {{"name", "d"}, {"units", 5}}),
               layer("BatchNormalization", {{"name", "bn2"}, {"scale", false}, {"center", false}}),
               layer("Dense", {{"name", "out"}, {"units", 3}, {"activation", "softmax"}})}),
          json::array({4, 4, 2})),
      4, 4);
}

// ResNet's stem in miniature: padding of the images, a strided convolution, BatchNormalization,
// relu, padding and a strided max pool (whose windows overlap), and a projection block's Add.
TEST(AutodiffFiniteDifferences, ZeroPaddingBeforeAConvolutionAndAMaxPoolAndAResidualAdd) {
  const auto in = [](const char* name) {
    return json::array({json::array({json::array({name, 0, 0, json::object()})})});
  };
  json add = layer("Add", {{"name", "sum"}});
  add["inbound_nodes"] = json::array({json::array(
      {json::array({"s", 0, 0, json::object()}), json::array({"b", 0, 0, json::object()})})});
  json a = layer("Conv2D", {{"name", "a"}, {"filters", 3}, {"kernel_size", {1, 1}}});
  a["inbound_nodes"] = in("m");
  json b = layer("Conv2D", {{"name", "b"},
                            {"filters", 3},
                            {"kernel_size", {3, 3}},
                            {"padding", "same"},
                            {"activation", "tanh"}});
  b["inbound_nodes"] = in("a");
  json sc = layer("Conv2D", {{"name", "s"}, {"filters", 3}, {"kernel_size", {1, 1}}});
  sc["inbound_nodes"] = in("m");
  json f = layer("Flatten", {{"name", "f"}});
  f["inbound_nodes"] = in("sum");
  json d = layer("Dense", {{"name", "d"}, {"units", 3}, {"activation", "softmax"}});
  d["inbound_nodes"] = in("f");
  expect_gradients_match_finite_differences(
      model_of(
          json::array(
              {layer("ZeroPadding2D", {{"name", "p0"}, {"padding", 2}}),
               layer("Conv2D",
                     {{"name", "c"}, {"filters", 3}, {"kernel_size", {3, 3}}, {"strides", {2, 2}}}),
               layer("BatchNormalization", {{"name", "bn"}}),
               layer("Activation", {{"name", "r"}, {"activation", "tanh"}}),
               layer("ZeroPadding2D", {{"name", "p1"}, {"padding", 1}}),
               layer("MaxPooling2D", {{"name", "m"}, {"pool_size", {3, 3}}, {"strides", {2, 2}}}),
               a, b, sc, add, f, d}),
          json::array({9, 9, 2})),
      5, 4);
}

TEST(Autodiff, BatchNormalizationTrainsGammaAndBetaAndPassesItsInputGradient) {
  const Graph g = model_of(
      json::array({layer("Dense", {{"name", "d"}, {"units", 4}}),
                   layer("BatchNormalization", {{"name", "bn"}}),
                   layer("Dense", {{"name", "out"}, {"units", 3}, {"activation", "softmax"}})}),
      json::array({5}));
  const TrainingGraph t = differentiate(g);
  EXPECT_THAT(
      describe_all(g, t),
      ::testing::ElementsAre(
          "softmax_cross_entropy -> gradient of out before its activation",
          "bias_grad -> gradient of out/bias", "dense_kernel_grad -> gradient of out/kernel",
          "dense_input_grad -> gradient of bn", "bias_grad -> gradient of bn/beta",
          "batch_norm_gamma_grad -> gradient of bn/gamma", "batch_norm_input_grad -> gradient of d",
          "bias_grad -> gradient of d/bias", "dense_kernel_grad -> gradient of d/kernel"));
  // Trainable: d's kernel and bias, bn's gamma and beta (not its moving statistics), out's.
  EXPECT_EQ(t.parameters.size(), 6u);
}

}  // namespace
}  // namespace tpu::ir
