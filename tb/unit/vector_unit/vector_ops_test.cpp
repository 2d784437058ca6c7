// VectorOps without the kernel. Every expected value comes from the written rules computed a
// second way (tb/unit/numerics/exact_rules.h: exact integer arithmetic, double precision, or fp32
// in the documented order with an independent bf16 rounding), from the numerics library's scalar
// definitions (the fast paths must give their bits) or from the config.
#include "hw/vector_unit/vector_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "hw/isa/fields.h"
#include "hw/vector_unit/functions.h"
#include "numerics/activation.h"
#include "numerics/batch_norm.h"
#include "numerics/bf16.h"
#include "numerics/elementwise.h"
#include "numerics/fixed_point.h"
#include "numerics/quantize.h"
#include "tb/unit/numerics/exact_rules.h"

namespace tpu {
namespace {

using exact::bits_of;
using exact::float_of;
using exact::kI32Max;
using exact::kI32Min;

ChipConfig test_config() {
  ChipConfig cfg;
  cfg.name = "vector-test";
  cfg.clock_mhz = 700;
  cfg.tensor_cores = 1;
  cfg.mxu.count = 1;
  cfg.mxu.rows = 16;
  cfg.mxu.cols = 16;
  cfg.mxu.input_type = DType::Int8;
  cfg.mxu.acc_type = DType::Int32;
  cfg.unified_buffer.bytes = 1 << 16;
  cfg.unified_buffer.bytes_per_cycle = 32;
  cfg.vector_unit.bytes_per_cycle = 32;
  cfg.accumulators.entries = 64;
  cfg.vector_unit.lanes = 8;
  cfg.vector_unit.sublanes = 4;
  cfg.vector_unit.latency_cycles = 5;
  return cfg;
}

// ---- unified buffer and accumulator fixture ----

struct Core {
  ChipConfig cfg = test_config();
  std::vector<std::uint8_t> ub = std::vector<std::uint8_t>(cfg.unified_buffer.bytes, 0xa5);
  std::vector<std::uint32_t> acc =
      std::vector<std::uint32_t>(std::size_t{cfg.accumulators.entries} * cfg.mxu.cols, 0);
  DType acc_type = DType::Int32;

  UbView ub_view() { return UbView{ub.data(), ub.size()}; }
  AccView acc_view() {
    return AccView{acc.data(), cfg.accumulators.entries, cfg.mxu.cols, acc_type};
  }
  std::uint32_t& acc_word(std::uint32_t entry, std::uint32_t col) {
    return acc[std::size_t{entry} * cfg.mxu.cols + col];
  }

  void put32(std::uint64_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) ub[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
  std::uint32_t get32(std::uint64_t at) const {
    return std::uint32_t{ub[at]} | std::uint32_t{ub[at + 1]} << 8 |
           std::uint32_t{ub[at + 2]} << 16 | std::uint32_t{ub[at + 3]} << 24;
  }
  void put_bf16(std::uint64_t at, float v) {
    const std::uint32_t u = bits_of(exact::bf16(v));
    ub[at] = static_cast<std::uint8_t>(u >> 16);
    ub[at + 1] = static_cast<std::uint8_t>(u >> 24);
  }
  float get_bf16(std::uint64_t at) const {
    return float_of((std::uint32_t{ub[at]} | std::uint32_t{ub[at + 1]} << 8) << 16);
  }
  void put8(std::uint64_t at, int v) { ub[at] = static_cast<std::uint8_t>(v); }
  int get8(std::uint64_t at) const { return static_cast<std::int8_t>(ub[at]); }

  void put_params(std::uint64_t at, std::uint32_t bias, std::uint32_t scale, std::int32_t shift) {
    put32(at, bias);
    put32(at + 4, scale);
    put32(at + 8, static_cast<std::uint32_t>(shift));
  }
};

// Expects `f` to throw ProgramError whose message names every string in `words`.
template <class F>
void expect_program_error(F&& f, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no ProgramError thrown";
  } catch (const ProgramError& e) {
    for (const auto& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos)
          << "'" << w << "' not in: " << e.what();
  }
}

// An edit of a valid instruction and the words its ProgramError must name.
template <class I>
struct Refusal {
  std::function<void(I&)> edit;
  std::vector<std::string> words;
};

// `run` refuses each edit of `ok`, naming its words, before the unified buffer changes.
template <class I, class Run>
void expect_refusals(const Core& core, const I& ok, Run run,
                     const std::vector<Refusal<I>>& refusals) {
  const std::vector<std::uint8_t> before = core.ub;
  for (const Refusal<I>& r : refusals) {
    I inst = ok;
    r.edit(inst);
    expect_program_error([&] { run(inst); }, r.words);
  }
  EXPECT_EQ(core.ub, before);
}

// ---- activate ----

TEST(VectorActivate, IntAccToInt8RequantizesPerColumnThenRelu) {
  Core core;
  VectorOps ops(core.cfg);
  std::mt19937 rng(6);
  std::uniform_int_distribution<std::int32_t> accv(-3000000, 3000000);
  std::uniform_int_distribution<std::int32_t> biasv(-50000, 50000);
  std::uniform_real_distribution<double> log2_scale(-18.0, -8.0);
  isa::Activate a;
  a.src = AccAddr(3);
  a.dst = UbAddr(0x1000);
  a.params = UbAddr(0x200);
  a.rows = 5;
  a.cols = 6;  // fewer than the entry's mxu.cols words
  a.dst_stride = 8;
  a.func = isa::ActFunc::Relu;
  a.out_type = DType::Int8;
  std::vector<numerics::QuantizedMultiplier> q(a.cols);
  std::vector<std::int32_t> bias(a.cols);
  for (std::uint32_t c = 0; c < a.cols; ++c) {
    q[c] = numerics::quantize_multiplier(std::exp2(log2_scale(rng)));
    bias[c] = biasv(rng);
    core.put_params(a.params.value() + 12 * c, static_cast<std::uint32_t>(bias[c]),
                    static_cast<std::uint32_t>(q[c].multiplier_q31), q[c].shift);
  }
  core.acc_word(3, 0) = static_cast<std::uint32_t>(kI32Max);  // bias add saturates
  for (std::uint32_t r = 0; r < a.rows; ++r)
    for (std::uint32_t c = 0; c < a.cols; ++c)
      if (r + c > 0) core.acc_word(3 + r, c) = static_cast<std::uint32_t>(accv(rng));
  bias[0] = std::abs(bias[0]);
  core.put32(a.params.value(), static_cast<std::uint32_t>(bias[0]));

  const std::vector<std::uint8_t> before = core.ub;
  ops.activate(a, core.acc_view(), core.ub_view());
  for (std::uint32_t r = 0; r < a.rows; ++r) {
    for (std::uint32_t c = 0; c < a.cols; ++c) {
      const std::int64_t sum =
          exact::clamp(std::int64_t{static_cast<std::int32_t>(core.acc_word(3 + r, c))} + bias[c],
                       kI32Min, kI32Max);
      const std::int32_t expect = std::max(
          exact::requantize(static_cast<std::int32_t>(sum), q[c].multiplier_q31, q[c].shift), 0);
      EXPECT_EQ(core.get8(a.dst.value() + r * a.dst_stride + c), expect) << r << "," << c;
    }
    for (std::uint32_t g = a.cols; g < a.dst_stride; ++g) {
      const std::uint64_t at = a.dst.value() + r * a.dst_stride + g;
      EXPECT_EQ(core.ub[at], before[at]) << "gap byte " << at << " written";
    }
  }
}

TEST(VectorActivate, IntAccToInt32AddsBiasWithSaturationThenRelu) {
  Core core;
  VectorOps ops(core.cfg);
  isa::Activate a;
  a.src = AccAddr(0);
  a.dst = UbAddr(0x400);
  a.params = UbAddr(0);
  a.rows = 2;
  a.cols = 4;
  a.dst_stride = 16;
  a.out_type = DType::Int32;
  const std::vector<std::int32_t> acc = {kI32Max, kI32Min, -7, 9, 100, -100, 0, kI32Max - 1};
  const std::vector<std::int32_t> bias = {5, -5, 3, -20};
  for (std::uint32_t c = 0; c < a.cols; ++c)
    core.put_params(12 * c, static_cast<std::uint32_t>(bias[c]), 0, 0);
  for (std::uint32_t i = 0; i < acc.size(); ++i)
    core.acc_word(i / a.cols, i % a.cols) = static_cast<std::uint32_t>(acc[i]);
  for (isa::ActFunc f : {isa::ActFunc::None, isa::ActFunc::Relu}) {
    a.func = f;
    ops.activate(a, core.acc_view(), core.ub_view());
    for (std::uint32_t i = 0; i < acc.size(); ++i) {
      std::int64_t expect = exact::clamp(std::int64_t{acc[i]} + bias[i % a.cols], kI32Min, kI32Max);
      if (f == isa::ActFunc::Relu) expect = std::max<std::int64_t>(expect, 0);
      const std::uint64_t at = a.dst.value() + (i / a.cols) * a.dst_stride + 4 * (i % a.cols);
      EXPECT_EQ(static_cast<std::int32_t>(core.get32(at)), expect) << i;
    }
  }
}

TEST(VectorActivate, FloatAccScalesInFp32AndRoundsToBf16NearestEven) {
  Core core;
  core.acc_type = DType::Fp32;
  VectorOps ops(core.cfg);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> v(-8.0f, 8.0f);
  isa::Activate a;
  a.src = AccAddr(10);
  a.dst = UbAddr(0x800);
  a.params = UbAddr(0x100);
  a.rows = 7;
  a.cols = 16;
  a.dst_stride = 32;
  a.out_type = DType::Bf16;
  std::vector<float> bias(a.cols), scale(a.cols);
  for (std::uint32_t c = 0; c < a.cols; ++c) {
    bias[c] = v(rng);
    scale[c] = v(rng) / 4.0f;
    core.put_params(a.params.value() + 12 * c, bits_of(bias[c]), bits_of(scale[c]), 0);
  }
  for (std::uint32_t r = 0; r < a.rows; ++r)
    for (std::uint32_t c = 0; c < a.cols; ++c) core.acc_word(10 + r, c) = bits_of(v(rng));
  for (isa::ActFunc f : {isa::ActFunc::None, isa::ActFunc::Relu, isa::ActFunc::Relu6,
                         isa::ActFunc::Sigmoid, isa::ActFunc::Tanh}) {
    a.func = f;
    ops.activate(a, core.acc_view(), core.ub_view());
    for (std::uint32_t r = 0; r < a.rows; ++r)
      for (std::uint32_t c = 0; c < a.cols; ++c) {
        float y = (float_of(core.acc_word(10 + r, c)) + bias[c]) * scale[c];
        if (f == isa::ActFunc::Relu) y = y < 0.0f ? 0.0f : y;
        if (f == isa::ActFunc::Relu6) y = std::min(y < 0.0f ? 0.0f : y, 6.0f);
        if (f == isa::ActFunc::Sigmoid) y = 1.0f / (1.0f + std::exp(-y));
        if (f == isa::ActFunc::Tanh) y = std::tanh(y);
        EXPECT_EQ(bits_of(core.get_bf16(a.dst.value() + r * a.dst_stride + 2 * c)),
                  bits_of(exact::bf16(y)))
            << isa::name_of(f) << " " << r << "," << c;
      }
  }
}

TEST(VectorActivate, Bf16RoundingBreaksTiesToEven) {
  Core core;
  core.acc_type = DType::Fp32;
  VectorOps ops(core.cfg);
  // 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7 (even: 1); 1 + 3*2^-8 lies
  // halfway between 1 + 2^-7 and 1 + 2^-6 (even: 1 + 2^-6).
  const std::vector<float> ties = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8),
                                   -(1.0f + std::ldexp(1.0f, -8))};
  isa::Activate a;
  a.src = AccAddr(0);
  a.dst = UbAddr(0x100);
  a.params = UbAddr(0);
  a.rows = 1;
  a.cols = static_cast<std::uint16_t>(ties.size());
  a.dst_stride = 2 * a.cols;
  a.out_type = DType::Bf16;
  for (std::uint32_t c = 0; c < a.cols; ++c) {
    core.put_params(12 * c, bits_of(0.0f), bits_of(1.0f), 0);
    core.acc_word(0, c) = bits_of(ties[c]);
  }
  ops.activate(a, core.acc_view(), core.ub_view());
  for (std::uint32_t c = 0; c < a.cols; ++c)
    EXPECT_EQ(core.get_bf16(a.dst.value() + 2 * c), exact::bf16(ties[c])) << c;
}

TEST(VectorActivate, IntAccToFloatConvertsSaturatedSumThenScales) {
  Core core;
  VectorOps ops(core.cfg);
  isa::Activate a;
  a.src = AccAddr(0);
  a.dst = UbAddr(0x100);
  a.params = UbAddr(0);
  a.rows = 1;
  a.cols = 3;
  a.dst_stride = 12;
  a.func = isa::ActFunc::Sigmoid;
  a.out_type = DType::Fp32;
  const std::vector<std::int32_t> acc = {1234, -98765, kI32Max};
  const std::vector<std::int32_t> bias = {-1000, 4321, 1};
  const float scale = 1.0f / 4096.0f;
  for (std::uint32_t c = 0; c < a.cols; ++c) {
    core.put_params(12 * c, static_cast<std::uint32_t>(bias[c]), bits_of(scale), 0);
    core.acc_word(0, c) = static_cast<std::uint32_t>(acc[c]);
  }
  ops.activate(a, core.acc_view(), core.ub_view());
  for (std::uint32_t c = 0; c < a.cols; ++c) {
    const auto sum =
        static_cast<float>(exact::clamp(std::int64_t{acc[c]} + bias[c], kI32Min, kI32Max));
    const float y = 1.0f / (1.0f + std::exp(-(sum * scale)));
    EXPECT_EQ(core.get32(a.dst.value() + 4 * c), bits_of(y)) << c;
  }
}

TEST(VectorActivate, SoftmaxWorksAcrossTheRowAndSumsToOne) {
  Core core;
  core.acc_type = DType::Fp32;
  VectorOps ops(core.cfg);
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> v(-6.0f, 6.0f);
  isa::Activate a;
  a.src = AccAddr(20);
  a.dst = UbAddr(0x2000);
  a.params = UbAddr(0x40);
  a.rows = 4;
  a.cols = 10;
  a.dst_stride = 64;
  a.func = isa::ActFunc::Softmax;
  std::vector<float> bias(a.cols), scale(a.cols);
  for (std::uint32_t c = 0; c < a.cols; ++c) {
    bias[c] = v(rng);
    scale[c] = 0.5f + static_cast<float>(c) / 8.0f;
    core.put_params(a.params.value() + 12 * c, bits_of(bias[c]), bits_of(scale[c]), 0);
  }
  for (std::uint32_t r = 0; r < a.rows; ++r)
    for (std::uint32_t c = 0; c < a.cols; ++c) core.acc_word(20 + r, c) = bits_of(v(rng));
  for (DType out : {DType::Fp32, DType::Bf16}) {
    a.out_type = out;
    ops.activate(a, core.acc_view(), core.ub_view());
    for (std::uint32_t r = 0; r < a.rows; ++r) {
      std::vector<float> x(a.cols);
      for (std::uint32_t c = 0; c < a.cols; ++c)
        x[c] = (float_of(core.acc_word(20 + r, c)) + bias[c]) * scale[c];
      const float m = *std::max_element(x.begin(), x.end());
      float sum = 0.0f;
      double dsum = 0.0;
      for (float f : x) {
        sum += std::exp(f - m);
        dsum += std::exp(static_cast<double>(f) - m);
      }
      double total = 0.0;
      for (std::uint32_t c = 0; c < a.cols; ++c) {
        const std::uint64_t at = a.dst.value() + r * a.dst_stride + c * size_of(out);
        const float got = out == DType::Fp32 ? float_of(core.get32(at)) : core.get_bf16(at);
        const float y = std::exp(x[c] - m) / sum;
        EXPECT_EQ(bits_of(got), bits_of(out == DType::Fp32 ? y : exact::bf16(y))) << r << "," << c;
        EXPECT_NEAR(got, std::exp(static_cast<double>(x[c]) - m) / dsum,
                    out == DType::Fp32 ? 1e-6 : 4e-3);
        total += got;
      }
      EXPECT_NEAR(total, 1.0, out == DType::Fp32 ? 1e-5 : 2e-2);
    }
  }
}

// A valid activate whose fields the error tests change one at a time.
struct ActivateCase {
  Core core;
  isa::Activate a;
  ActivateCase() {
    a.src = AccAddr(0);
    a.dst = UbAddr(0x1000);
    a.params = UbAddr(0x100);
    a.rows = 4;
    a.cols = 8;
    a.dst_stride = 8;
    a.out_type = DType::Int8;
    for (std::uint32_t c = 0; c < a.cols; ++c)
      core.put_params(a.params.value() + 12 * c, 0, std::uint32_t{1} << 30, 1);
  }
  void run() {
    VectorOps ops(core.cfg);
    ops.activate(a, core.acc_view(), core.ub_view());
  }
};

TEST(VectorActivate, RejectsOutOfRangeFieldsNamingThem) {
  {
    ActivateCase t;
    t.a.params = UbAddr(static_cast<std::uint32_t>(t.core.ub.size() - 12 * t.a.cols + 1));
    expect_program_error([&] { t.run(); }, {"activate", "params"});
  }
  {
    ActivateCase t;
    t.a.dst = UbAddr(static_cast<std::uint32_t>(t.core.ub.size() - 3 * t.a.dst_stride - 7));
    expect_program_error([&] { t.run(); }, {"dst", "0x"});
  }
  {
    ActivateCase t;
    t.a.src = AccAddr(t.core.cfg.accumulators.entries - t.a.rows + 1);
    expect_program_error([&] { t.run(); },
                         {"src", std::to_string(t.core.cfg.accumulators.entries)});
  }
  {
    ActivateCase t;
    t.a.cols = static_cast<std::uint16_t>(t.core.cfg.mxu.cols + 1);
    expect_program_error([&] { t.run(); }, {"cols", std::to_string(t.core.cfg.mxu.cols)});
  }
  {
    ActivateCase t;
    t.a.cols = 0;
    expect_program_error([&] { t.run(); }, {"cols"});
  }
  {
    ActivateCase t;
    t.a.rows = 0;
    expect_program_error([&] { t.run(); }, {"rows"});
  }
  {
    ActivateCase t;
    t.a.dst_stride = t.a.cols - 1;
    expect_program_error([&] { t.run(); }, {"stride"});
  }
  {
    ActivateCase t;
    t.a.dst = UbAddr(t.a.params.value() + 12 * t.a.cols - 1);
    expect_program_error([&] { t.run(); }, {"dst", "params", "overlaps"});
  }
}

TEST(VectorActivate, RejectsUnsupportedFunctionAndOutputTypeCombinations) {
  for (isa::ActFunc f :
       {isa::ActFunc::Relu6, isa::ActFunc::Sigmoid, isa::ActFunc::Tanh, isa::ActFunc::Softmax}) {
    for (DType out : {DType::Int8, DType::Int32}) {
      ActivateCase t;
      t.a.func = f;
      t.a.out_type = out;
      t.a.dst_stride = t.a.cols * size_of(out);
      expect_program_error([&] { t.run(); },
                           {"func", std::string(isa::name_of(f)), std::string(name_of(out))});
    }
  }
  for (DType out : {DType::Int8, DType::Int32}) {
    ActivateCase t;
    t.core.acc_type = DType::Fp32;
    t.a.out_type = out;
    t.a.dst_stride = t.a.cols * size_of(out);
    expect_program_error([&] { t.run(); }, {"out", std::string(name_of(out)), "fp32"});
  }
}

TEST(VectorActivate, RejectsBadRequantParamsBeforeWritingAnything) {
  {
    ActivateCase t;
    const std::uint64_t last = t.a.params.value() + 12 * (t.a.cols - 1);
    t.core.put32(last + 8, static_cast<std::uint32_t>(numerics::kMaxRequantShift + 1));
    const std::vector<std::uint8_t> before = t.core.ub;
    expect_program_error([&] { t.run(); }, {"shift", "column 7"});
    EXPECT_EQ(t.core.ub, before);
  }
  {
    ActivateCase t;
    t.core.put32(t.a.params.value() + 4, static_cast<std::uint32_t>(-5));
    expect_program_error([&] { t.run(); }, {"scale", "column 0"});
  }
}

// ---- pool ----

struct PoolGeom {
  std::uint64_t oh, ow;
};
// docs/isa.md §4.8: out_h and out_w, or for 0 valid pooling's size.
PoolGeom geom_of(const isa::Pool& p) {
  return {p.out_h != 0 ? p.out_h : (p.in_h - p.kernel_h) / std::uint64_t{p.stride_h} + 1,
          p.out_w != 0 ? p.out_w : (p.in_w - p.kernel_w) / std::uint64_t{p.stride_w} + 1};
}

// The input elements output (img, oy, ox) pools in channel c, in window order (ky, then kx), the
// window positions outside the image skipped (docs/isa.md §4.8).
std::vector<std::uint64_t> window_of(const isa::Pool& p, std::uint64_t img, std::uint64_t oy,
                                     std::uint64_t ox, std::uint64_t c) {
  std::vector<std::uint64_t> elems;
  for (std::int64_t ky = 0; ky < p.kernel_h; ++ky)
    for (std::int64_t kx = 0; kx < p.kernel_w; ++kx) {
      const std::int64_t y = static_cast<std::int64_t>(oy * p.stride_h) - p.pad_top + ky;
      const std::int64_t x = static_cast<std::int64_t>(ox * p.stride_w) - p.pad_left + kx;
      if (y < 0 || y >= p.in_h || x < 0 || x >= p.in_w) continue;
      elems.push_back(((img * p.in_h + static_cast<std::uint64_t>(y)) * p.in_w +
                       static_cast<std::uint64_t>(x)) *
                          p.channels +
                      c);
    }
  return elems;
}

