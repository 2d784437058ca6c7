// The MXU's math core (hw/mxu/systolic_array.h) against a plain reference written here from the
// ISA's MatMul and SetWindow definitions: a triple loop that sums each column in row order,
// starting from zero, and reads windowed rows with the documented index arithmetic. Plus the
// bounds and geometry checks, and the summation-order contract the bf16 reference relies on.
#include "hw/mxu/systolic_array.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/mxu_helpers.h"
#include "hw/common/dtype.h"
#include "hw/common/error.h"
#include "numerics/bf16.h"

namespace tpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

MxuConfig make_config(std::uint32_t rows, std::uint32_t cols, DType input) {
  return test::mxu_config(rows, cols, input);
}

std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Random element bytes of the MXU input type. bf16 values spread over several binades and include
// zeros, so that column sums round.
class Values {
 public:
  explicit Values(std::uint32_t seed) : rng_(seed) {}

  void fill(DType t, std::uint8_t* p, std::size_t elems) {
    for (std::size_t i = 0; i < elems; ++i) {
      if (t == DType::Int8) {
        p[i] = static_cast<std::uint8_t>(rng_());
      } else {
        set_bf16(p + 2 * i, next_float());
      }
    }
  }
  std::vector<std::uint8_t> bytes(DType t, std::size_t elems) {
    std::vector<std::uint8_t> v(elems * size_of(t));
    fill(t, v.data(), elems);
    return v;
  }
  std::vector<std::uint32_t> words(std::size_t n) {
    std::vector<std::uint32_t> v(n);
    for (auto& w : v) w = static_cast<std::uint32_t>(rng_());
    return v;
  }
  // Accumulator contents: random int32, or finite fp32 values of moderate size.
  std::vector<std::uint32_t> acc(DType t, std::size_t n) {
    if (t == DType::Int8) return words(n);
    std::vector<std::uint32_t> v(n);
    for (auto& w : v) w = float_bits(next_float());
    return v;
  }

  static void set_bf16(std::uint8_t* p, float f) {
    const Bf16 h = to_bf16(f);
    p[0] = static_cast<std::uint8_t>(h.bits);
    p[1] = static_cast<std::uint8_t>(h.bits >> 8);
  }

 private:
  float next_float() {
    if (rng_() % 16 == 0) return 0.0f;
    std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
    std::uniform_int_distribution<int> exp(-10, 10);
    return std::ldexp(mant(rng_), exp(rng_));
  }
  std::mt19937 rng_;
};

WeightTile make_tile(DType t, std::uint32_t k, std::uint32_t n, Values& v) {
  WeightTile w;
  w.rows = k;
  w.cols = n;
  w.bytes = v.bytes(t, std::size_t{k} * n);
  return w;
}

// The raw bits of element k of input row r, straight from isa::MatMul / isa::SetWindow; 0 (which
// is int8 0 and bf16 +0) for a window position in the padding.
std::uint32_t input_bits(const InputSpec& in, DType t, const std::vector<std::uint8_t>& ub,
                         std::uint32_t r, std::uint32_t k) {
  const std::uint64_t e = size_of(t);
  std::uint64_t addr;
  if (!in.window) {
    addr = in.src + std::uint64_t{r} * in.src_stride + k * e;
  } else {
    const isa::SetWindow& g = in.geom;
    const std::uint64_t p = std::uint64_t{in.first_pixel} + r;
    const std::uint64_t b = p / (std::uint64_t{g.out_h} * g.out_w);
    const std::int64_t oy = static_cast<std::int64_t>((p / g.out_w) % g.out_h);
    const std::int64_t ox = static_cast<std::int64_t>(p % g.out_w);
    const std::uint64_t kk = std::uint64_t{in.k_first} + k;
    const std::int64_t ky = static_cast<std::int64_t>((kk / g.in_c) / g.kernel_w);
    const std::int64_t kx = static_cast<std::int64_t>((kk / g.in_c) % g.kernel_w);
    const std::int64_t y =
        oy * g.stride_h + ky * std::max(g.dilation_h, std::uint16_t{1}) - g.pad_top;
    const std::int64_t x =
        ox * g.stride_w + kx * std::max(g.dilation_w, std::uint16_t{1}) - g.pad_left;
    if (y < 0 || y >= g.in_h || x < 0 || x >= g.in_w) return 0;
    addr =
        in.src +
        (((b * g.in_h + static_cast<std::uint64_t>(y)) * g.in_w + static_cast<std::uint64_t>(x)) *
             g.in_c +
         kk % g.in_c) *
            e;
  }
  return t == DType::Int8 ? ub.at(addr) : ub.at(addr) | std::uint32_t{ub.at(addr + 1)} << 8;
}

std::uint32_t tile_bits(const WeightTile& w, DType t, std::uint32_t k, std::uint32_t n) {
  const std::size_t i = std::size_t{k} * w.cols + n;
  return t == DType::Int8 ? w.bytes.at(i)
                          : w.bytes.at(2 * i) | std::uint32_t{w.bytes.at(2 * i + 1)} << 8;
}

float bf16_value(std::uint32_t bits) { return to_float(Bf16{static_cast<std::uint16_t>(bits)}); }

// Column n of result row r: int8 products summed exactly and added to the accumulator modulo
// 2^32; bf16 products (each rounded to fp32) added one by one in row order from +0, then the
// column sum added to the accumulator, all in fp32.
std::uint32_t reference_entry(DType t, const WeightTile& w, const InputSpec& in,
                              const std::vector<std::uint8_t>& ub, std::uint32_t r, std::uint32_t n,
                              std::uint32_t old, bool accumulate) {
  if (t == DType::Int8) {
    std::int64_t psum = 0;
    for (std::uint32_t k = 0; k < w.rows; ++k)
      psum += std::int64_t{static_cast<std::int8_t>(input_bits(in, t, ub, r, k))} *
              static_cast<std::int8_t>(tile_bits(w, t, k, n));
    const auto p = static_cast<std::uint32_t>(psum);
    return accumulate ? old + p : p;
  }
  float psum = 0.0f;
  for (std::uint32_t k = 0; k < w.rows; ++k) {
    const float p = bf16_value(input_bits(in, t, ub, r, k)) * bf16_value(tile_bits(w, t, k, n));
    psum = psum + p;
  }
  return float_bits(accumulate ? bits_float(old) + psum : psum);
}

