// The training reference (sw/nn/training_reference.h): its gradients agree with the float64
// definitions within bf16's precision, replicas and micro-batches change only the order of sums,
// the optimizers take the steps their definitions say, and training lowers the loss.
#include "sw/nn/training_reference.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "sw/import/import.h"
#include "sw/nn/float64_training.h"

namespace tpu::nn {
namespace {

using ir::Graph;
using ir::Role;
using ir::TensorId;
using json = nlohmann::json;

json layer(const std::string& cls, json config) {
  return json{{"class_name", cls}, {"config", std::move(config)}};
}

// The tutorial's network, shrunk: conv, max pooling, relu, flatten, dense, softmax.
Graph small_cnn() {
  return importers::parse_model(
      json{{"name", "small"},
           {"input", {8, 8, 2}},
           {"layers",
            json::array({layer("Conv2D", {{"name", "c"}, {"filters", 4}, {"kernel_size", {3, 3}}}),
                         layer("MaxPooling2D", {{"name", "p"}, {"pool_size", {2, 2}}}),
                         layer("Activation", {{"name", "r"}, {"activation", "relu"}}),
                         layer("Flatten", {{"name", "f"}}),
                         layer("Dense", {{"name", "d"}, {"units", 5}}),
                         layer("Activation", {{"name", "s"}, {"activation", "softmax"}})})}},
      "small.json");
}

// A strided "same" convolution with tanh (its input gradient runs), average pooling and a Dense
// with a fused softmax.
Graph strided_cnn() {
  return importers::parse_model(
      json{{"name", "strided"},
           {"input", {7, 7, 3}},
           {"layers",
            json::array(
                {layer("Conv2D", {{"name", "c1"},
                                  {"filters", 4},
                                  {"kernel_size", {3, 3}},
                                  {"activation", "relu"}}),
                 layer("Conv2D", {{"name", "c2"},
                                  {"filters", 3},
                                  {"kernel_size", {3, 3}},
                                  {"strides", {2, 2}},
                                  {"padding", "same"},
                                  {"activation", "tanh"}}),
                 layer("AveragePooling2D", {{"name", "p"}, {"pool_size", {2, 2}}}),
                 layer("Flatten", {{"name", "f"}}),
                 layer("Dense", {{"name", "d"}, {"units", 4}, {"activation", "softmax"}})})}},
      "strided.json");
}

// ResNet's pattern: a convolution without bias, BatchNormalization in training mode, relu; then
// a BatchNormalization without scale and center after a Dense.
Graph batch_norm_cnn() {
  return importers::parse_model(
      json{
          {"name", "bn"},
          {"input", {6, 6, 2}},
          {"layers",
           json::array(
               {layer(
                    "Conv2D",
                    {{"name", "c"}, {"filters", 4}, {"kernel_size", {3, 3}}, {"use_bias", false}}),
                layer("BatchNormalization", {{"name", "bn1"}, {"epsilon", 1.001e-5}}),
                layer("Activation", {{"name", "r"}, {"activation", "relu"}}),
                layer("Flatten", {{"name", "f"}}), layer("Dense", {{"name", "d"}, {"units", 6}}),
                layer("BatchNormalization", {{"name", "bn2"}, {"scale", false}, {"center", false}}),
                layer("Dense", {{"name", "out"}, {"units", 4}, {"activation", "softmax"}})})}},
      "bn.json");
}

// tb/system/fit/data/two_conv.json shrunk: a "same" convolution, then a strided "valid" one
// whose window never reads the last row and column (their input gradient is zero).
Graph two_conv() {
  return importers::parse_model(
      json{{"name", "two_conv"},
           {"input", {8, 8, 2}},
           {"layers",
            json::array(
                {layer("Conv2D", {{"name", "c1"},
                                  {"filters", 4},
                                  {"kernel_size", {3, 3}},
                                  {"padding", "same"},
                                  {"activation", "relu"}}),
                 layer("Conv2D", {{"name", "c2"},
                                  {"filters", 6},
                                  {"kernel_size", {3, 3}},
                                  {"strides", {2, 2}},
                                  {"activation", "relu"}}),
                 layer("Flatten", {{"name", "f"}}),
                 layer("Dense", {{"name", "d"}, {"units", 4}, {"activation", "softmax"}})})}},
      "two_conv.json");
}

struct Batch {
  std::vector<float> images;
  std::vector<std::int32_t> labels;
};
Batch batch_of(const Graph& g, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Batch b;
  b.images.resize(n * g.input.size());
  for (float& x : b.images) x = u(rng);
  for (std::size_t i = 0; i < n; ++i)
    b.labels.push_back(static_cast<std::int32_t>(rng() % g.output().size()));
  return b;
}

double norm(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

void expect_close_to_float64(const Graph& g, const TrainPlan& plan, std::size_t n) {
  const ir::TrainingGraph t = ir::differentiate(g);
  const Weights w = random_weights(g, 7);
  const Batch b = batch_of(g, n, 11);
  const Float64Step want = step64(g, t, w, b.images.data(), b.labels.data(), n);
  Optimizer sgd;
  sgd.kind = OptimizerKind::Sgd;
  TrainState s = initial_state(g, t, w, sgd);
  std::vector<std::vector<float>> got;
  const StepRecords rec =
      reference_step(g, t, plan, sgd, s, b.images.data(), b.labels.data(), n, &got);
  ASSERT_EQ(got.size(), t.parameters.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    const TensorId& p = t.parameters[k];
    const std::vector<double>& g64 = want.gradients.at({Role::ParameterGradient, p.op, p.param});
    ASSERT_EQ(got[k].size(), g64.size());
    std::vector<double> diff(g64.size());
    for (std::size_t e = 0; e < g64.size(); ++e) diff[e] = got[k][e] - g64[e];
    // bf16 operands carry 8 significant bits: errors of a few parts in a thousand, averaged. A
    // bias right before a BatchNormalization has gradient 0 (the mean absorbs it), where fp32
    // leaves rounding noise: hence the absolute floor.
    EXPECT_LE(norm(diff), 0.02 * norm(g64) + 1e-6) << ir::describe(g, p);
  }
  double loss = 0.0;
  for (float l : rec.loss) loss += l;
  EXPECT_NEAR(loss / static_cast<double>(n), want.loss, 0.02 * want.loss);
}

TEST(TrainingReference, GradientsAgreeWithTheFloat64DefinitionsWithinBf16Precision) {
  expect_close_to_float64(small_cnn(), TrainPlan{128, 1, 0, {}}, 6);
  expect_close_to_float64(strided_cnn(), TrainPlan{128, 1, 0, {}}, 6);
  expect_close_to_float64(two_conv(), TrainPlan{128, 1, 0, {}}, 6);
  // BatchNormalization's statistics are the pass's: one replica, one pass, as float64's.
  expect_close_to_float64(batch_norm_cnn(), TrainPlan{128, 1, 0, {}}, 6);
}

TEST(TrainingReference, SmallTilesReplicasAndMicroBatchesChangeOnlyTheOrderOfSums) {
  expect_close_to_float64(small_cnn(), TrainPlan{8, 2, 2, {}}, 8);
  expect_close_to_float64(strided_cnn(), TrainPlan{5, 2, 1, {}}, 4);
  // 4 rows per tile: c2's 6 output channels take two tiles per kernel position.
  expect_close_to_float64(two_conv(), TrainPlan{4, 2, 1, {}}, 4);
}

// A kernel's gradient summed in chunks of images (the plan's kernel_chunk, how the chip sums it
// when a pass's tensors stream from off-chip memory): each chunk's sum added to the running sum.
// A chunk of the whole pass is the default's order bit for bit; smaller chunks change only the
// order of sums.
TEST(TrainingReference, KernelGradientsSummedInChunksOfImagesChangeOnlyTheOrderOfSums) {
  const Graph g = two_conv();
  const ir::TrainingGraph t = ir::differentiate(g);
  const Batch b = batch_of(g, 6, 4);
  std::vector<std::uint32_t> whole(g.ops.size(), 6), ones(g.ops.size(), 1);
  const auto gradients = [&](const TrainPlan& plan) {
    TrainState s = initial_state(g, t, random_weights(g, 3), Optimizer{});
    std::vector<std::vector<float>> grads;
    (void)reference_step(g, t, plan, Optimizer{}, s, b.images.data(), b.labels.data(), 6, &grads);
    return grads;
  };
  const auto by_default = gradients(TrainPlan{8, 1, 0, {}});
  EXPECT_EQ(gradients(TrainPlan{8, 1, 0, whole}), by_default);
  const auto chunked = gradients(TrainPlan{8, 1, 0, ones});
  EXPECT_NE(chunked, by_default);
  for (std::size_t k = 0; k < chunked.size(); ++k)
    for (std::size_t e = 0; e < chunked[k].size(); ++e)
      EXPECT_NEAR(chunked[k][e], by_default[k][e], 1e-5f + 1e-3f * std::abs(by_default[k][e]));
  expect_close_to_float64(two_conv(), TrainPlan{8, 1, 0, ones}, 6);
}

TEST(TrainingReference, TheSamePlanAndInputsGiveTheSameWeightsBitForBit) {
  // Splitting a batch changes the order of fp32 sums, so the weights may differ in their last
  // bits; the plan is part of the reference's input, and the same plan gives the same bits.
  const Graph g = small_cnn();
  const ir::TrainingGraph t = ir::differentiate(g);
  const Batch b = batch_of(g, 8, 3);
  Optimizer adam;
  TrainState a = initial_state(g, t, random_weights(g, 5), adam);
  TrainState c = a;
  (void)reference_step(g, t, TrainPlan{16, 2, 2, {}}, adam, a, b.images.data(), b.labels.data(), 8);
  (void)reference_step(g, t, TrainPlan{16, 2, 2, {}}, adam, c, b.images.data(), b.labels.data(), 8);
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    EXPECT_EQ(a.weights.layers[i].kernel, c.weights.layers[i].kernel);
    EXPECT_EQ(a.weights.layers[i].bias, c.weights.layers[i].bias);
  }
}

// One step of `opt` on small_cnn's batch of 4 from seeded weights: per parameter (the training
// graph's order) its kind, its values before and after the step, and its summed gradient.
struct FirstStep {
  std::vector<ir::Param> param;
  std::vector<std::vector<float>> before, after, grads;
  std::uint64_t iterations = 0;
};
FirstStep first_step(const Optimizer& opt) {
  const Graph g = small_cnn();
  const ir::TrainingGraph t = ir::differentiate(g);
  const Batch b = batch_of(g, 4, 9);
  const Weights w0 = random_weights(g, 2);
  TrainState s = initial_state(g, t, w0, opt);
  FirstStep f;
  (void)reference_step(g, t, TrainPlan{}, opt, s, b.images.data(), b.labels.data(), 4, &f.grads);
  for (const TensorId& p : t.parameters) {
    f.param.push_back(p.param);
    f.before.push_back(tensor_of(w0.layers[p.op], p.param));
    f.after.push_back(tensor_of(s.weights.layers[p.op], p.param));
  }
  f.iterations = s.iterations;
  return f;
}

TEST(TrainingReference, SgdMovesEachWeightByTheLearningRateTimesItsGradient) {
  Optimizer sgd;
  sgd.kind = OptimizerKind::Sgd;
  sgd.learning_rate = 0.5f;
  const FirstStep f = first_step(sgd);
  for (std::size_t k = 0; k < f.param.size(); ++k)
    for (std::size_t e = 0; e < f.before[k].size(); ++e)
      EXPECT_EQ(f.after[k][e], f.before[k][e] - 0.5f * f.grads[k][e]);
  EXPECT_EQ(f.iterations, 1u);
}

// LARS's first step (m = 0): a kernel moves by lr * trust * (g + wd * w) with its own tensor's
// trust = eta * |w| / (|g| + wd * |w|), here evaluated in float64; a bias by lr * g alone (MLPerf's
// skip list: no trust ratio, no decay).
TEST(TrainingReference, LarsScalesEachKernelByItsTrustRatioAndStepsBiasesByTheLearningRate) {
  Optimizer lars;
  lars.kind = OptimizerKind::Lars;
  lars.learning_rate = 2.0f, lars.weight_decay = 1e-3f, lars.lars_eta = 0.01f;
  const FirstStep f = first_step(lars);
  std::size_t kernels = 0, biases = 0;
  for (std::size_t k = 0; k < f.param.size(); ++k) {
    const std::vector<float>&before = f.before[k], &g = f.grads[k];
    double ww = 0.0, gg = 0.0;
    for (std::size_t e = 0; e < before.size(); ++e)
      ww += double{before[e]} * before[e], gg += double{g[e]} * g[e];
    const bool scaled = f.param[k] == ir::Param::Kernel;
    EXPECT_EQ(lars_scales(f.param[k]), scaled);
    const double wd = scaled ? 1e-3 : 0.0;
    const double trust = scaled ? 0.01 * std::sqrt(ww) / (std::sqrt(gg) + wd * std::sqrt(ww)) : 1.0;
    for (std::size_t e = 0; e < before.size(); ++e) {
      const double step = 2.0 * trust * (g[e] + wd * before[e]);
      EXPECT_NEAR(f.after[k][e], before[e] - step, 1e-5 * (std::abs(before[e]) + std::abs(step)))
          << "parameter " << k << " element " << e;
    }
    ++(scaled ? kernels : biases);
  }
  EXPECT_GT(kernels, 0u);
  EXPECT_GT(biases, 0u);
}

TEST(TrainingReference, AdamsFirstStepMovesEveryWeightWithAGradientByAboutTheLearningRate) {
  // t = 1: m = 0.1 g, v = 0.001 g², alpha = lr sqrt(0.001) / 0.1, so the step is
  // lr * |g| / (|g| + eps / sqrt(0.001)): the learning rate for gradients much larger than eps.
  Optimizer adam;
  adam.learning_rate = 0.01f;
  const FirstStep f = first_step(adam);
  std::size_t checked = 0;
  for (std::size_t k = 0; k < f.param.size(); ++k)
    for (std::size_t e = 0; e < f.before[k].size(); ++e) {
      if (std::abs(f.grads[k][e]) < 1e-4f) continue;
      EXPECT_NEAR(f.before[k][e] - f.after[k][e], f.grads[k][e] > 0 ? 0.01f : -0.01f, 1e-4f);
      ++checked;
    }
  EXPECT_GT(checked, 100u);
}

TEST(TrainingReference, AdamAndMomentumLowerTheLossOfAFixedBatch) {
  const Graph g = strided_cnn();
  const ir::TrainingGraph t = ir::differentiate(g);
  const Batch b = batch_of(g, 8, 4);
  for (OptimizerKind kind : {OptimizerKind::Adam, OptimizerKind::Momentum}) {
    Optimizer opt;
    opt.kind = kind;
    opt.learning_rate = kind == OptimizerKind::Adam ? 0.01f : 0.1f;
    TrainState s = initial_state(g, t, random_weights(g, 8), opt);
    const auto mean = [](const StepRecords& r) {
      double m = 0.0;
      for (float l : r.loss) m += l;
      return m / static_cast<double>(r.loss.size());
    };
    const double first =
        mean(reference_step(g, t, TrainPlan{}, opt, s, b.images.data(), b.labels.data(), 8));
    double last = first;
    for (int step = 0; step < 30; ++step)
      last = mean(reference_step(g, t, TrainPlan{}, opt, s, b.images.data(), b.labels.data(), 8));
    EXPECT_LT(last, 0.5 * first) << (kind == OptimizerKind::Adam ? "adam" : "momentum");
    const StepRecords eval =
        reference_evaluate(g, t, TrainPlan{}, s.weights, b.images.data(), b.labels.data(), 8);
    EXPECT_LT(mean(eval), 0.5 * first);
  }
}

TEST(TrainingReference, ABatchThatDoesNotSplitOverTheReplicasIsRefused) {
  const Graph g = small_cnn();
  const ir::TrainingGraph t = ir::differentiate(g);
  const Batch b = batch_of(g, 5, 1);
  Optimizer opt;
  TrainState s = initial_state(g, t, random_weights(g, 1), opt);
  EXPECT_THROW((void)reference_step(g, t, TrainPlan{128, 2, 0, {}}, opt, s, b.images.data(),
                                    b.labels.data(), 5),
               std::invalid_argument);
}

}  // namespace
}  // namespace tpu::nn