// TensorFlow's "same" padding along one axis (tf.nn.max_pool / avg_pool, padding="SAME"): out =
// ceil(in / stride), total padding max((out - 1) * stride + kernel - in, 0), the smaller half on
// top (left).
void same_padding(std::uint16_t in, std::uint16_t kernel, std::uint8_t stride, std::uint8_t& pad,
                  std::uint16_t& out) {
  out = static_cast<std::uint16_t>((in + stride - 1) / stride);
  const int total = std::max((out - 1) * stride + kernel - in, 0);
  pad = static_cast<std::uint8_t>(total / 2);
}

isa::Pool pool_case(isa::PoolKind kind, DType type) {
  isa::Pool p;
  p.src = UbAddr(0x100);
  p.dst = UbAddr(0x4000);
  p.in_h = 9;
  p.in_w = 8;
  p.channels = 3;
  p.kernel_h = 3;
  p.kernel_w = 2;
  p.stride_h = 2;  // overlapping windows vertically
  p.stride_w = 3;  // gaps between windows horizontally
  p.images = 2;
  p.kind = kind;
  p.type = type;
  return p;
}

// pool_case's images through overlapping 3x4 windows with "same" padding: 5x4 outputs, one row
// and one column padded on each side, so corners, edges and the inside hold 6, 8, 9 or 12 inputs.
isa::Pool same_pool_case(isa::PoolKind kind, DType type) {
  isa::Pool p = pool_case(kind, type);
  p.kernel_w = 4;
  p.stride_w = 2;
  same_padding(p.in_h, p.kernel_h, p.stride_h, p.pad_top, p.out_h);
  same_padding(p.in_w, p.kernel_w, p.stride_w, p.pad_left, p.out_w);
  return p;
}

// Fills the input of `p` from `value(i)` and returns the expected output bytes in NHWC order: the
// written rule over window_of, int8 average by exact rounding division, bf16 average summed in
// fp32 in window order and rounded by exact::bf16, fp32 average the same sum and quotient
// unrounded.
template <class Value>
std::vector<std::uint32_t> pool_expected(const isa::Pool& p, Core& core, Value value) {
  const bool int8 = p.type == DType::Int8;
  const bool fp32 = p.type == DType::Fp32;
  const std::uint64_t in_elems = std::uint64_t{p.images} * p.in_h * p.in_w * p.channels;
  for (std::uint64_t i = 0; i < in_elems; ++i) {
    if (int8)
      core.put8(p.src.value() + i, static_cast<int>(value(i)));
    else if (fp32)
      core.put32(p.src.value() + 4 * i, bits_of(static_cast<float>(value(i))));
    else
      core.put_bf16(p.src.value() + 2 * i, static_cast<float>(value(i)));
  }
  const auto at = [&](std::uint64_t i) {
    if (fp32) return float_of(core.get32(p.src.value() + 4 * i));
    return int8 ? static_cast<float>(core.get8(p.src.value() + i))
                : core.get_bf16(p.src.value() + 2 * i);
  };
  std::vector<std::uint32_t> expect;
  const PoolGeom g = geom_of(p);
  for (std::uint64_t n = 0; n < p.images; ++n)
    for (std::uint64_t oy = 0; oy < g.oh; ++oy)
      for (std::uint64_t ox = 0; ox < g.ow; ++ox)
        for (std::uint64_t c = 0; c < p.channels; ++c) {
          const std::vector<std::uint64_t> win = window_of(p, n, oy, ox, c);
          float mx = -std::numeric_limits<float>::infinity(), sum = 0.0f;
          std::int64_t isum = 0;
          for (std::uint64_t i : win) {
            mx = std::max(mx, at(i));
            sum += at(i);
            isum += static_cast<std::int64_t>(at(i));
          }
          const auto count = static_cast<std::int64_t>(win.size());
          if (int8)
            expect.push_back(static_cast<std::uint8_t>(p.kind == isa::PoolKind::Max
                                                           ? static_cast<std::int64_t>(mx)
                                                           : exact::round_div(isum, count)));
          else if (fp32)
            expect.push_back(
                bits_of(p.kind == isa::PoolKind::Max ? mx : sum / static_cast<float>(count)));
          else
            expect.push_back(bits_of(p.kind == isa::PoolKind::Max
                                         ? mx
                                         : exact::bf16(sum / static_cast<float>(count))) >>
                             16);
        }
  return expect;
}

std::vector<std::uint32_t> pool_output(const isa::Pool& p, const Core& core) {
  const PoolGeom g = geom_of(p);
  const std::uint64_t n = std::uint64_t{p.images} * g.oh * g.ow * p.channels;
  std::vector<std::uint32_t> out;
  for (std::uint64_t i = 0; i < n; ++i)
    out.push_back(p.type == DType::Fp32 ? core.get32(p.dst.value() + 4 * i)
                  : p.type == DType::Int8
                      ? std::uint32_t{core.ub[p.dst.value() + i]}
                      : core.ub[p.dst.value() + 2 * i] |
                            std::uint32_t{core.ub[p.dst.value() + 2 * i + 1]} << 8);
  return out;
}

// docs/isa.md §4.8: fp32 max is exact (the largest value, bit for bit) and fp32 avg the fp32 sum
// in window order divided by the count, not rounded further; valid and "same" windows.
TEST(VectorPool, Fp32MaxIsExactAndAvgSumsInWindowOrderUnrounded) {
  for (isa::PoolKind kind : {isa::PoolKind::Max, isa::PoolKind::Avg})
    for (const bool same : {false, true}) {
      Core core;
      const isa::Pool p = same ? same_pool_case(kind, DType::Fp32) : pool_case(kind, DType::Fp32);
      std::mt19937 rng(21);
      std::uniform_real_distribution<float> f(-1e3f, 1e3f);
      const std::vector<std::uint32_t> expect =
          pool_expected(p, core, [&](std::uint64_t) { return double{f(rng)}; });
      VectorOps(core.cfg).pool(p, core.ub_view());
      EXPECT_EQ(pool_output(p, core), expect) << isa::name_of(kind) << " same " << same;
    }
}

// fp32 max pooling: a NaN in the window gives NaN, equal values (+0 and -0) give the first.
TEST(VectorPool, Fp32MaxPropagatesNanAndKeepsTheFirstOfEqualValues) {
  Core core;
  isa::Pool p = pool_case(isa::PoolKind::Max, DType::Fp32);
  p.images = 1, p.in_h = 1, p.in_w = 2, p.channels = 2, p.kernel_h = 1, p.kernel_w = 2;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float in[] = {-0.0f, 1.0f, 0.0f, nan};  // pixel 0: {-0, 1}, pixel 1: {+0, NaN}
  for (std::uint64_t i = 0; i < 4; ++i) core.put32(p.src.value() + 4 * i, bits_of(in[i]));
  VectorOps(core.cfg).pool(p, core.ub_view());
  EXPECT_EQ(core.get32(p.dst.value()), bits_of(-0.0f));
  EXPECT_TRUE(std::isnan(float_of(core.get32(p.dst.value() + 4))));
}

// TensorFlow's "same" pooling: window positions in the padding are skipped; max is the largest of
// the positions inside, avg divides their sum by their count (tf.nn.avg_pool's SAME semantics).
TEST(VectorPool, SamePaddingSkipsThePositionsOutsideTheImage) {
  for (DType type : {DType::Int8, DType::Bf16})
    for (isa::PoolKind kind : {isa::PoolKind::Max, isa::PoolKind::Avg}) {
      Core core;
      const isa::Pool p = same_pool_case(kind, type);
      ASSERT_EQ(p.pad_top, 1);
      ASSERT_EQ(p.pad_left, 1);
      std::mt19937 rng(14);
      std::uniform_int_distribution<int> i8(-128, 127);
      std::uniform_real_distribution<float> f(-100.0f, 100.0f);
      const std::vector<std::uint32_t> expect = pool_expected(p, core, [&](std::uint64_t) {
        return type == DType::Int8 ? static_cast<double>(i8(rng)) : double{f(rng)};
      });
      VectorOps(core.cfg).pool(p, core.ub_view());
      EXPECT_EQ(pool_output(p, core), expect) << isa::name_of(kind) << " " << name_of(type);
    }
}

// A 3x3 image of 1..9 through a 3x3 window with one pixel of padding all round: the corner
// window holds 1, 2, 4, 5 (sum 12) and averages 3, not 12 / 9; the edge window below the top
// holds 1..6 (21 / 6 = 3.5, rounded away from zero to 4); the centre holds all nine (5).
TEST(VectorPool, AvgDividesByTheCountOfPositionsInsideTheImage) {
  Core core;
  isa::Pool p;
  p.src = UbAddr(0);
  p.dst = UbAddr(0x100);
  p.in_h = p.in_w = 3;
  p.channels = p.images = 1;
  p.kernel_h = p.kernel_w = 3;
  p.stride_h = p.stride_w = 1;
  p.pad_top = p.pad_left = 1;
  p.out_h = p.out_w = 3;
  p.kind = isa::PoolKind::Avg;
  for (int i = 0; i < 9; ++i) core.put8(static_cast<std::uint64_t>(i), i + 1);
  VectorOps(core.cfg).pool(p, core.ub_view());
  EXPECT_EQ(core.get8(0x100), 3);
  EXPECT_EQ(core.get8(0x101), 4);
  EXPECT_EQ(core.get8(0x104), 5);
}

// Zero pads and out dims equal to the valid ones are valid pooling, byte for byte: what every
// program written before padding existed (out_h = out_w = 0) computes.
TEST(VectorPool, ZeroPadsAndTheValidOutDimsPoolExactlyAsValidPooling) {
  for (DType type : {DType::Int8, DType::Bf16})
    for (isa::PoolKind kind : {isa::PoolKind::Max, isa::PoolKind::Avg}) {
      Core valid, given;
      isa::Pool p = pool_case(kind, type);
      std::mt19937 rng(15);
      for (std::uint64_t i = 0; i < 0x4000; ++i)
        valid.ub[i] = given.ub[i] = static_cast<std::uint8_t>(rng());
      VectorOps(valid.cfg).pool(p, valid.ub_view());
      const PoolGeom g = geom_of(p);
      p.out_h = static_cast<std::uint16_t>(g.oh);
      p.out_w = static_cast<std::uint16_t>(g.ow);
      VectorOps(given.cfg).pool(p, given.ub_view());
      EXPECT_EQ(given.ub, valid.ub) << isa::name_of(kind) << " " << name_of(type);
    }
}

TEST(VectorPool, Int8MaxAndAvgOverValidWindowsOfEveryImage) {
  for (isa::PoolKind kind : {isa::PoolKind::Max, isa::PoolKind::Avg}) {
    Core core;
    const isa::Pool p = pool_case(kind, DType::Int8);
    std::mt19937 rng(9);
    std::uniform_int_distribution<int> v(-128, 127);
    const std::vector<std::uint32_t> expect =
        pool_expected(p, core, [&](std::uint64_t) { return v(rng); });
    VectorOps(core.cfg).pool(p, core.ub_view());
    EXPECT_EQ(pool_output(p, core), expect) << isa::name_of(kind);
  }
}

TEST(VectorPool, Int8AvgRoundsHalfAwayFromZero) {
  Core core;
  VectorOps ops(core.cfg);
  isa::Pool p;
  p.src = UbAddr(0);
  p.dst = UbAddr(0x100);
  p.in_h = 1;
  p.in_w = 2;
  p.channels = 4;
  p.kernel_h = 1;
  p.kernel_w = 2;
  p.stride_h = 1;
  p.stride_w = 1;
  p.images = 1;
  p.kind = isa::PoolKind::Avg;
  const std::vector<int> left = {-3, 3, -128, 127}, right = {-2, 2, -127, 126};
  for (std::uint64_t c = 0; c < p.channels; ++c) {
    core.put8(c, left[c]);
    core.put8(p.channels + c, right[c]);
  }
  ops.pool(p, core.ub_view());
  for (std::uint64_t c = 0; c < p.channels; ++c)
    EXPECT_EQ(core.get8(p.dst.value() + c), std::round((left[c] + right[c]) / 2.0)) << c;
}

TEST(VectorPool, Bf16MaxAndAvgSumInFp32InWindowOrder) {
  for (isa::PoolKind kind : {isa::PoolKind::Max, isa::PoolKind::Avg}) {
    Core core;
    const isa::Pool p = pool_case(kind, DType::Bf16);
    std::mt19937 rng(10);
    std::uniform_real_distribution<float> v(-100.0f, 100.0f);
    const std::vector<std::uint32_t> expect =
        pool_expected(p, core, [&](std::uint64_t) { return v(rng); });
    VectorOps(core.cfg).pool(p, core.ub_view());
    EXPECT_EQ(pool_output(p, core), expect) << isa::name_of(kind);
  }
}

TEST(VectorPool, RejectsBadGeometryRangesAndOverlapNamingTheField) {
  Core core;
  VectorOps ops(core.cfg);
  const auto run = [&](const isa::Pool& p) { ops.pool(p, core.ub_view()); };
  const isa::Pool ok = pool_case(isa::PoolKind::Max, DType::Int8);
  {
    isa::Pool p = ok;
    p.kernel_h = static_cast<std::uint16_t>(p.in_h + 1);
    expect_program_error([&] { run(p); }, {"pool", "kernel_h", std::to_string(p.in_h)});
  }
  {
    isa::Pool p = ok;
    p.kernel_w = 0;
    expect_program_error([&] { run(p); }, {"kernel_w"});
  }
  {
    isa::Pool p = ok;
    p.stride_w = 0;
    expect_program_error([&] { run(p); }, {"stride_w"});
  }
  {
    isa::Pool p = ok;
    p.pad_top = 1;
    expect_program_error([&] { run(p); }, {"pad_top = 1", "out_h = 0", "valid pooling"});
  }
  const isa::Pool same = same_pool_case(isa::PoolKind::Avg, DType::Int8);
  {
    isa::Pool p = same;
    p.pad_left = static_cast<std::uint8_t>(p.kernel_w);
    expect_program_error([&] { run(p); },
                         {"pad_left = " + std::to_string(p.kernel_w), "kernel_w", "no input"});
  }
  {
    // Window oy starts at row oy * stride_h - pad_top: the one after the last that starts inside
    // the image starts at in_h.
    isa::Pool p = same;
    p.out_h = static_cast<std::uint16_t>((p.in_h + p.pad_top) / p.stride_h + 1);
    expect_program_error([&] { run(p); },
                         {"out_h = " + std::to_string(p.out_h), "past the 9 in_h inputs"});
    p.out_h = static_cast<std::uint16_t>(p.out_h - 1);
    run(p);
  }
  {
    isa::Pool p = ok;
    p.channels = 0;
    expect_program_error([&] { run(p); }, {"channels"});
  }
  {
    isa::Pool p = ok;
    p.type = DType::Int32;
    expect_program_error([&] { run(p); }, {"type", "int32"});
  }
  {
    isa::Pool p = ok;
    p.src = UbAddr(static_cast<std::uint32_t>(core.ub.size() - 10));
    expect_program_error([&] { run(p); }, {"src", "0x"});
  }
  {
    isa::Pool p = ok;
    p.dst = UbAddr(static_cast<std::uint32_t>(core.ub.size() - 1));
    expect_program_error([&] { run(p); }, {"dst"});
  }
  {
    isa::Pool p = ok;
    p.dst = UbAddr(p.src.value() + 7);
    const std::vector<std::uint8_t> before = core.ub;
    expect_program_error([&] { run(p); }, {"dst", "src", "overlaps"});
    EXPECT_EQ(core.ub, before);
  }
}

// ---- softmax (rows wider than an accumulator entry) ----

// Softmax of fp32 rows in the documented order: row maximum, exp(x - max), sum in index order,
// divide — each step one fp32 operation.
std::vector<float> ref_softmax(const std::vector<float>& x) {
  const float m = *std::max_element(x.begin(), x.end());
  std::vector<float> y(x.size());
  float sum = 0.0f;
  for (std::size_t i = 0; i < x.size(); ++i) sum += (y[i] = std::exp(x[i] - m));
  for (float& v : y) v /= sum;
  return y;
}

TEST(VectorSoftmax, NormalizesEachRowAcrossAllItsColumnsInPlaceOrNot) {
  Core core;
  VectorOps ops(core.cfg);
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> v(-20.0f, 20.0f);
  isa::Softmax s;
  s.src = UbAddr(0x100);
  s.rows = 3;
  s.cols = 1000;  // wider than any accumulator entry (256 values)
  s.src_stride = 4000 + 16;
  std::vector<std::vector<float>> x(s.rows, std::vector<float>(s.cols));
  auto fill = [&] {
    for (std::uint32_t r = 0; r < s.rows; ++r)
      for (std::uint32_t c = 0; c < s.cols; ++c)
        core.put32(s.src.value() + r * s.src_stride + 4 * c, bits_of(x[r][c]));
  };
  for (auto& row : x)
    for (float& f : row) f = v(rng);
  for (const bool in_place : {false, true}) {
    fill();
    s.dst = in_place ? s.src : UbAddr(0x8000);
    s.dst_stride = in_place ? s.src_stride : 4000;
    ops.softmax(s, core.ub_view());
    for (std::uint32_t r = 0; r < s.rows; ++r) {
      const std::vector<float> y = ref_softmax(x[r]);
      double total = 0.0;
      for (std::uint32_t c = 0; c < s.cols; ++c) {
        const float got = float_of(core.get32(s.dst.value() + r * s.dst_stride + 4 * c));
        ASSERT_EQ(bits_of(got), bits_of(y[c])) << "row " << r << " col " << c;
        total += got;
      }
      EXPECT_NEAR(total, 1.0, 1e-4);
    }
  }
}

TEST(VectorSoftmax, RejectsEmptyRowsShortStridesOverlapsAndRangesPastTheBuffer) {
  Core core;
  VectorOps ops(core.cfg);
  isa::Softmax ok;
  ok.src = UbAddr(0x100);
  ok.dst = UbAddr(0x4000);
  ok.rows = 2;
  ok.cols = 10;
  ok.src_stride = ok.dst_stride = 40;
  ops.softmax(ok, core.ub_view());
  const std::uint64_t ub = core.ub_view().bytes;
  const struct {
    const char* name;
    void (*edit)(isa::Softmax&, std::uint64_t);
    const char* expect;
  } cases[] = {
      {"rows 0", [](isa::Softmax& s, std::uint64_t) { s.rows = 0; }, "softmax: rows = 0"},
      {"cols 0", [](isa::Softmax& s, std::uint64_t) { s.cols = 0; }, "softmax: cols = 0"},
      {"short src stride", [](isa::Softmax& s, std::uint64_t) { s.src_stride = 36; },
       "softmax: src_stride = 36 bytes (must be >= cols 10 x 4"},
      {"short dst stride", [](isa::Softmax& s, std::uint64_t) { s.dst_stride = 4; },
       "softmax: dst_stride = 4 bytes"},
      {"src past the end",
       [](isa::Softmax& s, std::uint64_t u) { s.src = UbAddr(static_cast<std::uint32_t>(u - 60)); },
       "softmax: src = "},
      {"dst past the end",
       [](isa::Softmax& s, std::uint64_t u) { s.dst = UbAddr(static_cast<std::uint32_t>(u - 4)); },
       "softmax: dst = "},
      {"overlap", [](isa::Softmax& s, std::uint64_t) { s.dst = UbAddr(0x104); }, "overlaps src"},
      {"in place with another stride",
       [](isa::Softmax& s, std::uint64_t) { s.dst = s.src, s.dst_stride = 44; },
       "in place needs dst = src and dst_stride = src_stride"},
  };
  for (const auto& c : cases) {
    isa::Softmax s = ok;
    c.edit(s, ub);
    try {
      ops.softmax(s, core.ub_view());
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const ProgramError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos)
          << c.name << ": " << e.what();
    }
  }
}

// ---- eltwise ----

// count elements of `type` at a, b and dst.
isa::Eltwise eltwise_case(DType type, std::uint32_t count, std::uint32_t a, std::uint32_t b,
                          std::uint32_t dst) {
  isa::Eltwise e;
  e.a = UbAddr(a);
  e.b = UbAddr(b);
  e.dst = UbAddr(dst);
  e.count = count;
  e.type = type;
  return e;
}

TEST(VectorEltwise, Int8OpsSaturateAndMulRoundsHalfAwayAfterShift) {
  Core core;
  VectorOps ops(core.cfg);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> v(-128, 127);
  isa::Eltwise e = eltwise_case(DType::Int8, 1500, 0x100, 0x800, 0x1000);
  std::vector<int> a(e.count), b(e.count);
  for (std::uint32_t i = 0; i < e.count; ++i) {
    a[i] = i < 4 ? (i % 2 ? -128 : 127) : v(rng);  // saturating pairs first
    b[i] = i < 4 ? a[i] : v(rng);
    core.put8(e.a.value() + i, a[i]);
    core.put8(e.b.value() + i, b[i]);
  }
  for (isa::EltOp op :
       {isa::EltOp::Add, isa::EltOp::Sub, isa::EltOp::Mul, isa::EltOp::Max, isa::EltOp::Min}) {
    for (int shift : {0, 1, 7}) {
      if (op != isa::EltOp::Mul && shift != 0) continue;
      e.op = op;
      e.shift = static_cast<std::int8_t>(shift);
      ops.eltwise(e, core.ub_view());
      for (std::uint32_t i = 0; i < e.count; ++i) {
        double expect = 0;
        switch (op) {
          case isa::EltOp::Add: expect = a[i] + b[i]; break;
          case isa::EltOp::Sub: expect = a[i] - b[i]; break;
          case isa::EltOp::Mul: expect = std::round(a[i] * b[i] / std::ldexp(1.0, shift)); break;
          case isa::EltOp::Max: expect = std::max(a[i], b[i]); break;
          case isa::EltOp::Min: expect = std::min(a[i], b[i]); break;
          default: ADD_FAILURE() << "not an int8 op";
        }
        expect = std::min(std::max(expect, -128.0), 127.0);
        EXPECT_EQ(core.get8(e.dst.value() + i), expect)
            << isa::name_of(op) << " shift " << shift << " " << a[i] << "," << b[i];
      }
    }
  }
}

