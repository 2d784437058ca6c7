// Float reference inference (sw/nn/reference): Keras semantics checked against a naive
// implementation written here from the definitions (TensorFlow's SAME padding, pooling over the
// pixels inside the image, softmax per pixel over channels, NHWC flatten), and the shipped
// weights on the real Fashion-MNIST test set.
#include "sw/nn/reference.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "hw/common/error.h"
#include "sw/data/idx.h"
#include "sw/import/import.h"
#include "sw/ir/graph.h"
#include "sw/nn/weights.h"

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

const std::string kSource = TPUSIM_SOURCE_DIR;

// --- The naive reference: double precision, direct formulas, nothing shared with sw/nn. ------

struct Tensor {
  std::uint32_t h, w, c;
  std::vector<double> v;
  double& at(std::uint32_t y, std::uint32_t x, std::uint32_t ch) { return v[(y * w + x) * c + ch]; }
};

// tf.nn.convolution / pooling with SAME: out = ceil(in / s), the total padding
// max((out - 1) s + k - in, 0) with its smaller half at the top/left.
std::int64_t tf_pad_top(std::uint32_t in, std::uint32_t out, std::uint32_t k, std::uint32_t s,
                        Padding p) {
  if (p == Padding::Valid) return 0;
  const std::int64_t total = std::max<std::int64_t>(std::int64_t(out - 1) * s + k - in, 0);
  return total / 2;
}

void naive_activation(Act a, double l_alpha, Tensor& t) {
  for (std::uint32_t px = 0; px < t.h * t.w; ++px) {
    double* x = &t.v[px * t.c];
    if (a == Act::Softmax) {
      double sum = 0;
      for (std::uint32_t i = 0; i < t.c; ++i) sum += std::exp(x[i]);
      for (std::uint32_t i = 0; i < t.c; ++i) x[i] = std::exp(x[i]) / sum;
      continue;
    }
    for (std::uint32_t i = 0; i < t.c; ++i) {
      switch (a) {
        case Act::Linear: break;
        case Act::Relu: x[i] = x[i] > 0 ? x[i] : 0; break;
        case Act::Relu6: x[i] = std::min(6.0, x[i] > 0 ? x[i] : 0); break;
        case Act::Sigmoid: x[i] = 1 / (1 + std::exp(-x[i])); break;
        case Act::Tanh: x[i] = std::tanh(x[i]); break;
        case Act::LeakyRelu: x[i] = x[i] > 0 ? x[i] : l_alpha * x[i]; break;
        case Act::Elu: x[i] = x[i] > 0 ? x[i] : l_alpha * std::expm1(x[i]); break;
        case Act::Softmax: break;
      }
    }
  }
}