std::vector<std::uint32_t> reference(DType t, const WeightTile& w, const InputSpec& in,
                                     const std::vector<std::uint8_t>& ub,
                                     std::vector<std::uint32_t> acc, std::uint32_t acc_stride,
                                     bool accumulate) {
  for (std::uint32_t r = 0; r < in.rows; ++r)
    for (std::uint32_t n = 0; n < w.cols; ++n) {
      std::uint32_t& a = acc.at(std::size_t{r} * acc_stride + n);
      a = reference_entry(t, w, in, ub, r, n, a, accumulate);
    }
  return acc;
}

// Runs multiply() and the reference on the same accumulator contents, which span `acc_rows`
// entries of `acc_stride` words (more than the matmul writes, so untouched words are compared
// too), in both modes.
void expect_matches_reference(const SystolicArray& array, const WeightTile& w, const InputSpec& in,
                              const std::vector<std::uint8_t>& ub, std::uint32_t acc_stride,
                              std::uint32_t acc_rows, Values& v) {
  const DType t = array.config().input_type;
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(fmt::format("K={} N={} B={} accumulate={}", w.rows, w.cols, in.rows, accumulate));
    const std::vector<std::uint32_t> before = v.acc(t, std::size_t{acc_rows} * acc_stride);
    std::vector<std::uint32_t> acc = before;
    array.multiply(w, in, ub.data(), ub.size(), acc.data(), acc_stride, accumulate);
    EXPECT_EQ(acc, reference(t, w, in, ub, before, acc_stride, accumulate));
  }
}

struct Shape {
  std::uint32_t k, n, b;
};

void dense_odd_shapes(DType t) {
  const MxuConfig cfg = make_config(32, 32, t);
  const SystolicArray array(cfg);
  Values v(t == DType::Int8 ? 1 : 2);
  const std::uint32_t e = size_of(t);
  for (const Shape s : {Shape{5, 3, 7}, Shape{cfg.rows, cfg.cols, 9}, Shape{17, 29, 1},
                        Shape{1, 1, 1}, Shape{cfg.rows, 17, 33}}) {
    const WeightTile w = make_tile(t, s.k, s.n, v);
    InputSpec in;
    in.src = 3 * e;  // not aligned to anything
    in.rows = s.b;
    in.src_stride = (s.k + 3) * e;
    const std::vector<std::uint8_t> ub =
        v.bytes(t, in.src / e + std::size_t{in.rows} * in.src_stride / e);
    expect_matches_reference(array, w, in, ub, cfg.cols, s.b + 2, v);
  }
}

TEST(SystolicArray, Int8DenseMatchesReferenceForShapesThatDoNotFillTheArray) {
  dense_odd_shapes(DType::Int8);
}

TEST(SystolicArray, Bf16DenseMatchesReferenceForShapesThatDoNotFillTheArray) {
  dense_odd_shapes(DType::Bf16);
}

TEST(SystolicArray, DenseRowsMayOverlapOrRepeat) {
  for (DType t : {DType::Int8, DType::Bf16}) {
    const SystolicArray array(make_config(16, 16, t));
    Values v(3);
    const WeightTile w = make_tile(t, 9, 7, v);
    const std::vector<std::uint8_t> ub = v.bytes(t, 64);
    InputSpec in;
    in.rows = 5;
    for (std::uint32_t stride : {0u, size_of(t)}) {
      in.src_stride = stride;
      expect_matches_reference(array, w, in, ub, 16, 5, v);
    }
  }
}

// A batch of `images` NHWC images and the convolution window that reads it.
struct Conv {
  isa::SetWindow g;
  std::uint32_t images;
};

isa::SetWindow window(std::uint16_t in_h, std::uint16_t in_w, std::uint16_t in_c,
                      std::uint16_t kernel, std::uint16_t stride, std::uint16_t pad) {
  isa::SetWindow g;
  g.in_h = in_h;
  g.in_w = in_w;
  g.in_c = in_c;
  g.kernel_h = kernel;
  g.kernel_w = kernel;
  g.stride_h = stride;
  g.stride_w = stride;
  g.pad_top = pad;
  g.pad_left = pad;
  g.out_h = static_cast<std::uint16_t>((in_h + 2 * pad - kernel) / stride + 1);
  g.out_w = static_cast<std::uint16_t>((in_w + 2 * pad - kernel) / stride + 1);
  return g;
}

// `g` with window positions (dh, dw) input pixels apart, and the output size of its padding:
// (in + 2 * pad - ((kernel - 1) * dilation + 1)) / stride + 1.
isa::SetWindow dilated(isa::SetWindow g, std::uint16_t dh, std::uint16_t dw) {
  g.dilation_h = dh;
  g.dilation_w = dw;
  g.out_h = static_cast<std::uint16_t>(
      (g.in_h + 2 * g.pad_top - ((g.kernel_h - 1) * dh + 1)) / g.stride_h + 1);
  g.out_w = static_cast<std::uint16_t>(
      (g.in_w + 2 * g.pad_left - ((g.kernel_w - 1) * dw + 1)) / g.stride_w + 1);
  return g;
}

std::uint32_t window_k(const isa::SetWindow& g) {
  return std::uint32_t{g.kernel_h} * g.kernel_w * g.in_c;
}

std::vector<Conv> convs() {
  return {
      {window(7, 6, 3, 3, 1, 0), 2},    // valid, stride 1
      {window(7, 6, 3, 3, 1, 1), 3},    // same padding
      {window(9, 8, 2, 3, 2, 1), 2},    // stride 2 with padding
      {window(5, 5, 1, 3, 2, 2), 2},    // padding 2 > stride - 1: some windows are mostly padding
      {window(28, 28, 1, 3, 1, 0), 2},  // the Fashion-MNIST convolution
      {dilated(window(9, 8, 2, 3, 1, 2), 2, 2), 2},    // dilation 2, same padding
      {dilated(window(11, 10, 3, 3, 2, 1), 3, 2), 2},  // unequal dilations, stride 2, padding
      {dilated(window(8, 9, 1, 2, 1, 0), 5, 1), 2},    // a dilation wider than the kernel
  };
}