const isa::EltOp kEltOps[] = {isa::EltOp::Add, isa::EltOp::Sub, isa::EltOp::Mul, isa::EltOp::Max,
                              isa::EltOp::Min};

// The fp32 result of a float op: add, sub and mul in float64, exact here and rounded once to
// fp32 (the correctly rounded fp32 operation), max and min as numerics::max_float and min_float
// define them (a NaN operand gives NaN; equal operands give the first). The gradient ops
// (docs/isa.md §4.9, a = y, b = dy) select, or round each step in float64 the same way in the
// written order.
float fp32_op(isa::EltOp op, float x, float y) {
  const auto r = [](double v) { return static_cast<float>(v); };
  switch (op) {
    case isa::EltOp::Add: return r(double{x} + y);
    case isa::EltOp::Sub: return r(double{x} - y);
    case isa::EltOp::Mul: return r(double{x} * y);
    case isa::EltOp::Max: return numerics::max_float(x, y);
    case isa::EltOp::Min: return numerics::min_float(x, y);
    case isa::EltOp::ReluGrad: return x > 0.0f ? y : 0.0f;
    case isa::EltOp::Relu6Grad: return x > 0.0f && x < 6.0f ? y : 0.0f;
    case isa::EltOp::SigmoidGrad: return r(double{y} * r(double{x} * r(1.0 - double{x})));
    case isa::EltOp::TanhGrad: return r(double{y} * r(1.0 - double{r(double{x} * x)}));
    case isa::EltOp::Div: return r(double{x} / y);  // float64 keeps 2*24+2 bits: one rounding
  }
  return 0.0f;
}

// With a multiplier, int8 mul requantizes the exact product (numerics::requantize's rule,
// computed here with exact integer arithmetic) and the shift may be negative.
TEST(VectorEltwise, Int8MulWithAMultiplierRequantizesTheExactProduct) {
  Core core;
  VectorOps ops(core.cfg);
  isa::Eltwise e = eltwise_case(DType::Int8, 256 * 16, 0x100, 0x1100, 0x2100);
  e.op = isa::EltOp::Mul;
  for (std::uint32_t i = 0; i < e.count; ++i) {
    core.put8(e.a.value() + i, static_cast<int>(i % 256) - 128);
    core.put8(e.b.value() + i, static_cast<int>(i / 16) - 128);  // every pair of a and b
  }
  for (const auto& [m, shift] : {std::pair{1518500250, 7}, std::pair{1 << 30, -3},
                                 std::pair{exact::kI32Max, 0}, std::pair{1 << 30, 31}}) {
    e.multiplier = m;
    e.shift = static_cast<std::int8_t>(shift);
    ops.eltwise(e, core.ub_view());
    for (std::uint32_t i = 0; i < e.count; ++i) {
      const int x = core.get8(e.a.value() + i), y = core.get8(e.b.value() + i);
      ASSERT_EQ(core.get8(e.dst.value() + i), exact::requantize(x * y, m, shift))
          << x << " * " << y << " m " << m << " shift " << shift;
    }
  }
}

// bf16 and fp32 operands: one fp32 operation each (on signed zeros and NaN too), then bf16
// rounds the result to nearest even.
TEST(VectorEltwise, FloatOpsAreOneFp32OperationRoundedToTheirType) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<float, float>> special = {
      {-0.0f, 0.0f}, {0.0f, -0.0f}, {nan, 1.0f}, {1.0f, nan}, {3.0f, 3.0f}};
  for (DType type : {DType::Bf16, DType::Fp32}) {
    Core core;
    VectorOps ops(core.cfg);
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> v(-1e4f, 1e4f);
    isa::Eltwise e = eltwise_case(type, 1000, 0x100, 0x2100, 0x4100);
    const bool bf16 = type == DType::Bf16;
    const auto put = [&](std::uint64_t base, std::uint32_t i, float x) {
      if (bf16)
        core.put_bf16(base + 2 * i, x);
      else
        core.put32(base + 4 * i, bits_of(x));
    };
    const auto get = [&](std::uint64_t base, std::uint32_t i) {
      return bf16 ? core.get_bf16(base + 2 * i) : float_of(core.get32(base + 4 * i));
    };
    for (std::uint32_t i = 0; i < e.count; ++i) {
      const auto [x, y] = i < special.size() ? special[i] : std::pair{v(rng), v(rng)};
      put(e.a.value(), i, x);
      put(e.b.value(), i, y);
    }
    for (isa::EltOp op : kEltOps) {
      e.op = op;
      ops.eltwise(e, core.ub_view());
      for (std::uint32_t i = 0; i < e.count; ++i) {
        float expect = fp32_op(op, get(e.a.value(), i), get(e.b.value(), i));
        if (bf16) expect = exact::bf16(expect);
        const float got = get(e.dst.value(), i);
        if (std::isnan(expect))
          EXPECT_TRUE(std::isnan(got)) << name_of(type) << " " << isa::name_of(op) << " " << i;
        else
          EXPECT_EQ(bits_of(got), bits_of(expect))
              << name_of(type) << " " << isa::name_of(op) << " " << i;
      }
    }
  }
}

const isa::EltOp kGradOps[] = {isa::EltOp::ReluGrad, isa::EltOp::Relu6Grad, isa::EltOp::SigmoidGrad,
                               isa::EltOp::TanhGrad};

// a = the activation's output y, b = dy: y spread over the relu6 edges and sigmoid's and tanh's
// ranges, signed zeros, NaN; every result bit for bit (in place too: dst = a).
TEST(VectorEltwise, GradientOpsSelectOrRoundEachFp32StepInTheWrittenOrder) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<float, float>> special = {
      {0.0f, 2.0f}, {-0.0f, 2.0f}, {6.0f, 2.0f},   {5.9999995f, -2.0f}, {1e-45f, 3.0f},
      {nan, 1.0f},  {0.5f, nan},   {-1.0f, -3.0f}, {0.99999994f, 1.0f}, {7.0f, -0.0f}};
  Core core;
  VectorOps ops(core.cfg);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> y_of(-1.5f, 7.5f), dy_of(-10.0f, 10.0f);
  isa::Eltwise e = eltwise_case(DType::Fp32, 2000, 0x100, 0x2100, 0x4100);
  std::vector<float> ys(e.count), dys(e.count);
  for (std::uint32_t i = 0; i < e.count; ++i) {
    std::tie(ys[i], dys[i]) = i < special.size() ? special[i] : std::pair{y_of(rng), dy_of(rng)};
    core.put32(e.a.value() + 4 * i, bits_of(ys[i]));
    core.put32(e.b.value() + 4 * i, bits_of(dys[i]));
  }
  for (const bool in_place : {false, true})
    for (isa::EltOp op : kGradOps) {
      e.op = op;
      e.dst = in_place ? e.a : UbAddr(0x4100);
      for (std::uint32_t i = 0; i < e.count; ++i) core.put32(e.a.value() + 4 * i, bits_of(ys[i]));
      ops.eltwise(e, core.ub_view());
      for (std::uint32_t i = 0; i < e.count; ++i) {
        const float expect = fp32_op(op, ys[i], dys[i]);
        const float got = float_of(core.get32(e.dst.value() + 4 * i));
        if (std::isnan(expect))
          EXPECT_TRUE(std::isnan(got)) << isa::name_of(op) << " " << i;
        else
          ASSERT_EQ(bits_of(got), bits_of(expect))
              << isa::name_of(op) << " y " << ys[i] << " dy " << dys[i];
      }
    }
}

// docs/isa.md §4.9: the gradient ops decode with any element type but execute on fp32 only; the
// refusal names the op and the type and writes nothing.
TEST(VectorEltwise, GradientOpsRefuseEveryTypeButFp32NamingOpAndType) {
  Core core;
  VectorOps ops(core.cfg);
  const std::vector<std::uint8_t> before = core.ub;
  for (isa::EltOp op : kGradOps)
    for (DType type : {DType::Int8, DType::Bf16}) {
      isa::Eltwise e = eltwise_case(type, 16, 0x100, 0x200, 0x300);
      e.op = op;
      expect_program_error(
          [&] { ops.eltwise(e, core.ub_view()); },
          {"eltwise", std::string(isa::name_of(op)), std::string(name_of(type)), "fp32"});
    }
  EXPECT_EQ(core.ub, before);
}

TEST(VectorEltwise, InPlaceIsAllowedButPartialOverlapIsNot) {
  Core core;
  VectorOps ops(core.cfg);
  isa::Eltwise e;
  e.a = UbAddr(0x100);
  e.b = UbAddr(0x200);
  e.dst = e.a;
  e.count = 64;
  e.op = isa::EltOp::Add;
  std::vector<int> a(e.count), b(e.count);
  for (std::uint32_t i = 0; i < e.count; ++i) {
    a[i] = static_cast<int>(i) - 32;
    b[i] = 3 * static_cast<int>(i) - 90;
    core.put8(e.a.value() + i, a[i]);
    core.put8(e.b.value() + i, b[i]);
  }
  ops.eltwise(e, core.ub_view());
  for (std::uint32_t i = 0; i < e.count; ++i)
    EXPECT_EQ(core.get8(e.a.value() + i), std::min(std::max(a[i] + b[i], -128), 127));
  e.dst = UbAddr(e.b.value() + 1);
  expect_program_error([&] { ops.eltwise(e, core.ub_view()); }, {"dst", "overlaps", "b"});
}

TEST(VectorEltwise, RejectsBadFieldsNamingThem) {
  Core core;
  VectorOps ops(core.cfg);
  isa::Eltwise ok;
  ok.a = UbAddr(0);
  ok.b = UbAddr(0x100);
  ok.dst = UbAddr(0x200);
  ok.count = 16;
  const auto run = [&](const isa::Eltwise& e) { ops.eltwise(e, core.ub_view()); };
  const auto end = static_cast<std::uint32_t>(core.ub.size());
  {
    isa::Eltwise e = ok;
    e.a = UbAddr(end - 15);
    expect_program_error([&] { run(e); }, {"eltwise", "a = 0x"});
  }
  {
    isa::Eltwise e = ok;
    e.b = UbAddr(end);
    expect_program_error([&] { run(e); }, {"b = 0x"});
  }
  {
    isa::Eltwise e = ok;
    e.dst = UbAddr(end - 1);
    expect_program_error([&] { run(e); }, {"dst = 0x"});
  }
  {
    isa::Eltwise e = ok;
    e.count = 0;
    expect_program_error([&] { run(e); }, {"count"});
  }
  {
    isa::Eltwise e = ok;
    e.shift = 2;
    expect_program_error([&] { run(e); }, {"shift", "add"});
  }
  {
    isa::Eltwise e = ok;
    e.op = isa::EltOp::Mul;
    e.shift = static_cast<std::int8_t>(numerics::kMaxRequantShift + 1);
    expect_program_error([&] { run(e); }, {"shift"});
  }
  {
    isa::Eltwise e = ok;
    e.op = isa::EltOp::Mul;
    e.shift = -1;
    expect_program_error([&] { run(e); }, {"shift = -1", "without a multiplier", "0..31"});
    e.multiplier = 1 << 30;
    e.shift = static_cast<std::int8_t>(numerics::kMinRequantShift - 1);
    expect_program_error([&] { run(e); }, {"shift = -32", "with a multiplier", "-31..31"});
    e.shift = 0;
    e.multiplier = -5;
    expect_program_error([&] { run(e); }, {"multiplier = -5", ">= 0"});
  }
  {
    isa::Eltwise e = ok;
    e.type = DType::Bf16;
    e.op = isa::EltOp::Mul;
    e.multiplier = 1 << 30;
    expect_program_error([&] { run(e); }, {"multiplier", "bf16", "must be 0"});
  }
  {
    isa::Eltwise e = ok;
    e.type = DType::Int32;
    expect_program_error([&] { run(e); }, {"type", "int32", "int8, bf16, fp32"});
  }
}

// ---- eltwise: a broadcast b (b_period) and div ----

// docs/isa.md §4.9: with b_period = p > 0, element i reads b[i mod p]; p = 1 is a scalar, p = 7 one
// value per channel of a 7-channel NHWC tensor, p = count the unbroadcast form. Every type, with
// the int8 ops' saturation and the float ops' fp32 rounding, against the written rule with an
// explicit i % p; b's bytes after its p elements are never read (they hold NaN or -128 here).
TEST(VectorEltwise, ABroadcastBReadsElementIModuloBPeriod) {
  constexpr std::uint32_t kCount = 3 * 7 * 5;  // 5 pixels of 7 channels, 3 images
  for (DType type : {DType::Int8, DType::Bf16, DType::Fp32})
    for (std::uint32_t p : {1u, 7u, kCount}) {
      Core core;
      VectorOps ops(core.cfg);
      std::mt19937 rng(23 + p);
      std::uniform_real_distribution<float> v(-100.0f, 100.0f);
      std::uniform_int_distribution<int> q(-128, 127);
      isa::Eltwise e = eltwise_case(type, kCount, 0x100, 0x2100, 0x4100);
      e.b_period = p;
      const std::uint64_t es = size_of(type);
      std::vector<float> af(kCount), bf(kCount);
      std::vector<int> ai(kCount), bi(kCount);
      for (std::uint32_t i = 0; i < kCount; ++i) {
        ai[i] = q(rng), bi[i] = i < p ? q(rng) : -128;
        af[i] = v(rng), bf[i] = i < p ? v(rng) : std::numeric_limits<float>::quiet_NaN();
        if (type == DType::Int8) {
          core.put8(e.a.value() + i, ai[i]);
          core.put8(e.b.value() + i, bi[i]);
        } else if (type == DType::Bf16) {
          af[i] = exact::bf16(af[i]), bf[i] = exact::bf16(bf[i]);
          core.put_bf16(e.a.value() + 2 * i, af[i]);
          core.put_bf16(e.b.value() + 2 * i, bf[i]);
        } else {
          core.put32(e.a.value() + 4 * i, bits_of(af[i]));
          core.put32(e.b.value() + 4 * i, bits_of(bf[i]));
        }
      }
      for (isa::EltOp op : kEltOps) {
        e.op = op;
        ops.eltwise(e, core.ub_view());
        for (std::uint32_t i = 0; i < kCount; ++i) {
          const std::uint32_t j = i % p;
          const std::uint64_t at = e.dst.value() + es * i;
          if (type == DType::Int8) {
            int expect = 0;
            switch (op) {
              case isa::EltOp::Add: expect = ai[i] + bi[j]; break;
              case isa::EltOp::Sub: expect = ai[i] - bi[j]; break;
              case isa::EltOp::Mul: expect = ai[i] * bi[j]; break;
              case isa::EltOp::Max: expect = std::max(ai[i], bi[j]); break;
              default: expect = std::min(ai[i], bi[j]); break;
            }
            ASSERT_EQ(core.get8(at), std::clamp(expect, -128, 127))
                << isa::name_of(op) << " p " << p << " i " << i;
          } else {
            float expect = fp32_op(op, af[i], bf[j]);
            if (type == DType::Bf16) expect = exact::bf16(expect);
            const float got = type == DType::Bf16 ? core.get_bf16(at) : float_of(core.get32(at));
            ASSERT_EQ(bits_of(got), bits_of(expect))
                << name_of(type) << " " << isa::name_of(op) << " p " << p << " i " << i;
          }
        }
      }
    }
}

// b_period = count is b_period = 0: the same bytes out, for every op of an fp32 pair.
TEST(VectorEltwise, BPeriodEqualToCountIsTheUnbroadcastForm) {
  Core core;
  VectorOps ops(core.cfg);
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> v(-5.0f, 5.0f);
  isa::Eltwise e = eltwise_case(DType::Fp32, 200, 0x100, 0x1100, 0x2100);
  for (std::uint32_t i = 0; i < e.count; ++i) {
    core.put32(e.a.value() + 4 * i, bits_of(v(rng)));
    core.put32(e.b.value() + 4 * i, bits_of(v(rng)));
  }
  for (isa::EltOp op : {isa::EltOp::Add, isa::EltOp::Mul, isa::EltOp::Div, isa::EltOp::TanhGrad}) {
    e.op = op;
    e.b_period = 0;
    ops.eltwise(e, core.ub_view());
    const std::vector<std::uint8_t> unbroadcast(core.ub.begin() + 0x2100,
                                                core.ub.begin() + 0x2100 + 4 * e.count);
    e.b_period = e.count;
    ops.eltwise(e, core.ub_view());
    EXPECT_TRUE(std::equal(unbroadcast.begin(), unbroadcast.end(), core.ub.begin() + 0x2100))
        << isa::name_of(op);
  }
}

std::uint32_t edge_fp32_bits(std::mt19937& rng, bool one_nan);  // below, with the fast paths

// docs/isa.md §4.9: div is one IEEE-754 fp32 division rounded to nearest even: x / ±0 is a signed
// infinity, 0 / 0 and inf / inf NaN, a NaN operand NaN, x / ±inf a signed zero, subnormal
// quotients and overflow to inf as IEEE says; random pairs against the float64 quotient rounded
// once (exact for division: float64 has more than 2*24+2 bits).
TEST(VectorEltwise, DivIsOneIeeeFp32DivisionIncludingZerosInfinitiesAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  struct Row {
    float a, b, expect;
  };
  const std::vector<Row> rows = {{1.0f, 0.0f, inf},
                                 {-1.0f, 0.0f, -inf},
                                 {1.0f, -0.0f, -inf},
                                 {-3.0f, -0.0f, inf},
                                 {0.0f, 0.0f, nan},
                                 {-0.0f, 0.0f, nan},
                                 {inf, inf, nan},
                                 {-inf, 2.0f, -inf},
                                 {nan, 1.0f, nan},
                                 {1.0f, nan, nan},
                                 {1.0f, inf, 0.0f},
                                 {-1.0f, inf, -0.0f},
                                 {0.0f, -5.0f, -0.0f},
                                 {1.0f, 3.0f, 1.0f / 3.0f},
                                 {tiny, 2.0f, 0.0f},          // a tie to even: 0
                                 {3 * tiny, 2.0f, 2 * tiny},  // 1.5 -> 2
                                 {3.0e38f, 0.5f, inf},
                                 {6.0f, 3.0f, 2.0f},
                                 {1.0f, 1e-40f, inf}};
  Core core;
  VectorOps ops(core.cfg);
  isa::Eltwise e = eltwise_case(DType::Fp32, 4000, 0x100, 0x4100, 0x8100);
  e.op = isa::EltOp::Div;
  std::mt19937 rng(31);
  std::vector<float> a(e.count), b(e.count);
  for (std::uint32_t i = 0; i < e.count; ++i) {
    if (i < rows.size()) {
      a[i] = rows[i].a, b[i] = rows[i].b;
    } else {
      a[i] = float_of(edge_fp32_bits(rng, false)), b[i] = float_of(edge_fp32_bits(rng, false));
    }
    core.put32(e.a.value() + 4 * i, bits_of(a[i]));
    core.put32(e.b.value() + 4 * i, bits_of(b[i]));
  }
  ops.eltwise(e, core.ub_view());
  for (std::uint32_t i = 0; i < e.count; ++i) {
    const float got = float_of(core.get32(e.dst.value() + 4 * i));
    const float expect = i < rows.size() ? rows[i].expect : fp32_op(isa::EltOp::Div, a[i], b[i]);
    if (std::isnan(expect))
      ASSERT_TRUE(std::isnan(got)) << a[i] << " / " << b[i];
    else
      ASSERT_EQ(bits_of(got), bits_of(expect)) << a[i] << " / " << b[i] << " = " << got;
  }
}

// div by a broadcast divisor, in place on a: a per-channel variance divides every pixel's value
// of its channel (BatchNormalization's backward), and a scalar count divides every value.
TEST(VectorEltwise, DivByABroadcastDivisorInPlace) {
  Core core;
  VectorOps ops(core.cfg);
  constexpr std::uint32_t kChannels = 5, kPixels = 40;
  isa::Eltwise e = eltwise_case(DType::Fp32, kChannels * kPixels, 0x100, 0x2000, 0x100);
  e.op = isa::EltOp::Div;
  std::mt19937 rng(37);
  std::uniform_real_distribution<float> v(-8.0f, 8.0f), var(0.01f, 4.0f);
  std::vector<float> x(e.count), d{var(rng), var(rng), var(rng), var(rng), 0.0f};
  for (std::uint32_t i = 0; i < e.count; ++i)
    core.put32(e.a.value() + 4 * i, bits_of(x[i] = v(rng)));
  for (std::uint32_t c = 0; c < kChannels; ++c) core.put32(e.b.value() + 4 * c, bits_of(d[c]));
  for (std::uint32_t p : {kChannels, 1u}) {
    e.b_period = p;
    ops.eltwise(e, core.ub_view());
    for (std::uint32_t i = 0; i < e.count; ++i) {
      x[i] = x[i] / d[i % p];
      ASSERT_EQ(core.get32(e.dst.value() + 4 * i), bits_of(x[i])) << "p " << p << " i " << i;
    }
  }
}