std::vector<double> naive_forward(const Graph& m, const Weights& wts, const float* image) {
  Tensor t{m.input.h, m.input.w, m.input.c, std::vector<double>(image, image + m.input.size())};
  for (std::size_t li = 0; li < m.ops.size(); ++li) {
    const Op& l = m.ops[li];
    Tensor o{l.out.h, l.out.w, l.out.c, std::vector<double>(l.out.size(), 0.0)};
    // The window's extent with its dilation sets the SAME padding (tf.nn.convolution).
    const std::uint32_t ekh = (l.kernel_h - 1) * l.dilation_h + 1;
    const std::uint32_t ekw = (l.kernel_w - 1) * l.dilation_w + 1;
    const std::int64_t pt = tf_pad_top(l.in.h, l.out.h, ekh, l.stride_h, l.padding);
    const std::int64_t pl = tf_pad_top(l.in.w, l.out.w, ekw, l.stride_w, l.padding);
    auto inside = [&](std::int64_t y, std::int64_t x) {
      return y >= 0 && x >= 0 && y < std::int64_t(l.in.h) && x < std::int64_t(l.in.w);
    };
    const LayerWeights& lw = wts.layers[li];
    // Output channel co of a depthwise window reads input channel co / mult only.
    auto depthwise = [&](const Tensor& in, Tensor& out, bool bias) {
      const std::uint32_t mult = l.depth_multiplier;
      for (std::uint32_t oy = 0; oy < out.h; ++oy)
        for (std::uint32_t ox = 0; ox < out.w; ++ox)
          for (std::uint32_t co = 0; co < in.c * mult; ++co) {
            double acc = bias && l.use_bias ? lw.bias[co] : 0.0;
            for (std::uint32_t ky = 0; ky < l.kernel_h; ++ky)
              for (std::uint32_t kx = 0; kx < l.kernel_w; ++kx) {
                const std::int64_t y = std::int64_t(oy) * l.stride_h + ky * l.dilation_h - pt;
                const std::int64_t x = std::int64_t(ox) * l.stride_w + kx * l.dilation_w - pl;
                if (!inside(y, x)) continue;
                acc += in.v[(std::uint64_t(y) * in.w + std::uint64_t(x)) * in.c + co / mult] *
                       lw.kernel[((ky * l.kernel_w + kx) * in.c + co / mult) * mult + co % mult];
              }
            out.v[(std::size_t(oy) * out.w + ox) * in.c * mult + co] = acc;
          }
    };
    switch (l.kind) {
      case OpKind::Conv2D:
        for (std::uint32_t oy = 0; oy < l.out.h; ++oy)
          for (std::uint32_t ox = 0; ox < l.out.w; ++ox)
            for (std::uint32_t co = 0; co < l.out.c; ++co) {
              double s = l.use_bias ? wts.layers[li].bias[co] : 0.0;
              for (std::uint32_t ky = 0; ky < l.kernel_h; ++ky)
                for (std::uint32_t kx = 0; kx < l.kernel_w; ++kx) {
                  const std::int64_t y = std::int64_t(oy) * l.stride_h + ky * l.dilation_h - pt;
                  const std::int64_t x = std::int64_t(ox) * l.stride_w + kx * l.dilation_w - pl;
                  if (!inside(y, x)) continue;
                  for (std::uint32_t ci = 0; ci < l.in.c; ++ci)
                    s += t.at(std::uint32_t(y), std::uint32_t(x), ci) *
                         wts.layers[li]
                             .kernel[((ky * l.kernel_w + kx) * l.in.c + ci) * l.out.c + co];
                }
              o.at(oy, ox, co) = s;
            }
        naive_activation(l.activation, l.alpha, o);
        break;
      case OpKind::MaxPooling2D:
      case OpKind::AveragePooling2D:
        for (std::uint32_t oy = 0; oy < l.out.h; ++oy)
          for (std::uint32_t ox = 0; ox < l.out.w; ++ox)
            for (std::uint32_t ch = 0; ch < l.out.c; ++ch) {
              double best = -std::numeric_limits<double>::infinity(), sum = 0;
              int n = 0;
              for (std::uint32_t ky = 0; ky < l.kernel_h; ++ky)
                for (std::uint32_t kx = 0; kx < l.kernel_w; ++kx) {
                  const std::int64_t y = std::int64_t(oy) * l.stride_h + ky - pt;
                  const std::int64_t x = std::int64_t(ox) * l.stride_w + kx - pl;
                  if (!inside(y, x)) continue;
                  best = std::max(best, t.at(std::uint32_t(y), std::uint32_t(x), ch));
                  sum += t.at(std::uint32_t(y), std::uint32_t(x), ch);
                  ++n;
                }
              o.at(oy, ox, ch) = l.kind == OpKind::MaxPooling2D ? best : sum / n;
            }
        break;
      case OpKind::Activation:
        o.v = t.v;
        naive_activation(l.activation, l.alpha, o);
        break;
      case OpKind::Flatten: o.v = t.v; break;
      case OpKind::Dense:
        for (std::uint32_t j = 0; j < l.out.c; ++j) {
          double s = l.use_bias ? wts.layers[li].bias[j] : 0.0;
          for (std::size_t i = 0; i < t.v.size(); ++i)
            s += t.v[i] * wts.layers[li].kernel[i * l.out.c + j];
          o.v[j] = s;
        }
        naive_activation(l.activation, l.alpha, o);
        break;
      case OpKind::DepthwiseConv2D:
        depthwise(t, o, true);
        naive_activation(l.activation, l.alpha, o);
        break;
      case OpKind::SeparableConv2D: {
        Tensor mid{
            l.out.h, l.out.w, l.in.c * l.depth_multiplier,
            std::vector<double>(std::size_t(l.out.h) * l.out.w * l.in.c * l.depth_multiplier)};
        depthwise(t, mid, false);
        for (std::uint32_t px = 0; px < l.out.h * l.out.w; ++px)
          for (std::uint32_t co = 0; co < l.out.c; ++co) {
            double acc = l.use_bias ? lw.bias[co] : 0.0;
            for (std::uint32_t ci = 0; ci < mid.c; ++ci)
              acc += mid.v[px * mid.c + ci] * lw.pointwise[ci * l.out.c + co];
            o.v[px * l.out.c + co] = acc;
          }
        naive_activation(l.activation, l.alpha, o);
        break;
      }
      case OpKind::PReLU:
        for (std::size_t i = 0; i < o.v.size(); ++i)
          o.v[i] = t.v[i] > 0 ? t.v[i] : lw.alpha[i % l.out.c] * t.v[i];
        break;
      case OpKind::Embedding:
        for (std::uint32_t s = 0; s < l.in.c; ++s)
          for (std::uint32_t d = 0; d < l.filters; ++d)
            o.v[s * l.filters + d] = lw.kernel[std::size_t(t.v[s]) * l.filters + d];
        break;
      case OpKind::LSTM: {
        // Keras's LSTM cell in double: gates i, f, c, o.
        const std::uint32_t T = l.in.w, F = l.in.c, U = l.filters;
        std::vector<double> h(U, 0.0), c(U, 0.0);
        auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
        for (std::uint32_t st = 0; st < T; ++st) {
          std::vector<double> z(4 * U);
          for (std::uint32_t j = 0; j < 4 * U; ++j) {
            double acc = l.use_bias ? lw.bias[j] : 0.0;
            for (std::uint32_t k = 0; k < F; ++k) acc += t.v[st * F + k] * lw.kernel[k * 4 * U + j];
            for (std::uint32_t k = 0; k < U; ++k) acc += h[k] * lw.recurrent[k * 4 * U + j];
            z[j] = acc;
          }
          for (std::uint32_t u = 0; u < U; ++u) {
            c[u] = sig(z[U + u]) * c[u] + sig(z[u]) * std::tanh(z[2 * U + u]);
            h[u] = sig(z[3 * U + u]) * std::tanh(c[u]);
          }
          if (l.return_sequences)
            for (std::uint32_t u = 0; u < U; ++u) o.v[st * U + u] = h[u];
        }
        if (!l.return_sequences) o.v = h;
        break;
      }
      default:  // graph layers have their own tests (graph_test.cpp)
        ADD_FAILURE() << "the naive reference runs chains of the classes above only";
        break;
    }
    t = std::move(o);
  }
  return t.v;
}