void windowed_matches_reference(DType t) {
  const MxuConfig cfg = make_config(32, 16, t);
  const SystolicArray array(cfg);
  Values v(t == DType::Int8 ? 4 : 5);
  const std::uint32_t e = size_of(t);
  for (const Conv& c : convs()) {
    const isa::SetWindow& g = c.g;
    SCOPED_TRACE(fmt::format("in {}x{}x{} stride {} pad {} dilation {}x{}", g.in_h, g.in_w, g.in_c,
                             g.stride_h, g.pad_top, g.dilation_h, g.dilation_w));
    const std::uint32_t pixels = std::uint32_t{g.out_h} * g.out_w;
    const std::uint32_t k = std::min(window_k(g), cfg.rows);
    const WeightTile w = make_tile(t, k, 11, v);
    InputSpec in;
    in.window = true;
    in.geom = g;
    in.src = 5 * e;
    const std::vector<std::uint8_t> ub =
        v.bytes(t, in.src / e + std::size_t{c.images} * g.in_h * g.in_w * g.in_c + 7);
    // The whole batch; then a run that starts mid-image and crosses into the next one.
    in.first_pixel = 0;
    in.rows = c.images * pixels;
    expect_matches_reference(array, w, in, ub, cfg.cols, in.rows, v);
    in.first_pixel = pixels / 2 + 1;
    in.rows = pixels;
    expect_matches_reference(array, w, in, ub, cfg.cols, in.rows, v);
  }
}

TEST(SystolicArray, Int8WindowedRowsReadTheWindowOfEachOutputPixelWithZeroPadding) {
  windowed_matches_reference(DType::Int8);
}

TEST(SystolicArray, Bf16WindowedRowsReadTheWindowOfEachOutputPixelWithZeroPadding) {
  windowed_matches_reference(DType::Bf16);
}

// A 3x3x3 window (K = 27) on a 16-row array takes two tiles: rows 0..15 with k_first = 0, then
// rows 16..26 with k_first = 16, accumulated.
struct SplitWindow {
  isa::SetWindow g = window(6, 7, 3, 3, 1, 1);
  std::uint32_t images = 2;
  std::uint32_t n = 13;
};

TEST(SystolicArray, Int8WindowSplitAcrossTilesSumsToTheWholeWindow) {
  const SplitWindow s;
  const MxuConfig small = make_config(16, 16, DType::Int8);
  const MxuConfig big = make_config(32, 16, DType::Int8);
  Values v(6);
  const std::uint32_t k = window_k(s.g);
  ASSERT_GT(k, small.rows);
  ASSERT_LE(k, big.rows);
  const WeightTile whole = make_tile(DType::Int8, k, s.n, v);
  WeightTile part[2];
  for (int i = 0; i < 2; ++i) {
    const std::uint32_t first = i == 0 ? 0 : small.rows;
    const std::uint32_t rows = i == 0 ? small.rows : k - small.rows;
    part[i].rows = rows;
    part[i].cols = s.n;
    part[i].bytes.assign(whole.bytes.begin() + std::ptrdiff_t{first} * s.n,
                         whole.bytes.begin() + std::ptrdiff_t{first + rows} * s.n);
  }
  InputSpec in;
  in.window = true;
  in.geom = s.g;
  in.rows = s.images * s.g.out_h * s.g.out_w;
  const std::vector<std::uint8_t> ub =
      v.bytes(DType::Int8, std::size_t{s.images} * s.g.in_h * s.g.in_w * s.g.in_c);

  std::vector<std::uint32_t> one(std::size_t{in.rows} * big.cols);
  SystolicArray(big).multiply(whole, in, ub.data(), ub.size(), one.data(), big.cols, false);
  EXPECT_EQ(one, reference(DType::Int8, whole, in, ub, one, big.cols, false));

  std::vector<std::uint32_t> two(std::size_t{in.rows} * big.cols);
  const SystolicArray array(small);
  in.k_first = 0;
  array.multiply(part[0], in, ub.data(), ub.size(), two.data(), big.cols, false);
  in.k_first = static_cast<std::uint16_t>(small.rows);
  array.multiply(part[1], in, ub.data(), ub.size(), two.data(), big.cols, true);
  EXPECT_EQ(two, one);
}

TEST(SystolicArray, Bf16WindowSplitAcrossTilesAddsEachTilesColumnSumToTheAccumulator) {
  const SplitWindow s;
  const MxuConfig cfg = make_config(16, 16, DType::Bf16);
  const SystolicArray array(cfg);
  Values v(7);
  const std::uint32_t k = window_k(s.g);
  InputSpec in;
  in.window = true;
  in.geom = s.g;
  in.rows = s.images * s.g.out_h * s.g.out_w;
  const std::vector<std::uint8_t> ub =
      v.bytes(DType::Bf16, std::size_t{s.images} * s.g.in_h * s.g.in_w * s.g.in_c);
  const std::vector<std::uint32_t> zero(std::size_t{in.rows} * cfg.cols);
  std::vector<std::uint32_t> acc = zero, expected = zero;
  for (std::uint32_t first = 0; first < k; first += cfg.rows) {
    const WeightTile w = make_tile(DType::Bf16, std::min(cfg.rows, k - first), s.n, v);
    in.k_first = static_cast<std::uint16_t>(first);
    const bool accumulate = first > 0;
    array.multiply(w, in, ub.data(), ub.size(), acc.data(), cfg.cols, accumulate);
    expected = reference(DType::Bf16, w, in, ub, expected, cfg.cols, accumulate);
  }
  EXPECT_EQ(acc, expected);
}

