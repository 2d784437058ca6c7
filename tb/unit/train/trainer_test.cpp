// The trainer (sw/train): deterministic for a seed, gradients that agree with finite differences
// of its own loss, the input-scale fold, and refusals of what it cannot train.
#include "sw/train/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "hw/common/error.h"
#include "sw/data/idx.h"
#include "sw/import/import.h"
#include "sw/ir/graph.h"
#include "sw/nn/reference.h"
#include "sw/nn/weights.h"

namespace tpu::train {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const std::string kShippedModel =
    std::string(TPUSIM_SOURCE_DIR) + "/configs/models/fashion_mnist_cnn.json";
constexpr std::size_t kSubset = 512;

data::Dataset first_images(const data::Dataset& d, std::size_t n) {
  data::Dataset s;
  s.images.count = static_cast<std::uint32_t>(n);
  s.images.rows = d.images.rows;
  s.images.cols = d.images.cols;
  const std::size_t px = std::size_t{d.images.rows} * d.images.cols;
  s.images.pixels.assign(d.images.pixels.begin(), d.images.pixels.begin() + n * px);
  s.labels.assign(d.labels.begin(), d.labels.begin() + n);
  return s;
}

data::Dataset train_subset() {
  return first_images(data::load_fashion_mnist(data::kDefaultFashionMnistDir, "train"), kSubset);
}

// Bit patterns, so that -0.0 differs from 0.0 and a NaN equals itself.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

bool same_bits(const nn::Weights& a, const nn::Weights& b) {
  if (a.layers.size() != b.layers.size()) return false;
  for (std::size_t i = 0; i < a.layers.size(); ++i)
    if (!same_bits(a.layers[i].kernel, b.layers[i].kernel) ||
        !same_bits(a.layers[i].bias, b.layers[i].bias))
      return false;
  return true;
}

TrainOptions short_run(std::uint64_t seed) {
  TrainOptions o;
  o.epochs = 3;
  o.seed = seed;
  return o;
}

TEST(Trainer, SameSeedGivesBitIdenticalWeightsAndLosses) {
  const ir::Graph m = importers::load_model(kShippedModel);
  const data::Dataset d = train_subset();
  const TrainResult a = train(m, d, short_run(5));
  const TrainResult b = train(m, d, short_run(5));
  EXPECT_TRUE(same_bits(a.weights, b.weights));
  ASSERT_EQ(a.epochs.size(), b.epochs.size());
  for (std::size_t e = 0; e < a.epochs.size(); ++e) {
    EXPECT_EQ(a.epochs[e].loss, b.epochs[e].loss);
    EXPECT_EQ(a.epochs[e].accuracy, b.epochs[e].accuracy);
  }
  EXPECT_FALSE(same_bits(a.weights, train(m, d, short_run(6)).weights));
}

TEST(Trainer, LossDecreasesEveryEpoch) {
  const ir::Graph m = importers::load_model(kShippedModel);
  const TrainResult r = train(m, train_subset(), short_run(5));
  ASSERT_EQ(r.epochs.size(), 3u);
  for (std::size_t e = 1; e < r.epochs.size(); ++e)
    EXPECT_LT(r.epochs[e].loss, r.epochs[e - 1].loss) << "epoch " << e + 1;
}

TEST(Trainer, RawPixelTrainingAsTheTutorialIsDeterministicToo) {
  const ir::Graph m = importers::load_model(kShippedModel);
  const data::Dataset d = first_images(train_subset(), 128);
  TrainOptions o;
  o.epochs = 1;
  o.input_scale = 1.0f;
  EXPECT_TRUE(same_bits(train(m, d, o).weights, train(m, d, o).weights));
}

// The returned weights take raw pixels: evaluated on raw pixels they score what the trainer
// measured on scaled pixels during the last epoch.
TEST(Trainer, InputScaleIsFoldedIntoTheFirstKernel) {
  const ir::Graph m = importers::load_model(kShippedModel);
  const data::Dataset d = train_subset();
  TrainOptions o = short_run(5);
  o.epochs = 1;
  const TrainResult r = train(m, d, o, &d);
  const Evaluation raw = evaluate(m, r.weights, d);
  ASSERT_TRUE(r.epochs[0].val_loss.has_value());
  EXPECT_NEAR(raw.loss, *r.epochs[0].val_loss, 1e-4);
  EXPECT_NEAR(raw.accuracy, *r.epochs[0].val_accuracy, 2.0 / kSubset);
  // The trainer's loss and the float reference agree on the classification.
  std::vector<float> images(d.images.pixels.begin(), d.images.pixels.end());
  const auto top1 = nn::argmax_rows(nn::forward_float(m, r.weights, images.data(), d.images.count),
                                    m.output().size());
  std::size_t correct = 0;
  for (std::size_t i = 0; i < top1.size(); ++i) correct += top1[i] == d.labels[i] ? 1 : 0;
  EXPECT_NEAR(double(correct) / kSubset, raw.accuracy, 2.0 / kSubset);
}

TEST(Trainer, ProgressReportsEveryBatchAndEachEpochOnce) {
  const ir::Graph m = importers::load_model(kShippedModel);
  const data::Dataset d = first_images(train_subset(), 100);
  TrainOptions o = short_run(1);
  o.epochs = 2;
  std::vector<Progress> calls;
  const TrainResult r = train(m, d, o, nullptr, [&](const Progress& p) { calls.push_back(p); });
  const std::uint64_t batches = (100 + o.batch - 1) / o.batch;
  ASSERT_EQ(calls.size(), o.epochs * batches);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].batches, batches);
    EXPECT_EQ(calls[i].batch, i % batches + 1);
    EXPECT_EQ(calls[i].epoch, i / batches + 1);
    EXPECT_EQ(calls[i].epoch_done.has_value(), calls[i].batch == batches);
  }
  EXPECT_EQ(calls.back().epoch_done->loss, r.epochs.back().loss);
  EXPECT_FALSE(r.epochs.back().val_loss.has_value());
}