// Uniform in [lo, hi) from the top 53 bits (the same numbers on every platform).
float uniform(std::mt19937_64& rng, double lo, double hi) {
  return static_cast<float>(lo + (hi - lo) * double(rng() >> 11) * 0x1.0p-53);
}

Weights random_with_biases(const Graph& m, std::uint64_t seed) {
  Weights w = random_weights(m, seed);
  std::mt19937_64 rng(seed + 1);
  for (auto& lw : w.layers)
    for (float& b : lw.bias) b = uniform(rng, -0.5, 0.5);
  return w;
}

Graph model_of(json layers, json input) {
  return parse_model(
      json{{"name", "t"}, {"input", std::move(input)}, {"layers", std::move(layers)}}, "test.json");
}

json layer(const std::string& cls, json config) {
  return json{{"class_name", cls}, {"config", std::move(config)}};
}

void expect_matches_naive(const Graph& m, const Weights& w, std::size_t images,
                          std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> in(images * m.input.size());
  for (float& x : in) x = uniform(rng, -2.0, 2.0);
  const std::vector<float> got = forward_float(m, w, in.data(), images);
  ASSERT_EQ(got.size(), images * m.output().size());
  for (std::size_t n = 0; n < images; ++n) {
    const std::vector<double> want = naive_forward(m, w, in.data() + n * m.input.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[n * want.size() + i], want[i], 1e-5 * (1 + std::abs(want[i])))
          << "image " << n << " output " << i;
  }
}