// A convolution as Keras defines it (NHWC images, HWIO kernel, dilation_rate), written without the
// ISA's flattened window: output (b, oy, ox, n) is the sum over ky, kx, c of
// image[b][oy*stride + ky*dilation - pad][ox*stride + kx*dilation - pad][c] * kernel[ky][kx][c][n],
// zero outside the image. The MXU gets the kernel in tiles of at most `rows` window elements,
// accumulated; int8 sums are exact, so their order does not matter.
TEST(SystolicArray, WindowedMatMulsComputeTheDilatedConvolution) {
  const MxuConfig cfg = make_config(16, 8, DType::Int8);
  const SystolicArray array(cfg);
  Values v(21);
  const std::uint32_t n_out = 5;
  for (const Conv& conv : convs()) {
    const isa::SetWindow& g = conv.g;
    SCOPED_TRACE(fmt::format("in {}x{}x{} kernel {}x{} stride {} pad {} dilation {}x{}", g.in_h,
                             g.in_w, g.in_c, g.kernel_h, g.kernel_w, g.stride_h, g.pad_top,
                             g.dilation_h, g.dilation_w));
    const std::uint32_t k_total = window_k(g);
    const std::vector<std::uint8_t> image =
        v.bytes(DType::Int8, std::size_t{conv.images} * g.in_h * g.in_w * g.in_c);
    const std::vector<std::uint8_t> kernel = v.bytes(DType::Int8, std::size_t{k_total} * n_out);
    InputSpec in;
    in.window = true;
    in.geom = g;
    in.rows = conv.images * g.out_h * g.out_w;
    std::vector<std::uint32_t> acc(std::size_t{in.rows} * cfg.cols);
    for (std::uint32_t k0 = 0; k0 < k_total; k0 += cfg.rows) {
      WeightTile w;
      w.rows = std::min(cfg.rows, k_total - k0);
      w.cols = n_out;
      w.bytes.assign(kernel.begin() + std::ptrdiff_t{k0} * n_out,
                     kernel.begin() + std::ptrdiff_t{k0 + w.rows} * n_out);
      in.k_first = static_cast<std::uint16_t>(k0);
      array.multiply(w, in, image.data(), image.size(), acc.data(), cfg.cols, k0 > 0);
    }
    const auto at = [](const std::vector<std::uint8_t>& bytes, std::size_t i) {
      return std::int64_t{static_cast<std::int8_t>(bytes.at(i))};
    };
    std::vector<std::int32_t> got, want;
    for (std::uint32_t b = 0; b < conv.images; ++b)
      for (std::int64_t oy = 0; oy < g.out_h; ++oy)
        for (std::int64_t ox = 0; ox < g.out_w; ++ox)
          for (std::uint32_t n = 0; n < n_out; ++n) {
            std::int64_t sum = 0;
            for (std::int64_t ky = 0; ky < g.kernel_h; ++ky)
              for (std::int64_t kx = 0; kx < g.kernel_w; ++kx) {
                const std::int64_t y = oy * g.stride_h + ky * g.dilation_h - g.pad_top;
                const std::int64_t x = ox * g.stride_w + kx * g.dilation_w - g.pad_left;
                if (y < 0 || y >= g.in_h || x < 0 || x >= g.in_w) continue;
                for (std::int64_t c = 0; c < g.in_c; ++c)
                  sum +=
                      at(image,
                         static_cast<std::size_t>(((b * g.in_h + y) * g.in_w + x) * g.in_c + c)) *
                      at(kernel, static_cast<std::size_t>(
                                     ((ky * g.kernel_w + kx) * g.in_c + c) * n_out + n));
              }
            want.push_back(static_cast<std::int32_t>(sum));
            const std::size_t row =
                (std::size_t{b} * g.out_h + static_cast<std::size_t>(oy)) * g.out_w +
                static_cast<std::size_t>(ox);
            got.push_back(static_cast<std::int32_t>(acc.at(row * cfg.cols + n)));
          }
    EXPECT_EQ(got, want);
  }
}

// gather() is what the RTL array is fed (hw/mxu/rtl_mxu.cpp): every row, padding and dilation
// included, as the ISA defines it, for a run that starts mid-image and crosses into the next.
TEST(SystolicArray, GatheredRowsAreTheWindowedRowsTheIsaDefines) {
  for (DType t : {DType::Int8, DType::Bf16}) {
    const SystolicArray array(make_config(16, 8, t));
    Values v(22);
    for (const Conv& c : convs()) {
      const isa::SetWindow& g = c.g;
      SCOPED_TRACE(fmt::format("in {}x{}x{} stride {} pad {} dilation {}x{}", g.in_h, g.in_w,
                               g.in_c, g.stride_h, g.pad_top, g.dilation_h, g.dilation_w));
      InputSpec in;
      in.window = true;
      in.geom = g;
      in.src = 3 * size_of(t);
      in.first_pixel = std::uint32_t{g.out_h} * g.out_w / 2 + 1;
      in.rows = std::uint32_t{g.out_h} * g.out_w;
      in.k_first = static_cast<std::uint16_t>(window_k(g) > 16 ? 5 : 0);
      const std::uint32_t k = std::min(16u, window_k(g) - in.k_first);
      const std::vector<std::uint8_t> ub =
          v.bytes(t, 3 + std::size_t{c.images} * g.in_h * g.in_w * g.in_c);
      const std::vector<std::uint8_t> rows = array.gather(in, k, ub.data(), ub.size());
      std::vector<std::uint32_t> got, want;
      for (std::uint32_t r = 0; r < in.rows; ++r)
        for (std::uint32_t i = 0; i < k; ++i) {
          const std::size_t at = (std::size_t{r} * k + i) * size_of(t);
          got.push_back(t == DType::Int8
                            ? std::uint32_t{rows.at(at)}
                            : std::uint32_t{rows.at(at)} | std::uint32_t{rows.at(at + 1)} << 8);
          want.push_back(input_bits(in, t, ub, r, i));
        }
      EXPECT_EQ(got, want);
    }
  }
}

TEST(SystolicArray, AccumulateAddsTheColumnSumAndOverwriteReplacesTheEntry) {
  for (DType t : {DType::Int8, DType::Bf16}) {
    const MxuConfig cfg = make_config(8, 8, t);
    const SystolicArray array(cfg);
    Values v(8);
    const WeightTile w = make_tile(t, 6, 5, v);
    InputSpec in;
    in.rows = 3;
    in.src_stride = 6 * size_of(t);
    const std::vector<std::uint8_t> ub = v.bytes(t, 18);
    const std::vector<std::uint32_t> start = v.acc(t, std::size_t{in.rows} * cfg.cols);
    const std::vector<std::uint32_t> zero(start.size());

    std::vector<std::uint32_t> psum = zero;  // the column sums alone
    array.multiply(w, in, ub.data(), ub.size(), psum.data(), cfg.cols, false);
    std::vector<std::uint32_t> over = start, add = start;
    array.multiply(w, in, ub.data(), ub.size(), over.data(), cfg.cols, false);
    array.multiply(w, in, ub.data(), ub.size(), add.data(), cfg.cols, true);
    for (std::uint32_t r = 0; r < in.rows; ++r)
      for (std::uint32_t n = 0; n < w.cols; ++n) {
        const std::size_t i = std::size_t{r} * cfg.cols + n;
        EXPECT_EQ(over[i], psum[i]);
        const std::uint32_t sum = t == DType::Int8
                                      ? start[i] + psum[i]
                                      : float_bits(bits_float(start[i]) + bits_float(psum[i]));
        EXPECT_EQ(add[i], sum);
      }
  }
}