// docs/isa.md §4.9: div decodes with any element type but executes on fp32 only; the refusal
// names the op and the type and writes nothing.
TEST(VectorEltwise, DivRefusesEveryTypeButFp32NamingOpAndType) {
  Core core;
  VectorOps ops(core.cfg);
  const std::vector<std::uint8_t> before = core.ub;
  for (DType type : {DType::Int8, DType::Bf16}) {
    isa::Eltwise e = eltwise_case(type, 16, 0x100, 0x200, 0x300);
    e.op = isa::EltOp::Div;
    expect_program_error([&] { ops.eltwise(e, core.ub_view()); },
                         {"eltwise", "op div", std::string(name_of(type)), "fp32 only"});
  }
  EXPECT_EQ(core.ub, before);
}

// b_period > count is refused; a broadcast b needs only its b_period elements inside the unified
// buffer; a b shorter than count may not overlap dst (not even in place), one of count elements
// may be dst itself.
TEST(VectorEltwise, BroadcastChecksItsPeriodRangeAndOverlapBeforeWritingAnything) {
  Core core;
  VectorOps ops(core.cfg);
  const auto end = static_cast<std::uint32_t>(core.ub.size());
  isa::Eltwise ok = eltwise_case(DType::Fp32, 16, 0x100, 0x200, 0x300);
  ok.b_period = 4;
  const auto run = [&](const isa::Eltwise& e) { ops.eltwise(e, core.ub_view()); };
  expect_refusals<isa::Eltwise>(
      core, ok, run,
      {
          {[](isa::Eltwise& e) { e.b_period = 17; },
           {"eltwise", "b_period = 17", "0", "1..count = 16"}},
          {[&](isa::Eltwise& e) { e.b = UbAddr(end - 15); },
           {"b = 0x", "b_period 4 x fp32", "reaches past the end"}},
          {[](isa::Eltwise& e) { e.dst = e.b; },
           {"dst = 0x200", "overlaps b = 0x200", "b_period = 4 < count = 16"}},
          {[](isa::Eltwise& e) { e.dst = UbAddr(e.b.value() - 60); }, {"dst", "overlaps b"}},
          {[](isa::Eltwise& e) {
             e.b_period = 0;
             e.dst = UbAddr(e.b.value() + 4);
           },
           {"dst", "overlaps b", "must equal b"}},
      });
  // 16 bytes at the very end hold a period of 4 fp32 values; count 16 would not fit there.
  isa::Eltwise at_end = ok;
  at_end.b = UbAddr(end - 16);
  EXPECT_NO_THROW(run(at_end));
  // In place on b is allowed when b has count elements.
  isa::Eltwise on_b = ok;
  on_b.b_period = on_b.count;
  on_b.dst = on_b.b;
  EXPECT_NO_THROW(run(on_b));
}

// ---- copy ----

// Concatenate along channels: two NHWC tensors of 3 and 5 channels (int8) into one of 8, each
// pixel's channels a row of the copy; the other tensor's channels between the rows stay.
TEST(VectorCopy, CopiesStridedRowsIntoPlaceAndLeavesTheBytesBetweenThem) {
  Core core;
  VectorOps ops(core.cfg);
  const std::uint32_t pixels = 50, c0 = 3, c1 = 5;
  std::mt19937 rng(16);
  for (std::uint32_t i = 0; i < pixels * (c0 + c1); ++i)
    core.ub[0x100 + i] = static_cast<std::uint8_t>(rng());
  isa::Copy first;
  first.src = UbAddr(0x100), first.dst = UbAddr(0x1000), first.rows = pixels;
  first.row_bytes = c0, first.src_stride = c0, first.dst_stride = c0 + c1;
  isa::Copy second = first;
  second.src = UbAddr(0x100 + pixels * c0), second.dst = UbAddr(0x1000 + c0);
  second.row_bytes = second.src_stride = c1;
  ops.copy(first, core.ub_view());
  ops.copy(second, core.ub_view());
  for (std::uint32_t p = 0; p < pixels; ++p)
    for (std::uint32_t c = 0; c < c0 + c1; ++c) {
      const std::uint32_t from =
          c < c0 ? 0x100 + p * c0 + c : 0x100 + pixels * c0 + p * c1 + c - c0;
      ASSERT_EQ(core.ub[0x1000 + p * (c0 + c1) + c], core.ub[from]) << p << " " << c;
    }
  EXPECT_EQ(core.ub[0x1000 + pixels * (c0 + c1)], 0xa5) << "past the last row";
}

// A source stride of 0 reads one row again for every row written: a zero region fills a border.
TEST(VectorCopy, ASourceStrideOfZeroRepeatsOneRow) {
  Core core;
  VectorOps ops(core.cfg);
  for (std::uint32_t i = 0; i < 16; ++i) core.ub[i] = 0;
  isa::Copy c;
  c.src = UbAddr(0), c.dst = UbAddr(0x200), c.rows = 7, c.row_bytes = 16;
  c.src_stride = 0, c.dst_stride = 20;
  ops.copy(c, core.ub_view());
  for (std::uint32_t r = 0; r < c.rows; ++r) {
    for (std::uint32_t b = 0; b < c.row_bytes; ++b)
      ASSERT_EQ(core.ub[0x200 + r * c.dst_stride + b], 0) << r << " " << b;
    if (r + 1 < c.rows) {
      EXPECT_EQ(core.ub[0x200 + r * c.dst_stride + c.row_bytes], 0xa5) << r;
    }
  }
}

TEST(VectorCopy, RejectsEmptyRowsOverlappingRowsAndOverlapBeforeWritingAnything) {
  Core core;
  VectorOps ops(core.cfg);
  isa::Copy ok;
  ok.src = UbAddr(0), ok.dst = UbAddr(0x1000), ok.rows = 4, ok.row_bytes = 16;
  ok.src_stride = ok.dst_stride = 32;
  const auto end = static_cast<std::uint32_t>(core.ub.size());
  expect_refusals<isa::Copy>(
      core, ok, [&](const isa::Copy& c) { ops.copy(c, core.ub_view()); },
      {{[](isa::Copy& c) { c.rows = 0; }, {"copy", "rows = 0"}},
       {[](isa::Copy& c) { c.row_bytes = 0; }, {"row_bytes = 0"}},
       {[](isa::Copy& c) { c.dst_stride = 15; }, {"dst_stride = 15", "row_bytes = 16"}},
       {[&](isa::Copy& c) { c.dst = UbAddr(end - 3 * 32 - 15); },
        {"dst = 0x", "reaches past the end"}},
       // The last source row's last byte.
       {[](isa::Copy& c) { c.dst = UbAddr(3 * 32 + 15); }, {"dst = 0x", "overlaps src"}}});
}

// ---- both builds of the kernels ----
//
// VectorOps runs hand-vectorised AVX2 kernels where the CPU has AVX2 and portable ones elsewhere
// (hw/vector_unit/vector_ops.cpp); TPUSIM_SIMD picks one. Each must give the bits of the numerics
// library's scalar definitions (numerics/), which the reference inference in sw/nn follows too,
// on data weighted toward the cases where a shortcut would differ: saturation, rounding ties,
// NaN, signed zeros, and column or channel counts that leave remainders after each vector width.

// Selects a build through TPUSIM_SIMD for one scope and restores the environment after.
class ScopedSimd {
 public:
  explicit ScopedSimd(const std::string& path) {
    if (const char* old = std::getenv(kVar)) saved_ = old;
    setenv(kVar, path.c_str(), 1);
  }
  ~ScopedSimd() {
    if (saved_)
      setenv(kVar, saved_->c_str(), 1);
    else
      unsetenv(kVar);
  }
  ScopedSimd(const ScopedSimd&) = delete;
  ScopedSimd& operator=(const ScopedSimd&) = delete;

 private:
  static constexpr const char* kVar = "TPUSIM_SIMD";
  std::optional<std::string> saved_;
};

// The builds this host can run: portable everywhere, avx2 on x86 CPUs that have it.
std::vector<std::string> simd_paths() {
  std::vector<std::string> paths = {"portable"};
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx2")) paths.emplace_back("avx2");
#endif
  return paths;
}

// int32 values weighted toward the ends of the range.
std::int32_t edge_i32(std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 5), near(0, 3);
  switch (pick(rng)) {
    case 0: return kI32Min + near(rng);
    case 1: return kI32Max - near(rng);
    case 2: return std::uniform_int_distribution<std::int32_t>(-300, 300)(rng);
    case 3: return std::uniform_int_distribution<std::int32_t>(-(1 << 20), 1 << 20)(rng);
    default: return std::uniform_int_distribution<std::int32_t>(kI32Min, kI32Max)(rng);
  }
}

// An activation's accumulators and unified buffer, wider than test_config's so that rows have
// whole vectors and remainders: kCols = two 32-column blocks, one 8-column group and 3 more.
struct WideActivate {
  static constexpr std::uint32_t kWords = 80, kRows = 64;
  static constexpr std::uint16_t kCols = 75;
  ChipConfig cfg = test_config();
  std::vector<std::uint32_t> acc = std::vector<std::uint32_t>(std::size_t{kWords} * kRows);
  std::vector<std::uint8_t> ub = std::vector<std::uint8_t>(1 << 16, 0xa5);
  isa::Activate a;

  WideActivate(DType out_type, isa::ActFunc func) {
    a.src = AccAddr(0);
    a.params = UbAddr(0);
    a.dst = UbAddr(0x1000);
    a.rows = kRows;
    a.cols = kCols;
    a.dst_stride = size_of(out_type) * kCols + 5;  // gap bytes after each row
    a.func = func;
    a.out_type = out_type;
  }
  void put32(std::uint64_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) ub[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
  std::uint32_t get(std::uint64_t at, std::uint32_t bytes) const {
    std::uint32_t v = 0;
    for (std::uint32_t i = 0; i < bytes; ++i) v |= std::uint32_t{ub[at + i]} << (8 * i);
    return v;
  }
  void put_params(std::uint32_t c, std::uint32_t bias, std::uint32_t scale, std::int32_t shift) {
    put32(12u * c, bias);
    put32(12u * c + 4, scale);
    put32(12u * c + 8, static_cast<std::uint32_t>(shift));
  }
  std::uint32_t& word(std::uint32_t r, std::uint32_t c) { return acc[std::size_t{r} * kWords + c]; }
  // Runs the instruction on `path`; returns the output bits of every row and column and checks
  // that the gap bytes after each row kept their value.
  std::vector<std::uint32_t> run(const std::string& path, DType acc_type) {
    std::vector<std::uint8_t> before = ub;
    {
      ScopedSimd simd(path);
      VectorOps(cfg).activate(a, AccView{acc.data(), kRows, kWords, acc_type},
                              UbView{ub.data(), ub.size()});
    }
    const std::uint32_t esize = size_of(a.out_type);
    std::vector<std::uint32_t> bits;
    for (std::uint32_t r = 0; r < kRows; ++r) {
      const std::uint64_t row = a.dst.value() + std::uint64_t{r} * a.dst_stride;
      for (std::uint32_t c = 0; c < kCols; ++c) bits.push_back(get(row + esize * c, esize));
      for (std::uint64_t g = row + esize * kCols; g < row + a.dst_stride; ++g)
        EXPECT_EQ(ub[g], before[g]) << path << ": gap byte " << g << " written";
    }
    ub = std::move(before);
    return bits;
  }
};

TEST(VectorActivate, Int8FastPathsMatchScalarRequantizeOnSaturationAndTies) {
  for (isa::ActFunc func : {isa::ActFunc::None, isa::ActFunc::Relu}) {
    WideActivate t(DType::Int8, func);
    std::mt19937 rng(21);
    for (std::uint32_t& w : t.acc) w = static_cast<std::uint32_t>(edge_i32(rng));
    // Every shift in [kMinRequantShift, kMaxRequantShift], then shifts of 1..3, where the divide
    // by 2^shift meets ties often; multipliers 2^30 (every odd product is a tie of the doubling
    // high multiply), the largest, 0, and random Q31 values.
    const std::int32_t n_shifts = numerics::kMaxRequantShift - numerics::kMinRequantShift + 1;
    std::vector<std::int32_t> bias(t.kCols), mult(t.kCols), shift(t.kCols);
    std::uniform_int_distribution<std::int32_t> q31(std::int32_t{1} << 30, kI32Max);
    for (std::uint32_t c = 0; c < t.kCols; ++c) {
      const auto ci = static_cast<std::int32_t>(c);
      shift[c] = ci < n_shifts ? numerics::kMinRequantShift + ci : 1 + ci % 3;
      const std::int32_t kinds[] = {std::int32_t{1} << 30, kI32Max, c == 6 ? 0 : q31(rng)};
      mult[c] = kinds[c % 3];
      bias[c] = c % 4 == 0 ? 0 : edge_i32(rng);
      t.put_params(c, static_cast<std::uint32_t>(bias[c]), static_cast<std::uint32_t>(mult[c]),
                   shift[c]);
    }
    // The scalar chain, and a count of the cases the data reaches.
    std::vector<std::uint32_t> expect;
    int bias_saturated = 0, mul_ties = 0, pot_ties = 0, int8_saturated = 0, inside = 0;
    for (std::uint32_t r = 0; r < t.kRows; ++r)
      for (std::uint32_t c = 0; c < t.kCols; ++c) {
        const auto x = static_cast<std::int32_t>(t.word(r, c));
        const std::int32_t s = numerics::add_bias(x, bias[c]);
        std::int8_t q = numerics::requantize(s, mult[c], shift[c]);
        if (func == isa::ActFunc::Relu) q = numerics::relu(q);
        expect.push_back(static_cast<std::uint8_t>(q));
        bias_saturated += s != std::int64_t{x} + bias[c];
        const std::int32_t l = shift[c] < 0 ? numerics::saturating_shift_left(s, -shift[c]) : s;
        const std::int64_t ab = std::int64_t{l} * mult[c];
        mul_ties += (ab & ((std::int64_t{1} << 31) - 1)) == (std::int64_t{1} << 30);
        const std::int32_t hi = numerics::saturating_rounding_doubling_high_mul(l, mult[c]);
        pot_ties += shift[c] > 0 && (std::int64_t{hi} & ((std::int64_t{1} << shift[c]) - 1)) ==
                                        (std::int64_t{1} << (shift[c] - 1));
        const std::int32_t unclamped =
            shift[c] > 0 ? numerics::rounding_divide_by_pot(hi, shift[c]) : hi;
        int8_saturated += unclamped < -128 || unclamped > 127;
        inside += unclamped > -128 && unclamped < 127;
      }
    EXPECT_GT(bias_saturated, 100);
    EXPECT_GT(mul_ties, 100);
    EXPECT_GT(pot_ties, 100);
    EXPECT_GT(int8_saturated, 100);
    EXPECT_GT(inside, 100);
    for (const std::string& path : simd_paths()) {
      const std::vector<std::uint32_t> got = t.run(path, DType::Int32);
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], expect[i]) << path << " " << isa::name_of(func) << " row " << i / t.kCols
                                     << " col " << i % t.kCols;
    }
  }
}

// x86's default NaN, the one invalid operations (inf - inf) make. When two NaNs meet in an add,
// which one the result carries depends on the operand order the compiler picks (IEEE 754 leaves it
// open), so data for row functions (softmax) and sums (average pooling) holds only this NaN.
constexpr std::uint32_t kDefaultNan = 0xffc00000u;

// fp32 bit patterns weighted toward special values: NaN (quiet, signalling, either sign; only
// kDefaultNan if `one_nan`), +-inf, +-0, subnormals, values near 6 (relu6), bf16 rounding ties
// (low 16 bits 0x8000) and their neighbours, and ordinary values of either sign.
std::uint32_t edge_fp32_bits(std::mt19937& rng, bool one_nan) {
  std::uniform_int_distribution<int> pick(0, 11);
  std::uniform_int_distribution<std::uint32_t> any(0, 0xffffffffu);
  const std::uint32_t sign = any(rng) & 0x80000000u;
  switch (pick(rng)) {
    case 0:
      if (one_nan) return kDefaultNan;
      return (any(rng) & 1) != 0 ? 0x7fc00000u | (any(rng) & 0xff) : 0xff800001u;
    case 1: return sign | 0x7f800000u;
    case 2: return sign;
    case 3: return sign | (any(rng) & 0x007fffffu);
    case 4: return bits_of(6.0f) + (any(rng) & 3) - 1;
    case 5: return (any(rng) & 0xffff0000u & 0xbfffffffu) | 0x8000u;
    case 6: return (any(rng) & 0xffff0000u & 0xbfffffffu) | (0x7fffu + (any(rng) & 2));
    default: return bits_of(std::uniform_real_distribution<float>(-50.0f, 50.0f)(rng));
  }
}

TEST(VectorActivate, FloatFastPathsMatchScalarFunctionsBitForBit) {
  for (DType acc_type : {DType::Int32, DType::Fp32})
    for (DType out : {DType::Bf16, DType::Fp32})
      for (isa::ActFunc func : {isa::ActFunc::None, isa::ActFunc::Relu, isa::ActFunc::Relu6,
                                isa::ActFunc::Sigmoid, isa::ActFunc::Tanh, isa::ActFunc::Softmax}) {
        WideActivate t(out, func);
        std::mt19937 rng(22);
        const bool int_acc = acc_type == DType::Int32;
        for (std::uint32_t& w : t.acc)
          w = int_acc ? static_cast<std::uint32_t>(edge_i32(rng))
                      : edge_fp32_bits(rng, func == isa::ActFunc::Softmax);
        // Columns with bias 0 and scale 1 pass the accumulator's special values through exactly;
        // NaN only ever comes from the accumulator, as one NaN operand fixes the result's bits.
        std::vector<std::uint32_t> bias(t.kCols);
        std::vector<float> scale(t.kCols);
        std::uniform_real_distribution<float> log2_scale(-12.0f, 2.0f);
        for (std::uint32_t c = 0; c < t.kCols; ++c) {
          const bool exact = c % 3 == 0;
          scale[c] = exact ? 1.0f : std::exp2(log2_scale(rng));
          bias[c] = exact     ? 0u
                    : int_acc ? static_cast<std::uint32_t>(edge_i32(rng))
                              : bits_of(std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng));
          t.put_params(c, bias[c], bits_of(scale[c]), 0);
        }
        std::vector<std::uint32_t> expect;
        std::vector<float> x(t.kCols);
        for (std::uint32_t r = 0; r < t.kRows; ++r) {
          for (std::uint32_t c = 0; c < t.kCols; ++c)
            x[c] = int_acc
                       ? numerics::scale_int(static_cast<std::int32_t>(t.word(r, c)),
                                             static_cast<std::int32_t>(bias[c]), scale[c])
                       : numerics::scale_float(float_of(t.word(r, c)), float_of(bias[c]), scale[c]);
          if (func == isa::ActFunc::Softmax)
            numerics::softmax_row(x.data(), x.data(), x.size());
          else
            for (float& v : x) v = activate_float(func, v);
          for (float v : x) expect.push_back(out == DType::Fp32 ? bits_of(v) : to_bf16(v).bits);
        }
        for (const std::string& path : simd_paths()) {
          const std::vector<std::uint32_t> got = t.run(path, acc_type);
          for (std::size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], expect[i])
                << path << " acc " << name_of(acc_type) << " out " << name_of(out) << " "
                << isa::name_of(func) << " row " << i / t.kCols << " col " << i % t.kCols;
        }
      }
}

// bf16 bit patterns for pooling: many zeros of both signs and repeated values (ties the window
// order must break), NaN of several kinds (only kDefaultNan's if `one_nan`), +-inf and random
// finite values.
std::uint16_t edge_bf16_bits(std::mt19937& rng, bool one_nan) {
  std::uniform_int_distribution<int> pick(0, 31);
  std::uniform_int_distribution<std::uint32_t> any(0, 0xffff);
  const int k = pick(rng);
  if (k < 8) return k % 2 == 0 ? 0x0000 : 0x8000;
  if (k == 8 && one_nan) return static_cast<std::uint16_t>(kDefaultNan >> 16);
  if (k == 8) return (any(rng) & 1) != 0 ? 0x7fc1 : 0xff81;
  if (k == 9) return (any(rng) & 1) != 0 ? 0x7f80 : 0xff80;
  if (k < 18) return to_bf16(k % 2 == 0 ? 1.5f : -2.0f).bits;
  return static_cast<std::uint16_t>(any(rng) & 0xbfff);  // exponent MSB clear: finite
}