TEST(FloatReference, StridedSameConvolutionsPoolingAndAllActivationsMatchTheDefinitions) {
  const Graph m = model_of(
      json::array({
          layer("Conv2D", {{"filters", 5},
                           {"kernel_size", 3},
                           {"strides", 2},
                           {"padding", "same"},
                           {"activation", "relu"}}),
          layer("AveragePooling2D", {{"pool_size", 2}, {"strides", 1}, {"padding", "same"}}),
          layer("Conv2D", {{"filters", 6},
                           {"kernel_size", {2, 3}},
                           {"strides", {1, 2}},
                           {"activation", "tanh"}}),
          layer("MaxPooling2D", {{"pool_size", 3}, {"strides", 2}, {"padding", "same"}}),
          layer("Activation", {{"activation", "sigmoid"}}),
          layer("Conv2D",
                {{"filters", 4}, {"kernel_size", 1}, {"use_bias", false}, {"activation", "relu6"}}),
          layer("Flatten", json::object()),
          layer("Dense", {{"units", 7}, {"activation", "relu6"}}),
          layer("Dense", {{"units", 9}}),
          layer("Activation", {{"activation", "softmax"}}),
      }),
      json::array({9, 10, 3}));
  expect_matches_naive(m, random_with_biases(m, 11), 4, 12);
}

TEST(FloatReference, ValidPoolingAndDenseActivationsMatchTheDefinitions) {
  const Graph m = model_of(
      json::array({
          layer("Conv2D", {{"filters", 37}, {"kernel_size", 3}, {"padding", "same"}}),
          layer("AveragePooling2D", {{"pool_size", 2}}),
          layer("Activation", {{"activation", "relu"}}),
          layer("Conv2D",
                {{"filters", 3}, {"kernel_size", 3}, {"strides", 2}, {"activation", "sigmoid"}}),
          layer("MaxPooling2D", {{"pool_size", 2}}),
          layer("Activation", {{"activation", "tanh"}}),
          layer("Flatten", json::object()),
          layer("Dense", {{"units", 4}, {"activation", "tanh"}}),
          layer("Dense", {{"units", 3}, {"activation", "softmax"}}),
      }),
      json::array({12, 12, 2}));
  expect_matches_naive(m, random_with_biases(m, 21), 3, 22);
}

TEST(FloatReference, DilatedDepthwiseSeparableAndParametricActivationsMatchTheDefinitions) {
  const Graph m = model_of(
      json::array({
          layer("Conv2D", {{"filters", 4}, {"kernel_size", 3}, {"dilation_rate", 2}}),
          layer("DepthwiseConv2D", {{"kernel_size", 3},
                                    {"strides", 2},
                                    {"padding", "same"},
                                    {"depth_multiplier", 2},
                                    {"activation", "relu6"}}),
          layer(
              "SeparableConv2D",
              {{"filters", 5}, {"kernel_size", 2}, {"dilation_rate", {2, 1}}, {"padding", "same"}}),
          layer("PReLU", {{"shared_axes", {1, 2}}}),
          layer("ELU", {{"alpha", 0.7}}),
          layer("LeakyReLU", {{"negative_slope", 0.2}}),
          layer("Flatten", json::object()),
          layer("Dense", {{"units", 6}, {"activation", "elu"}}),
      }),
      json::array({13, 11, 3}));
  Weights w = random_with_biases(m, 41);
  std::mt19937_64 rng(42);
  for (float& a : w.layers[3].alpha) a = uniform(rng, -0.5, 0.5);
  expect_matches_naive(m, w, 3, 43);
}

TEST(FloatReference, StackedLstmsMatchKerassCell) {
  const Graph m =
      model_of(json::array({layer("LSTM", {{"units", 7}, {"return_sequences", true}}),
                            layer("LSTM", {{"units", 4}}), layer("Dense", {{"units", 3}})}),
               json::array({6, 5}));
  expect_matches_naive(m, random_with_biases(m, 51), 3, 52);
}

