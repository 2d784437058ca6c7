// The quantized reference's fast kernels (sw/nn/fast_kernels.h: oneDNN's int8 sums, vectorised
// requantization and pooling) against its plain loops, the definition they must keep: the same
// bits on every model, shape and chip type below, in chunks or not.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "sw/compiler/compiler.h"
#include "sw/compiler/rewrite.h"
#include "sw/import/import.h"
#include "sw/nn/fast_kernels.h"
#include "sw/nn/quantized.h"
#include "sw/nn/weights.h"
#include "unit/import/layer_json.h"

namespace tpu::nn {
namespace {

using test::layer;

std::vector<float> random_inputs(const ir::Graph& g, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(n * g.input.size());
  if (ir::input_is_token_ids(g)) {
    for (float& v : x) v = static_cast<float>(rng() % 64);  // token ids within every table
  } else {
    std::uniform_real_distribution<float> pixel(-1.0f, 2.0f);
    for (float& v : x) v = pixel(rng);
  }
  return x;
}

// Bit equality of two runs' outputs (NaN payloads included).
void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  std::size_t differ = 0, first = a.size();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      if (differ++ == 0) first = i;
    }
  EXPECT_EQ(differ, 0u) << "first at element " << first << ": " << a[first] << " vs " << b[first];
}

void expect_fast_equals_plain(const ir::Graph& g, DType type, std::uint32_t tile_rows,
                              std::size_t n) {
  const Weights w = random_weights(g, 7);
  const auto cal = random_inputs(g, 8, 1);
  const QuantizedModel q = compiler::prepare(g, w, type, tile_rows, cal.data(), 8);
  const auto x = random_inputs(g, n, 2);
  SCOPED_TRACE(g.name + " on " + std::string(name_of(type)) + ", oneDNN int8 " +
               (fast::onednn_int8() ? "on" : "off"));
  expect_same_bits(forward_quantized(q, x.data(), n, Kernels::Fast),
                   forward_quantized(q, x.data(), n, Kernels::Plain));
}

ir::Graph shipped(const std::string& name) {
  return compiler::remove_identities(
      importers::load_model(std::string(TPUSIM_SOURCE_DIR) + "/configs/models/" + name + ".json"));
}

// Strided, dilated and "same" convolutions, a ReLU6, a "same" max pooling and a Dense: the
// shapes whose zeros below and right the fast path must place as the plain loops do.
ir::Graph odd_convolutions() {
  nlohmann::json layers = nlohmann::json::array();
  layers.push_back(layer("Conv2D", {{"name", "c1"},
                                    {"filters", 13},
                                    {"kernel_size", {3, 3}},
                                    {"strides", {2, 2}},
                                    {"padding", "same"},
                                    {"activation", "relu"}}));
  layers.push_back(layer("Conv2D", {{"name", "c2"},
                                    {"filters", 24},
                                    {"kernel_size", {3, 2}},
                                    {"dilation_rate", {2, 2}},
                                    {"padding", "same"},
                                    {"activation", "relu6"}}));
  layers.push_back(
      layer("MaxPooling2D",
            {{"name", "p"}, {"pool_size", {3, 3}}, {"strides", {2, 2}}, {"padding", "same"}}));
  layers.push_back(layer("Conv2D", {{"name", "c3"},
                                    {"filters", 9},
                                    {"kernel_size", {2, 2}},
                                    {"strides", {3, 3}},
                                    {"padding", "valid"}}));
  layers.push_back(layer("Flatten", {{"name", "f"}}));
  layers.push_back(layer("Dense", {{"name", "d"}, {"units", 7}, {"activation", "softmax"}}));
  const nlohmann::json doc{
      {"name", "odd_convolutions"}, {"input", {17, 15, 3}}, {"layers", layers}};
  return compiler::remove_identities(importers::parse_model(doc, "odd_convolutions"));
}

TEST(FastReference, EqualsThePlainLoopsOnTheShippedCnnInChunks) {
  // 300 images: more than one chunk of the CNN (chunk_images).
  const ir::Graph g = shipped("fashion_mnist_cnn");
  expect_fast_equals_plain(g, DType::Int8, 256, 300);
  expect_fast_equals_plain(g, DType::Bf16, 128, 20);
}