TEST(VectorPool, FastPathsMatchScalarFunctionsForEveryChannelCountAndWindow) {
  struct Shape {
    std::uint16_t in_h, in_w, channels, kernel_h, kernel_w;
    std::uint8_t stride_h, stride_w;
    std::uint16_t images;
    bool same;  // TensorFlow's "same" padding, else valid
  };
  // 2x2 stride 2 over channel counts with whole vectors and remainders; overlapping 3x2 windows;
  // 1x1 windows; "same" padding, where windows at the edges hold fewer positions.
  const Shape shapes[] = {{6, 7, 75, 2, 2, 2, 2, 2, false}, {5, 5, 3, 3, 2, 1, 2, 3, false},
                          {4, 4, 40, 1, 1, 1, 1, 1, false}, {4, 6, 64, 2, 3, 2, 3, 2, false},
                          {5, 7, 75, 3, 3, 1, 2, 2, true},  {3, 4, 33, 4, 5, 1, 1, 1, true}};
  for (const Shape& sh : shapes)
    for (DType type : {DType::Int8, DType::Bf16})
      for (isa::PoolKind kind : {isa::PoolKind::Max, isa::PoolKind::Avg}) {
        isa::Pool p;
        p.in_h = sh.in_h;
        p.in_w = sh.in_w;
        p.channels = sh.channels;
        p.kernel_h = sh.kernel_h;
        p.kernel_w = sh.kernel_w;
        p.stride_h = sh.stride_h;
        p.stride_w = sh.stride_w;
        p.images = sh.images;
        p.kind = kind;
        p.type = type;
        if (sh.same) {
          same_padding(p.in_h, p.kernel_h, p.stride_h, p.pad_top, p.out_h);
          same_padding(p.in_w, p.kernel_w, p.stride_w, p.pad_left, p.out_w);
        }
        const std::uint32_t esize = size_of(type);
        const std::uint64_t in_elems = std::uint64_t{p.images} * p.in_h * p.in_w * p.channels;
        p.src = UbAddr(0x10);
        p.dst = UbAddr(static_cast<std::uint32_t>(0x20 + in_elems * esize));
        const PoolGeom g = geom_of(p);
        std::vector<std::uint8_t> ub(1 << 16, 0xa5);
        std::mt19937 rng(23);
        std::uniform_int_distribution<int> i8(-128, 127);
        const auto elem = [&](std::uint64_t i) {
          const std::uint64_t at = p.src.value() + esize * i;
          return type == DType::Int8 ? std::uint32_t{ub[at]}
                                     : ub[at] | std::uint32_t{ub[at + 1]} << 8;
        };
        for (std::uint64_t i = 0; i < in_elems; ++i) {
          const std::uint64_t at = p.src.value() + esize * i;
          if (type == DType::Int8) {
            ub[at] = static_cast<std::uint8_t>(i8(rng));
          } else {
            const std::uint16_t b = edge_bf16_bits(rng, kind == isa::PoolKind::Avg);
            ub[at] = static_cast<std::uint8_t>(b);
            ub[at + 1] = static_cast<std::uint8_t>(b >> 8);
          }
        }
        // The scalar functions over each window in window order.
        std::vector<std::uint32_t> expect;
        for (std::uint64_t img = 0; img < p.images; ++img)
          for (std::uint64_t oy = 0; oy < g.oh; ++oy)
            for (std::uint64_t ox = 0; ox < g.ow; ++ox)
              for (std::uint64_t c = 0; c < p.channels; ++c) {
                std::vector<std::uint32_t> win;
                for (std::uint64_t i : window_of(p, img, oy, ox, c)) win.push_back(elem(i));
                const auto n = static_cast<std::int32_t>(win.size());
                if (type == DType::Int8) {
                  std::int32_t m = static_cast<std::int8_t>(win[0]), sum = 0;
                  for (std::uint32_t w : win) {
                    m = std::max<std::int32_t>(m, static_cast<std::int8_t>(w));
                    sum += static_cast<std::int8_t>(w);
                  }
                  expect.push_back(static_cast<std::uint8_t>(
                      kind == isa::PoolKind::Max ? m : numerics::avg_int8(sum, n)));
                } else {
                  const auto f = [](std::uint32_t w) {
                    return to_float(Bf16{static_cast<std::uint16_t>(w)});
                  };
                  float m = f(win[0]), sum = 0.0f;
                  for (std::uint32_t w : win) {
                    m = numerics::max_float(m, f(w));
                    sum += f(w);
                  }
                  expect.push_back(kind == isa::PoolKind::Max ? to_bf16(m).bits
                                                              : numerics::avg_bf16(sum, n).bits);
                }
              }
        const std::vector<std::uint8_t> input = ub;
        for (const std::string& path : simd_paths()) {
          ub = input;
          {
            ScopedSimd simd(path);
            VectorOps(test_config()).pool(p, UbView{ub.data(), ub.size()});
          }
          for (std::size_t i = 0; i < expect.size(); ++i) {
            const std::uint64_t at = p.dst.value() + esize * i;
            const std::uint32_t got = type == DType::Int8 ? std::uint32_t{ub[at]}
                                                          : ub[at] | std::uint32_t{ub[at + 1]} << 8;
            ASSERT_EQ(got, expect[i]) << path << " " << isa::name_of(kind) << " " << name_of(type)
                                      << " " << sh.channels << " channels, output " << i;
          }
          const std::uint64_t end = p.dst.value() + esize * expect.size();
          for (std::uint64_t b = 0; b < ub.size(); ++b) {
            if (b < p.dst.value() || b >= end) {
              ASSERT_EQ(ub[b], input[b]) << path << " byte " << b;
            }
          }
        }
      }
}

// Both builds of fp32 eltwise: every op, unbroadcast (in place too) and with b broadcast over
// periods of 1, 7 and 75 elements, on values weighted toward special ones (NaN, infinities,
// signed zeros, subnormals, the relu6 edge); the builds agree bit for bit and follow the written
// rule (fp32_op; a NaN result only needs to be NaN: one NaN kind, so its bits are fixed too).
TEST(VectorEltwise, Fp32LaneBuildsAgreeAndFollowTheWrittenRuleForEveryPeriod) {
  constexpr std::uint32_t kCount = 1001;
  for (isa::EltOp op : kEltOps)
    for (std::uint32_t period : {0u, 1u, 7u, 75u})
      for (const bool in_place : {false, true}) {
        Core core;
        isa::Eltwise e = eltwise_case(DType::Fp32, kCount, 0x100, 0x1100, 0x2100);
        e.op = op;
        e.b_period = period;
        if (in_place) e.dst = e.a;
        std::mt19937 rng(37 + period);
        const std::uint32_t b_count = period != 0 ? period : kCount;
        std::vector<float> a(kCount), b(b_count);
        for (std::uint32_t i = 0; i < kCount; ++i) {
          a[i] = float_of(edge_fp32_bits(rng, true));
          core.put32(e.a.value() + 4 * i, bits_of(a[i]));
        }
        for (std::uint32_t j = 0; j < b_count; ++j) {
          b[j] = float_of(edge_fp32_bits(rng, true));
          core.put32(e.b.value() + 4 * j, bits_of(b[j]));
        }
        const std::vector<std::uint8_t> input = core.ub;
        std::vector<std::vector<std::uint8_t>> outputs;
        for (const std::string& path : simd_paths()) {
          core.ub = input;
          {
            ScopedSimd simd(path);
            VectorOps(core.cfg).eltwise(e, core.ub_view());
          }
          for (std::uint32_t i = 0; i < kCount; ++i) {
            const float expect = fp32_op(op, a[i], b[i % b_count]);
            const std::uint32_t got = core.get32(e.dst.value() + 4 * i);
            if (std::isnan(expect))
              ASSERT_TRUE(std::isnan(float_of(got))) << path << " " << isa::name_of(op) << " " << i;
            else
              ASSERT_EQ(got, bits_of(expect))
                  << path << " " << isa::name_of(op) << " period " << period << " a " << a[i]
                  << " b " << b[i % b_count] << " element " << i;
          }
          outputs.push_back(core.ub);
        }
        for (const std::vector<std::uint8_t>& o : outputs)
          EXPECT_EQ(o, outputs.front()) << isa::name_of(op) << " period " << period;
      }
}

// Both builds of fp32 max pooling over channel counts with whole vectors and remainders, valid
// and "same" windows, on values with ties of +0 and -0 and NaN: numerics::max_float in window
// order, bit for bit.
TEST(VectorPool, Fp32MaxLaneBuildsFollowMaxFloatInWindowOrder) {
  for (const std::string& path : simd_paths())
    for (std::uint16_t channels : {std::uint16_t{3}, std::uint16_t{8}, std::uint16_t{75}})
      for (const bool same : {false, true}) {
        Core core;
        isa::Pool p = pool_case(isa::PoolKind::Max, DType::Fp32);
        p.images = 2, p.in_h = 5, p.in_w = 6, p.channels = channels;
        p.kernel_h = 3, p.kernel_w = 2, p.stride_h = 2, p.stride_w = 2;
        p.pad_top = p.pad_left = 0, p.out_h = p.out_w = 0;
        if (same) {
          same_padding(p.in_h, p.kernel_h, p.stride_h, p.pad_top, p.out_h);
          same_padding(p.in_w, p.kernel_w, p.stride_w, p.pad_left, p.out_w);
        }
        const std::uint64_t in_elems = std::uint64_t{p.images} * p.in_h * p.in_w * channels;
        p.src = UbAddr(0x100);
        p.dst = UbAddr(static_cast<std::uint32_t>(0x200 + 4 * in_elems));
        std::mt19937 rng(41 + channels);
        std::uniform_int_distribution<int> pick(0, 15);
        const float nan = std::numeric_limits<float>::quiet_NaN();
        const float values[] = {0.0f, -0.0f, 1.5f, -2.0f, nan};
        for (std::uint64_t i = 0; i < in_elems; ++i) {
          const int k = pick(rng);
          core.put32(p.src.value() + 4 * i, bits_of(k < 5 ? values[k] : static_cast<float>(k)));
        }
        const PoolGeom g = geom_of(p);
        std::vector<std::uint32_t> expect;
        for (std::uint64_t img = 0; img < p.images; ++img)
          for (std::uint64_t oy = 0; oy < g.oh; ++oy)
            for (std::uint64_t ox = 0; ox < g.ow; ++ox)
              for (std::uint64_t c = 0; c < channels; ++c) {
                const std::vector<std::uint64_t> win = window_of(p, img, oy, ox, c);
                float m = float_of(core.get32(p.src.value() + 4 * win[0]));
                for (std::uint64_t i : win)
                  m = numerics::max_float(m, float_of(core.get32(p.src.value() + 4 * i)));
                expect.push_back(bits_of(m));
              }
        {
          ScopedSimd simd(path);
          VectorOps(core.cfg).pool(p, core.ub_view());
        }
        for (std::size_t i = 0; i < expect.size(); ++i)
          ASSERT_EQ(core.get32(p.dst.value() + 4 * i), expect[i])
              << path << " channels " << channels << " same " << same << " output " << i;
        EXPECT_EQ(core.get32(p.dst.value() + 4 * expect.size()), 0xa5a5a5a5u) << path;
      }
}

TEST(VectorOpsSimd, UnknownBuildInTheEnvironmentIsRejectedNamingIt) {
  ActivateCase t;
  ScopedSimd simd("fastest");
  try {
    t.run();
    ADD_FAILURE() << "no InputError thrown";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("TPUSIM_SIMD = fastest"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("portable"), std::string::npos) << e.what();
  }
}

// ---- map ----

// The numerics library's definition of each map function (numerics/activation.h): prelu is
// leaky_relu with the channel's alpha.
float map_function(isa::MapFunc f, float x, float alpha) {
  switch (f) {
    case isa::MapFunc::Identity: return x;
    case isa::MapFunc::Relu: return numerics::relu(x);
    case isa::MapFunc::Relu6: return numerics::relu6(x);
    case isa::MapFunc::LeakyRelu: return numerics::leaky_relu(x, alpha);
    case isa::MapFunc::Elu: return numerics::elu(x, alpha);
    case isa::MapFunc::Sigmoid: return numerics::sigmoid(x);
    case isa::MapFunc::Tanh: return numerics::tanh_act(x);
    case isa::MapFunc::Prelu: return numerics::leaky_relu(x, alpha);
    case isa::MapFunc::Rsqrt: return numerics::rsqrt(x);
  }
  return 0.0f;
}

constexpr isa::MapFunc kMapFuncs[] = {
    isa::MapFunc::Identity, isa::MapFunc::Relu,    isa::MapFunc::Relu6, isa::MapFunc::LeakyRelu,
    isa::MapFunc::Elu,      isa::MapFunc::Sigmoid, isa::MapFunc::Tanh,  isa::MapFunc::Prelu};
constexpr DType kElementTypes[] = {DType::Int8, DType::Bf16, DType::Fp32};

// A map of `count` elements of 7 channels between two regions of a Core, the records after them.
isa::Map map_case(isa::MapFunc func, DType in, DType out, std::uint32_t count) {
  isa::Map m;
  m.src = UbAddr(0x100);
  m.dst = UbAddr(0x4000);
  m.params = UbAddr(0x8000);
  m.count = count;
  m.channels = 7;
  m.func = func;
  m.in_type = in;
  m.out_type = out;
  m.in_scale = in == DType::Int8 ? 0.0371f : 0.0f;
  m.out_scale = out == DType::Int8 ? 0.0213f : 0.0f;
  return m;
}

// Element bits of `type` (int8 1 byte, bf16 2, fp32 4) at index i of a region.
std::uint32_t element_bits(const Core& core, std::uint64_t base, std::uint64_t i, DType type) {
  const std::uint64_t size = size_of(type), at = base + size * i;
  std::uint32_t v = 0;
  for (std::uint64_t b = 0; b < size; ++b) v |= std::uint32_t{core.ub[at + b]} << (8 * b);
  return v;
}

// Every function from and to every type, against the chain the numerics library defines: the
// input as a real number (numerics::dequantize_int8, to_float, the fp32 value), affine with the
// channel's record, the function with its alpha, the output (numerics::quantize_int8, to_bf16).
// Inputs weighted toward special values (NaN, infinities, zeros, subnormals, ties of the bf16
// rounding) and every int8.
TEST(VectorMap, EveryFunctionAndTypeFollowTheNumericsDefinitions) {
  for (isa::MapFunc func : kMapFuncs)
    for (DType in : kElementTypes)
      for (DType out : kElementTypes) {
        Core core;
        const isa::Map m = map_case(func, in, out, 600);
        std::mt19937 rng(17);
        std::uniform_real_distribution<float> a(-3.0f, 3.0f), b(-2.0f, 2.0f), alpha(0.0f, 1.5f);
        std::vector<float> rec(3 * m.channels);
        for (std::uint32_t c = 0; c < m.channels; ++c) {
          rec[3 * c] = a(rng), rec[3 * c + 1] = b(rng), rec[3 * c + 2] = alpha(rng);
          for (std::uint32_t k = 0; k < 3; ++k)
            core.put32(m.params.value() + 12 * c + 4 * k, bits_of(rec[3 * c + k]));
        }
        std::vector<std::uint32_t> expect;
        for (std::uint32_t i = 0; i < m.count; ++i) {
          const std::uint32_t bits = edge_fp32_bits(rng, false);
          float x = 0.0f;
          if (in == DType::Int8) {
            core.put8(m.src.value() + i, static_cast<int>(i % 256) - 128);
            x = numerics::dequantize_int8(static_cast<std::int8_t>(core.get8(m.src.value() + i)),
                                          m.in_scale);
          } else if (in == DType::Bf16) {
            core.ub[m.src.value() + 2 * i] = static_cast<std::uint8_t>(bits >> 16);
            core.ub[m.src.value() + 2 * i + 1] = static_cast<std::uint8_t>(bits >> 24);
            x = to_float(Bf16{static_cast<std::uint16_t>(bits >> 16)});
          } else {
            core.put32(m.src.value() + 4 * i, bits);
            x = float_of(bits);
          }
          const std::uint32_t c = i % m.channels;
          const float y =
              map_function(func, numerics::affine(x, rec[3 * c], rec[3 * c + 1]), rec[3 * c + 2]);
          if (out == DType::Int8)
            expect.push_back(static_cast<std::uint8_t>(numerics::quantize_int8(y, m.out_scale)));
          else if (out == DType::Bf16)
            expect.push_back(to_bf16(y).bits);
          else
            expect.push_back(bits_of(y));
        }
        VectorOps(core.cfg).map(m, core.ub_view());
        for (std::uint32_t i = 0; i < m.count; ++i)
          ASSERT_EQ(element_bits(core, m.dst.value(), i, out), expect[i])
              << isa::name_of(func) << " " << name_of(in) << " -> " << name_of(out) << " " << i;
        EXPECT_EQ(element_bits(core, m.dst.value(), m.count, out) & 0xff, 0xa5u) << "past count";
      }
}

// Element i takes the record of channel i % channels: identity with a = c + 1 and b = 0 scales
// each element by its channel's number, exactly.
TEST(VectorMap, ElementIUsesTheRecordOfChannelIModuloChannels) {
  Core core;
  isa::Map m = map_case(isa::MapFunc::Identity, DType::Fp32, DType::Fp32, 100);
  for (std::uint32_t c = 0; c < m.channels; ++c) {
    core.put32(m.params.value() + 12 * c, bits_of(static_cast<float>(c + 1)));
    core.put32(m.params.value() + 12 * c + 4, 0);
  }
  for (std::uint32_t i = 0; i < m.count; ++i) core.put32(m.src.value() + 4 * i, bits_of(0.5f));
  VectorOps(core.cfg).map(m, core.ub_view());
  for (std::uint32_t i = 0; i < m.count; ++i)
    EXPECT_EQ(float_of(core.get32(m.dst.value() + 4 * i)),
              0.5f * static_cast<float>(i % m.channels + 1))
        << i;
}

// A standalone BatchNormalization on int8: per channel a = gamma / sqrt(var + eps), b = beta -
// mean * a (Keras's inference formula), the output requantized onto its own scale, ties of the
// output rounding away from zero.
// Both builds of map's lanes (identity, relu and relu6 between bf16 and fp32), in place and not,
// against the numerics chain: channel counts of 1 and 3 (records repeated to fill vectors) and 75
// (whole vectors and a remainder per period); records a = 1, b = 0 on every third channel pass
// special values through (and turn -0 into +0).
TEST(VectorMap, LaneBuildsFollowTheNumericsChainForEveryChannelCount) {
  for (const std::string& path : simd_paths())
    for (std::uint16_t channels : {std::uint16_t{1}, std::uint16_t{3}, std::uint16_t{75}})
      for (isa::MapFunc func : {isa::MapFunc::Identity, isa::MapFunc::Relu, isa::MapFunc::Relu6})
        for (DType in : {DType::Bf16, DType::Fp32})
          for (DType out : {DType::Bf16, DType::Fp32})
            for (const bool in_place : {false, true}) {
              if (in_place && in != out) continue;
              Core core;
              isa::Map m = map_case(func, in, out, 1001);
              m.channels = channels;
              if (in_place) m.dst = m.src;
              std::mt19937 rng(31 + channels);
              std::uniform_real_distribution<float> a(-3.0f, 3.0f), b(-2.0f, 2.0f);
              std::vector<float> ra(channels), rb(channels);
              for (std::uint32_t c = 0; c < channels; ++c) {
                ra[c] = c % 3 == 0 ? 1.0f : a(rng), rb[c] = c % 3 == 0 ? 0.0f : b(rng);
                core.put32(m.params.value() + 12 * c, bits_of(ra[c]));
                core.put32(m.params.value() + 12 * c + 4, bits_of(rb[c]));
                core.put32(m.params.value() + 12 * c + 8, 0);
              }
              std::vector<std::uint32_t> expect;
              for (std::uint32_t i = 0; i < m.count; ++i) {
                const std::uint32_t bits = edge_fp32_bits(rng, false);
                float x = float_of(bits);
                if (in == DType::Bf16) {
                  core.ub[m.src.value() + 2 * i] = static_cast<std::uint8_t>(bits >> 16);
                  core.ub[m.src.value() + 2 * i + 1] = static_cast<std::uint8_t>(bits >> 24);
                  x = to_float(Bf16{static_cast<std::uint16_t>(bits >> 16)});
                } else {
                  core.put32(m.src.value() + 4 * i, bits);
                }
                const std::uint32_t c = i % channels;
                const float y = map_function(func, numerics::affine(x, ra[c], rb[c]), 0.0f);
                expect.push_back(out == DType::Bf16 ? to_bf16(y).bits : bits_of(y));
              }
              {
                ScopedSimd simd(path);
                VectorOps(core.cfg).map(m, core.ub_view());
              }
              for (std::uint32_t i = 0; i < m.count; ++i)
                ASSERT_EQ(element_bits(core, m.dst.value(), i, out), expect[i])
                    << path << " " << isa::name_of(func) << " " << name_of(in) << " -> "
                    << name_of(out) << " channels " << channels << " in place " << in_place
                    << " element " << i;
              EXPECT_EQ(element_bits(core, m.dst.value(), m.count, out) & 0xff, 0xa5u)
                  << path << ": written past count";
            }
}

TEST(VectorMap, Int8BatchNormalizationRoundsHalfAwayAndSaturatesSymmetrically) {
  Core core;
  isa::Map m = map_case(isa::MapFunc::Identity, DType::Int8, DType::Int8, 6);
  m.channels = 1;
  m.in_scale = 1.0f, m.out_scale = 1.0f;
  const float gamma = 2.0f, beta = 0.5f, mean = 1.0f, var = 3.0f, eps = 1.0f;
  const float a = gamma / std::sqrt(var + eps), b = beta - mean * a;  // a = 1, b = -0.5
  core.put32(m.params.value(), bits_of(a));
  core.put32(m.params.value() + 4, bits_of(b));
  const std::vector<int> q = {3, -2, 127, -128, 0, 1};
  const std::vector<int> expect = {3, -3, 127, -127, -1, 1};  // 2.5, -2.5, 126.5, -128.5, -0.5, 0.5
  for (std::size_t i = 0; i < q.size(); ++i) core.put8(m.src.value() + i, q[i]);
  VectorOps(core.cfg).map(m, core.ub_view());
  for (std::size_t i = 0; i < q.size(); ++i)
    EXPECT_EQ(core.get8(m.dst.value() + i), expect[i]) << q[i];
}

TEST(VectorMap, InPlaceNeedsInputAndOutputOfOneSize) {
  Core core;
  VectorOps ops(core.cfg);
  isa::Map m = map_case(isa::MapFunc::Relu, DType::Fp32, DType::Fp32, 8);
  m.dst = m.src;
  core.put32(m.params.value(), bits_of(1.0f));
  core.put32(m.params.value() + 4, 0);
  m.channels = 1;
  for (std::uint32_t i = 0; i < m.count; ++i)
    core.put32(m.src.value() + 4 * i, bits_of(static_cast<float>(i) - 4.0f));
  ops.map(m, core.ub_view());
  for (std::uint32_t i = 0; i < m.count; ++i)
    EXPECT_EQ(float_of(core.get32(m.src.value() + 4 * i)),
              std::max(static_cast<float>(i) - 4.0f, 0.0f));
  m.out_type = DType::Bf16;
  expect_program_error([&] { ops.map(m, core.ub_view()); },
                       {"map", "dst", "overlaps src", "one size"});
}