TEST(FloatReference, AnEmbeddingLooksUpEachTokensRowAndRefusesAnIdOutsideItsTable) {
  const Graph m = model_of(json::array({layer("Embedding", {{"input_dim", 11}, {"output_dim", 3}}),
                                        layer("Flatten", json::object())}),
                           json::array({4}));
  const Weights w = random_weights(m, 61);
  const std::vector<float> ids = {3, 0, 10, 3};
  const auto got = forward_float(m, w, ids.data(), 1);
  const auto want = naive_forward(m, w, ids.data());
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(double(got[i]), want[i]);
  const std::vector<float> bad = {3, 11, 0, 0};
  EXPECT_THROW(forward_float(m, w, bad.data(), 1), InputError);
}

TEST(FloatReference, ShippedModelMatchesTheDefinitions) {
  const Graph m = load_model(kSource + "/configs/models/fashion_mnist_cnn.json");
  expect_matches_naive(m, random_with_biases(m, 31), 2, 32);
}

// One 1-channel convolution with an all-ones kernel and no bias: each output is the sum of the
// input pixels its window covers inside the image.
std::vector<float> box_sums(std::uint32_t side, std::uint32_t k, std::uint32_t s,
                            const std::vector<float>& in) {
  const Graph m = model_of(json::array({layer("Conv2D", {{"filters", 1},
                                                         {"kernel_size", k},
                                                         {"strides", s},
                                                         {"padding", "same"},
                                                         {"use_bias", false}})}),
                           json::array({side, side, 1}));
  Weights w = random_weights(m, 1);
  std::fill(w.layers[0].kernel.begin(), w.layers[0].kernel.end(), 1.0f);
  return forward_float(m, w, in.data(), 1);
}

std::vector<float> distinct_pixels(std::uint32_t n) {
  std::vector<float> v(n);
  for (std::uint32_t i = 0; i < n; ++i) v[i] = float(1u << (i % 20));
  return v;
}

TEST(FloatReference, SamePaddingPutsTheOddRowAndColumnAtTheBottomRight) {
  const std::uint32_t side = 4;
  const auto in = distinct_pixels(side * side);
  const auto out = box_sums(side, 2, 1, in);
  ASSERT_EQ(out.size(), side * side);
  auto px = [&](std::uint32_t y, std::uint32_t x) { return in[y * side + x]; };
  // TensorFlow pads k - 1 = 1 row: none at the top, one at the bottom.
  EXPECT_EQ(out[0], px(0, 0) + px(0, 1) + px(1, 0) + px(1, 1));
  EXPECT_EQ(out[side * side - 1], px(3, 3));
}

TEST(FloatReference, StridedSamePaddingSplitsTheTotalPaddingAsTensorFlow) {
  // in 6, k 3, stride 2: out 3, total padding (3 - 1) * 2 + 3 - 6 = 1, so the top/left gets
  // 1 / 2 = 0 rows (not (k - 1) / 2 = 1 as with stride 1).
  const std::uint32_t side = 6;
  const auto in = distinct_pixels(side * side);
  const auto out = box_sums(side, 3, 2, in);
  ASSERT_EQ(out.size(), 9u);
  float first = 0, last = 0;
  for (std::uint32_t y = 0; y < 3; ++y)
    for (std::uint32_t x = 0; x < 3; ++x) first += in[y * side + x];
  for (std::uint32_t y = 4; y < 6; ++y)
    for (std::uint32_t x = 4; x < 6; ++x) last += in[y * side + x];
  EXPECT_EQ(out[0], first);
  EXPECT_EQ(out[8], last);
}

TEST(FloatReference, SameAveragePoolingDividesByThePixelsInside) {
  const Graph m =
      model_of(json::array({layer("AveragePooling2D", {{"pool_size", 2}, {"padding", "same"}})}),
               json::array({3, 3, 1}));
  const std::vector<float> in = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  const auto out = forward_float(m, Weights{std::vector<LayerWeights>(1)}, in.data(), 1);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], (1 + 2 + 8 + 16) / 4.0f);
  EXPECT_EQ(out[1], (4 + 32) / 2.0f);
  EXPECT_EQ(out[2], (64 + 128) / 2.0f);
  EXPECT_EQ(out[3], 256.0f);
}