TEST(FastReference, EqualsThePlainLoopsOnAnMlpAResidualNetworkAndAnLstm) {
  for (const char* name : {"mlp", "resnet_mini", "lstm"}) {
    const ir::Graph g = shipped(name);
    expect_fast_equals_plain(g, DType::Int8, 256, 12);
    expect_fast_equals_plain(g, DType::Bf16, 128, 4);
  }
}

TEST(FastReference, EqualsThePlainLoopsOnStridedDilatedAndSamePaddedConvolutions) {
  const ir::Graph g = odd_convolutions();
  expect_fast_equals_plain(g, DType::Int8, 256, 9);
  expect_fast_equals_plain(g, DType::Int8, 16, 9);
  expect_fast_equals_plain(g, DType::Bf16, 16, 5);
}

TEST(FastReference, ChunksGiveTheBitsOfOneImageAtATime) {
  const ir::Graph g = shipped("fashion_mnist_cnn");
  const Weights w = random_weights(g, 3);
  const auto cal = random_inputs(g, 8, 1);
  const QuantizedModel q = compiler::prepare(g, w, DType::Int8, 256, cal.data(), 8);
  const std::size_t n = chunk_images(q) + 3;
  ASSERT_LT(chunk_images(q), n);
  const auto x = random_inputs(g, n, 4);
  const auto all = forward_quantized(q, x.data(), n);
  const std::size_t k = q.graph.output().size(), in = q.graph.input.size();
  for (std::size_t i : {std::size_t{0}, chunk_images(q) - 1, chunk_images(q), n - 1}) {
    const auto one = forward_quantized(q, x.data() + i * in, 1);
    EXPECT_EQ(std::memcmp(one.data(), all.data() + i * k, k * sizeof(float)), 0) << "image " << i;
  }
}

// The int32 sums of a convolution as the plain loops define them: per output pixel and column,
// the window's products in any order (wrapping int32 sums do not depend on it).
std::vector<std::int32_t> plain_sums(const fast::ConvShape& s, const std::vector<std::int8_t>& in,
                                     const std::vector<std::int8_t>& w) {
  std::vector<std::int32_t> acc(s.n * s.oh * s.ow * s.oc, 0);
  for (std::size_t b = 0; b < s.n; ++b)
    for (std::uint32_t y = 0; y < s.oh; ++y)
      for (std::uint32_t x = 0; x < s.ow; ++x)
        for (std::uint32_t ky = 0; ky < s.kh; ++ky)
          for (std::uint32_t kx = 0; kx < s.kw; ++kx) {
            const std::int64_t iy = std::int64_t{y} * s.sh + std::int64_t{ky} * s.dh - s.pt;
            const std::int64_t ix = std::int64_t{x} * s.sw + std::int64_t{kx} * s.dw - s.pl;
            if (iy < 0 || iy >= s.ih || ix < 0 || ix >= s.iw) continue;
            for (std::uint32_t ci = 0; ci < s.ic; ++ci)
              for (std::uint32_t c = 0; c < s.oc; ++c)
                acc[((b * s.oh + y) * s.ow + x) * s.oc + c] +=
                    int{in[((b * s.ih + static_cast<std::size_t>(iy)) * s.iw +
                            static_cast<std::size_t>(ix)) *
                               s.ic +
                           ci]} *
                    w[((std::size_t{ky} * s.kw + kx) * s.ic + ci) * s.oc + c];
          }
  return acc;
}