TEST(SystolicArray, ColumnsBeyondTheTileAndRowsBeyondTheMatmulAreUntouched) {
  for (DType t : {DType::Int8, DType::Bf16}) {
    const MxuConfig cfg = make_config(16, 32, t);
    const SystolicArray array(cfg);
    Values v(9);
    for (std::uint32_t n : {1u, 5u, 17u, cfg.cols - 1}) {
      const WeightTile w = make_tile(t, 7, n, v);
      InputSpec in;
      in.rows = 6;
      in.src_stride = 7 * size_of(t);
      const std::vector<std::uint8_t> ub = v.bytes(t, 42);
      const std::uint32_t acc_rows = in.rows + 3;
      const std::vector<std::uint32_t> before = v.words(std::size_t{acc_rows} * cfg.cols);
      for (bool accumulate : {false, true}) {
        std::vector<std::uint32_t> acc = before;
        array.multiply(w, in, ub.data(), ub.size(), acc.data(), cfg.cols, accumulate);
        for (std::uint32_t r = 0; r < acc_rows; ++r)
          for (std::uint32_t c = 0; c < cfg.cols; ++c) {
            if (r < in.rows && c < n) continue;
            const std::size_t i = std::size_t{r} * cfg.cols + c;
            EXPECT_EQ(acc[i], before[i]) << "row " << r << " column " << c;
          }
      }
    }
  }
}

TEST(SystolicArray, ZeroRowsWriteNothing) {
  const MxuConfig cfg = make_config(8, 8, DType::Int8);
  Values v(10);
  const WeightTile w = make_tile(DType::Int8, 8, 8, v);
  InputSpec in;
  in.src = 4;
  const std::vector<std::uint8_t> ub(4);
  const std::vector<std::uint32_t> before = v.words(cfg.cols);
  std::vector<std::uint32_t> acc = before;
  SystolicArray(cfg).multiply(w, in, ub.data(), ub.size(), acc.data(), cfg.cols, true);
  EXPECT_EQ(acc, before);
}

TEST(SystolicArray, Int8AccumulatorAddWrapsLikeTwosComplementInt32) {
  const MxuConfig cfg = make_config(4, 4, DType::Int8);
  // Every product is (-128) * (-128): the largest, and the column sum is positive.
  WeightTile w;
  w.rows = cfg.rows;
  w.cols = 1;
  w.bytes.assign(cfg.rows, static_cast<std::uint8_t>(std::numeric_limits<std::int8_t>::min()));
  InputSpec in;
  in.rows = 1;
  in.src_stride = cfg.rows;
  const std::vector<std::uint8_t> ub(cfg.rows, w.bytes[0]);
  const std::int32_t psum = static_cast<std::int32_t>(cfg.rows) * 128 * 128;
  std::vector<std::uint32_t> acc = {
      static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max() - psum + 1)};
  const std::vector<std::uint32_t> expected = reference(DType::Int8, w, in, ub, acc, 1, true);
  SystolicArray(cfg).multiply(w, in, ub.data(), ub.size(), acc.data(), 1, true);
  EXPECT_EQ(acc, expected);
  EXPECT_EQ(static_cast<std::int32_t>(acc[0]), std::numeric_limits<std::int32_t>::min());
}

// Bf16 inputs x (one row) and a one-column tile w, both given as floats that bf16 represents.
std::uint32_t bf16_column(const std::vector<float>& x, const std::vector<float>& w,
                          std::uint32_t acc = 0, bool accumulate = false) {
  const auto k = static_cast<std::uint32_t>(x.size());
  const MxuConfig cfg = make_config(k, 1, DType::Bf16);
  WeightTile tile;
  tile.rows = k;
  tile.cols = 1;
  tile.bytes.resize(2 * std::size_t{k});
  std::vector<std::uint8_t> ub(2 * std::size_t{k});
  for (std::uint32_t i = 0; i < k; ++i) {
    EXPECT_EQ(float_bits(round_bf16(x[i])), float_bits(x[i])) << "x[" << i << "] is not a bf16";
    EXPECT_EQ(float_bits(round_bf16(w[i])), float_bits(w[i])) << "w[" << i << "] is not a bf16";
    Values::set_bf16(&ub[2 * i], x[i]);
    Values::set_bf16(&tile.bytes[2 * i], w[i]);
  }
  InputSpec in;
  in.rows = 1;
  in.src_stride = 2 * k;
  SystolicArray(cfg).multiply(tile, in, ub.data(), ub.size(), &acc, 1, accumulate);
  return acc;
}

TEST(SystolicArray, Bf16SumsEachColumnInRowOrder) {
  // Products 1, 2^-24, 2^-24: in row order each small product is half an ulp of 1 and rounds
  // away (ties to even); summed the other way round they make one ulp that survives.
  const float tiny = std::ldexp(1.0f, -12);
  const std::vector<float> x = {1.0f, tiny, tiny}, w = {1.0f, tiny, tiny};
  float in_order = 0.0f, reversed = 0.0f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float p = x[i] * w[i], q = x[x.size() - 1 - i] * w[w.size() - 1 - i];
    in_order = in_order + p;
    reversed = reversed + q;
  }
  ASSERT_NE(in_order, reversed);
  EXPECT_EQ(bf16_column(x, w), float_bits(in_order));
}