TEST(FloatReference, SoftmaxOfHugeLogitsStaysFiniteAndSumsToOne) {
  const Graph m = model_of(json::array({layer("Activation", {{"activation", "softmax"}})}),
                           json::array({1, 2, 3}));
  const std::vector<float> in = {1e4f, 1e4f - 1, -1e4f, 88.0f, 89.0f, 90.0f};
  const auto out = forward_float(m, Weights{std::vector<LayerWeights>(1)}, in.data(), 1);
  for (std::size_t px = 0; px < 2; ++px) {
    float sum = 0;
    for (std::size_t c = 0; c < 3; ++c) {
      EXPECT_TRUE(std::isfinite(out[px * 3 + c]));
      sum += out[px * 3 + c];
    }
    EXPECT_NEAR(sum, 1.0f, 1e-6f);
  }
  EXPECT_NEAR(out[0], 1 / (1 + std::exp(-1.0)), 1e-6);
}

TEST(FloatReference, FlattenIsRowColumnChannelOrder) {
  const Graph m = model_of(json::array({layer("Flatten", json::object()),
                                        layer("Dense", {{"units", 1}, {"use_bias", false}})}),
                           json::array({2, 3, 4}));
  Weights w = random_weights(m, 1);
  std::fill(w.layers[1].kernel.begin(), w.layers[1].kernel.end(), 0.0f);
  const std::size_t y = 1, x = 2, c = 3;
  w.layers[1].kernel[(y * 3 + x) * 4 + c] = 1.0f;  // Keras: Flatten of NHWC is (h, w, c)
  std::vector<float> in(24);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = float(i + 1);
  const auto out = forward_float(m, w, in.data(), 1);
  EXPECT_EQ(out[0], in[(y * 3 + x) * 4 + c]);
}

TEST(FloatReference, WeightsOfAnotherModelAreRefused) {
  const Graph m = load_model(kSource + "/configs/models/fashion_mnist_cnn.json");
  Weights w = random_weights(m, 1);
  w.layers[4].kernel.resize(10);
  const std::vector<float> in(m.input.size());
  EXPECT_THROW(forward_float(m, w, in.data(), 1), InputError);
}

TEST(ArgmaxRows, PicksTheFirstOfEqualMaxima) {
  const std::vector<float> v = {1, 3, 3, 0, 9, 2, -1, -1, -1};
  EXPECT_EQ(argmax_rows(v, 3), (std::vector<std::uint32_t>{1, 1, 0}));
  EXPECT_THROW(argmax_rows(v, 4), std::invalid_argument);
}

// The weights tpusim ships must classify the Fashion-MNIST test set at least as well as the
// issue demands (>= 90% top-1), and exactly as configs/weights/fashion_mnist_cnn.json records.
TEST(ShippedWeights, ReachNinetyPercentTop1OnTheTestSetAsRecorded) {
  const Graph m = load_model(kSource + "/configs/models/fashion_mnist_cnn.json");
  const Weights w = load_weights(kSource + "/configs/weights/fashion_mnist_cnn.bin", m);
  const data::Dataset d = data::load_fashion_mnist(data::kDefaultFashionMnistDir, "t10k");
  // The tutorial feeds raw 0-255 pixels cast to float.
  const std::vector<float> images(d.images.pixels.begin(), d.images.pixels.end());
  const auto top1 =
      argmax_rows(forward_float(m, w, images.data(), d.images.count), m.output().size());
  std::size_t correct = 0;
  for (std::size_t i = 0; i < top1.size(); ++i) correct += top1[i] == d.labels[i] ? 1 : 0;
  EXPECT_GE(double(correct), 0.90 * d.images.count);

  std::ifstream meta_file(kSource + "/configs/weights/fashion_mnist_cnn.json");
  const json meta = json::parse(meta_file);
  EXPECT_EQ(correct, meta.at("float_reference").at("test_correct").get<std::size_t>());
  EXPECT_EQ(d.images.count, meta.at("float_reference").at("test_images").get<std::size_t>());
}

}  // namespace
}  // namespace tpu::nn