// A model with every layer kind and activation, on small hand-made images.
ir::Graph gradient_model() {
  auto layer = [](const std::string& cls, json cfg) {
    return json{{"class_name", cls}, {"config", std::move(cfg)}};
  };
  const json doc = {
      {"name", "grad"},
      {"input", {6, 6, 1}},
      {"layers",
       json::array({
           layer("Conv2D", {{"filters", 3},
                            {"kernel_size", 3},
                            {"strides", 2},
                            {"padding", "same"},
                            {"activation", "tanh"}}),
           layer("AveragePooling2D", {{"pool_size", 2}, {"strides", 1}, {"padding", "same"}}),
           layer("Conv2D", {{"filters", 4}, {"kernel_size", 2}, {"activation", "relu6"}}),
           layer("MaxPooling2D", {{"pool_size", 2}, {"strides", 1}}),
           layer("Activation", {{"activation", "sigmoid"}}),
           layer("Flatten", json::object()),
           layer("Dense", {{"units", 5}, {"activation", "relu"}}),
           layer("Activation", {{"activation", "softmax"}}),
           layer("Dense", {{"units", 3}}),
           layer("Activation", {{"activation", "softmax"}}),
       })}};
  return importers::parse_model(doc, "grad.json");
}

data::Dataset small_images(std::size_t n, std::uint32_t classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  data::Dataset d;
  d.images.count = static_cast<std::uint32_t>(n);
  d.images.rows = d.images.cols = 6;
  d.images.pixels.resize(n * 36);
  for (auto& p : d.images.pixels) p = static_cast<std::uint8_t>(rng() % 4);
  d.labels.resize(n);
  for (auto& l : d.labels) l = static_cast<std::uint8_t>(rng() % classes);
  return d;
}