TEST(SystolicArray, Bf16ColumnSumIsAddedToTheAccumulatorAfterItIsComplete) {
  // acc = 1, products 2^-24 and 2^-24: the column sum 2^-23 is one ulp of 1 and survives; adding
  // the products to the accumulator one by one would lose both.
  const float tiny = std::ldexp(1.0f, -12);
  const std::vector<float> x = {tiny, tiny}, w = {tiny, tiny};
  const float psum = (0.0f + x[0] * w[0]) + x[1] * w[1];
  EXPECT_EQ(bf16_column(x, w, float_bits(1.0f), true), float_bits(1.0f + psum));
  EXPECT_NE(1.0f + psum, (1.0f + x[0] * w[0]) + x[1] * w[1]);
}

TEST(SystolicArray, Bf16ColumnSumStartsAtPositiveZero) {
  // Every product is -0; -0 + -0 would stay -0, but the sum starts at +0.
  const std::vector<float> x = {-0.0f, 0.0f}, w = {1.0f, -1.0f};
  EXPECT_EQ(bf16_column(x, w, float_bits(1.0f)), float_bits(0.0f));
}

TEST(SystolicArray, Bf16ProductsAreRoundedToFp32BeforeTheyAreAdded) {
  // 2^-75 * 2^-74 is the smallest fp32 subnormal; 2^-75 * 2^-75 is half of it and rounds to zero
  // (ties to even). A fused multiply-add would keep that half and round the sum up instead.
  const float a = std::ldexp(1.0f, -75), b = std::ldexp(1.0f, -74);
  EXPECT_EQ(bf16_column({a, a}, {b, a}), float_bits(std::numeric_limits<float>::denorm_min()));
}

// The same rounding in every build of the host kernel (columns side by side in vectors of 4, 8
// or 16 lanes, rows in blocks, inputs read as rows or, transposed, as columns): tiles of 1 to 64
// columns and batches of 1 to 6 rows, every product 2^-75 * 2^-74 then 2^-75 * 2^-75, so every
// result is the smallest subnormal, which a fused multiply-add would round up to twice that.
TEST(SystolicArray, Bf16ProductsAreRoundedBeforeTheyAreAddedInEveryKernelWidth) {
  const float a = std::ldexp(1.0f, -75), b = std::ldexp(1.0f, -74);
  const std::uint32_t want = float_bits(std::numeric_limits<float>::denorm_min());
  const SystolicArray array(make_config(2, 64, DType::Bf16));
  for (std::uint32_t n : {1u, 8u, 16u, 17u, 40u, 64u})
    for (std::uint32_t rows : {1u, 3u, 6u})
      for (const bool transpose : {false, true}) {
        WeightTile tile;
        tile.rows = 2, tile.cols = n;
        tile.bytes.resize(4 * std::size_t{n});
        for (std::uint32_t c = 0; c < n; ++c) {
          Values::set_bf16(&tile.bytes[2 * c], b);
          Values::set_bf16(&tile.bytes[2 * (n + c)], a);
        }
        std::vector<std::uint8_t> ub(4 * std::size_t{rows});
        for (std::size_t i = 0; i < 2 * std::size_t{rows}; ++i) Values::set_bf16(&ub[2 * i], a);
        InputSpec in;
        in.rows = rows;
        in.transpose = transpose;
        in.src_stride = transpose ? 2 * rows : 4;  // two stored rows of `rows`, or rows of two
        std::vector<std::uint32_t> acc(std::size_t{rows} * 64, 0);
        array.multiply(tile, in, ub.data(), ub.size(), acc.data(), 64, false);
        for (std::uint32_t r = 0; r < rows; ++r)
          for (std::uint32_t c = 0; c < n; ++c)
            ASSERT_EQ(acc[std::size_t{r} * 64 + c], want)
                << n << " columns, " << rows << " rows, transpose " << transpose << ": row " << r
                << " column " << c;
      }
}

TEST(SystolicArray, Bf16NaNAndInfinityPropagate) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(bits_float(bf16_column({1.0f, nan, 2.0f}, {1.0f, 1.0f, 1.0f}))));
  EXPECT_TRUE(std::isnan(bits_float(bf16_column({1.0f, 2.0f}, {1.0f, nan}))));
  EXPECT_EQ(bf16_column({1.0f, inf}, {1.0f, 2.0f}), float_bits(inf));
  EXPECT_EQ(bf16_column({1.0f, inf}, {1.0f, -2.0f}), float_bits(-inf));
  EXPECT_TRUE(std::isnan(bits_float(bf16_column({inf, 0.0f}, {0.0f, 1.0f}))));  // inf * 0
  EXPECT_TRUE(std::isnan(bits_float(bf16_column({inf, inf}, {1.0f, -1.0f}))));  // inf - inf
  // Overflow of a product of finite bf16 values.
  const float big = std::ldexp(1.0f, 100);
  EXPECT_EQ(bf16_column({big}, {big}), float_bits(inf));
  // Into the accumulator.
  EXPECT_EQ(bf16_column({1.0f}, {1.0f}, float_bits(-inf), true), float_bits(-inf));
  EXPECT_TRUE(std::isnan(bits_float(bf16_column({1.0f}, {1.0f}, float_bits(nan), true))));
  EXPECT_TRUE(std::isnan(bits_float(bf16_column({inf}, {1.0f}, float_bits(-inf), true))));
}

// The bytes a read touches, by brute force from the reference addressing.
std::pair<std::uint64_t, std::uint64_t> touched(const InputSpec& in, DType t, std::uint32_t k) {
  const std::uint64_t e = size_of(t);
  std::uint64_t lo = std::numeric_limits<std::uint64_t>::max(), hi = 0;
  const isa::SetWindow& g = in.geom;
  for (std::uint32_t r = 0; r < in.rows; ++r) {
    const std::uint64_t p = std::uint64_t{in.first_pixel} + r;
    const std::uint64_t b = p / (std::uint64_t{g.out_h} * g.out_w);
    const std::int64_t oy = static_cast<std::int64_t>((p / g.out_w) % g.out_h);
    const std::int64_t ox = static_cast<std::int64_t>(p % g.out_w);
    for (std::uint32_t i = 0; i < k; ++i) {
      const std::uint64_t kk = std::uint64_t{in.k_first} + i;
      const std::int64_t y = oy * g.stride_h +
                             static_cast<std::int64_t>((kk / g.in_c) / g.kernel_w) *
                                 std::max(g.dilation_h, std::uint16_t{1}) -
                             g.pad_top;
      const std::int64_t x = ox * g.stride_w +
                             static_cast<std::int64_t>((kk / g.in_c) % g.kernel_w) *
                                 std::max(g.dilation_w, std::uint16_t{1}) -
                             g.pad_left;
      if (y < 0 || y >= g.in_h || x < 0 || x >= g.in_w) continue;
      const std::uint64_t a =
          in.src +
          (((b * g.in_h + static_cast<std::uint64_t>(y)) * g.in_w + static_cast<std::uint64_t>(x)) *
               g.in_c +
           kk % g.in_c) *
              e;
      lo = std::min(lo, a);
      hi = std::max(hi, a + e);
    }
  }
  return lo > hi ? std::make_pair(in.src, in.src) : std::make_pair(lo, hi);
}

