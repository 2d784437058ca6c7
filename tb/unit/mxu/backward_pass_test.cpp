// The backward pass of dense and convolution layers, run as programs on a whole chip with the
// training forms of the MXU instructions (docs/isa.md §4.4-4.6): transposed and strided weight
// tiles, transposed inputs and input-dilated windows. Each result is compared with a float64 loop
// written here from the layer's definition, not from the ISA. The values are small integers, so
// every bf16 product and fp32 sum is exact and the comparison is equality. Each program runs on
// v2 (bf16, TLM MXU), on tiny-rtl (int8, the Verilated RTL array) and on tiny-rtl with the TLM
// MXU: the RTL MXU must behave as the TLM one does. One elaboration per test.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/mxu_helpers.h"
#include "common/test_host.h"
#include "hw/chip/chip.h"
#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "hw/isa/isa.h"
#include "numerics/bf16.h"

namespace tpu {
namespace {

using isa::Instruction;

// Off-chip memory: the activate records at 0, operands from kMemData, results at kMemOut. The
// unified buffer: records at 0, operands from kUbData, results at kUbOut.
constexpr std::uint64_t kMemData = 0x1000, kMemOut = 0x100000;
constexpr std::uint32_t kUbData = 0x1000, kUbOut = 0x40000;

enum class Chip_ { V2, TinyRtl, TinyRtlAsTlm };

ChipConfig config_of(Chip_ c) {
  const std::string dir = std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/";
  ChipConfig cfg = load_chip_config(dir + (c == Chip_::V2 ? "v2.json" : "tiny-rtl.json"));
  if (c == Chip_::TinyRtlAsTlm) cfg.mxu.impl = MxuImpl::Tlm;
  return cfg;
}

// Integers in [-3, 3], as a tensor of doubles.
std::vector<double> small_ints(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-3, 3);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Elements of the MXU input type, `pitch` elements per row of `cols` (the rest zero).
std::vector<std::uint8_t> encode(DType t, const std::vector<double>& v, std::size_t cols,
                                 std::size_t pitch) {
  const std::size_t e = size_of(t), rows = v.size() / cols;
  std::vector<std::uint8_t> b(rows * pitch * e, 0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      std::uint8_t* p = &b[(r * pitch + c) * e];
      const double x = v[r * cols + c];
      if (t == DType::Int8) {
        p[0] = static_cast<std::uint8_t>(static_cast<std::int8_t>(x));
      } else {
        const std::uint16_t h = to_bf16(static_cast<float>(x)).bits;
        p[0] = static_cast<std::uint8_t>(h), p[1] = static_cast<std::uint8_t>(h >> 8);
      }
    }
  return b;
}

struct Program {
  ChipConfig cfg;
  DType t;
  std::uint32_t e;
  std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> images;
  std::vector<Instruction> code;
  std::uint64_t next_mem = kMemData;
  std::uint32_t next_ub = kUbData;

  explicit Program(Chip_ c)
      : cfg(config_of(c)), t(cfg.mxu.input_type), e(size_of(cfg.mxu.input_type)) {
    // Records {bias 0, scale 1.0f or unused, shift 0} for every column, read into UB 0.
    std::vector<std::uint8_t> records(12ull * cfg.mxu.cols, 0);
    const float one = 1.0f;
    if (cfg.mxu.acc_type == DType::Fp32)
      for (std::uint32_t n = 0; n < cfg.mxu.cols; ++n) std::memcpy(&records[12 * n + 4], &one, 4);
    images.emplace_back(0, records);
    code.push_back(isa::ReadMem{MemAddr(0), UbAddr(0), static_cast<std::uint32_t>(records.size())});
  }

  // A tensor in off-chip memory: returns its address.
  std::uint64_t in_memory(const std::vector<std::uint8_t>& bytes) {
    const std::uint64_t a = next_mem;
    images.emplace_back(a, bytes);
    next_mem += (bytes.size() + 255) / 256 * 256;
    return a;
  }
  // A tensor in the unified buffer (read there from off-chip memory): returns its UB address.
  std::uint32_t in_ub(const std::vector<std::uint8_t>& bytes) {
    const std::uint64_t m = in_memory(bytes);
    const std::uint32_t u = next_ub;
    const auto n = static_cast<std::uint32_t>(bytes.size());
    code.push_back(isa::ReadMem{MemAddr(m), UbAddr(u), n});
    next_ub += (n + 255) / 256 * 256;
    return u;
  }