TEST(VectorMap, RejectsBadFieldsNamingThemBeforeWritingAnything) {
  Core core;
  VectorOps ops(core.cfg);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_refusals<isa::Map>(
      core, map_case(isa::MapFunc::Elu, DType::Int8, DType::Bf16, 64),
      [&](const isa::Map& m) { ops.map(m, core.ub_view()); },
      {
          {[](isa::Map& m) { m.count = 0; }, {"map", "count = 0"}},
          {[](isa::Map& m) { m.channels = 0; }, {"channels = 0"}},
          {[](isa::Map& m) { m.in_scale = 0.0f; }, {"in_scale = 0", "finite number > 0", "int8"}},
          {[&](isa::Map& m) { m.in_scale = nan; }, {"in_scale = nan"}},
          {[](isa::Map& m) { m.in_scale = -1.0f; }, {"in_scale = -1"}},
          {[](isa::Map& m) { m.out_scale = 0.5f; }, {"out_scale = 0.5", "out bf16", "must be 0"}},
          {[](isa::Map& m) { m.in_type = DType::Int32; }, {"in = int32", "int8, bf16, fp32"}},
          {[](isa::Map& m) { m.func = static_cast<isa::MapFunc>(9); }, {"func = 9"}},
          {[&](isa::Map& m) {
             m.params = UbAddr(static_cast<std::uint32_t>(core.ub.size() - 12 * 6));
           },
           {"params = 0x", "12 bytes x channels 7"}},
          {[](isa::Map& m) { m.dst = UbAddr(m.params.value() - 2 * 10); },
           {"dst", "overlaps params"}},
          {[](isa::Map& m) { m.dst = UbAddr(m.src.value() + 1); }, {"dst", "overlaps src"}},
          {[&](isa::Map& m) { m.src = UbAddr(static_cast<std::uint32_t>(core.ub.size() - 63)); },
           {"src = 0x", "count 64 x int8"}},
      });
}

// docs/isa.md §4.16: rsqrt is numerics::rsqrt of t = x·a + b (two fp32 operations), fp32 in and
// out: BatchNormalization's rsqrt(variance + epsilon) with a = 1 and b = epsilon gives the bits of
// numerics::batch_stats' rsqrt; zeros, negatives, infinities and NaN as the double-precision
// 1/sqrt rounded once gives them.
TEST(VectorMap, RsqrtOfVariancePlusEpsilonIsNumericsRsqrtPerChannel) {
  Core core;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kEps = 1e-3f;
  std::vector<float> var = {0.0f, 1.0f, 4.0f, 2.0f, 1e-30f, 3.0e38f, -0.5f, 0.25f, 7.0f, 1e6f};
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> v(0.0f, 10.0f);
  while (var.size() < 300) var.push_back(v(rng));
  isa::Map m = map_case(isa::MapFunc::Rsqrt, DType::Fp32, DType::Fp32,
                        static_cast<std::uint32_t>(var.size()));
  m.channels = static_cast<std::uint16_t>(var.size());  // one record per channel, as BN's
  for (std::uint32_t c = 0; c < m.channels; ++c) {
    core.put32(m.src.value() + 4 * c, bits_of(var[c]));
    core.put32(m.params.value() + 12 * c, bits_of(1.0f));
    core.put32(m.params.value() + 12 * c + 4, bits_of(kEps));
    core.put32(m.params.value() + 12 * c + 8, 0);
  }
  VectorOps(core.cfg).map(m, core.ub_view());
  for (std::uint32_t c = 0; c < m.channels; ++c) {
    const float got = float_of(core.get32(m.dst.value() + 4 * c));
    const float t = var[c] + kEps;
    const float expect = static_cast<float>(1.0 / std::sqrt(static_cast<double>(t)));
    if (std::isnan(expect)) {
      ASSERT_TRUE(std::isnan(got)) << var[c];
      continue;
    }
    ASSERT_EQ(bits_of(got), bits_of(expect)) << var[c];
    // The statistics of a channel whose mean is 0 and whose E[x²] is var[c]: variance = var[c].
    ASSERT_EQ(bits_of(got), bits_of(numerics::batch_stats(0.0f, var[c], 1.0f, kEps).rsqrt))
        << var[c];
  }
  // The special values of t itself, with a = 1 and b = -0 (t = x exactly, -0 too: -0 + +0 would
  // be +0).
  const std::vector<std::pair<float, float>> special = {{0.0f, inf},  {-0.0f, -inf}, {inf, 0.0f},
                                                        {-1.0f, nan}, {nan, nan},    {0.25f, 2.0f}};
  isa::Map s = map_case(isa::MapFunc::Rsqrt, DType::Fp32, DType::Fp32,
                        static_cast<std::uint32_t>(special.size()));
  s.channels = 1;
  core.put32(s.params.value(), bits_of(1.0f));
  core.put32(s.params.value() + 4, bits_of(-0.0f));
  for (std::size_t i = 0; i < special.size(); ++i)
    core.put32(s.src.value() + 4 * i, bits_of(special[i].first));
  VectorOps(core.cfg).map(s, core.ub_view());
  for (std::size_t i = 0; i < special.size(); ++i) {
    const float got = float_of(core.get32(s.dst.value() + 4 * i));
    if (std::isnan(special[i].second))
      EXPECT_TRUE(std::isnan(got)) << special[i].first;
    else
      EXPECT_EQ(bits_of(got), bits_of(special[i].second)) << special[i].first;
  }
}

// rsqrt takes fp32 in and out only (the decoder accepts every element type with it): the
// refusal names the function, the field and its type, and writes nothing.
TEST(VectorMap, RsqrtRefusesEveryTypeButFp32NamingTheField) {
  Core core;
  VectorOps ops(core.cfg);
  expect_refusals<isa::Map>(
      core, map_case(isa::MapFunc::Rsqrt, DType::Fp32, DType::Fp32, 64),
      [&](const isa::Map& m) { ops.map(m, core.ub_view()); },
      {
          {[](isa::Map& m) {
             m.in_type = DType::Int8;
             m.in_scale = 0.5f;
           },
           {"map", "func rsqrt", "in = int8", "fp32 in and out only"}},
          {[](isa::Map& m) { m.in_type = DType::Bf16; }, {"func rsqrt", "in = bf16"}},
          {[](isa::Map& m) {
             m.out_type = DType::Int8;
             m.out_scale = 0.5f;
           },
           {"func rsqrt", "out = int8"}},
          {[](isa::Map& m) { m.out_type = DType::Bf16; }, {"func rsqrt", "out = bf16"}},
      });
}

// ---- xent ----

// The rows of an xent between regions of a Core: logits at 0x100, labels, gradients and records
// after them.
isa::Xent xent_case(std::uint32_t rows, std::uint16_t cols) {
  isa::Xent x;
  x.rows = rows, x.cols = cols;
  x.src = UbAddr(0x100);
  x.labels = UbAddr(0x100 + 4 * rows * cols + 64);
  x.dst = UbAddr(x.labels.value() + 4 * rows + 64);
  x.out = UbAddr(x.dst.value() + 4 * rows * cols + 64);
  x.scale = 1.0f / 125.0f;
  return x;
}

struct XentExpect {
  std::vector<float> grad;
  float loss = 0.0f, correct = 0.0f;
};

// docs/isa.md's xent, as a plain loop in fp32: softmax's probabilities (ref_softmax), minus the
// target (the one-hot label, or with smoothing E (1 - E) + E/n for the label and E/n for the
// rest), times scale; the loss log(s) - q with s summed in order, q = z_label - m (E = 0) or
// the targets' sum of t_c·(z_c - m) in order; correct when the label is the first index of the
// maximum.
XentExpect naive_xent(const std::vector<float>& z, std::size_t label, float scale,
                      float smoothing = 0.0f) {
  const auto first = static_cast<std::size_t>(std::max_element(z.begin(), z.end()) - z.begin());
  const float m = z[first];
  XentExpect x;
  const std::vector<float> p = ref_softmax(z);
  const float off = smoothing / static_cast<float>(z.size()), on = (1.0f - smoothing) + off;
  float q = 0.0f;
  for (std::size_t c = 0; c < z.size(); ++c) {
    x.grad.push_back((p[c] - (c == label ? on : off)) * scale);
    q += (c == label ? on : off) * (z[c] - m);
  }
  if (smoothing == 0.0f) q = z[label] - m;
  float s = 0.0f;
  for (float v : z) s += std::exp(v - m);
  x.loss = std::log(s) - q;
  x.correct = label == first ? 1.0f : 0.0f;
  return x;
}

TEST(VectorXent, GivesEachRowsScaledGradientLossAndCorrectFlagInPlaceOrNot) {
  Core core;
  VectorOps ops(core.cfg);
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> v(-10.0f, 10.0f);
  isa::Xent x = xent_case(7, 10);
  std::vector<std::vector<float>> z(x.rows, std::vector<float>(x.cols));
  std::vector<std::int32_t> label(x.rows);
  for (std::uint32_t r = 0; r < x.rows; ++r) {
    for (float& f : z[r]) f = v(rng);
    label[r] = static_cast<std::int32_t>(rng() % x.cols);
  }
  z[0][3] = z[0][5] = 40.0f, label[0] = 3;  // tied maximum: the first index is the prediction
  z[1][3] = z[1][5] = 40.0f, label[1] = 5;
  for (const float smoothing : {0.0f, 0.1f})
    for (const bool in_place : {false, true}) {
      for (std::uint32_t r = 0; r < x.rows; ++r) {
        for (std::uint32_t c = 0; c < x.cols; ++c)
          core.put32(x.src.value() + 4 * (r * x.cols + c), bits_of(z[r][c]));
        core.put32(x.labels.value() + 4 * r, static_cast<std::uint32_t>(label[r]));
      }
      isa::Xent run = x;
      run.smoothing = smoothing;
      if (in_place) run.dst = run.src;
      ops.xent(run, core.ub_view());
      for (std::uint32_t r = 0; r < x.rows; ++r) {
        const XentExpect e =
            naive_xent(z[r], static_cast<std::size_t>(label[r]), x.scale, smoothing);
        for (std::uint32_t c = 0; c < x.cols; ++c)
          ASSERT_EQ(core.get32(run.dst.value() + 4 * (r * x.cols + c)), bits_of(e.grad[c]))
              << "row " << r << " col " << c;
        EXPECT_EQ(core.get32(x.out.value() + 8 * r), bits_of(e.loss)) << r;
        EXPECT_EQ(core.get32(x.out.value() + 8 * r + 4), bits_of(e.correct)) << r;
      }
    }
  EXPECT_EQ(float_of(core.get32(x.out.value() + 4)), 1.0f);
  EXPECT_EQ(float_of(core.get32(x.out.value() + 12)), 0.0f);
}

TEST(VectorXent, RejectsBadFieldsLabelsAndOverlapsBeforeWritingAnything) {
  Core core;
  VectorOps ops(core.cfg);
  const isa::Xent ok = xent_case(4, 10);
  for (std::uint32_t r = 0; r < ok.rows; ++r)
    core.put32(ok.labels.value() + 4 * r, r == 2 ? 9u : r);
  const float inf = std::numeric_limits<float>::infinity();
  const std::uint64_t logits = 4 * 4 * 10;
  expect_refusals<isa::Xent>(
      core, ok, [&](const isa::Xent& x) { ops.xent(x, core.ub_view()); },
      {
          {[](isa::Xent& x) { x.rows = 0; }, {"xent: rows = 0"}},
          {[](isa::Xent& x) { x.cols = 0; }, {"xent: cols = 0"}},
          {[&](isa::Xent& x) { x.scale = inf; }, {"xent: scale = inf", "finite"}},
          {[](isa::Xent& x) { x.smoothing = 1.0f; }, {"xent: smoothing = 1", "[0, 1)"}},
          {[](isa::Xent& x) { x.smoothing = -0.5f; }, {"xent: smoothing = -0.5", "[0, 1)"}},
          {[](isa::Xent& x) { x.cols = 9; }, {"labels[2] = 9", "row 2", "[0, cols = 9)"}},
          {[&](isa::Xent& x) {
             x.src = UbAddr(static_cast<std::uint32_t>(core.ub.size() - logits + 4));
           },
           {"xent: src = 0x", "rows 4 x cols 10 x fp32"}},
          {[&](isa::Xent& x) { x.out = UbAddr(static_cast<std::uint32_t>(core.ub.size() - 8)); },
           {"xent: out = 0x", "8-byte records"}},
          {[](isa::Xent& x) { x.dst = UbAddr(x.src.value() + 4); }, {"dst", "overlaps src"}},
          {[](isa::Xent& x) { x.out = UbAddr(x.src.value() + 40); }, {"out", "overlaps src"}},
          {[](isa::Xent& x) { x.out = UbAddr(x.dst.value()); }, {"out", "overlaps dst"}},
      });
  core.put32(ok.labels.value() + 4, 0xffffffffu);
  expect_program_error([&] { ops.xent(ok, core.ub_view()); }, {"labels[1] = -1", "row 1"});
}

// ---- update ----

// count elements of w, g, m, v apart, and the record after them.
isa::Update update_case(isa::UpdateKind kind, std::uint32_t count) {
  isa::Update u;
  u.kind = kind, u.count = count;
  const std::uint32_t n = 4 * count + 32;
  u.w = UbAddr(0x100), u.g = UbAddr(0x100 + n);
  u.m = UbAddr(kind == isa::UpdateKind::Sgd ? 0 : 0x100 + 2 * n);  // momentum, adam, lars
  u.v = UbAddr(kind == isa::UpdateKind::Adam ? 0x100 + 3 * n : 0);
  u.params = UbAddr(0x100 + 4 * n);
  return u;
}

void put_floats(Core& core, std::uint64_t at, const std::vector<float>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) core.put32(at + 4 * i, bits_of(v[i]));
}
std::vector<float> get_floats(const Core& core, std::uint64_t at, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = float_of(core.get32(at + 4 * i));
  return v;
}

// Each kind against docs/isa.md's formulas written out as plain fp32 loops, every operation
// rounded on its own in the order written.
TEST(VectorUpdate, SgdMomentumAdamAndLarsStepEveryElementAsDocumented) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> v(-1.0f, 1.0f);
  constexpr std::uint32_t kCount = 301;
  const float lr = 1e-3f, mom = 0.9f, b1 = 0.9f, b2 = 0.999f, eps = 1e-7f;
  const float b1p = 0.729f, b2p = 0.997002999f;                        // t = 3
  const float wd = 1e-4f, eta = 1e-3f, w_ss = 90.25f, g_ss = 0.0625f;  // LARS: norms 9.5, 0.25
  for (const isa::UpdateKind kind : {isa::UpdateKind::Sgd, isa::UpdateKind::Momentum,
                                     isa::UpdateKind::Adam, isa::UpdateKind::Lars}) {
    Core core;
    const isa::Update u = update_case(kind, kCount);
    std::vector<float> w(kCount), g(kCount), m(kCount), s(kCount);
    for (std::uint32_t i = 0; i < kCount; ++i)
      w[i] = v(rng), g[i] = v(rng), m[i] = 0.1f * v(rng), s[i] = 0.01f * std::fabs(v(rng));
    put_floats(core, u.w.value(), w);
    put_floats(core, u.g.value(), g);
    if (kind != isa::UpdateKind::Sgd) put_floats(core, u.m.value(), m);
    if (kind == isa::UpdateKind::Adam) put_floats(core, u.v.value(), s);
    if (kind == isa::UpdateKind::Sgd) put_floats(core, u.params.value(), {lr});
    if (kind == isa::UpdateKind::Momentum) put_floats(core, u.params.value(), {lr, mom});
    if (kind == isa::UpdateKind::Adam)
      put_floats(core, u.params.value(), {lr, b1, b2, eps, b1p, b2p});
    if (kind == isa::UpdateKind::Lars)
      put_floats(core, u.params.value(), {lr, mom, wd, eta, w_ss, g_ss});
    const std::vector<std::uint8_t> before = core.ub;
    VectorOps(core.cfg).update(u, core.ub_view());

    const float one = 1.0f, sq = std::sqrt(one - b2p);
    const float alpha = (lr * sq) / (one - b1p);
    // LARS: trust = (eta * 9.5) / (0.25 + wd * 9.5), scaled_lr = lr * trust, once.
    const float ew = eta * 9.5f, dw = wd * 9.5f;
    const float den_l = 0.25f + dw, trust = ew / den_l, scaled_lr = lr * trust;
    for (std::uint32_t i = 0; i < kCount; ++i) {
      if (kind == isa::UpdateKind::Lars) {
        const float decay = wd * w[i], gd = g[i] + decay;
        const float a = mom * m[i], lg = scaled_lr * gd;
        m[i] = a - lg;
        w[i] = w[i] + m[i];
      } else if (kind == isa::UpdateKind::Sgd) {
        const float lg = lr * g[i];
        w[i] = w[i] - lg;
      } else if (kind == isa::UpdateKind::Momentum) {
        const float a = mom * m[i], lg = lr * g[i];
        m[i] = a - lg;
        w[i] = w[i] + m[i];
      } else {
        const float d = g[i] - m[i], c1 = one - b1;
        const float dm = d * c1;
        m[i] = m[i] + dm;
        const float gg = g[i] * g[i], c2 = one - b2;
        const float e = gg - s[i];
        const float dv = e * c2;
        s[i] = s[i] + dv;
        const float root = std::sqrt(s[i]);
        const float den = root + eps, num = m[i] * alpha;
        const float q = num / den;
        w[i] = w[i] - q;
      }
    }
    const auto got_w = get_floats(core, u.w.value(), kCount);
    for (std::uint32_t i = 0; i < kCount; ++i) ASSERT_EQ(bits_of(got_w[i]), bits_of(w[i])) << i;
    if (kind != isa::UpdateKind::Sgd) {
      const auto got_m = get_floats(core, u.m.value(), kCount);
      for (std::uint32_t i = 0; i < kCount; ++i) ASSERT_EQ(bits_of(got_m[i]), bits_of(m[i])) << i;
    }
    if (kind == isa::UpdateKind::Adam) {
      const auto got_v = get_floats(core, u.v.value(), kCount);
      for (std::uint32_t i = 0; i < kCount; ++i) ASSERT_EQ(bits_of(got_v[i]), bits_of(s[i])) << i;
    }
    // Nothing else changed: the gradients, the record and every other byte.
    std::vector<std::uint8_t> after = core.ub;
    for (const std::uint64_t at : {u.w.value(), u.m.value(), u.v.value()})
      if (at != 0)
        std::copy(before.begin() + static_cast<std::ptrdiff_t>(at),
                  before.begin() + static_cast<std::ptrdiff_t>(at + 4 * kCount),
                  after.begin() + static_cast<std::ptrdiff_t>(at));
    EXPECT_EQ(after, before);
  }
}

TEST(VectorUpdate, RejectsBadFieldsRecordsAndOverlapsNamingThemBeforeWritingAnything) {
  Core core;
  VectorOps ops(core.cfg);
  const isa::Update ok = update_case(isa::UpdateKind::Adam, 64);
  const std::uint64_t rec = ok.params.value();
  put_floats(core, rec, {1e-3f, 0.9f, 0.999f, 1e-7f, 0.9f, 0.999f});
  ops.update(ok, core.ub_view());
  const auto run = [&](const isa::Update& u) { ops.update(u, core.ub_view()); };
  expect_refusals<isa::Update>(
      core, ok, run,
      {
          {[](isa::Update& u) { u.count = 0; }, {"update: count = 0"}},
          {[](isa::Update& u) { u.kind = static_cast<isa::UpdateKind>(4); },
           {"update: kind = 4", "sgd, momentum, adam, lars"}},
          {[](isa::Update& u) { u.kind = isa::UpdateKind::Sgd; },
           {"update: m = 0x", "with kind sgd", "must be 0"}},
          {[](isa::Update& u) { u.kind = isa::UpdateKind::Momentum; },
           {"update: v = 0x", "with kind momentum", "must be 0"}},
          {[&](isa::Update& u) { u.v = UbAddr(static_cast<std::uint32_t>(core.ub.size() - 8)); },
           {"update: v = 0x", "count 64 x fp32"}},
          {[&](isa::Update& u) {
             u.params = UbAddr(static_cast<std::uint32_t>(core.ub.size() - 20));
           },
           {"update: params = 0x", "6 fp32 values of adam"}},
          {[](isa::Update& u) { u.m = UbAddr(u.w.value() + 4); }, {"update: m = 0x", "overlaps w"}},
          {[](isa::Update& u) { u.v = u.g; }, {"update: v = 0x", "overlaps g"}},
      });
  // Each value of the record out of its range, one at a time.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    int index;
    float value;
    const char* words;
  } records[] = {{0, -1e-3f, "update: lr = -0.001 (must be finite and >= 0)"},
                 {0, nan, "update: lr = nan"},
                 {1, 1.0f, "update: beta1 = 1 (must be in [0, 1))"},
                 {2, -0.5f, "update: beta2 = -0.5"},
                 {3, 0.0f, "update: epsilon = 0 (must be finite and > 0)"},
                 {4, 1.0f, "update: beta1_power = 1 (must be in [0, 1))"},
                 {5, std::numeric_limits<float>::infinity(), "update: beta2_power = inf"}};
  for (const auto& r : records) {
    const std::uint32_t saved = core.get32(rec + 4 * r.index);
    core.put32(rec + 4 * r.index, bits_of(r.value));
    const std::vector<std::uint8_t> before = core.ub;
    expect_program_error([&] { run(ok); }, {r.words});
    EXPECT_EQ(core.ub, before);
    core.put32(rec + 4 * r.index, saved);
  }
  const isa::Update mom = update_case(isa::UpdateKind::Momentum, 8);
  put_floats(core, mom.params.value(), {0.01f, 1.5f});
  expect_program_error([&] { run(mom); }, {"update: momentum = 1.5 (must be in [0, 1]"});
  // LARS's hyperparameters; its sums of squares are data (a diverged tensor's inf is stepped).
  const isa::Update lars = update_case(isa::UpdateKind::Lars, 8);
  for (const auto& [record, words] :
       {std::pair{std::vector<float>{0.1f, 1.5f, 1e-4f, 1e-3f, 1.0f, 1.0f},
                  "update: momentum = 1.5 (must be in [0, 1]"},
        std::pair{std::vector<float>{0.1f, 0.9f, -1e-4f, 1e-3f, 1.0f, 1.0f},
                  "update: weight_decay = -0.0001 (must be finite and >= 0)"},
        std::pair{std::vector<float>{0.1f, 0.9f, 1e-4f, 0.0f, 1.0f, 1.0f},
                  "update: eta = 0 (must be finite and > 0)"}}) {
    put_floats(core, lars.params.value(), record);
    expect_program_error([&] { run(lars); }, {words});
  }
  put_floats(core, lars.params.value(),
             {0.1f, 0.9f, 1e-4f, 1e-3f, std::numeric_limits<float>::infinity(), 1.0f});
  run(lars);
}