// Adam's first step (m = (1 - b1) g, v = (1 - b2) g^2, alpha = lr sqrt(1 - b2) / (1 - b1)) moves
// a parameter by -lr r g / (r |g| + eps) with r = sqrt(1 - b2): with a large eps the step is
// proportional to the gradient, so every parameter's step must match the finite-difference
// gradient of the mean loss.
TEST(Trainer, FirstStepMatchesFiniteDifferenceGradientsThroughEveryLayerKind) {
  const ir::Graph m = gradient_model();
  const data::Dataset d = small_images(16, 3, 9);
  TrainOptions o;
  o.epochs = 1;
  o.batch = 16;
  o.seed = 3;
  o.learning_rate = 1.0;
  o.epsilon = 1.0;
  o.input_scale = 1.0f;
  const double r = std::sqrt(1.0 - o.beta2);
  const nn::Weights before = nn::random_weights(m, o.seed);
  const nn::Weights after = train(m, d, o).weights;
  const double h = 1e-3;
  for (std::size_t li = 0; li < m.ops.size(); ++li) {
    if (!m.ops[li].has_weights()) continue;
    std::size_t clear = 0;
    for (int which = 0; which < 2; ++which) {
      const std::size_t n =
          which == 0 ? before.layers[li].kernel.size() : before.layers[li].bias.size();
      for (std::size_t k = 0; k < n; ++k) {
        auto loss_at = [&](double delta) {
          nn::Weights w = before;
          float& p = which == 0 ? w.layers[li].kernel[k] : w.layers[li].bias[k];
          p = static_cast<float>(p + delta);
          return evaluate(m, w, d).loss;
        };
        const double g = (loss_at(h) - loss_at(-h)) / (2 * h);
        const double step = -o.learning_rate * r * g / (r * std::abs(g) + o.epsilon);
        const float b = which == 0 ? before.layers[li].kernel[k] : before.layers[li].bias[k];
        const float a = which == 0 ? after.layers[li].kernel[k] : after.layers[li].bias[k];
        // Float rounding of the loss leaves the difference quotient good to ~1e-5; the float
        // update resolves ~1e-7.
        EXPECT_NEAR(double(a) - double(b), step, 0.03 * std::abs(step) + 1e-6)
            << m.ops[li].name << (which == 0 ? " kernel " : " bias ") << k << " g " << g;
        clear += std::abs(g) > 1e-3 ? 1 : 0;
      }
    }
    // Gradients reach every weighted layer through every layer kind after it.
    EXPECT_GE(clear, 5u) << m.ops[li].name;
  }
}

std::string train_error(const ir::Graph& m, const data::Dataset& d, const TrainOptions& o) {
  try {
    train(m, d, o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(Trainer, RefusesWhatItCannotTrain) {
  const ir::Graph m = gradient_model();
  const data::Dataset d = small_images(4, 3, 1);
  TrainOptions o;
  o.batch = 0;
  EXPECT_THAT(train_error(m, d, o), HasSubstr("batch = 0"));
  o = TrainOptions{};
  o.input_scale = 0.5f;
  const ir::Graph squashed = importers::parse_model(
      json{{"name", "s"},
           {"input", {6, 6, 1}},
           {"layers",
            {{{"class_name", "Activation"}, {"config", {{"activation", "sigmoid"}}}},
             {{"class_name", "Flatten"}, {"config", json::object()}},
             {{"class_name", "Dense"}, {"config", {{"units", 3}, {"activation", "softmax"}}}}}}},
      "s.json");
  EXPECT_THAT(train_error(squashed, d, o), HasSubstr("does not commute with an input scale"));

  data::Dataset bad_label = d;
  bad_label.labels[2] = 3;
  EXPECT_THAT(train_error(m, bad_label, TrainOptions{}), HasSubstr("label 2 = 3"));

  data::Dataset big = small_images(4, 3, 1);
  big.images.rows = big.images.cols = 3;
  big.images.pixels.resize(4 * 9);
  EXPECT_THAT(train_error(m, big, TrainOptions{}), HasSubstr("images are 3x3x1"));

  const ir::Graph no_softmax =
      importers::parse_model(json{{"name", "n"},
                                  {"input", {6, 6, 1}},
                                  {"layers",
                                   {{{"class_name", "Flatten"}, {"config", json::object()}},
                                    {{"class_name", "Dense"}, {"config", {{"units", 3}}}}}}},
                             "n.json");
  EXPECT_THAT(train_error(no_softmax, d, TrainOptions{}), HasSubstr("needs a softmax as the last"));
}

}  // namespace
}  // namespace tpu::train