TEST(SystolicArray, InputExtentIsTheBoundingRangeOfTheBytesRead) {
  for (DType t : {DType::Int8, DType::Bf16}) {
    const SystolicArray array(make_config(32, 8, t));
    const std::uint64_t e = size_of(t);
    InputSpec dense;
    dense.src = 100;
    dense.rows = 7;
    dense.src_stride = 40;
    EXPECT_EQ(array.input_extent(dense, 9),
              std::make_pair(dense.src, dense.src + 6 * dense.src_stride + 9 * e));
    dense.rows = 0;
    EXPECT_EQ(array.input_extent(dense, 9).first, array.input_extent(dense, 9).second);

    std::mt19937 rng(11);
    for (const Conv& c : convs()) {
      InputSpec in;
      in.window = true;
      in.geom = c.g;
      in.src = 64;
      const std::uint32_t pixels = std::uint32_t{c.g.out_h} * c.g.out_w;
      const std::uint32_t total = window_k(c.g);
      for (int trial = 0; trial < 40; ++trial) {
        in.first_pixel = static_cast<std::uint32_t>(rng() % (c.images * pixels));
        in.rows = 1 + static_cast<std::uint32_t>(rng() % (c.images * pixels - in.first_pixel));
        in.k_first = static_cast<std::uint16_t>(rng() % total);
        const std::uint32_t k =
            1 + static_cast<std::uint32_t>(rng() % std::min<std::uint32_t>(32, total - in.k_first));
        SCOPED_TRACE(fmt::format("first_pixel {} rows {} k_first {} k {}", in.first_pixel, in.rows,
                                 in.k_first, k));
        EXPECT_EQ(array.input_extent(in, k), touched(in, t, k));
      }
    }
  }
}

TEST(SystolicArray, WindowedRowsThatReadOnlyPaddingTouchNothing) {
  // Stride 2, padding 2 on a 5x5 image: output pixel (0, 0) with window position (0, 0) alone
  // reads the padding.
  const SystolicArray array(make_config(8, 8, DType::Int8));
  InputSpec in;
  in.window = true;
  in.geom = window(5, 5, 1, 3, 2, 2);
  in.src = 1000;
  in.rows = 1;
  const auto [lo, hi] = array.input_extent(in, 1);
  EXPECT_EQ(lo, hi);
  WeightTile w;
  w.rows = 1;
  w.cols = 1;
  w.bytes = {1};
  std::vector<std::uint32_t> acc = {7};
  // A unified buffer that holds none of the image: nothing is read, so nothing is out of range.
  const std::uint8_t ub[1] = {0};
  array.multiply(w, in, ub, sizeof ub, acc.data(), 1, false);
  EXPECT_EQ(acc[0], 0u);
}

TEST(SystolicArray, DenseReadOutsideTheUnifiedBufferIsAProgramErrorNamingTheFields) {
  for (DType t : {DType::Int8, DType::Bf16}) {
    const SystolicArray array(make_config(8, 8, t));
    Values v(12);
    const std::uint32_t e = size_of(t);
    const WeightTile w = make_tile(t, 8, 8, v);
    InputSpec in;
    in.src = 10;
    in.rows = 4;
    in.src_stride = 16 * e;
    const std::uint64_t end = in.src + 3ull * in.src_stride + 8ull * e;
    std::vector<std::uint8_t> ub(end);
    std::vector<std::uint32_t> acc(4 * 8);
    // Ending exactly at the end of the buffer is fine.
    EXPECT_NO_THROW(array.multiply(w, in, ub.data(), ub.size(), acc.data(), 8, false));
    ub.pop_back();
    try {
      array.multiply(w, in, ub.data(), ub.size(), acc.data(), 8, false);
      ADD_FAILURE() << "expected a ProgramError";
    } catch (const ProgramError& err) {
      EXPECT_THAT(err.what(), AllOf(HasSubstr(fmt::format("src {:#x}", in.src)),
                                    HasSubstr(fmt::format("rows {}", in.rows)),
                                    HasSubstr(fmt::format("stride {}", in.src_stride)),
                                    HasSubstr(fmt::format("{:#x}", end)),
                                    HasSubstr(std::to_string(ub.size()))));
    }
    // An address so large that src + rows * stride wraps around 2^64.
    in.src = std::numeric_limits<std::uint64_t>::max() - 4;
    EXPECT_THROW(array.multiply(w, in, ub.data(), ub.size(), acc.data(), 8, false), ProgramError);
  }
}

TEST(SystolicArray, WindowedReadOutsideTheUnifiedBufferIsAProgramErrorNamingTheWindow) {
  const SystolicArray array(make_config(16, 8, DType::Bf16));
  Values v(13);
  InputSpec in;
  in.window = true;
  in.geom = window(6, 6, 2, 3, 1, 1);
  in.src = 6;
  in.rows = 2u * in.geom.out_h * in.geom.out_w;  // two images
  const WeightTile w = make_tile(DType::Bf16, 16, 8, v);
  const auto [lo, hi] = touched(in, DType::Bf16, w.rows);
  std::vector<std::uint8_t> ub(hi);
  std::vector<std::uint32_t> acc(std::size_t{in.rows} * 8);
  EXPECT_NO_THROW(array.multiply(w, in, ub.data(), ub.size(), acc.data(), 8, false));
  ub.pop_back();
  try {
    array.multiply(w, in, ub.data(), ub.size(), acc.data(), 8, false);
    ADD_FAILURE() << "expected a ProgramError";
  } catch (const ProgramError& err) {
    EXPECT_THAT(err.what(), AllOf(HasSubstr("window"), HasSubstr(fmt::format("{:#x}", lo)),
                                  HasSubstr(fmt::format("{:#x}", hi))));
  }
}

