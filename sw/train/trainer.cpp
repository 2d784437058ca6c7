#include "sw/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>

#include "hw/common/error.h"
#include "sw/data/shuffle.h"
#include "sw/ir/autodiff.h"
#include "sw/nn/training_reference.h"

namespace tpu::train {
namespace {

using ir::Act;
using ir::Op;
using ir::OpKind;

// The plan of a step: the bf16 chips' 128-row MXU tiles, one replica, the whole batch in one
// pass. Evaluation runs its forward passes 1,000 images at a time (the forward of one image
// does not depend on the others).
constexpr std::uint32_t kTileRows = 128;
constexpr std::uint32_t kEvaluationPass = 1000;

void check_trainable(const ir::Graph& m, const data::Dataset& d, const char* role) {
  if (m.ops.empty()) throw InputError(fmt::format("{}: the model has no layers", m.file));
  const ir::Shape out = m.output();
  const ir::Shape image{d.images.rows, d.images.cols, 1};
  if (!(m.input == image))
    throw InputError(fmt::format("{}: input {}x{}x{}, but the {} images are {}x{}x1", m.file,
                                 m.input.h, m.input.w, m.input.c, role, d.images.rows,
                                 d.images.cols));
  if (d.images.count == 0 || d.labels.size() != d.images.count ||
      d.images.pixels.size() != std::size_t{d.images.count} * d.images.rows * d.images.cols)
    throw InputError(
        fmt::format("{} set: {} images, {} labels, {} pixels (needs at least one "
                    "image, one label per image)",
                    role, d.images.count, d.labels.size(), d.images.pixels.size()));
  for (std::size_t i = 0; i < d.labels.size(); ++i)
    if (d.labels[i] >= out.c)
      throw InputError(fmt::format("{} set: label {} = {} (model {} has {} classes)", role, i,
                                   d.labels[i], m.name, out.c));
}

// Where an input scale can be folded: the first weighted layer, reached only through layers
// that commute with a positive factor (pooling, Flatten, relu, linear).
std::size_t scale_target(const ir::Graph& m) {
  for (std::size_t i = 0; i < m.ops.size(); ++i) {
    const Op& l = m.ops[i];
    if (l.has_weights()) return i;
    const bool homogeneous =
        l.kind != OpKind::Activation || l.activation == Act::Relu || l.activation == Act::Linear;
    if (!homogeneous)
      throw InputError(
          fmt::format("{}: layer {} ({} {}) before the first weighted layer does not "
                      "commute with an input scale (training option input_scale "
                      "must be 1 for this model)",
                      m.file, l.name, ir::name_of(l.kind), ir::name_of(l.activation)));
  }
  throw InputError(fmt::format("{}: no weighted layer to train", m.file));
}

// Images `index` of `d` as float pixels times `scale` (the tutorial casts the pixel values to
// float32), and their labels.
void load(const data::Dataset& d, const std::size_t* index, std::size_t n, float scale,
          std::vector<float>& images, std::vector<std::int32_t>& labels) {
  const std::size_t px = std::size_t{d.images.rows} * d.images.cols;
  images.resize(n * px);
  labels.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* src = d.images.pixels.data() + index[i] * px;
    for (std::size_t k = 0; k < px; ++k) images[i * px + k] = static_cast<float>(src[k]) * scale;
    labels[i] = static_cast<std::int32_t>(d.labels[index[i]]);
  }
}

Evaluation run_evaluation(const ir::Graph& m, const ir::TrainingGraph& t, const nn::Weights& w,
                          const data::Dataset& d, float scale) {
  const nn::TrainPlan plan{kTileRows, 1, kEvaluationPass, {}};
  std::vector<std::size_t> index(std::min<std::size_t>(d.images.count, kEvaluationPass));
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  double loss = 0.0, correct = 0.0;
  for (std::size_t first = 0; first < d.images.count; first += kEvaluationPass) {
    const std::size_t n = std::min<std::size_t>(kEvaluationPass, d.images.count - first);
    index.resize(n);
    std::iota(index.begin(), index.end(), first);
    load(d, index.data(), n, scale, images, labels);
    const nn::StepRecords r =
        nn::reference_evaluate(m, t, plan, w, images.data(), labels.data(), n);
    for (std::size_t i = 0; i < n; ++i) loss += r.loss[i], correct += r.correct[i];
  }
  const auto n = static_cast<double>(d.images.count);
  return {loss / n, correct / n};
}

}  // namespace