// ---- reduce ----

// rows x cols fp32 values, stride bytes apart, at 0x100; the result at 0x8000.
isa::Reduce reduce_case(isa::ReduceOp op, std::uint32_t rows, std::uint16_t cols,
                        std::uint32_t stride) {
  isa::Reduce r;
  r.src = UbAddr(0x100);
  r.dst = UbAddr(0x8000);
  r.rows = rows;
  r.cols = cols;
  r.stride = stride;
  r.op = op;
  return r;
}

// docs/isa.md §4.17 as a naive loop: each column from +0 (sum, sum_squares), -inf (max) or dst
// (acc), the rows in order, one fp32 add (float64 of two fp32 values rounded once; of the square
// so rounded first for sum_squares) or numerics::max_float.
std::vector<float> reduce_expected(const isa::Reduce& r, const Core& core) {
  std::vector<float> out(r.cols);
  for (std::uint32_t c = 0; c < r.cols; ++c) {
    float s = r.accumulate
                  ? float_of(core.get32(r.dst.value() + 4 * c))
                  : (r.op == isa::ReduceOp::Max ? -std::numeric_limits<float>::infinity() : 0.0f);
    for (std::uint32_t row = 0; row < r.rows; ++row) {
      const float v = float_of(core.get32(r.src.value() + std::uint64_t{row} * r.stride + 4 * c));
      // sum_squares: the square rounded to fp32 first, then the add.
      const float sq = static_cast<float>(double{v} * v);
      s = r.op == isa::ReduceOp::Sum          ? static_cast<float>(double{s} + v)
          : r.op == isa::ReduceOp::SumSquares ? static_cast<float>(double{s} + sq)
                                              : numerics::max_float(s, v);
    }
    out[c] = s;
  }
  return out;
}

// Sums and maxima of every column, fresh and accumulated, with the bytes between rows and around
// dst untouched; the sum's order shows (large values cancel only after the small ones are lost).
TEST(VectorReduce, SumSumSquaresAndMaxRunDownEachColumnInRowOrder) {
  for (isa::ReduceOp op : {isa::ReduceOp::Sum, isa::ReduceOp::Max, isa::ReduceOp::SumSquares})
    for (const bool acc : {false, true}) {
      Core core;
      VectorOps ops(core.cfg);
      isa::Reduce r = reduce_case(op, 37, 11, 64);
      r.accumulate = acc;
      std::mt19937 rng(23);
      std::uniform_real_distribution<float> f(-100.0f, 100.0f);
      for (std::uint32_t row = 0; row < r.rows; ++row)
        for (std::uint32_t c = 0; c < r.cols; ++c) {
          float v = f(rng);
          if (c == 0) v = row == 0 ? 1e8f : (row == 1 ? -1e8f : 1.0f);  // order-sensitive column
          core.put32(r.src.value() + std::uint64_t{row} * r.stride + 4 * c, bits_of(v));
        }
      for (std::uint32_t c = 0; c < r.cols; ++c) core.put32(r.dst.value() + 4 * c, bits_of(f(rng)));
      const std::vector<float> expect = reduce_expected(r, core);
      std::vector<std::uint8_t> before = core.ub;
      ops.reduce(r, core.ub_view());
      for (std::uint32_t c = 0; c < r.cols; ++c) {
        EXPECT_EQ(core.get32(r.dst.value() + 4 * c), bits_of(expect[c]))
            << isa::name_of(op) << " acc " << acc << " column " << c;
        for (int b = 0; b < 4; ++b)
          before[r.dst.value() + 4 * c + b] = core.ub[r.dst.value() + 4 * c + b];
      }
      EXPECT_EQ(core.ub, before) << "only dst's cols values change";
    }
}

// max: -inf is the start, so a column of -inf stays -inf; a NaN anywhere in the column (or in dst
// with acc) gives NaN.
TEST(VectorReduce, MaxStartsFromMinusInfinityAndPropagatesNan) {
  Core core;
  VectorOps ops(core.cfg);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  isa::Reduce r = reduce_case(isa::ReduceOp::Max, 3, 3, 12);
  const float in[3][3] = {{-inf, 1.0f, 2.0f}, {-inf, nan, 3.0f}, {-inf, 0.5f, -1.0f}};
  for (int row = 0; row < 3; ++row)
    for (int c = 0; c < 3; ++c) core.put32(r.src.value() + 12 * row + 4 * c, bits_of(in[row][c]));
  ops.reduce(r, core.ub_view());
  EXPECT_EQ(float_of(core.get32(r.dst.value())), -inf);
  EXPECT_TRUE(std::isnan(float_of(core.get32(r.dst.value() + 4))));
  EXPECT_EQ(float_of(core.get32(r.dst.value() + 8)), 3.0f);
  r.accumulate = true;
  core.put32(r.dst.value() + 8, bits_of(nan));
  ops.reduce(r, core.ub_view());
  EXPECT_TRUE(std::isnan(float_of(core.get32(r.dst.value() + 8))));
}

// Both builds of reduce over 75 columns (whole vectors and a remainder), fresh and accumulated,
// on values weighted toward special ones (one NaN kind): every column as the scalar loop, in row
// order, bit for bit.
TEST(VectorReduce, LaneBuildsRunDownEachColumnAsTheScalarLoop) {
  for (const std::string& path : simd_paths())
    for (isa::ReduceOp op : {isa::ReduceOp::Sum, isa::ReduceOp::Max, isa::ReduceOp::SumSquares})
      for (const bool acc : {false, true}) {
        Core core;
        isa::Reduce r = reduce_case(op, 9, 75, 75 * 4 + 8);
        r.accumulate = acc;
        std::mt19937 rng(43);
        for (std::uint32_t row = 0; row < r.rows; ++row)
          for (std::uint32_t c = 0; c < r.cols; ++c)
            core.put32(r.src.value() + std::uint64_t{row} * r.stride + 4 * c,
                       edge_fp32_bits(rng, true));
        for (std::uint32_t c = 0; c < r.cols; ++c)
          core.put32(r.dst.value() + 4 * c, edge_fp32_bits(rng, true));
        const std::vector<float> expect = reduce_expected(r, core);
        {
          ScopedSimd simd(path);
          VectorOps(core.cfg).reduce(r, core.ub_view());
        }
        for (std::uint32_t c = 0; c < r.cols; ++c)
          ASSERT_EQ(core.get32(r.dst.value() + 4 * c), bits_of(expect[c]))
              << path << " " << isa::name_of(op) << " acc " << acc << " column " << c;
      }
}

TEST(VectorReduce, RejectsBadFieldsNamingThemBeforeWritingAnything) {
  Core core;
  VectorOps ops(core.cfg);
  const isa::Reduce ok = reduce_case(isa::ReduceOp::Sum, 4, 8, 32);
  const auto end = static_cast<std::uint32_t>(core.ub.size());
  expect_refusals<isa::Reduce>(
      core, ok, [&](const isa::Reduce& r) { ops.reduce(r, core.ub_view()); },
      {
          {[](isa::Reduce& r) { r.rows = 0; }, {"reduce", "rows = 0"}},
          {[](isa::Reduce& r) { r.cols = 0; }, {"cols = 0"}},
          {[](isa::Reduce& r) { r.stride = 31; }, {"stride = 31", "cols 8"}},
          {[](isa::Reduce& r) { r.type = DType::Int8; }, {"type = int8", "fp32"}},
          {[](isa::Reduce& r) { r.type = DType::Bf16; }, {"type = bf16", "fp32"}},
          {[&](isa::Reduce& r) { r.src = UbAddr(end - 3 * 32 - 31); }, {"src = 0x"}},
          {[&](isa::Reduce& r) { r.dst = UbAddr(end - 31); }, {"dst = 0x"}},
          {[](isa::Reduce& r) { r.dst = UbAddr(r.src.value() + 3 * 32 + 28); },
           {"dst", "overlaps src"}},
      });
  isa::Reduce gap = ok;  // dst in the bytes between src's rows still overlaps its extent
  gap.stride = 64;
  gap.dst = UbAddr(ok.src.value() + 32);
  expect_program_error([&] { ops.reduce(gap, core.ub_view()); }, {"overlaps src"});
}

// ---- pool_grad ----

// A "same"-padded 3x3 window at stride 2 over a 7x6x3 image (out 4x3, pad 1): windows overlap,
// so a position may receive several gradients, and edges hold 4, 6 or 9 positions.
isa::SetWindow pool_grad_window() {
  isa::SetWindow w;
  w.in_h = 7, w.in_w = 6, w.in_c = 3;
  w.kernel_h = 3, w.kernel_w = 3, w.stride_h = 2, w.stride_w = 2;
  w.pad_top = 1, w.pad_left = 1, w.out_h = 4, w.out_w = 3;
  return w;
}

isa::PoolGrad pool_grad_case(isa::PoolKind kind) {
  isa::PoolGrad g;
  g.x = UbAddr(0x100);
  g.dy = UbAddr(0x2000);
  g.dst = UbAddr(0x4000);
  g.images = 2;
  g.kind = kind;
  return g;
}

// docs/isa.md §4.18 as naive loops over the written definition: dX = +0, then for b, oy, ox, c the
// in-image window positions (ky outer, kx inner); max adds dy at the first maximum of x (the
// first NaN if any), avg adds dy / n at each position in order. Adds are float64 of two fp32
// values rounded once.
std::vector<float> pool_grad_expected(const isa::PoolGrad& g, const isa::SetWindow& w,
                                      const Core& core) {
  const std::uint64_t ch = w.in_c;
  std::vector<float> dx(std::uint64_t{g.images} * w.in_h * w.in_w * ch, 0.0f);
  const auto x_at = [&](std::uint64_t i) { return float_of(core.get32(g.x.value() + 4 * i)); };
  std::uint64_t o = 0;
  for (std::uint64_t b = 0; b < g.images; ++b)
    for (std::int64_t oy = 0; oy < w.out_h; ++oy)
      for (std::int64_t ox = 0; ox < w.out_w; ++ox)
        for (std::uint64_t c = 0; c < ch; ++c, ++o) {
          std::vector<std::uint64_t> win;
          for (std::int64_t ky = 0; ky < w.kernel_h; ++ky)
            for (std::int64_t kx = 0; kx < w.kernel_w; ++kx) {
              const std::int64_t y = oy * w.stride_h - w.pad_top + ky;
              const std::int64_t x = ox * w.stride_w - w.pad_left + kx;
              if (y < 0 || y >= w.in_h || x < 0 || x >= w.in_w) continue;
              win.push_back(((b * w.in_h + static_cast<std::uint64_t>(y)) * w.in_w +
                             static_cast<std::uint64_t>(x)) *
                                ch +
                            c);
            }
          const float dy = float_of(core.get32(g.dy.value() + 4 * o));
          const auto add = [&](std::uint64_t i, float v) {
            dx[i] = static_cast<float>(double{dx[i]} + v);
          };
          if (g.kind == isa::PoolKind::Avg) {
            const auto share = static_cast<float>(double{dy} / static_cast<double>(win.size()));
            for (std::uint64_t i : win) add(i, share);
            continue;
          }
          std::uint64_t best = win[0];
          for (std::uint64_t i : win) {
            if (std::isnan(x_at(i))) {
              best = i;
              break;
            }
            if (x_at(i) > x_at(best)) best = i;
          }
          add(best, dy);
        }
  return dx;
}

// Max and avg over overlapping, padded windows of two images; x holds few distinct values, so
// windows have ties (the first maximum wins) and one NaN; every dX bit for bit.
TEST(VectorPoolGrad, ScattersEachGradientAsTheWrittenLoopsDo) {
  const isa::SetWindow w = pool_grad_window();
  for (isa::PoolKind kind : {isa::PoolKind::Max, isa::PoolKind::Avg}) {
    Core core;
    VectorOps ops(core.cfg);
    const isa::PoolGrad g = pool_grad_case(kind);
    std::mt19937 rng(29);
    std::uniform_int_distribution<int> few(-3, 3);
    std::uniform_real_distribution<float> f(-10.0f, 10.0f);
    const std::uint64_t xs = std::uint64_t{g.images} * w.in_h * w.in_w * w.in_c;
    const std::uint64_t dys = std::uint64_t{g.images} * w.out_h * w.out_w * w.in_c;
    for (std::uint64_t i = 0; i < xs; ++i)
      core.put32(g.x.value() + 4 * i, bits_of(i == 40 ? std::numeric_limits<float>::quiet_NaN()
                                                      : static_cast<float>(few(rng))));
    for (std::uint64_t i = 0; i < dys; ++i) core.put32(g.dy.value() + 4 * i, bits_of(f(rng)));
    const std::vector<float> expect = pool_grad_expected(g, w, core);
    ops.pool_grad(g, w, core.ub_view());
    for (std::uint64_t i = 0; i < xs; ++i)
      ASSERT_EQ(core.get32(g.dst.value() + 4 * i), bits_of(expect[i]))
          << isa::name_of(kind) << " element " << i;
  }
}

// Both builds of pool_grad over channel counts with whole vectors and remainders (75, 8, 3), on
// overlapping padded windows and disjoint ones: x holds few distinct values (ties, which the
// first maximum breaks; +0 against -0) and NaNs; every dX bit for bit as the written loops.
TEST(VectorPoolGrad, LaneBuildsScatterAsTheWrittenLoopsForEveryChannelCount) {
  for (const std::string& path : simd_paths())
    for (std::uint16_t channels : {std::uint16_t{75}, std::uint16_t{8}, std::uint16_t{3}})
      for (const bool overlap : {true, false})
        for (isa::PoolKind kind : {isa::PoolKind::Max, isa::PoolKind::Avg}) {
          isa::SetWindow w = pool_grad_window();
          w.in_c = channels;
          if (!overlap) {
            w.in_h = 6, w.in_w = 4, w.kernel_h = w.kernel_w = 2, w.stride_h = w.stride_w = 2;
            w.pad_top = w.pad_left = 0, w.out_h = 3, w.out_w = 2;
          }
          Core core;
          isa::PoolGrad g = pool_grad_case(kind);
          const std::uint64_t xs = std::uint64_t{g.images} * w.in_h * w.in_w * w.in_c;
          const std::uint64_t dys = std::uint64_t{g.images} * w.out_h * w.out_w * w.in_c;
          g.x = UbAddr(0x100);
          g.dy = UbAddr(static_cast<std::uint32_t>(0x100 + 4 * xs));
          g.dst = UbAddr(static_cast<std::uint32_t>(0x100 + 4 * (xs + dys)));
          std::mt19937 rng(47 + channels);
          std::uniform_int_distribution<int> pick(0, 9);
          std::uniform_real_distribution<float> f(-10.0f, 10.0f);
          const float values[] = {0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()};
          for (std::uint64_t i = 0; i < xs; ++i) {
            const int k = pick(rng);
            core.put32(g.x.value() + 4 * i, bits_of(k < 3 ? values[k] : static_cast<float>(k % 4)));
          }
          for (std::uint64_t i = 0; i < dys; ++i) core.put32(g.dy.value() + 4 * i, bits_of(f(rng)));
          const std::vector<float> expect = pool_grad_expected(g, w, core);
          {
            ScopedSimd simd(path);
            VectorOps(core.cfg).pool_grad(g, w, core.ub_view());
          }
          for (std::uint64_t i = 0; i < xs; ++i)
            ASSERT_EQ(core.get32(g.dst.value() + 4 * i), bits_of(expect[i]))
                << path << " " << isa::name_of(kind) << " channels " << channels << " overlap "
                << overlap << " element " << i;
        }
}