TEST(SystolicArray, WeightTileMustFitTheArrayAndHaveRowsAndColumns) {
  const MxuConfig cfg = make_config(8, 4, DType::Int8);
  const SystolicArray array(cfg);
  Values v(14);
  const std::vector<std::uint8_t> ub(1024);
  std::vector<std::uint32_t> acc(64);
  InputSpec in;
  in.rows = 1;
  in.src_stride = 16;
  for (const auto& [k, n] : {std::pair<std::uint32_t, std::uint32_t>{cfg.rows + 1, cfg.cols},
                             {cfg.rows, cfg.cols + 1},
                             {0, cfg.cols},
                             {cfg.rows, 0}}) {
    const WeightTile w = make_tile(DType::Int8, k, n, v);
    try {
      array.multiply(w, in, ub.data(), ub.size(), acc.data(), cfg.cols, false);
      ADD_FAILURE() << "expected a ProgramError for " << k << " x " << n;
    } catch (const ProgramError& err) {
      EXPECT_THAT(err.what(), AllOf(HasSubstr(fmt::format("{} x {}", k, n)),
                                    HasSubstr(fmt::format("{} x {}", cfg.rows, cfg.cols))));
    }
  }
}

// Timing only (docs/timing-model.md): a tile carries its shape and no bytes, and the MXU makes
// multiply()'s checks alone, with the same messages; nothing is read or written.
TEST(SystolicArray, CheckMultiplyRefusesWhatMultiplyRefusesWithTheSameMessage) {
  const MxuConfig cfg = make_config(8, 4, DType::Int8);
  const SystolicArray array(cfg);
  Values v(16);
  std::vector<std::uint8_t> ub(64);
  std::vector<std::uint32_t> acc(64, 7);
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const ProgramError& err) {
      return std::string(err.what());
    }
    return std::string();
  };
  InputSpec in;
  in.rows = 4;
  in.src_stride = 20;  // the last row ends at byte 68, past the 64-byte buffer
  for (const auto& [k, n] : {std::pair<std::uint32_t, std::uint32_t>{cfg.rows + 1, cfg.cols},
                             {cfg.rows, 0},
                             {cfg.rows, cfg.cols}}) {
    const WeightTile w = make_tile(DType::Int8, k, n, v);
    WeightTile shape_only;
    shape_only.rows = k, shape_only.cols = n;
    const std::string full =
        message([&] { array.multiply(w, in, ub.data(), ub.size(), acc.data(), 4, false); });
    ASSERT_NE(full, "") << k << " x " << n;
    EXPECT_EQ(message([&] { array.check_multiply(shape_only, in, ub.size()); }), full);
  }
  in.src_stride = 8;
  WeightTile shape_only;
  shape_only.rows = cfg.rows, shape_only.cols = cfg.cols;
  EXPECT_NO_THROW(array.check_multiply(shape_only, in, ub.size()));
  EXPECT_EQ(acc, std::vector<std::uint32_t>(64, 7));
  EXPECT_EQ(message([&] { array.check_gather(in, 0, ub.size()); }),
            message([&] { (void)array.gather(in, 0, ub.data(), ub.size()); }));
}

TEST(SystolicArray, WindowGeometryMustBeSaneAndTheTileInsideTheWindow) {
  const SystolicArray array(make_config(16, 4, DType::Int8));
  Values v(15);
  const std::vector<std::uint8_t> ub(4096);
  std::vector<std::uint32_t> acc(64);
  const isa::SetWindow good = window(6, 6, 2, 3, 1, 0);
  const WeightTile w = make_tile(DType::Int8, 4, 4, v);
  InputSpec in;
  in.window = true;
  in.rows = 4;
  std::vector<isa::SetWindow> bad(9, good);
  bad[0].in_c = 0;
  bad[1].kernel_h = 0;
  bad[2].kernel_w = 0;
  bad[3].stride_h = 0;
  bad[4].stride_w = 0;
  bad[5].out_h = 0;
  bad[6].out_w = 0;
  bad[7].in_h = 0;
  bad[8].in_w = 0;
  for (const isa::SetWindow& g : bad) {
    in.geom = g;
    EXPECT_THROW(array.multiply(w, in, ub.data(), ub.size(), acc.data(), 4, false), ProgramError);
  }
  // A SetWindow that never came: the default geometry.
  in.geom = isa::SetWindow{};
  EXPECT_THROW(array.multiply(w, in, ub.data(), ub.size(), acc.data(), 4, false), ProgramError);

  in.geom = good;
  in.k_first = static_cast<std::uint16_t>(window_k(good) - w.rows);
  EXPECT_NO_THROW(array.multiply(w, in, ub.data(), ub.size(), acc.data(), 4, false));
  in.k_first = static_cast<std::uint16_t>(in.k_first + 1);
  try {
    array.multiply(w, in, ub.data(), ub.size(), acc.data(), 4, false);
    ADD_FAILURE() << "expected a ProgramError";
  } catch (const ProgramError& err) {
    EXPECT_THAT(err.what(), AllOf(HasSubstr(fmt::format("k_first {}", in.k_first)),
                                  HasSubstr(std::to_string(window_k(good)))));
  }
}

TEST(SystolicArray, InputTypeMustPairWithItsAccumulatorType) {
  MxuConfig cfg = make_config(8, 8, DType::Int8);
  cfg.acc_type = DType::Fp32;
  EXPECT_THROW(SystolicArray{cfg}, ConfigError);
  cfg = make_config(8, 8, DType::Bf16);
  cfg.acc_type = DType::Int32;
  EXPECT_THROW(SystolicArray{cfg}, ConfigError);
  cfg.input_type = DType::Fp32;
  cfg.acc_type = DType::Fp32;
  EXPECT_THROW(SystolicArray{cfg}, ConfigError);
}

}  // namespace
}  // namespace tpu