TrainResult train(const ir::Graph& m, const data::Dataset& data, const TrainOptions& opt,
                  const data::Dataset* validation, const ProgressFn& progress) {
  auto bad = [](const char* key, double v, const char* allowed) {
    return InputError(fmt::format("training option {} = {} ({})", key, v, allowed));
  };
  if (opt.epochs == 0) throw bad("epochs", opt.epochs, "must be >= 1");
  if (opt.batch == 0) throw bad("batch", opt.batch, "must be >= 1");
  if (!(opt.learning_rate > 0.0) || !std::isfinite(opt.learning_rate))
    throw bad("learning_rate", opt.learning_rate, "must be a finite number > 0");
  if (!(opt.beta1 >= 0.0 && opt.beta1 < 1.0)) throw bad("beta1", opt.beta1, "must be in [0, 1)");
  if (!(opt.beta2 >= 0.0 && opt.beta2 < 1.0)) throw bad("beta2", opt.beta2, "must be in [0, 1)");
  if (!(opt.epsilon > 0.0) || !std::isfinite(opt.epsilon))
    throw bad("epsilon", opt.epsilon, "must be a finite number > 0");
  if (!(opt.input_scale > 0.0f) || !std::isfinite(opt.input_scale))
    throw bad("input_scale", opt.input_scale, "must be a finite number > 0");
  const ir::TrainingGraph t = ir::differentiate(m);  // names every layer it cannot train
  check_trainable(m, data, "training");
  if (validation) check_trainable(m, *validation, "validation");
  const std::size_t fold_into = scale_target(m);

  nn::Optimizer adam;
  adam.kind = nn::OptimizerKind::Adam;
  adam.learning_rate = static_cast<float>(opt.learning_rate);
  adam.beta1 = static_cast<float>(opt.beta1);
  adam.beta2 = static_cast<float>(opt.beta2);
  adam.epsilon = static_cast<float>(opt.epsilon);
  nn::TrainState state = nn::initial_state(m, t, nn::random_weights(m, opt.seed), adam);
  const nn::TrainPlan plan{kTileRows, 1, 0, {}};

  std::mt19937_64 shuffle_rng(opt.seed ^ data::kShuffleStream);
  const std::size_t n = data.images.count;
  std::vector<std::size_t> order(n);
  const std::uint64_t batches = (n + opt.batch - 1) / opt.batch;
  std::vector<float> images;
  std::vector<std::int32_t> labels;

  TrainResult result;
  for (std::uint32_t epoch = 1; epoch <= opt.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    std::iota(order.begin(), order.end(), std::size_t{0});
    data::shuffle(order, shuffle_rng);  // a new order every epoch, as Keras's fit(shuffle=True)
    double loss_sum = 0.0, correct = 0.0;
    std::size_t seen = 0;
    for (std::uint64_t b = 0; b < batches; ++b) {
      const std::size_t lo = static_cast<std::size_t>(b * opt.batch);
      const std::size_t hi = std::min(n, lo + opt.batch);
      load(data, &order[lo], hi - lo, opt.input_scale, images, labels);
      const nn::StepRecords r =
          nn::reference_step(m, t, plan, adam, state, images.data(), labels.data(), hi - lo);
      for (std::size_t i = 0; i < hi - lo; ++i) loss_sum += r.loss[i], correct += r.correct[i];
      seen += hi - lo;
      if (progress && b + 1 < batches) {
        Progress p;
        p.epoch = epoch;
        p.epochs = opt.epochs;
        p.batch = b + 1;
        p.batches = batches;
        p.loss = loss_sum / static_cast<double>(seen);
        p.accuracy = correct / static_cast<double>(seen);
        progress(p);
      }
    }
    EpochStats st;
    st.epoch = epoch;
    st.loss = loss_sum / static_cast<double>(n);
    st.accuracy = correct / static_cast<double>(n);
    if (validation) {
      const Evaluation e =
          run_evaluation(m, t, nn::weights_with_moving(state), *validation, opt.input_scale);
      st.val_loss = e.loss;
      st.val_accuracy = e.accuracy;
    }
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.epochs.push_back(st);
    if (progress) {
      Progress p;
      p.epoch = epoch;
      p.epochs = opt.epochs;
      p.batch = batches;
      p.batches = batches;
      p.loss = st.loss;
      p.accuracy = st.accuracy;
      p.epoch_done = st;
      progress(p);
    }
  }
  result.weights = nn::weights_with_moving(state);
  // conv(s x) = conv(x) with the kernel times s; the bias is added after the kernel.
  if (opt.input_scale != 1.0f)
    for (float& k : result.weights.layers[fold_into].kernel) k *= opt.input_scale;
  return result;
}

Evaluation evaluate(const ir::Graph& m, const nn::Weights& w, const data::Dataset& data) {
  const ir::TrainingGraph t = ir::differentiate(m);
  check_trainable(m, data, "evaluation");
  return run_evaluation(m, t, w, data, 1.0f);
}

}  // namespace tpu::train