// Without overlap or padding (2x2 at stride 2) max puts each dy at one position, the first
// maximum of its window, and zeros the rest; avg puts dy / 4 at all four.
TEST(VectorPoolGrad, DisjointWindowsGiveOnePositionPerWindowOrAQuarterEach) {
  isa::SetWindow w;
  w.in_h = 2, w.in_w = 2, w.in_c = 1, w.kernel_h = 2, w.kernel_w = 2, w.stride_h = 2;
  w.stride_w = 2, w.out_h = 1, w.out_w = 1;
  Core core;
  VectorOps ops(core.cfg);
  isa::PoolGrad g = pool_grad_case(isa::PoolKind::Max);
  g.images = 1;
  const float x[] = {1.0f, 5.0f, 5.0f, -2.0f};
  for (int i = 0; i < 4; ++i) core.put32(g.x.value() + 4 * i, bits_of(x[i]));
  core.put32(g.dy.value(), bits_of(3.0f));
  ops.pool_grad(g, w, core.ub_view());
  const float max_dx[] = {0.0f, 3.0f, 0.0f, 0.0f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(core.get32(g.dst.value() + 4 * i), bits_of(max_dx[i]));
  g.kind = isa::PoolKind::Avg;
  ops.pool_grad(g, w, core.ub_view());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(core.get32(g.dst.value() + 4 * i), bits_of(0.75f));
}

TEST(VectorPoolGrad, RejectsBadFieldsAndWindowsNamingThemBeforeWritingAnything) {
  Core core;
  VectorOps ops(core.cfg);
  const isa::SetWindow w = pool_grad_window();
  const auto end = static_cast<std::uint32_t>(core.ub.size());
  const auto run_with = [&](const isa::SetWindow& win) {
    return [&, win](const isa::PoolGrad& g) { ops.pool_grad(g, win, core.ub_view()); };
  };
  const isa::PoolGrad ok = pool_grad_case(isa::PoolKind::Max);
  expect_refusals<isa::PoolGrad>(
      core, ok, run_with(w),
      {
          {[](isa::PoolGrad& g) { g.images = 0; }, {"pool_grad", "images = 0"}},
          {[](isa::PoolGrad& g) { g.type = DType::Bf16; }, {"type = bf16", "fp32"}},
          {[&](isa::PoolGrad& g) { g.x = UbAddr(end - 100); }, {"x = 0x"}},
          {[&](isa::PoolGrad& g) { g.dy = UbAddr(end - 100); }, {"dy = 0x"}},
          {[&](isa::PoolGrad& g) { g.dst = UbAddr(end - 100); }, {"dst = 0x"}},
          {[](isa::PoolGrad& g) { g.dst = UbAddr(g.x.value() + 4); }, {"dst", "overlaps x"}},
          {[](isa::PoolGrad& g) { g.dst = UbAddr(g.dy.value() - 4); }, {"dst", "overlaps dy"}},
      });
  isa::SetWindow none;  // the registers before any set_window
  isa::SetWindow dilated = w;
  dilated.dilation_w = 2;
  isa::SetWindow in_dilated = w;
  in_dilated.in_dilation_h = 2;
  isa::SetWindow wide_pad = w;
  wide_pad.pad_left = 3;
  isa::SetWindow too_many = w;
  too_many.out_h = 5;  // window 4 starts at row 4 * 2 - 1 = 7, past the 7 rows
  for (const auto& [win, words] :
       {std::pair{none, std::vector<std::string>{"pool_grad", "set_window must precede"}},
        std::pair{dilated, std::vector<std::string>{"dilation 1x2"}},
        std::pair{in_dilated, std::vector<std::string>{"input dilation 2x1"}},
        std::pair{wide_pad, std::vector<std::string>{"pad_left = 3", "kernel_w"}},
        std::pair{too_many, std::vector<std::string>{"out_h = 5", "past the 7 in_h inputs"}}})
    expect_refusals<isa::PoolGrad>(core, ok, run_with(win), {{[](isa::PoolGrad&) {}, words}});
  // Dilation 0 reads as 1; avg reads no x, so x may be anything, even dst.
  isa::SetWindow zero_dilation = w;
  zero_dilation.dilation_h = zero_dilation.dilation_w = 0;
  zero_dilation.in_dilation_h = zero_dilation.in_dilation_w = 0;
  ops.pool_grad(ok, zero_dilation, core.ub_view());
  isa::PoolGrad avg = pool_grad_case(isa::PoolKind::Avg);
  avg.x = avg.dst;
  ops.pool_grad(avg, w, core.ub_view());
}

// ---- cost ----

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// docs/timing-model.md: latency + max(element ops / lane slots, UB bytes / port bytes per cycle).
std::uint64_t formula(const ChipConfig& cfg, std::uint64_t ops, std::uint64_t ub_bytes) {
  const std::uint64_t slots = std::uint64_t{cfg.vector_unit.lanes} * cfg.vector_unit.sublanes;
  return cfg.vector_unit.latency_cycles +
         std::max(ceil_div(ops, slots), ceil_div(ub_bytes, cfg.vector_unit.bytes_per_cycle));
}

TEST(VectorCost, ConfigWithoutLanesOrPortBandwidthIsRejected) {
  ChipConfig cfg = test_config();
  cfg.vector_unit.sublanes = 0;
  EXPECT_THROW(VectorOps{cfg}, ConfigError);
  cfg = test_config();
  cfg.vector_unit.bytes_per_cycle = 0;
  EXPECT_THROW(VectorOps{cfg}, ConfigError);
}

TEST(VectorCost, ActivateCountsOneOpPerOutputAndThreeForSoftmax) {
  const ChipConfig cfg = test_config();
  VectorOps ops(cfg);
  isa::Activate a;
  a.rows = 100;
  a.cols = 16;
  a.dst_stride = 16;
  a.out_type = DType::Int8;
  for (isa::ActFunc f : {isa::ActFunc::Relu, isa::ActFunc::Softmax}) {
    a.func = f;
    a.out_type = f == isa::ActFunc::Softmax ? DType::Bf16 : DType::Int8;
    const VectorCost c = ops.cost(a);
    const std::uint64_t elems = std::uint64_t{a.rows} * a.cols;
    EXPECT_EQ(c.element_ops, elems * (f == isa::ActFunc::Softmax ? 3 : 1));
    EXPECT_EQ(c.acc_bytes_read, elems * size_of(cfg.mxu.acc_type));
    EXPECT_EQ(c.ub_bytes_read, 12u * a.cols);
    EXPECT_EQ(c.ub_bytes_written, elems * size_of(a.out_type));
    EXPECT_EQ(c.cycles, formula(cfg, c.element_ops, c.ub_bytes_read + c.ub_bytes_written));
  }
}

TEST(VectorCost, SoftmaxCountsThreeOpsPerValueAndReadsAndWritesEachOnce) {
  const ChipConfig cfg = test_config();
  VectorOps ops(cfg);
  isa::Softmax s;
  s.rows = 32;
  s.cols = 1000;
  s.src_stride = s.dst_stride = 4000;
  const VectorCost c = ops.cost(s);
  const std::uint64_t elems = std::uint64_t{s.rows} * s.cols;
  EXPECT_EQ(c.element_ops, 3 * elems);
  EXPECT_EQ(c.ub_bytes_read, 4 * elems);
  EXPECT_EQ(c.ub_bytes_written, 4 * elems);
  EXPECT_EQ(c.acc_bytes_read, 0u);
  EXPECT_EQ(c.cycles, formula(cfg, c.element_ops, c.ub_bytes_read + c.ub_bytes_written));
}

TEST(VectorCost, DoublingLanesHalvesTheThroughputPartWhenComputeBound) {
  ChipConfig cfg = test_config();
  cfg.vector_unit.bytes_per_cycle = 1 << 20;  // the port never limits
  isa::Eltwise e;
  e.count = 4096;
  e.type = DType::Bf16;
  const std::uint64_t slots = std::uint64_t{cfg.vector_unit.lanes} * cfg.vector_unit.sublanes;
  const std::uint64_t narrow = VectorOps(cfg).cost(e).cycles;
  EXPECT_EQ(narrow - cfg.vector_unit.latency_cycles, ceil_div(e.count, slots));
  ChipConfig wide = cfg;
  wide.vector_unit.lanes *= 2;
  const std::uint64_t fast = VectorOps(wide).cost(e).cycles;
  EXPECT_EQ(2 * (fast - cfg.vector_unit.latency_cycles), narrow - cfg.vector_unit.latency_cycles);
}

TEST(VectorCost, UnifiedBufferPortBoundsTheCostWhenNarrow) {
  ChipConfig cfg = test_config();
  cfg.vector_unit.bytes_per_cycle = 4;
  VectorOps ops(cfg);
  isa::Eltwise e;
  e.count = 1000;
  e.type = DType::Int8;
  const VectorCost c = ops.cost(e);
  EXPECT_EQ(c.element_ops, e.count);
  EXPECT_EQ(c.ub_bytes_read, 2u * e.count);
  EXPECT_EQ(c.ub_bytes_written, e.count);
  EXPECT_EQ(c.cycles, cfg.vector_unit.latency_cycles +
                          ceil_div(3u * e.count, cfg.vector_unit.bytes_per_cycle));
  EXPECT_EQ(c.cycles, formula(cfg, c.element_ops, 3u * e.count));
}

// docs/timing-model.md, "Broadcast and division": a broadcast b is read once (b_period elements),
// the lanes do one pass per element, and a division holds a lane for 4 element operations; the
// cycles follow the formula from the config, on the test config and on narrow- and wide-port
// variants (port-bound and lane-bound).
TEST(VectorCost, EltwiseReadsABroadcastBOnceAndCountsFourOpsPerDivision) {
  ChipConfig cfg = test_config();
  for (std::uint32_t port : {cfg.vector_unit.bytes_per_cycle, 4u, 1u << 20}) {
    cfg.vector_unit.bytes_per_cycle = port;
    const VectorOps ops(cfg);
    for (DType type : {DType::Int8, DType::Bf16, DType::Fp32})
      for (isa::EltOp op : {isa::EltOp::Add, isa::EltOp::Mul, isa::EltOp::Div})
        for (std::uint32_t p : {0u, 1u, 64u, 5000u}) {
          if (op == isa::EltOp::Div && type != DType::Fp32) continue;
          isa::Eltwise e = eltwise_case(type, 5000, 0, 0x8000, 0x10000);
          e.op = op;
          e.b_period = p;
          const VectorCost c = ops.cost(e);
          const std::uint64_t es = size_of(type);
          EXPECT_EQ(c.element_ops, std::uint64_t{e.count} * (op == isa::EltOp::Div ? 4 : 1));
          EXPECT_EQ(c.ub_bytes_read, e.count * es + (p == 0 ? e.count : p) * es);
          EXPECT_EQ(c.ub_bytes_written, e.count * es);
          EXPECT_EQ(c.acc_bytes_read, 0u);
          EXPECT_EQ(c.cycles, formula(cfg, c.element_ops, c.ub_bytes_read + c.ub_bytes_written))
              << name_of(type) << " " << isa::name_of(op) << " p " << p << " port " << port;
        }
  }
  // b_period = 0 costs exactly what every eltwise cost before the field existed.
  isa::Eltwise e = eltwise_case(DType::Fp32, 5000, 0, 0x8000, 0x10000);
  const VectorCost old = VectorOps(cfg).cost(e);
  EXPECT_EQ(old.ub_bytes_read, 2u * 4 * e.count);
  EXPECT_EQ(old.element_ops, e.count);
}

// A division is lane-bound where an add is port-bound once the port is wide: four times the
// lane term of the same add.
TEST(VectorCost, ADivisionTakesFourTimesTheLaneCyclesOfAnAdd) {
  ChipConfig cfg = test_config();
  cfg.vector_unit.bytes_per_cycle = 1 << 20;  // the port never limits
  const std::uint64_t latency = cfg.vector_unit.latency_cycles;
  const std::uint64_t slots = std::uint64_t{cfg.vector_unit.lanes} * cfg.vector_unit.sublanes;
  isa::Eltwise e = eltwise_case(DType::Fp32, 4096, 0, 0x8000, 0x10000);
  const std::uint64_t add = VectorOps(cfg).cost(e).cycles - latency;
  e.op = isa::EltOp::Div;
  const std::uint64_t div = VectorOps(cfg).cost(e).cycles - latency;
  EXPECT_EQ(add, ceil_div(e.count, slots));
  EXPECT_EQ(div, ceil_div(4 * e.count, slots));
  EXPECT_EQ(div, 4 * add);
}

// rsqrt is one of map's functions: one pass per element, as sigmoid.
TEST(VectorCost, MapRsqrtCostsWhatMapSigmoidCosts) {
  const ChipConfig cfg = test_config();
  const VectorOps ops(cfg);
  const VectorCost r = ops.cost(map_case(isa::MapFunc::Rsqrt, DType::Fp32, DType::Fp32, 512));
  const VectorCost s = ops.cost(map_case(isa::MapFunc::Sigmoid, DType::Fp32, DType::Fp32, 512));
  EXPECT_EQ(r.element_ops, 512u);
  EXPECT_EQ(r.cycles, s.cycles);
  EXPECT_EQ(r.ub_bytes_read, s.ub_bytes_read);
  EXPECT_EQ(r.ub_bytes_written, s.ub_bytes_written);
  EXPECT_EQ(r.cycles, formula(cfg, r.element_ops, r.ub_bytes_read + r.ub_bytes_written));
}

// One op per element; the input and the channel records read, the output written.
TEST(VectorCost, MapCountsOneOpPerElementAndReadsTheRecordsOnce) {
  const ChipConfig cfg = test_config();
  VectorOps ops(cfg);
  for (DType in : kElementTypes)
    for (DType out : kElementTypes) {
      const isa::Map m = map_case(isa::MapFunc::Sigmoid, in, out, 5000);
      const VectorCost c = ops.cost(m);
      EXPECT_EQ(c.element_ops, m.count);
      EXPECT_EQ(c.ub_bytes_read, std::uint64_t{m.count} * size_of(in) + 12u * m.channels);
      EXPECT_EQ(c.ub_bytes_written, std::uint64_t{m.count} * size_of(out));
      EXPECT_EQ(c.acc_bytes_read, 0u);
      EXPECT_EQ(c.cycles, formula(cfg, c.element_ops, c.ub_bytes_read + c.ub_bytes_written));
    }
}

// Softmax's three ops per value, one more for the one-hot and scale, one per row for the loss;
// logits and labels read, gradients and 8-byte records written.
TEST(VectorCost, XentCountsFourOpsPerValueAndOnePerRow) {
  const ChipConfig cfg = test_config();
  const isa::Xent x = xent_case(125, 10);
  const VectorCost c = VectorOps(cfg).cost(x);
  const std::uint64_t elems = std::uint64_t{x.rows} * x.cols;
  EXPECT_EQ(c.element_ops, 4 * elems + x.rows);
  EXPECT_EQ(c.ub_bytes_read, 4 * elems + 4u * x.rows);
  EXPECT_EQ(c.ub_bytes_written, 4 * elems + 8u * x.rows);
  EXPECT_EQ(c.acc_bytes_read, 0u);
  EXPECT_EQ(c.cycles, formula(cfg, c.element_ops, c.ub_bytes_read + c.ub_bytes_written));
}

// sgd 1, momentum 3, adam 9, lars 4 ops per element; each array the kind uses read once, each it
// steps written once, and the record (1, 2 or 6 fp32 values) read once.
TEST(VectorCost, UpdateCountsItsKindsOpsAndArrays) {
  const ChipConfig cfg = test_config();
  const struct {
    isa::UpdateKind kind;
    std::uint64_t ops, arrays_read, arrays_written, record;
  } kinds[] = {{isa::UpdateKind::Sgd, 1, 2, 1, 1},
               {isa::UpdateKind::Momentum, 3, 3, 2, 2},
               {isa::UpdateKind::Adam, 9, 4, 3, 6},
               {isa::UpdateKind::Lars, 4, 3, 2, 6}};
  for (const auto& k : kinds) {
    const isa::Update u = update_case(k.kind, 5000);
    const VectorCost c = VectorOps(cfg).cost(u);
    EXPECT_EQ(c.element_ops, k.ops * u.count);
    EXPECT_EQ(c.ub_bytes_read, 4 * k.arrays_read * u.count + 4 * k.record);
    EXPECT_EQ(c.ub_bytes_written, 4 * k.arrays_written * u.count);
    EXPECT_EQ(c.acc_bytes_read, 0u);
    EXPECT_EQ(c.cycles, formula(cfg, c.element_ops, c.ub_bytes_read + c.ub_bytes_written));
  }
}

// A copy has no lane operation: its bytes cross the unit's port twice, read and written.
TEST(VectorCost, CopyMovesItsBytesThroughThePortWithoutLaneOps) {
  ChipConfig cfg = test_config();
  isa::Copy copy;
  copy.rows = 100, copy.row_bytes = 37, copy.src_stride = 0, copy.dst_stride = 64;
  for (std::uint32_t port : {cfg.vector_unit.bytes_per_cycle, 7u}) {
    cfg.vector_unit.bytes_per_cycle = port;
    const VectorCost c = VectorOps(cfg).cost(copy);
    EXPECT_EQ(c.element_ops, 0u);
    EXPECT_EQ(c.ub_bytes_read, std::uint64_t{copy.rows} * copy.row_bytes);
    EXPECT_EQ(c.ub_bytes_written, std::uint64_t{copy.rows} * copy.row_bytes);
    EXPECT_EQ(c.acc_bytes_read, 0u);
    EXPECT_EQ(c.cycles, cfg.vector_unit.latency_cycles +
                            ceil_div(2 * std::uint64_t{copy.rows} * copy.row_bytes, port));
    EXPECT_EQ(c.cycles, formula(cfg, 0, c.ub_bytes_read + c.ub_bytes_written));
  }
}

// One op per window position read, padded positions skipped: the sizes of every window_of,
// summed (for valid pooling, outputs x kernel_h x kernel_w).
TEST(VectorCost, PoolCountsOneOpPerWindowElementAndReadsTheInputOnce) {
  const ChipConfig cfg = test_config();
  VectorOps ops(cfg);
  for (DType t : {DType::Int8, DType::Bf16})
    for (const isa::Pool& p :
         {pool_case(isa::PoolKind::Avg, t), same_pool_case(isa::PoolKind::Max, t)}) {
      const PoolGeom g = geom_of(p);
      std::uint64_t inside = 0;
      for (std::uint64_t n = 0; n < p.images; ++n)
        for (std::uint64_t oy = 0; oy < g.oh; ++oy)
          for (std::uint64_t ox = 0; ox < g.ow; ++ox)
            for (std::uint64_t c = 0; c < p.channels; ++c)
              inside += window_of(p, n, oy, ox, c).size();
      const std::uint64_t outs = std::uint64_t{p.images} * g.oh * g.ow * p.channels;
      EXPECT_EQ(inside<outs * p.kernel_h * p.kernel_w, p.pad_top> 0);
      const VectorCost c = ops.cost(p);
      EXPECT_EQ(c.element_ops, inside);
      EXPECT_EQ(c.ub_bytes_read,
                std::uint64_t{p.images} * p.in_h * p.in_w * p.channels * size_of(t));
      EXPECT_EQ(c.ub_bytes_written, outs * size_of(t));
      EXPECT_EQ(c.acc_bytes_read, 0u);
      EXPECT_EQ(c.cycles, formula(cfg, c.element_ops, c.ub_bytes_read + c.ub_bytes_written));
    }
}

// One op per value reduced; every row's cols values read once (and dst's with acc), one row of
// cols values written.
TEST(VectorCost, ReduceCountsOneOpPerValueAndWritesOneRow) {
  ChipConfig cfg = test_config();
  for (std::uint32_t port : {cfg.vector_unit.bytes_per_cycle, 1u << 20}) {
    cfg.vector_unit.bytes_per_cycle = port;
    VectorOps ops(cfg);
    for (const bool acc : {false, true})
      for (const isa::ReduceOp op : {isa::ReduceOp::Sum, isa::ReduceOp::SumSquares}) {
        // sum_squares's multiply and add count once, as a multiply-add.
        isa::Reduce r = reduce_case(op, 300, 40, 400);
        r.accumulate = acc;
        const VectorCost c = ops.cost(r);
        const std::uint64_t elems = std::uint64_t{r.rows} * r.cols;
        EXPECT_EQ(c.element_ops, elems);
        EXPECT_EQ(c.ub_bytes_read, 4 * elems + (acc ? 4u * r.cols : 0u));
        EXPECT_EQ(c.ub_bytes_written, 4u * r.cols);
        EXPECT_EQ(c.acc_bytes_read, 0u);
        EXPECT_EQ(c.cycles, formula(cfg, c.element_ops, c.ub_bytes_read + c.ub_bytes_written));
      }
  }
}

// pool's count of window positions inside the image (the sizes of every window, summed) plus one
// op per dy element; dy read, x read by max only, dX written once.
TEST(VectorCost, PoolGradCountsPoolsPositionsPlusOneOpPerGradient) {
  const ChipConfig cfg = test_config();
  VectorOps ops(cfg);
  const isa::SetWindow w = pool_grad_window();
  std::uint64_t inside = 0;
  for (std::int64_t oy = 0; oy < w.out_h; ++oy)
    for (std::int64_t ox = 0; ox < w.out_w; ++ox)
      for (std::int64_t ky = 0; ky < w.kernel_h; ++ky)
        for (std::int64_t kx = 0; kx < w.kernel_w; ++kx) {
          const std::int64_t y = oy * w.stride_h - w.pad_top + ky;
          const std::int64_t x = ox * w.stride_w - w.pad_left + kx;
          inside += y >= 0 && y < w.in_h && x >= 0 && x < w.in_w ? 1 : 0;
        }
  for (isa::PoolKind kind : {isa::PoolKind::Max, isa::PoolKind::Avg}) {
    const isa::PoolGrad g = pool_grad_case(kind);
    const std::uint64_t dys = std::uint64_t{g.images} * w.out_h * w.out_w * w.in_c;
    const std::uint64_t xs = std::uint64_t{g.images} * w.in_h * w.in_w * w.in_c;
    const VectorCost c = ops.cost(g, w);
    EXPECT_EQ(c.element_ops, inside * g.images * w.in_c + dys);
    EXPECT_EQ(c.ub_bytes_read, 4 * dys + (kind == isa::PoolKind::Max ? 4 * xs : 0));
    EXPECT_EQ(c.ub_bytes_written, 4 * xs);
    EXPECT_EQ(c.acc_bytes_read, 0u);
    EXPECT_EQ(c.cycles, formula(cfg, c.element_ops, c.ub_bytes_read + c.ub_bytes_written));
  }
}

// ---- timing only (docs/timing-model.md, "Timing-only mode"): every field and range checked as
// in a full run, no value read or written, and the checks of values (labels, optimizer records)
// not made ----

SimOptions timing_only() {
  SimOptions o;
  o.timing_only = true;
  return o;
}

// A unified buffer whose every byte is 0xa5 (no valid fp32 label, no sane optimizer record).
struct Ub {
  std::vector<std::uint8_t> bytes = std::vector<std::uint8_t>(1 << 16, 0xa5);
  UbView view() { return UbView{bytes.data(), bytes.size()}; }
};

// What `f` throws as ProgramError ("" when it does not).
std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const ProgramError& e) {
    return e.what();
  }
  return "";
}

isa::Eltwise eltwise(std::uint32_t dst) {
  isa::Eltwise e;
  e.a = UbAddr(0), e.b = UbAddr(0x1000), e.dst = UbAddr(dst), e.count = 256;
  e.type = DType::Fp32;
  return e;
}

TEST(VectorOpsTimingOnly, ComputesNothingAndWritesNothing) {
  const ChipConfig cfg = test_config();
  const VectorOps ops(cfg, timing_only());
  Ub ub;
  const std::vector<std::uint8_t> before = ub.bytes;
  ops.eltwise(eltwise(0x2000), ub.view());
  isa::Copy c;
  c.src = UbAddr(0), c.dst = UbAddr(0x4000), c.rows = 8, c.row_bytes = 64, c.src_stride = 64,
  c.dst_stride = 64;
  ops.copy(c, ub.view());
  isa::Reduce r;
  r.src = UbAddr(0), r.dst = UbAddr(0x8000), r.rows = 16, r.cols = 8, r.stride = 32;
  r.type = DType::Fp32;
  ops.reduce(r, ub.view());
  EXPECT_EQ(ub.bytes, before);
  // The cost never depended on values.
  EXPECT_EQ(ops.cost(c).cycles, VectorOps(cfg).cost(c).cycles);
}

TEST(VectorOpsTimingOnly, RefusesWhatAFullRunRefusesWithTheSameMessage) {
  const ChipConfig cfg = test_config();
  const VectorOps full(cfg), timing(cfg, timing_only());
  Ub ub;
  const isa::Eltwise outside = eltwise((1 << 16) - 512);
  const std::string msg = refusal([&] { full.eltwise(outside, ub.view()); });
  ASSERT_NE(msg, "");
  EXPECT_EQ(refusal([&] { timing.eltwise(outside, ub.view()); }), msg);
  isa::Eltwise overlapping = eltwise(0x80);  // dst overlaps a without equalling it
  const std::string overlap = refusal([&] { full.eltwise(overlapping, ub.view()); });
  ASSERT_NE(overlap, "");
  EXPECT_EQ(refusal([&] { timing.eltwise(overlapping, ub.view()); }), overlap);
}

// Labels and optimizer records are values: a full run refuses them out of range, timing only
// never reads them.
TEST(VectorOpsTimingOnly, ChecksOfValuesAreNotMade) {
  const ChipConfig cfg = test_config();
  const VectorOps full(cfg), timing(cfg, timing_only());
  Ub ub;
  isa::Xent x;
  x.rows = 4, x.cols = 10, x.scale = 0.25f;
  x.src = UbAddr(0x100), x.labels = UbAddr(0x400), x.dst = UbAddr(0x800), x.out = UbAddr(0xc00);
  EXPECT_NE(refusal([&] { full.xent(x, ub.view()); }).find("labels[0]"), std::string::npos);
  EXPECT_EQ(refusal([&] { timing.xent(x, ub.view()); }), "");
  isa::Update u;
  u.w = UbAddr(0), u.g = UbAddr(0x1000), u.m = UbAddr(0x2000), u.params = UbAddr(0x3000);
  u.count = 64, u.kind = isa::UpdateKind::Momentum;
  EXPECT_NE(refusal([&] { full.update(u, ub.view()); }).find("update: lr"), std::string::npos);
  EXPECT_EQ(refusal([&] { timing.update(u, ub.view()); }), "");
}

}  // namespace
}  // namespace tpu