  // Accumulator entries [0, rows), columns [0, cols), as 32-bit words to off-chip memory; runs
  // the program and returns them. nullopt when this build has no Verilated array for an RTL MXU.
  std::optional<std::vector<double>> run(std::uint32_t rows, std::uint32_t cols) {
    const bool fp = cfg.mxu.acc_type == DType::Fp32;
    isa::Activate a;
    a.src = AccAddr(0), a.dst = UbAddr(kUbOut), a.params = UbAddr(0), a.rows = rows;
    a.cols = static_cast<std::uint16_t>(cols), a.dst_stride = cols * 4;
    a.out_type = fp ? DType::Fp32 : DType::Int32;
    code.push_back(a);
    code.push_back(isa::WriteMem{UbAddr(kUbOut), MemAddr(kMemOut), rows * cols * 4});
    code.push_back(isa::Halt{});

    std::unique_ptr<Chip> chip;
    try {
      chip = std::make_unique<Chip>("chip", cfg);
    } catch (const ConfigError&) {
      if (cfg.mxu.impl == MxuImpl::Rtl) return std::nullopt;
      throw;
    }
    test::TestHost host("host", *chip, 4096);
    for (auto& [addr, bytes] : images) host.load_memory(addr, bytes);
    host.programs[0] = code;
    for (std::size_t core = 1; core < host.programs.size(); ++core)
      host.programs[core] = {isa::Halt{}};
    sc_core::sc_start();
    std::vector<std::uint32_t> words(std::size_t{rows} * cols);
    EXPECT_EQ(test::read_memory(host, kMemOut, words.data(), words.size() * 4), words.size() * 4);
    std::vector<double> out;
    for (std::uint32_t w : words) {
      float f;
      std::memcpy(&f, &w, 4);
      out.push_back(fp ? static_cast<double>(f)
                       : static_cast<double>(static_cast<std::int32_t>(w)));
    }
    return out;
  }
};

// A dense layer y = x W (x: batch x in, W: in x out). dW = x^T dY: tile = dY (K = batch), input
// rows = columns of x (matmul transpose). dX = dY W^T: tile = W read transposed from a wider stored
// matrix (read_weights transpose + stride), input rows = rows of dY.
void dense_backward(Chip_ c) {
  Program p(c);
  const std::uint32_t batch = 6, in = 5, out = 4, pitch = 8;
  const auto x = small_ints(batch * in, 1), w = small_ints(in * out, 2);
  const auto dy = small_ints(batch * out, 3);
  const std::uint32_t ub_x = p.in_ub(encode(p.t, x, in, in));
  const std::uint32_t ub_w = p.in_ub(encode(p.t, w, out, pitch));
  const std::uint32_t ub_dy = p.in_ub(encode(p.t, dy, out, out));

  p.code.push_back(test::read_weights(true, ub_dy, batch, out, 0, false));
  isa::MatMul dw;
  dw.swap_weights = true, dw.transpose = true, dw.src = UbAddr(ub_x), dw.rows = in;
  dw.src_stride = in * p.e, dw.dst = AccAddr(0);
  p.code.push_back(dw);
  p.code.push_back(test::read_weights(true, ub_w, in, out, pitch * p.e, true));
  isa::MatMul dx;
  dx.swap_weights = true, dx.src = UbAddr(ub_dy), dx.rows = batch, dx.src_stride = out * p.e;
  dx.dst = AccAddr(8);
  p.code.push_back(dx);
  const std::uint32_t cols = out > in ? out : in;
  const auto run = p.run(8 + batch, cols);
  if (!run) GTEST_SKIP() << "no Verilated array in this build";
  const std::vector<double>& got = *run;

  for (std::uint32_t i = 0; i < in; ++i)
    for (std::uint32_t o = 0; o < out; ++o) {
      double s = 0;
      for (std::uint32_t b = 0; b < batch; ++b) s += x[b * in + i] * dy[b * out + o];
      EXPECT_EQ(got[i * cols + o], s) << "dW[" << i << "][" << o << "]";
    }
  for (std::uint32_t b = 0; b < batch; ++b)
    for (std::uint32_t i = 0; i < in; ++i) {
      double s = 0;
      for (std::uint32_t o = 0; o < out; ++o) s += dy[b * out + o] * w[i * out + o];
      EXPECT_EQ(got[(8 + b) * cols + i], s) << "dX[" << b << "][" << i << "]";
    }
}

// A convolution of a 5x5x2 image with a 3x3x2x3 kernel (HWIO), stride 2, no padding: 2x2x3
// outputs. Its input gradient dX[y][x][ci] = sum over oy, ox, ky, kx with y = 2*oy + ky,
// x = 2*ox + kx of dY[oy][ox][co] * W[ky][kx][ci][co] is a stride-1 convolution of dY dilated by 2
// (in_dilation), padded by 2, with the kernel flipped and transposed: window position (ky', kx')
// takes the tile W[2-ky'][2-kx'] transposed, read with read_weights transpose from the forward
// kernel, stored with a row pitch of 8 elements (a sub-block of a wider matrix).
void conv_input_gradient(Chip_ c) {
  Program p(c);
  const std::uint32_t H = 5, W_ = 5, ci_n = 2, co_n = 3, kh = 3, kw = 3, s = 2, oh = 2, ow = 2;
  const std::uint32_t pitch = 8;
  const auto w = small_ints(kh * kw * ci_n * co_n, 4);
  const auto dy = small_ints(oh * ow * co_n, 5);
  const std::uint64_t mem_w = p.in_memory(encode(p.t, w, co_n, pitch));
  const std::uint32_t ub_dy = p.in_ub(encode(p.t, dy, co_n, co_n));

  isa::SetWindow g;
  g.in_h = oh, g.in_w = ow, g.in_c = co_n, g.kernel_h = kh, g.kernel_w = kw;
  g.pad_top = kh - 1, g.pad_left = kw - 1, g.out_h = H, g.out_w = W_;
  g.in_dilation_h = s, g.in_dilation_w = s;
  p.code.push_back(g);
  for (std::uint32_t ky2 = 0; ky2 < kh; ++ky2)
    for (std::uint32_t kx2 = 0; kx2 < kw; ++kx2) {
      const std::uint32_t ky = kh - 1 - ky2, kx = kw - 1 - kx2;
      // Rows ci of (ky, kx) in the stored kernel matrix [(ky, kx, ci)][co].
      const std::uint64_t rows_at = mem_w + std::uint64_t{(ky * kw + kx) * ci_n} * pitch * p.e;
      p.code.push_back(test::read_weights(false, rows_at, ci_n, co_n, pitch * p.e, true));
      isa::MatMul mm;
      mm.swap_weights = true, mm.window = true, mm.accumulate = ky2 + kx2 > 0;
      mm.src = UbAddr(ub_dy), mm.rows = H * W_, mm.dst = AccAddr(0);
      mm.k_first = static_cast<std::uint16_t>((ky2 * kw + kx2) * co_n);
      p.code.push_back(mm);
    }
  const auto got = p.run(H * W_, ci_n);
  if (!got) GTEST_SKIP() << "no Verilated array in this build";

  std::vector<double> dx(H * W_ * ci_n, 0.0);
  for (std::uint32_t oy = 0; oy < oh; ++oy)
    for (std::uint32_t ox = 0; ox < ow; ++ox)
      for (std::uint32_t ky = 0; ky < kh; ++ky)
        for (std::uint32_t kx = 0; kx < kw; ++kx)
          for (std::uint32_t ci = 0; ci < ci_n; ++ci)
            for (std::uint32_t co = 0; co < co_n; ++co)
              dx[((oy * s + ky) * W_ + ox * s + kx) * ci_n + ci] +=
                  dy[(oy * ow + ox) * co_n + co] * w[((ky * kw + kx) * ci_n + ci) * co_n + co];
  EXPECT_EQ(*got, dx);
}

// The same convolution's kernel gradient, with padding 1 (3x3 outputs): dW[ky][kx][ci][co] = sum
// over oy, ox of X[2*oy + ky - 1][2*ox + kx - 1][ci] * dY[oy][ox][co] (zero outside the image).
// Tile = dY (K = 9 output pixels, N = 3 channels); a transposed windowed matmul's rows are the 18
// window elements (ky, kx, ci), each over the 9 pixels.
void conv_weight_gradient(Chip_ c) {
  Program p(c);
  const std::uint32_t H = 5, W_ = 5, ci_n = 2, co_n = 3, kh = 3, kw = 3, s = 2, oh = 3, ow = 3;
  const auto x = small_ints(H * W_ * ci_n, 6);
  const auto dy = small_ints(oh * ow * co_n, 7);
  const std::uint32_t ub_x = p.in_ub(encode(p.t, x, ci_n, ci_n));
  const std::uint32_t ub_dy = p.in_ub(encode(p.t, dy, co_n, co_n));

  isa::SetWindow g;
  g.in_h = H, g.in_w = W_, g.in_c = ci_n, g.kernel_h = kh, g.kernel_w = kw, g.stride_h = s,
  g.stride_w = s, g.pad_top = 1, g.pad_left = 1, g.out_h = oh, g.out_w = ow;
  p.code.push_back(g);
  p.code.push_back(test::read_weights(true, ub_dy, oh * ow, co_n, 0, false));
  isa::MatMul mm;
  mm.swap_weights = true, mm.window = true, mm.transpose = true;
  mm.src = UbAddr(ub_x), mm.rows = kh * kw * ci_n, mm.dst = AccAddr(0);
  p.code.push_back(mm);
  const auto got = p.run(kh * kw * ci_n, co_n);
  if (!got) GTEST_SKIP() << "no Verilated array in this build";

  std::vector<double> dw(kh * kw * ci_n * co_n, 0.0);
  for (std::uint32_t oy = 0; oy < oh; ++oy)
    for (std::uint32_t ox = 0; ox < ow; ++ox)
      for (std::uint32_t ky = 0; ky < kh; ++ky)
        for (std::uint32_t kx = 0; kx < kw; ++kx) {
          const int y = static_cast<int>(oy * s + ky) - 1, xx = static_cast<int>(ox * s + kx) - 1;
          if (y < 0 || xx < 0 || y >= static_cast<int>(H) || xx >= static_cast<int>(W_)) continue;
          for (std::uint32_t ci = 0; ci < ci_n; ++ci)
            for (std::uint32_t co = 0; co < co_n; ++co)
              dw[((ky * kw + kx) * ci_n + ci) * co_n + co] +=
                  x[(static_cast<std::uint32_t>(y) * W_ + static_cast<std::uint32_t>(xx)) * ci_n +
                    ci] *
                  dy[(oy * ow + ox) * co_n + co];
        }
  EXPECT_EQ(*got, dw);
}

TEST(BackwardPass, DenseGradientsMatchALoopOnV2) { dense_backward(Chip_::V2); }
TEST(BackwardPass, DenseGradientsMatchALoopOnTheRtlMxu) { dense_backward(Chip_::TinyRtl); }
TEST(BackwardPass, DenseGradientsMatchALoopOnTinyRtlWithTheTlmMxu) {
  dense_backward(Chip_::TinyRtlAsTlm);
}
TEST(BackwardPass, StridedConvInputGradientMatchesALoopOnV2) { conv_input_gradient(Chip_::V2); }
TEST(BackwardPass, StridedConvInputGradientMatchesALoopOnTheRtlMxu) {
  conv_input_gradient(Chip_::TinyRtl);
}
TEST(BackwardPass, StridedConvInputGradientMatchesALoopOnTinyRtlWithTheTlmMxu) {
  conv_input_gradient(Chip_::TinyRtlAsTlm);
}
TEST(BackwardPass, ConvWeightGradientMatchesALoopOnV2) { conv_weight_gradient(Chip_::V2); }
TEST(BackwardPass, ConvWeightGradientMatchesALoopOnTheRtlMxu) {
  conv_weight_gradient(Chip_::TinyRtl);
}
TEST(BackwardPass, ConvWeightGradientMatchesALoopOnTinyRtlWithTheTlmMxu) {
  conv_weight_gradient(Chip_::TinyRtlAsTlm);
}

}  // namespace
}  // namespace tpu
