// The trainer (sw/train): the training reference's step in a Keras loop, deterministic for a
// seed, the input-scale fold, and refusals of what it cannot train. (Its gradients are the
// reference's: tb/unit/nn/training_reference_test.cpp and tb/unit/ir/autodiff_test.cpp check
// them against float64 and finite differences.)
#include "sw/train/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "hw/common/error.h"
#include "sw/data/idx.h"
#include "sw/data/shuffle.h"
#include "sw/import/import.h"
#include "sw/ir/autodiff.h"
#include "sw/ir/graph.h"
#include "sw/nn/reference.h"
#include "sw/nn/training_reference.h"
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
  // Not bit for bit: the MXU reads bf16(pixel · s) and bf16(kernel) while training, bf16(pixel)
  // and bf16(kernel · s) after the fold; each rounding moves a product by up to 2^-8.
  EXPECT_NEAR(raw.loss, *r.epochs[0].val_loss, 0.01 * *r.epochs[0].val_loss);
  EXPECT_NEAR(raw.accuracy, *r.epochs[0].val_accuracy, 4.0 / kSubset);
  // The trainer's loss and the float reference agree on the classification.
  std::vector<float> images(d.images.pixels.begin(), d.images.pixels.end());
  const auto top1 = nn::argmax_rows(nn::forward_float(m, r.weights, images.data(), d.images.count),
                                    m.output().size());
  std::size_t correct = 0;
  for (std::size_t i = 0; i < top1.size(); ++i) correct += top1[i] == d.labels[i] ? 1 : 0;
  EXPECT_NEAR(double(correct) / kSubset, raw.accuracy, 4.0 / kSubset);
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

// Every trainable layer kind and activation, on small hand-made images.
ir::Graph small_model() {
  auto layer = [](const std::string& cls, json cfg) {
    return json{{"class_name", cls}, {"config", std::move(cfg)}};
  };
  const json doc = {
      {"name", "small"},
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
           layer("Dense", {{"units", 3}}),
           layer("Activation", {{"activation", "softmax"}}),
       })}};
  return importers::parse_model(doc, "small.json");
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

// One trainer: an epoch of `train` is nn::reference_step on its batches in the shuffled order,
// bit for bit — the arithmetic tpusim fit checks the chip against.
TEST(Trainer, EachStepIsTheTrainingReferenceStep) {
  const ir::Graph m = small_model();
  const data::Dataset d = small_images(24, 3, 9);
  TrainOptions o;
  o.epochs = 1;
  o.batch = 8;
  o.seed = 3;
  o.input_scale = 0.25f;
  const nn::Weights got = train(m, d, o).weights;

  const ir::TrainingGraph t = ir::differentiate(m);
  nn::Optimizer adam;
  nn::TrainState s = nn::initial_state(m, t, nn::random_weights(m, o.seed), adam);
  std::vector<std::size_t> order(24);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937_64 rng(o.seed ^ data::kShuffleStream);
  data::shuffle(order, rng);
  for (std::size_t b = 0; b < 3; ++b) {
    std::vector<float> images;
    std::vector<std::int32_t> labels;
    for (std::size_t i = b * 8; i < b * 8 + 8; ++i) {
      for (std::size_t k = 0; k < 36; ++k)
        images.push_back(static_cast<float>(d.images.pixels[order[i] * 36 + k]) * 0.25f);
      labels.push_back(d.labels[order[i]]);
    }
    nn::reference_step(m, t, nn::TrainPlan{128, 1, 0, {}}, adam, s, images.data(), labels.data(),
                       8);
  }
  for (float& k : s.weights.layers[0].kernel) k *= 0.25f;  // the fold
  EXPECT_TRUE(same_bits(got, s.weights));
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
  const ir::Graph m = small_model();
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
  EXPECT_THAT(train_error(no_softmax, d, TrainOptions{}), HasSubstr("fit trains a classifier"));
}

}  // namespace
}  // namespace tpu::train