// oneDNN's fp32 convolution of the int8 values (the route on CPUs without VNNI), on any CPU: the
// plain loops' sums where the kernel keeps every sum below 2^24, refused where it does not.
TEST(FastReference, Fp32ConvolutionGivesTheExactInt8SumsOrIsNotTaken) {
  fast::ConvShape s;
  s.n = 3, s.ih = 9, s.iw = 8, s.ic = 5, s.kh = 3, s.kw = 3, s.sh = 2, s.sw = 1, s.pt = 1, s.pl = 1,
  s.oh = 5, s.ow = 8, s.oc = 11;
  std::mt19937_64 rng(16);
  std::vector<std::int8_t> in(s.n * s.ih * s.iw * s.ic), w(std::size_t{s.kh} * s.kw * s.ic * s.oc);
  for (auto& v : in) v = static_cast<std::int8_t>(static_cast<int>(rng() % 256) - 128);
  for (auto& v : w) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  fast::ConvS8 conv(s, w.data(), fast::ConvRoute::F32);
  if (fast::onednn_built()) {
    ASSERT_TRUE(conv.ok()) << "45 taps of at most 127: 128 * 45 * 127 < 2^24";
    std::vector<std::int32_t> acc(s.n * s.oh * s.ow * s.oc);
    conv.run(in.data(), s.n, acc.data());
    EXPECT_EQ(acc, plain_sums(s, in, w));
  }
  // A 1 x 1 convolution of 1100 channels of weights 127: 128 * 1100 * 127 > 2^24.
  fast::ConvShape wide;
  wide.n = 1, wide.ic = 1100, wide.oc = 2;
  const std::vector<std::int8_t> big(std::size_t{wide.ic} * wide.oc, 127);
  EXPECT_FALSE(fast::ConvS8(wide, big.data(), fast::ConvRoute::F32).ok());
}

// numerics::requantize(numerics::add_bias(...)) at the edges of every step: saturating biases,
// left and right shifts up to 31, the doubling multiply's one overflow (INT32_MIN squared), ties.
TEST(FastReference, VectorisedRequantizationIsTheNumericsDefinition) {
  constexpr std::int32_t kMin = std::numeric_limits<std::int32_t>::min();
  constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max();
  std::mt19937_64 rng(11);
  const std::size_t oc = 8 * 37 + 5;  // whole vectors and a tail
  const std::size_t pixels = 4000;
  std::vector<std::int32_t> bias(oc), mult(oc), shift(oc), acc(pixels * oc);
  const std::int32_t edges[] = {kMin, kMin + 1, -1, 0, 1, kMax - 1, kMax, 1 << 30, -(1 << 30)};
  auto any = [&] {
    const std::uint64_t r = rng();
    if (r % 4 == 0) return edges[(r >> 8) % std::size(edges)];
    if (r % 4 == 1)
      return static_cast<std::int32_t>(static_cast<std::int64_t>(r >> 40) - (1 << 23));
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(r >> 16));
  };
  for (std::size_t c = 0; c < oc; ++c) {
    bias[c] = c % 3 == 0 ? any() : static_cast<std::int32_t>(rng() % 2001) - 1000;
    mult[c] = c % 5 == 0 ? any() : static_cast<std::int32_t>((1u << 30) + rng() % (1u << 30));
    shift[c] = static_cast<std::int32_t>(rng() % 63) - 31;
  }
  mult[16 * 8 + 1] = kMin;
  for (auto& a : acc) a = any();
  // The first blocks of 16 channels with right shifts only and multipliers other than
  // INT32_MIN (requantize16's int32 lanes), the rest mixed (int64 lanes).
  for (std::size_t c = 0; c < 16 * 8; ++c) {
    shift[c] = static_cast<std::int32_t>(rng() % 32);
    if (mult[c] == kMin) mult[c] = kMax;
  }
  // Every vectorised loop this CPU can run (AVX-512's, AVX2's), and requantize_rows's choice.
  for (const fast::Isa isa : {fast::Isa::Avx2, fast::Isa::Avx512, fast::Isa::Scalar}) {
    if (!fast::cpu_has(isa)) continue;
    SCOPED_TRACE(isa == fast::Isa::Avx512 ? "AVX-512 loop"
                 : isa == fast::Isa::Avx2 ? "AVX2 loop"
                                          : "requantize_rows's choice");
    for (bool relu : {false, true}) {
      std::vector<std::int8_t> fast_out(acc.size()), plain_out(acc.size());
      if (isa == fast::Isa::Scalar)
        fast::requantize_rows(acc.data(), pixels, oc, bias.data(), mult.data(), shift.data(), relu,
                              fast_out.data());
      else
        fast::requantize_rows_on(isa, acc.data(), pixels, oc, bias.data(), mult.data(),
                                 shift.data(), relu, fast_out.data());
      fast::requantize_rows_scalar(acc.data(), pixels, oc, bias.data(), mult.data(), shift.data(),
                                   relu, plain_out.data());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < acc.size(); ++i) differ += fast_out[i] != plain_out[i];
      EXPECT_EQ(differ, 0u) << "relu " << relu;
    }
  }
}

}  // namespace
}  // namespace tpu::nn
