// The backward pass's MatMul inputs (docs/isa.md §4.6 "transpose", §4.5 input dilation) on the
// MXU's math core, against a plain loop written here from the document: element j of input row
// r is read where the document says, each column summed in row order from zero. Both the
// multiply and gather() (the RTL MXU's rows) are checked, for int8 and bf16.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/mxu_helpers.h"
#include "hw/common/error.h"
#include "hw/mxu/systolic_array.h"
#include "numerics/bf16.h"

namespace tpu {
namespace {

MxuConfig make_config(std::uint32_t rows, std::uint32_t cols, DType input) {
  return test::mxu_config(rows, cols, input);
}

// Small integers, exact as int8 and bf16 and in every fp32 sum below.
std::vector<std::uint8_t> random_elements(DType t, std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<std::uint8_t> v(n * size_of(t));
  for (std::size_t i = 0; i < n; ++i) {
    const int x = d(rng);
    if (t == DType::Int8) {
      v[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(x));
    } else {
      const std::uint16_t b = to_bf16(static_cast<float>(x)).bits;
      v[2 * i] = static_cast<std::uint8_t>(b), v[2 * i + 1] = static_cast<std::uint8_t>(b >> 8);
    }
  }
  return v;
}

double element(DType t, const std::vector<std::uint8_t>& bytes, std::uint64_t index) {
  if (t == DType::Int8) return static_cast<std::int8_t>(bytes.at(index));
  const auto b = static_cast<std::uint16_t>(bytes.at(2 * index) | bytes.at(2 * index + 1) << 8);
  return to_float(Bf16{b});
}

// The element index (in the unified buffer, from address 0) of input row r, element j, or nullopt
// for a zero: docs/isa.md §4.6, with §4.5's input dilation.
std::optional<std::uint64_t> input_index(const InputSpec& in, std::uint32_t e, std::uint32_t r,
                                         std::uint32_t j) {
  if (!in.window) {
    const std::uint64_t addr = in.transpose ? in.src + std::uint64_t{j} * in.src_stride + r * e
                                            : in.src + std::uint64_t{r} * in.src_stride + j * e;
    return addr / e;
  }
  const isa::SetWindow& g = in.geom;
  const std::uint64_t p = std::uint64_t{in.first_pixel} + (in.transpose ? j : r);
  const std::uint64_t k = std::uint64_t{in.k_first} + (in.transpose ? r : j);
  const std::uint64_t b = p / (std::uint64_t{g.out_h} * g.out_w);
  const std::int64_t oy = static_cast<std::int64_t>(p / g.out_w % g.out_h);
  const std::int64_t ox = static_cast<std::int64_t>(p % g.out_w);
  const std::int64_t ky = static_cast<std::int64_t>(k / g.in_c / g.kernel_w);
  const std::int64_t kx = static_cast<std::int64_t>(k / g.in_c % g.kernel_w);
  const std::int64_t dh = g.dilation_h ? g.dilation_h : 1, dw = g.dilation_w ? g.dilation_w : 1;
  const std::int64_t ih = g.in_dilation_h ? g.in_dilation_h : 1;
  const std::int64_t iw = g.in_dilation_w ? g.in_dilation_w : 1;
  const std::int64_t vy = oy * g.stride_h + ky * dh - g.pad_top;
  const std::int64_t vx = ox * g.stride_w + kx * dw - g.pad_left;
  if (vy < 0 || vx < 0 || vy % ih != 0 || vx % iw != 0 || vy / ih >= g.in_h || vx / iw >= g.in_w)
    return std::nullopt;
  const auto y = static_cast<std::uint64_t>(vy / ih), x = static_cast<std::uint64_t>(vx / iw);
  return in.src / e + ((b * g.in_h + y) * g.in_w + x) * g.in_c + k % g.in_c;
}

// acc[r][n] = sum_j x_r[j] * w[j][n], in j order from 0 (exact for these values).
std::vector<double> reference(DType t, const WeightTile& w, const InputSpec& in,
                              const std::vector<std::uint8_t>& ub) {
  const std::uint32_t e = size_of(t);
  std::vector<double> out(std::size_t{in.rows} * w.cols, 0.0);
  for (std::uint32_t r = 0; r < in.rows; ++r)
    for (std::uint32_t n = 0; n < w.cols; ++n)
      for (std::uint32_t j = 0; j < w.rows; ++j) {
        const auto i = input_index(in, e, r, j);
        if (i) out[r * w.cols + n] += element(t, ub, *i) * element(t, w.bytes, j * w.cols + n);
      }
  return out;
}

double acc_value(DType t, std::uint32_t word) {
  if (t == DType::Int8) return static_cast<std::int32_t>(word);
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

// Runs multiply() and gather() on `in` with a K x N tile and compares both with the reference.
void expect_matches(DType t, std::uint32_t k, std::uint32_t n, const InputSpec& in) {
  SCOPED_TRACE(fmt::format("{} K={} N={} B={} window={} transpose={}", name_of(t), k, n, in.rows,
                           in.window, in.transpose));
  const SystolicArray array(make_config(16, 16, t));
  const std::vector<std::uint8_t> ub = random_elements(t, 4096, 3);
  WeightTile w;
  w.rows = k, w.cols = n, w.bytes = random_elements(t, std::size_t{k} * n, 4);
  std::vector<std::uint32_t> acc(std::size_t{in.rows} * 16, 0);
  array.multiply(w, in, ub.data(), ub.size(), acc.data(), 16, false);
  const std::vector<double> want = reference(t, w, in, ub);
  for (std::uint32_t r = 0; r < in.rows; ++r)
    for (std::uint32_t c = 0; c < n; ++c)
      ASSERT_EQ(acc_value(t, acc[r * 16 + c]), want[r * n + c]) << "row " << r << " col " << c;

  const std::uint32_t e = size_of(t);
  const std::vector<std::uint8_t> rows = array.gather(in, k, ub.data(), ub.size());
  ASSERT_EQ(rows.size(), std::size_t{in.rows} * k * e);
  for (std::uint32_t r = 0; r < in.rows; ++r)
    for (std::uint32_t j = 0; j < k; ++j) {
      const auto i = input_index(in, e, r, j);
      EXPECT_EQ(element(t, rows, std::size_t{r} * k + j), i ? element(t, ub, *i) : 0.0)
          << "gathered row " << r << " element " << j;
    }
}

const DType kTypes[] = {DType::Int8, DType::Bf16};

// Dense dW = X^T * dY: input row r is column r of X (rows `stride` bytes apart), K = batch.
TEST(MxuTranspose, TransposedDenseRowsAreColumnsOfTheStoredMatrix) {
  for (DType t : kTypes) {
    const std::uint32_t e = size_of(t);
    InputSpec in;
    in.transpose = true, in.src = 64 * e, in.rows = 9, in.src_stride = 11 * e;
    expect_matches(t, 7, 5, in);
    in.rows = 1, in.src_stride = 0;  // stride 0: every tile row reads the same stored row
    expect_matches(t, 16, 16, in);
  }
}

// A 5x6x3 image, 3x3 window, stride 2, padding 1 on top and left: 3x3 outputs, 2 images. The
// transposed rows are window elements, their elements output pixels (the tile's rows).
TEST(MxuTranspose, TransposedWindowedRowsAreWindowElementsOverPixels) {
  for (DType t : kTypes) {
    InputSpec in;
    in.window = in.transpose = true;
    in.src = 128 * size_of(t);
    in.geom.in_h = 5, in.geom.in_w = 6, in.geom.in_c = 3, in.geom.kernel_h = 3,
    in.geom.kernel_w = 3, in.geom.stride_h = 2, in.geom.stride_w = 2, in.geom.pad_top = 1,
    in.geom.pad_left = 1, in.geom.out_h = 3, in.geom.out_w = 3;
    in.rows = 27;                  // every window element
    expect_matches(t, 16, 4, in);  // pixels 0..15: image 0 and most of image 1
    in.k_first = 5, in.rows = 13, in.first_pixel = 7;
    in.geom.dilation_h = 2, in.geom.pad_top = 2;
    expect_matches(t, 9, 6, in);
  }
}

// dX of a stride-2 convolution reads dY dilated by 2: zeros between its pixels.
TEST(MxuInputDilation, DilatedImageReadsZerosBetweenStoredPixels) {
  for (DType t : kTypes) {
    InputSpec in;
    in.window = true;
    in.src = 32 * size_of(t);
    in.geom.in_h = 3, in.geom.in_w = 4, in.geom.in_c = 2, in.geom.kernel_h = 3,
    in.geom.kernel_w = 3, in.geom.pad_top = 2, in.geom.pad_left = 2, in.geom.out_h = 7,
    in.geom.out_w = 9, in.geom.in_dilation_h = 2, in.geom.in_dilation_w = 3;
    in.rows = 2 * 7 * 9;  // two images
    expect_matches(t, 16, 5, in);
    in.k_first = 3, in.first_pixel = 5, in.rows = 15, in.transpose = true;  // 3 + 15 = 3*3*2
    expect_matches(t, 12, 7, in);
  }
}

TEST(MxuTranspose, TransposedWindowedRowsMustLieInsideTheWindow) {
  const SystolicArray array(make_config(16, 16, DType::Int8));
  const std::vector<std::uint8_t> ub(4096, 1);
  InputSpec in;
  in.window = in.transpose = true;
  in.geom.in_h = 4, in.geom.in_w = 4, in.geom.in_c = 2, in.geom.kernel_h = 2, in.geom.kernel_w = 2,
  in.geom.out_h = 3, in.geom.out_w = 3;
  in.k_first = 3, in.rows = 6;  // 3 + 6 > 2*2*2
  WeightTile w;
  w.rows = 4, w.cols = 4, w.bytes.assign(16, 1);
  std::vector<std::uint32_t> acc(6 * 16);
  EXPECT_THAT([&] { array.multiply(w, in, ub.data(), ub.size(), acc.data(), 16, false); },
              ::testing::ThrowsMessage<ProgramError>(
                  ::testing::HasSubstr("matmul window transpose: k_first 3 + rows 6 exceeds")));
}

TEST(MxuTranspose, TransposedDenseExtentMustLieInsideTheUnifiedBuffer) {
  const SystolicArray array(make_config(16, 16, DType::Int8));
  const std::vector<std::uint8_t> ub(256, 1);
  InputSpec in;
  in.transpose = true, in.src = 0, in.rows = 8, in.src_stride = 64;  // (4-1)*64 + 8 = 200 fits
  WeightTile w;
  w.rows = 4, w.cols = 2, w.bytes.assign(8, 1);
  std::vector<std::uint32_t> acc(8 * 16);
  EXPECT_NO_THROW(array.multiply(w, in, ub.data(), ub.size(), acc.data(), 16, false));
  in.src = 57;  // ends at 257
  EXPECT_THAT([&] { array.multiply(w, in, ub.data(), ub.size(), acc.data(), 16, false); },
              ::testing::ThrowsMessage<ProgramError>(
                  ::testing::HasSubstr("matmul transpose: src 0x39 + (tile rows 4 - 1) * stride "
                                       "64 + rows 8 x 1 bytes ends at 0x101")));
}

}  // namespace
}  // namespace tpu
