// Microbenchmarks of VectorOps on the instructions the Fashion-MNIST CNN
// (configs/models/fashion_mnist_cnn.json) spends its vector-unit time in, each on both builds of
// the kernels: argument 0 runs the portable build, 1 the AVX2 build (skipped on CPUs without
// it). Shapes are those the compiler emits: a 26x26x64 convolution output drained in chunks of
// three images (2028 rows of 64 columns) from accumulator entries of mxu.cols words, the
// 10-class softmax over a batch of 256, and 2x2 stride-2 max pooling of 100 images.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "hw/config/chip_config.h"
#include "hw/isa/fields.h"
#include "hw/isa/isa.h"
#include "hw/vector_unit/vector_ops.h"
#include "numerics/fixed_point.h"

namespace tpu {
namespace {

constexpr std::uint32_t kConvRows = 3 * 26 * 26;
constexpr std::uint16_t kConvChannels = 64;

ChipConfig bench_config() {
  ChipConfig cfg;
  cfg.name = "vector-bench";
  cfg.vector_unit.bytes_per_cycle = 256;
  cfg.vector_unit.lanes = 128;
  cfg.vector_unit.sublanes = 8;
  cfg.vector_unit.latency_cycles = 8;
  return cfg;
}

// Selects the kernel build through TPUSIM_SIMD (hw/vector_unit/vector_ops.cpp); false when the
// host cannot run it.
bool select_path(benchmark::State& state) {
  const bool avx2 = state.range(0) != 0;
#if defined(__x86_64__) || defined(__i386__)
  if (avx2 && !__builtin_cpu_supports("avx2")) {
    state.SkipWithError("this CPU has no AVX2");
    return false;
  }
#else
  if (avx2) {
    state.SkipWithError("AVX2 kernels exist only on x86");
    return false;
  }
#endif
  setenv("TPUSIM_SIMD", avx2 ? "avx2" : "portable", 1);
  state.SetLabel(avx2 ? "avx2" : "portable");
  return true;
}

void put32(std::vector<std::uint8_t>& ub, std::uint64_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) ub[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

struct ActivateBench {
  isa::Activate a;
  AccView acc_view;
  std::vector<std::uint32_t> acc;
  std::vector<std::uint8_t> ub;
};

// Accumulators filled with random values of acc_type, parameters at UB address 0 and the output
// after them. Integer outputs get Q31 multipliers for scales around 2^-12; float outputs get fp32
// scales.
ActivateBench make_activate(DType acc_type, DType out_type, isa::ActFunc func,
                            std::uint32_t words_per_entry, std::uint32_t rows, std::uint16_t cols) {
  ActivateBench b;
  std::mt19937 rng(1);
  b.acc.resize(std::size_t{rows} * words_per_entry);
  std::uniform_int_distribution<std::int32_t> acc_i(-(1 << 20), 1 << 20);
  std::uniform_real_distribution<float> acc_f(-64.0f, 64.0f);
  for (std::uint32_t& w : b.acc)
    w = acc_type == DType::Int32 ? static_cast<std::uint32_t>(acc_i(rng)) : float_bits(acc_f(rng));
  b.acc_view = AccView{b.acc.data(), rows, words_per_entry, acc_type};

  b.a.src = AccAddr(0);
  b.a.params = UbAddr(0);
  b.a.dst = UbAddr(12u * cols);
  b.a.rows = rows;
  b.a.cols = cols;
  b.a.dst_stride = size_of(out_type) * cols;
  b.a.func = func;
  b.a.out_type = out_type;
  b.ub.resize(12u * cols + std::size_t{rows} * b.a.dst_stride);
  std::uniform_real_distribution<double> log2_scale(-14.0, -10.0);
  std::uniform_int_distribution<std::int32_t> bias_i(-4096, 4096);
  for (std::uint16_t c = 0; c < cols; ++c) {
    const double scale = std::exp2(log2_scale(rng));
    std::uint32_t bias = 0, scale_word = 0;
    std::int32_t shift = 0;
    if (out_type == DType::Int8) {
      const numerics::QuantizedMultiplier q = numerics::quantize_multiplier(scale);
      bias = static_cast<std::uint32_t>(bias_i(rng));
      scale_word = static_cast<std::uint32_t>(q.multiplier_q31);
      shift = q.shift;
    } else {
      bias = acc_type == DType::Int32 ? static_cast<std::uint32_t>(bias_i(rng))
                                      : float_bits(static_cast<float>(bias_i(rng)) / 256.0f);
      scale_word = float_bits(static_cast<float>(scale));
    }
    put32(b.ub, 12u * c, bias);
    put32(b.ub, 12u * c + 4, scale_word);
    put32(b.ub, 12u * c + 8, static_cast<std::uint32_t>(shift));
  }
  return b;
}

void run_activate(benchmark::State& state, ActivateBench& b) {
  if (!select_path(state)) return;
  const ChipConfig cfg = bench_config();
  const VectorOps ops(cfg);
  const UbView ub{b.ub.data(), b.ub.size()};
  for (auto _ : state) {
    ops.activate(b.a, b.acc_view, ub);
    benchmark::DoNotOptimize(b.ub.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * b.a.rows * b.a.cols);
}

// v1: int32 accumulators of a 256-wide MXU, requantized to int8 with relu.
void BM_ActivateInt32ToInt8Relu(benchmark::State& state) {
  ActivateBench b =
      make_activate(DType::Int32, DType::Int8, isa::ActFunc::Relu, 256, kConvRows, kConvChannels);
  run_activate(state, b);
}
BENCHMARK(BM_ActivateInt32ToInt8Relu)->Arg(0)->Arg(1);

// v1: the classifier's 10 logits per image, softmax in fp32.
void BM_ActivateInt32ToFp32Softmax(benchmark::State& state) {
  ActivateBench b = make_activate(DType::Int32, DType::Fp32, isa::ActFunc::Softmax, 256, 256, 10);
  run_activate(state, b);
}
BENCHMARK(BM_ActivateInt32ToFp32Softmax)->Arg(0)->Arg(1);

// v2-v4: fp32 accumulators of a 128-wide MXU, to bf16 with relu.
void BM_ActivateFp32ToBf16Relu(benchmark::State& state) {
  ActivateBench b =
      make_activate(DType::Fp32, DType::Bf16, isa::ActFunc::Relu, 128, kConvRows, kConvChannels);
  run_activate(state, b);
}
BENCHMARK(BM_ActivateFp32ToBf16Relu)->Arg(0)->Arg(1);

// 2x2 stride-2 max pooling of 100 images of 26x26x64 at UB address 0, output after them; the
// inputs are random finite bf16 values of either sign.
void run_pool(benchmark::State& state, DType type) {
  if (!select_path(state)) return;
  isa::Pool p;
  p.in_h = p.in_w = 26;
  p.channels = kConvChannels;
  p.kernel_h = p.kernel_w = p.stride_h = p.stride_w = 2;
  p.images = 100;
  p.kind = isa::PoolKind::Max;
  p.type = type;
  const std::uint64_t in_elems = std::uint64_t{p.images} * p.in_h * p.in_w * p.channels;
  const std::uint64_t out_elems = std::uint64_t{p.images} * 13 * 13 * p.channels;
  const std::uint64_t esize = size_of(type);
  p.src = UbAddr(0);
  p.dst = UbAddr(static_cast<std::uint32_t>(in_elems * esize));
  std::vector<std::uint8_t> ub((in_elems + out_elems) * esize);
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> byte(0, 255);
  for (std::uint64_t i = 0; i < in_elems * esize; ++i) {
    ub[i] = static_cast<std::uint8_t>(byte(rng));
    if (type == DType::Bf16 && i % 2 == 1) ub[i] &= 0xbf;  // exponent MSB clear: never NaN
  }
  const ChipConfig cfg = bench_config();
  const VectorOps ops(cfg);
  const UbView view{ub.data(), ub.size()};
  for (auto _ : state) {
    ops.pool(p, view);
    benchmark::DoNotOptimize(ub.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * in_elems));
}

void BM_PoolMaxInt8(benchmark::State& state) { run_pool(state, DType::Int8); }
BENCHMARK(BM_PoolMaxInt8)->Arg(0)->Arg(1);

void BM_PoolMaxBf16(benchmark::State& state) { run_pool(state, DType::Bf16); }
BENCHMARK(BM_PoolMaxBf16)->Arg(0)->Arg(1);

}  // namespace
}  // namespace tpu

BENCHMARK_MAIN();
