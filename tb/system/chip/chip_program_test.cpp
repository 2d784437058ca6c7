// Whole-chip tests: hand-written programs streamed through the host interface into a chip built
// from a shipped config. Each TEST elaborates its own chip (one process per test).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "common/chip_sim.h"
#include "common/test_host.h"
#include "hw/chip/chip.h"
#include "hw/config/chip_config.h"
#include "hw/isa/assembler.h"
#include "hw/isa/semantics.h"
#include "hw/vector_unit/vector_ops.h"
#include "numerics/activation.h"
#include "numerics/batch_norm.h"
#include "numerics/bf16.h"
#include "numerics/elementwise.h"
#include "numerics/fixed_point.h"
#include "numerics/gradient.h"
#include "numerics/loss.h"
#include "numerics/optimizer.h"
#include "numerics/quantize.h"
#include "tb/unit/numerics/exact_rules.h"

namespace tpu {
namespace {

using exact::bits_of;
using isa::Instruction;

using test::shipped;
using test::Simulation;

template <class T>
void put(std::vector<std::uint8_t>& v, std::size_t off, T x) {
  std::memcpy(v.data() + off, &x, sizeof x);
}
template <class T>
T get(const std::vector<std::uint8_t>& v, std::size_t off) {
  T x;
  std::memcpy(&x, v.data() + off, sizeof x);
  return x;
}

// Random bf16 values, stored as bits.
std::vector<std::uint16_t> random_bf16(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = to_bf16(d(rng)).bits;
  return v;
}

// The bf16 reference: each tile's column sum in row order from +0, then added to the running
// accumulator (hw/mxu/systolic_array.h).
std::vector<float> reference_bf16(const std::vector<std::uint16_t>& x,
                                  const std::vector<std::vector<std::uint16_t>>& tiles,
                                  std::uint32_t b, std::uint32_t k, std::uint32_t n) {
  std::vector<float> acc(std::size_t{b} * n, 0.0f);
  for (const auto& w : tiles)
    for (std::uint32_t r = 0; r < b; ++r)
      for (std::uint32_t j = 0; j < n; ++j) {
        float psum = 0.0f;
        for (std::uint32_t i = 0; i < k; ++i)
          psum += to_float(Bf16{x[r * k + i]}) * to_float(Bf16{w[i * n + j]});
        acc[r * n + j] += psum;  // psum starts at +0, so overwrite and +0 + psum agree
      }
  return acc;
}

TEST(ChipProgram, V3RunsBothCoresAndAllMxusConcurrently) {
  const ChipConfig cfg = shipped("v3");
  ASSERT_EQ(cfg.tensor_cores, 2u);
  ASSERT_EQ(cfg.mxu.count, 2u);
  // Each MXU multiplies its own B x K input by T weight tiles, accumulating, so the work is
  // compute-bound: inputs, tiles and outputs stay in HBM, and the accumulators hold B rows per MXU.
  const std::uint32_t K = cfg.mxu.rows, N = cfg.mxu.cols, T = 24;
  const std::uint32_t B = cfg.accumulators.entries / cfg.mxu.count;
  const std::uint64_t x_bytes = std::uint64_t{B} * K * 2, tile_bytes = std::uint64_t{K} * N * 2;
  const std::uint64_t out_bytes = std::uint64_t{B} * N * 4, params_bytes = 12ull * N;
  const std::uint32_t units = cfg.tensor_cores * cfg.mxu.count;

  std::mt19937 rng(7);
  std::vector<std::vector<std::uint16_t>> x(units);
  std::vector<std::vector<std::vector<std::uint16_t>>> w(units);
  for (std::uint32_t u = 0; u < units; ++u) {
    x[u] = random_bf16(std::size_t{B} * K, rng);
    for (std::uint32_t t = 0; t < T; ++t) w[u].push_back(random_bf16(std::size_t{K} * N, rng));
  }

  // HBM: [params][x per unit][tiles per unit][out per unit].
  const std::uint64_t m_params = 0, m_x = 4096, m_tiles = m_x + units * x_bytes;
  const std::uint64_t m_out = m_tiles + std::uint64_t{units} * T * tile_bytes;
  Simulation sim(cfg, 4096);
  sim.host.instructions_per_write = 64;
  std::vector<std::uint8_t> params(params_bytes);
  for (std::uint32_t j = 0; j < N; ++j) put<float>(params, 12 * j + 4, 1.0f);  // bias 0, scale 1
  sim.host.load_memory(m_params, params);
  auto bytes_of = [](const std::vector<std::uint16_t>& v) {
    std::vector<std::uint8_t> b(v.size() * 2);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  auto tile_addr = [&](std::uint32_t u, std::uint32_t t) {
    return m_tiles + (u * T + t) * tile_bytes;
  };
  for (std::uint32_t u = 0; u < units; ++u) {
    sim.host.load_memory(m_x + u * x_bytes, bytes_of(x[u]));
    for (std::uint32_t t = 0; t < T; ++t) sim.host.load_memory(tile_addr(u, t), bytes_of(w[u][t]));
  }

  // UB per core: [params][x for mxu 0][x for mxu 1][out 0][out 1]; accumulators: B rows per MXU.
  const std::uint64_t ub_x = 4096, ub_out = ub_x + cfg.mxu.count * x_bytes;
  auto u32 = [](std::uint64_t v) { return static_cast<std::uint32_t>(v); };
  std::size_t total = 0;
  for (std::uint32_t c = 0; c < cfg.tensor_cores; ++c) {
    auto& p = sim.host.programs[c];
    p.push_back(isa::ReadMem{MemAddr(m_params), UbAddr(0), u32(params_bytes)});
    for (std::uint32_t m = 0; m < cfg.mxu.count; ++m)
      p.push_back(isa::ReadMem{MemAddr(m_x + (c * cfg.mxu.count + m) * x_bytes),
                               UbAddr(u32(ub_x + m * x_bytes)), u32(x_bytes)});
    for (std::uint32_t t = 0; t < T; ++t)
      for (std::uint32_t m = 0; m < cfg.mxu.count; ++m) {
        const std::uint32_t u = c * cfg.mxu.count + m;
        p.push_back(isa::ReadWeights{static_cast<std::uint8_t>(m), isa::WeightSource::OffChip,
                                     tile_addr(u, t), static_cast<std::uint16_t>(K),
                                     static_cast<std::uint16_t>(N)});
        isa::MatMul mm;
        mm.mxu = static_cast<std::uint8_t>(m);
        mm.swap_weights = true;
        mm.accumulate = t > 0;
        mm.src = UbAddr(u32(ub_x + m * x_bytes));
        mm.dst = AccAddr(m * B);
        mm.rows = B;
        mm.src_stride = K * 2;
        p.push_back(mm);
      }
    for (std::uint32_t m = 0; m < cfg.mxu.count; ++m) {
      const std::uint32_t u = c * cfg.mxu.count + m;
      isa::Activate a;
      a.src = AccAddr(m * B);
      a.dst = UbAddr(u32(ub_out + m * out_bytes));
      a.params = UbAddr(0);
      a.rows = B;
      a.cols = static_cast<std::uint16_t>(N);
      a.dst_stride = N * 4;
      a.out_type = DType::Fp32;
      p.push_back(a);
      p.push_back(isa::WriteMem{UbAddr(u32(ub_out + m * out_bytes)), MemAddr(m_out + u * out_bytes),
                                u32(out_bytes)});
    }
    p.push_back(isa::Halt{});
    total += p.size();
  }
  EXPECT_GE(total, 200u) << "a program of a few hundred instructions";

  const Cycle elapsed = sim.run();

  // Results: bit-exact with the reference, for every core and MXU.
  for (std::uint32_t u = 0; u < units; ++u) {
    const auto want = reference_bf16(x[u], w[u], B, K, N);
    std::vector<float> got(want.size());
    ASSERT_EQ(test::read_memory(sim.host, m_out + u * out_bytes, got.data(), out_bytes), out_bytes);
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
          << "unit " << u << " element " << i << ": " << got[i] << " vs " << want[i];
  }
  // Concurrency: each MXU was active T*B cycles; one MXU doing all of it would take the serial
  // sum, but the chip finished in well under half of that, so both cores and both MXUs per core
  // ran at the same time.
  std::uint64_t serial = 0;
  for (const auto& core : sim.chip.cores)
    for (const auto& m : core->mxus) {
      EXPECT_EQ(m->buckets().active, std::uint64_t{T} * B);
      EXPECT_EQ(m->buckets().total(), elapsed) << "every MXU cycle lands in one bucket";
      serial += m->buckets().active;
    }
  EXPECT_LT(elapsed, serial / 2) << "elapsed " << elapsed << " vs serial sum " << serial;
}

// Keras Embedding on both of v3's cores: one table of bf16 vectors in the HBM they share, each
// core looking up its own token ids (read from host memory) and writing the rows back to the host.
TEST(ChipProgram, GatherCopiesTheTableRowsItsIndicesPickOnEveryCore) {
  const ChipConfig cfg = shipped("v3");
  ASSERT_EQ(cfg.tensor_cores, 2u);
  const std::uint32_t rows = 1000, row_bytes = 64 * 2, count = 300;
  const std::uint64_t table = 0x100000;
  std::mt19937 rng(13);
  std::vector<std::uint8_t> table_bytes(std::size_t{rows} * row_bytes);
  for (auto& b : table_bytes) b = static_cast<std::uint8_t>(rng());

  // Host memory: per core, its indices at c * 0x10000 and its output rows at 0x40000 + c * 0x10000.
  Simulation sim(cfg, 0x80000);
  sim.host.load_memory(table, table_bytes);
  std::vector<std::vector<std::int32_t>> indices(cfg.tensor_cores);
  const std::uint32_t ub_dst = 0x1000, layer = 7;
  for (std::uint32_t c = 0; c < cfg.tensor_cores; ++c) {
    // The first and last rows, then random ones (repeats allowed, as token ids repeat).
    indices[c] = {0, static_cast<std::int32_t>(rows - 1)};
    while (indices[c].size() < count) indices[c].push_back(static_cast<std::int32_t>(rng() % rows));
    std::memcpy(sim.host.memory.data() + c * 0x10000, indices[c].data(), 4 * count);
    const HostAddr out(0x40000 + c * 0x10000);
    sim.host.programs[c] = {
        isa::ReadHost{HostAddr(c * 0x10000), UbAddr(0), 4 * count},
        isa::Tag{layer},
        isa::Gather{MemAddr(table), UbAddr(0), UbAddr(ub_dst), count, row_bytes, rows},
        isa::Tag{0},
        isa::WriteHost{UbAddr(ub_dst), out, count * row_bytes},
        isa::Halt{}};
  }
  sim.run();

  for (std::uint32_t c = 0; c < cfg.tensor_cores; ++c) {
    for (std::uint32_t r = 0; r < count; ++r) {
      const std::uint8_t* got = sim.host.memory.data() + 0x40000 + c * 0x10000 + r * row_bytes;
      const std::uint8_t* want = table_bytes.data() + std::size_t(indices[c][r]) * row_bytes;
      ASSERT_EQ(std::memcmp(got, want, row_bytes), 0)
          << "core " << c << " row " << r << " (index " << indices[c][r] << ")";
    }
    // The layer holds the gather alone: its rows off chip and into the UB, its indices read.
    const Counters& k = sim.chip.cores[c]->counters().by_layer().at(layer);
    EXPECT_EQ(k.off_chip_bytes_read, std::uint64_t{count} * row_bytes);
    EXPECT_EQ(k.ub_bytes_written, std::uint64_t{count} * row_bytes);
    EXPECT_EQ(k.ub_bytes_read, 4ull * count);
    EXPECT_EQ(k.host_bytes_in + k.host_bytes_out + k.off_chip_bytes_written, 0u);
  }
}

// ---- the vector unit's layer instructions (pool with padding, map, eltwise sub, Q31 mul and
// fp32, copy), assembled from text: every output byte against the numerics library's scalar
// definitions, and the vector unit's counters and time against VectorOps's cost of each
// instruction (docs/timing-model.md) ----

// The vector instructions of layer `tag` in `program` ran back to back, each taking its cost: the
// layer's vector ops and unified-buffer bytes are the sums of their costs, and its span (first
// start to last completion) the sum of their cycles.
void expect_vector_costs(const Simulation& sim, const std::vector<isa::Instruction>& program,
                         std::uint32_t tag) {
  const VectorOps ops(sim.chip.config());
  VectorCost sum;
  std::uint32_t layer = 0;
  isa::SetWindow window;  // the window registers as each instruction issues
  for (const isa::Instruction& inst : program) {
    if (const auto* t = std::get_if<isa::Tag>(&inst)) layer = t->id;
    if (const auto* w = std::get_if<isa::SetWindow>(&inst)) window = *w;
    if (layer != tag || isa::unit_of(inst).kind != isa::UnitKind::Vector) continue;
    std::visit(
        [&](const auto& i) {
          using T = std::decay_t<decltype(i)>;
          if constexpr (std::is_same_v<T, isa::Pool> || std::is_same_v<T, isa::Map> ||
                        std::is_same_v<T, isa::Eltwise> || std::is_same_v<T, isa::Copy> ||
                        std::is_same_v<T, isa::Xent> || std::is_same_v<T, isa::Update> ||
                        std::is_same_v<T, isa::Reduce> || std::is_same_v<T, isa::PoolGrad>) {
            VectorCost c;
            if constexpr (std::is_same_v<T, isa::PoolGrad>)
              c = ops.cost(i, window);
            else
              c = ops.cost(i);
            sum.cycles += c.cycles;
            sum.element_ops += c.element_ops;
            sum.ub_bytes_read += c.ub_bytes_read;
            sum.ub_bytes_written += c.ub_bytes_written;
          } else {
            ADD_FAILURE() << isa::to_string(inst) << " is not one of this test's instructions";
          }
        },
        inst);
  }
  const Counters& c = sim.chip.cores[0]->counters().by_layer().at(tag);
  EXPECT_EQ(c.vector_ops, sum.element_ops);
  EXPECT_EQ(c.ub_bytes_read, sum.ub_bytes_read);
  EXPECT_EQ(c.ub_bytes_written, sum.ub_bytes_written);
  EXPECT_EQ(c.span(), sum.cycles);
}

// A 6x6x4 int8 image on v1: "same" average pooling 3x3 stride 1, a per-channel LeakyReLU onto
// another scale, the difference from the input, its product with the input requantized by a Q31
// multiplier, and the result concatenated with the input along channels.
TEST(VectorProgram, Int8LayerChainOnV1MatchesTheNumericsDefinitions) {
  constexpr std::uint32_t H = 6, W = 6, C = 4, P = H * W;
  constexpr float kInScale = 0.05f, kOutScale = 0.04f;
  const numerics::QuantizedMultiplier q = numerics::quantize_multiplier(0.37);
  Simulation sim(shipped("v1"), 1 << 16);
  std::vector<std::uint8_t>& mem = sim.host.memory;
  std::mt19937 rng(31);
  std::vector<std::int8_t> x(P * C);
  for (std::int8_t& v : x) v = static_cast<std::int8_t>(rng());
  std::memcpy(mem.data(), x.data(), x.size());
  std::vector<float> a(C), b(C), alpha(C);
  for (std::uint32_t c = 0; c < C; ++c) {
    a[c] = 0.5f + 0.25f * static_cast<float>(c), b[c] = 0.1f * static_cast<float>(c) - 0.15f;
    alpha[c] = 0.1f * static_cast<float>(c + 1);
    put(mem, 0x1000 + 12 * c, a[c]);
    put(mem, 0x1000 + 12 * c + 4, b[c]);
    put(mem, 0x1000 + 12 * c + 8, alpha[c]);
  }
  const std::string text = fmt::format(
      "read_host src=0x1000 dst=0x10000 bytes={records}\n"
      "read_host src=0x0 dst=0x0 bytes={n}\n"
      "tag id=1\n"
      "pool src=0x0 dst=0x1000 in_h={H} in_w={W} channels={C} kernel_h=3 kernel_w=3 stride_h=1 "
      "stride_w=1 images=1 pad_top=1 pad_left=1 out_h={H} out_w={W} kind=avg type=int8\n"
      "map src=0x1000 dst=0x2000 params=0x10000 count={n} channels={C} in_scale={in_scale} "
      "out_scale={out_scale} func=leaky_relu in=int8 out=int8\n"
      "eltwise a=0x2000 b=0x0 dst=0x3000 count={n} op=sub type=int8\n"
      "eltwise a=0x3000 b=0x0 dst=0x3800 count={n} shift={shift} multiplier={mult} op=mul "
      "type=int8\n"
      "copy src=0x3800 dst=0x4000 rows={P} row_bytes={C} src_stride={C} dst_stride={C2}\n"
      "copy src=0x0 dst=0x{second:x} rows={P} row_bytes={C} src_stride={C} dst_stride={C2}\n"
      "tag id=2\n"
      "write_host src=0x4000 dst=0x8000 bytes={out}\n"
      "halt\n",
      fmt::arg("records", 12 * C), fmt::arg("n", P * C), fmt::arg("H", H), fmt::arg("W", W),
      fmt::arg("C", C), fmt::arg("P", P), fmt::arg("C2", 2 * C), fmt::arg("second", 0x4000 + C),
      fmt::arg("in_scale", kInScale), fmt::arg("out_scale", kOutScale), fmt::arg("shift", q.shift),
      fmt::arg("mult", q.multiplier_q31), fmt::arg("out", 2 * P * C));
  const std::vector<isa::Instruction> program = isa::assemble(text, "chain.s");
  sim.host.programs[0] = program;
  sim.run();

  for (std::uint32_t y = 0; y < H; ++y)
    for (std::uint32_t xx = 0; xx < W; ++xx)
      for (std::uint32_t c = 0; c < C; ++c) {
        std::int32_t sum = 0, n = 0;
        for (std::uint32_t wy = y > 0 ? y - 1 : 0; wy <= std::min(y + 1, H - 1); ++wy)
          for (std::uint32_t wx = xx > 0 ? xx - 1 : 0; wx <= std::min(xx + 1, W - 1); ++wx, ++n)
            sum += x[(wy * W + wx) * C + c];
        const std::uint32_t i = (y * W + xx) * C + c;
        const std::int8_t pooled = numerics::avg_int8(sum, n);
        const float t = numerics::affine(numerics::dequantize_int8(pooled, kInScale), a[c], b[c]);
        const std::int8_t mapped =
            numerics::quantize_int8(numerics::leaky_relu(t, alpha[c]), kOutScale);
        const std::int8_t diff = numerics::sub_int8(mapped, x[i]);
        const std::int8_t product =
            numerics::mul_int8_requant(diff, x[i], q.multiplier_q31, q.shift);
        const std::uint32_t pixel = 0x8000 + (y * W + xx) * 2 * C;
        ASSERT_EQ(static_cast<std::int8_t>(mem[pixel + c]), product) << y << " " << xx << " " << c;
        ASSERT_EQ(static_cast<std::int8_t>(mem[pixel + C + c]), x[i]) << y << " " << xx << " " << c;
      }
  expect_vector_costs(sim, program, 1);
}

// bf16 activations on v3 (both cores run; core 1 only halts): "same" max pooling, an ELU into an
// fp32 state, an fp32 add and multiply, and the state converted back to bf16.
TEST(VectorProgram, Bf16AndFp32ChainOnV3MatchesTheNumericsDefinitions) {
  constexpr std::uint32_t H = 5, W = 5, C = 3, P = H * W, N = P * C;
  Simulation sim(shipped("v3"), 1 << 16);
  std::vector<std::uint8_t>& mem = sim.host.memory;
  std::mt19937 rng(32);
  std::uniform_real_distribution<float> v(-4.0f, 4.0f);
  std::vector<Bf16> x(N);
  std::vector<float> s(N);
  for (std::uint32_t i = 0; i < N; ++i) {
    x[i] = to_bf16(v(rng));
    std::memcpy(mem.data() + 2 * i, &x[i].bits, 2);
    s[i] = v(rng);
    put(mem, 0x400 + 4 * i, s[i]);
  }
  const float a = 1.5f, b = -0.25f, alpha = 0.7f;
  for (std::uint32_t c = 0; c < 2; ++c) {
    put(mem, 0x1000 + 12 * c, c == 0 ? a : 1.0f);
    put(mem, 0x1000 + 12 * c + 4, c == 0 ? b : 0.0f);
    put(mem, 0x1000 + 12 * c + 8, alpha);
  }
  // "same" 3x3 max pooling with stride 2 of the 5x5 image: 3x3 outputs, one row and column of
  // padding on each side.
  const std::string text = fmt::format(
      "read_host src=0x1000 dst=0x20000 bytes=24\n"
      "read_host src=0x400 dst=0x8000 bytes={sb}\n"
      "read_host src=0x0 dst=0x0 bytes={xb}\n"
      "tag id=1\n"
      "pool src=0x0 dst=0x1000 in_h={H} in_w={W} channels={C} kernel_h=3 kernel_w=3 stride_h=2 "
      "stride_w=2 images=1 pad_top=1 pad_left=1 out_h=3 out_w=3 kind=max type=bf16\n"
      "map src=0x0 dst=0x4000 params=0x20000 count={N} channels=1 func=elu in=bf16 out=fp32\n"
      "eltwise a=0x4000 b=0x8000 dst=0x4000 count={N} op=add type=fp32\n"
      "eltwise a=0x4000 b=0x8000 dst=0xc000 count={N} op=mul type=fp32\n"
      "map src=0xc000 dst=0x10000 params=0x2000c count={N} channels=1 func=identity in=fp32 "
      "out=bf16\n"
      "tag id=2\n"
      "write_host src=0x1000 dst=0x2000 bytes={pb}\n"
      "write_host src=0x10000 dst=0x3000 bytes={xb}\n"
      "halt\n",
      fmt::arg("H", H), fmt::arg("W", W), fmt::arg("C", C), fmt::arg("N", N), fmt::arg("xb", 2 * N),
      fmt::arg("sb", 4 * N), fmt::arg("pb", 2 * 9 * C));
  const std::vector<isa::Instruction> program = isa::assemble(text, "fp32.s");
  sim.host.programs[0] = program;
  sim.host.programs[1] = {isa::Halt{}};
  sim.run();

  const auto bf16_at = [&](std::uint64_t at) {
    Bf16 h;
    std::memcpy(&h.bits, mem.data() + at, 2);
    return h;
  };
  // Window oy covers rows 2*oy - 1 .. 2*oy + 1, those inside 0..4.
  for (std::uint32_t oy = 0; oy < 3; ++oy)
    for (std::uint32_t ox = 0; ox < 3; ++ox)
      for (std::uint32_t c = 0; c < C; ++c) {
        float m = -std::numeric_limits<float>::infinity();
        for (std::uint32_t y = oy == 0 ? 0 : 2 * oy - 1; y <= std::min(2 * oy + 1, H - 1); ++y)
          for (std::uint32_t xx = ox == 0 ? 0 : 2 * ox - 1; xx <= std::min(2 * ox + 1, W - 1); ++xx)
            m = numerics::max_float(m, to_float(x[(y * W + xx) * C + c]));
        EXPECT_EQ(bf16_at(0x2000 + 2 * ((oy * 3 + ox) * C + c)).bits, to_bf16(m).bits)
            << oy << " " << ox << " " << c;
      }
  for (std::uint32_t i = 0; i < N; ++i) {
    const float e = numerics::elu(numerics::affine(to_float(x[i]), a, b), alpha);
    const float state = e + s[i];
    const float product = state * s[i];
    const Bf16 back = to_bf16(numerics::affine(product, 1.0f, 0.0f));
    ASSERT_EQ(bf16_at(0x3000 + 2 * i).bits, back.bits) << i;
  }
  expect_vector_costs(sim, program, 1);
}

// One replica's training step on v3 (the tutorial's per-core share: 125 images of 10 classes,
// each replica's loss scaled by 1 / the global batch of 1000): the loss and its gradient in place,
// then an Adam step at t = 3 over 300 weights, against the numerics library's definitions. The
// logits arrive last, so both vector instructions run back to back once they are in.
TEST(VectorProgram, XentAndAdamUpdateOnV3MatchTheNumericsDefinitions) {
  constexpr std::uint32_t kRows = 125, kCols = 10, kN = 300;
  constexpr float kScale = 0.001f;
  Simulation sim(shipped("v3"), 1 << 16);
  std::vector<std::uint8_t>& mem = sim.host.memory;
  std::mt19937 rng(33);
  std::uniform_real_distribution<float> v(-5.0f, 5.0f);
  std::vector<float> z(kRows * kCols);
  std::vector<std::int32_t> label(kRows);
  for (std::uint32_t i = 0; i < z.size(); ++i) put(mem, 4 * i, z[i] = v(rng));
  for (std::uint32_t r = 0; r < kRows; ++r)
    put(mem, 0x1400 + 4 * r, label[r] = static_cast<std::int32_t>(rng() % kCols));
  const numerics::AdamPowers powers = numerics::adam_powers(0.9f, 0.999f, 3);
  const float record[] = {1e-3f, 0.9f, 0.999f, 1e-7f, powers.beta1_power, powers.beta2_power};
  for (std::uint32_t k = 0; k < 6; ++k) put(mem, 0x1800 + 4 * k, record[k]);
  std::vector<float> w(kN), g(kN), m(kN), s(kN);
  for (std::uint32_t i = 0; i < kN; ++i) {
    put(mem, 0x2000 + 4 * i, w[i] = v(rng));
    put(mem, 0x2800 + 4 * i, g[i] = 0.01f * v(rng));
    put(mem, 0x3000 + 4 * i, m[i] = 0.001f * v(rng));
    put(mem, 0x3800 + 4 * i, s[i] = 1e-5f * std::fabs(v(rng)));
  }
  const std::string text = fmt::format(
      "read_host src=0x1800 dst=0x1c00 bytes=24\n"
      "read_host src=0x2000 dst=0x2000 bytes={nb4}\n"
      "read_host src=0x1400 dst=0x1400 bytes={lb}\n"
      "read_host src=0x0 dst=0x0 bytes={zb}\n"
      "tag id=1\n"
      "xent src=0x0 labels=0x1400 dst=0x0 out=0x1800 rows={R} cols={C} scale={scale}\n"
      "update w=0x2000 g=0x2800 m=0x3000 v=0x3800 params=0x1c00 count={N} kind=adam\n"
      "tag id=2\n"
      "write_host src=0x0 dst=0x4000 bytes={zb}\n"
      "write_host src=0x1800 dst=0x5400 bytes={ob}\n"
      "write_host src=0x2000 dst=0x6000 bytes={nb}\n"
      "write_host src=0x3000 dst=0x6800 bytes={nb}\n"
      "write_host src=0x3800 dst=0x7000 bytes={nb}\n"
      "halt\n",
      fmt::arg("zb", 4 * kRows * kCols), fmt::arg("lb", 4 * kRows), fmt::arg("nb4", 0x2000),
      fmt::arg("R", kRows), fmt::arg("C", kCols), fmt::arg("scale", kScale), fmt::arg("N", kN),
      fmt::arg("ob", 8 * kRows), fmt::arg("nb", 4 * kN));
  const std::vector<isa::Instruction> program = isa::assemble(text, "train.s");
  sim.host.programs[0] = program;
  sim.host.programs[1] = {isa::Halt{}};
  sim.run();

  for (std::uint32_t r = 0; r < kRows; ++r) {
    std::vector<float> grad(kCols);
    const numerics::XentRow rec = numerics::softmax_xent_row(
        z.data() + r * kCols, grad.data(), kCols, static_cast<std::size_t>(label[r]), kScale);
    for (std::uint32_t c = 0; c < kCols; ++c)
      ASSERT_EQ(get<std::uint32_t>(mem, 0x4000 + 4 * (r * kCols + c)), bits_of(grad[c]))
          << r << " " << c;
    EXPECT_EQ(get<std::uint32_t>(mem, 0x5400 + 8 * r), bits_of(rec.loss)) << r;
    EXPECT_EQ(get<std::uint32_t>(mem, 0x5400 + 8 * r + 4), bits_of(rec.correct)) << r;
  }
  const float alpha = numerics::adam_alpha(record[0], record[4], record[5]);
  for (std::uint32_t i = 0; i < kN; ++i) {
    numerics::adam_step(w[i], m[i], s[i], g[i], alpha, record[1], record[2], record[3]);
    ASSERT_EQ(get<std::uint32_t>(mem, 0x6000 + 4 * i), bits_of(w[i])) << i;
    ASSERT_EQ(get<std::uint32_t>(mem, 0x6800 + 4 * i), bits_of(m[i])) << i;
    ASSERT_EQ(get<std::uint32_t>(mem, 0x7000 + 4 * i), bits_of(s[i])) << i;
  }
  expect_vector_costs(sim, program, 1);
}

// BatchNormalization's training forward on v3 with the instructions it needed (docs/isa.md §4.9,
// §4.16): the batch sums of x and x² by reduce, the mean and E[x²] divided by the row count
// broadcast as a scalar (b_period = 1), rsqrt(variance + ε) by map, then ((x − mean)·rsqrt)·γ + β
// with each per-channel value broadcast along the NHWC rows (b_period = C), and the backward's
// (x − mean) / (variance + ε) by div. Every bit against numerics/batch_norm.h, and the layer's
// cycles, lane operations and unified-buffer bytes against the vector unit's cost formula.
TEST(VectorProgram, BatchNormForwardOnV3BroadcastsPerChannelValuesAndDivides) {
  constexpr std::uint32_t N = 2 * 4 * 4, C = 6, NC = N * C;
  constexpr float kEps = 1e-3f;
  Simulation sim(shipped("v3"), 1 << 16);
  std::vector<std::uint8_t>& mem = sim.host.memory;
  std::mt19937 rng(47);
  std::uniform_real_distribution<float> v(-3.0f, 5.0f), g(0.5f, 2.0f);
  std::vector<float> x(NC), gamma(C), beta(C);
  for (std::uint32_t i = 0; i < NC; ++i) put(mem, 4 * i, x[i] = v(rng));
  // Constants at host 0x1000 -> UB 0x3000: the row count, channel records {1, ε, 0}, γ, β, ε.
  put(mem, 0x1000, static_cast<float>(N));
  for (std::uint32_t c = 0; c < C; ++c) {
    put(mem, 0x1100 + 12 * c, 1.0f);
    put(mem, 0x1100 + 12 * c + 4, kEps);
    put(mem, 0x1100 + 12 * c + 8, 0.0f);
    put(mem, 0x1200 + 4 * c, gamma[c] = g(rng));
    put(mem, 0x1240 + 4 * c, beta[c] = v(rng));
  }
  put(mem, 0x1280, kEps);
  const std::string text = fmt::format(
      "read_host src=0x0 dst=0x0 bytes={xb}\n"
      "read_host src=0x1000 dst=0x3000 bytes=0x300\n"
      "sync\n"
      "tag id=1\n"
      "reduce src=0x0 dst=0x2000 rows={N} cols={C} stride={cb} op=sum type=fp32\n"
      "eltwise a=0x0 b=0x0 dst=0x1000 count={NC} op=mul type=fp32\n"
      "reduce src=0x1000 dst=0x2040 rows={N} cols={C} stride={cb} op=sum type=fp32\n"
      "eltwise a=0x2000 b=0x3000 dst=0x2080 count={C} b_period=1 op=div type=fp32\n"
      "eltwise a=0x2040 b=0x3000 dst=0x20c0 count={C} b_period=1 op=div type=fp32\n"
      "eltwise a=0x2080 b=0x2080 dst=0x2100 count={C} op=mul type=fp32\n"
      "eltwise a=0x20c0 b=0x2100 dst=0x2140 count={C} op=sub type=fp32\n"
      "map src=0x2140 dst=0x2180 params=0x3100 count={C} channels={C} func=rsqrt in=fp32 "
      "out=fp32\n"
      "eltwise a=0x2140 b=0x3280 dst=0x21c0 count={C} b_period=1 op=add type=fp32\n"
      "eltwise a=0x0 b=0x2080 dst=0x4000 count={NC} b_period={C} op=sub type=fp32\n"
      "eltwise a=0x4000 b=0x2180 dst=0x5000 count={NC} b_period={C} op=mul type=fp32\n"
      "eltwise a=0x5000 b=0x3200 dst=0x5000 count={NC} b_period={C} op=mul type=fp32\n"
      "eltwise a=0x5000 b=0x3240 dst=0x5000 count={NC} b_period={C} op=add type=fp32\n"
      "eltwise a=0x4000 b=0x21c0 dst=0x7000 count={NC} b_period={C} op=div type=fp32\n"
      "tag id=2\n"
      "write_host src=0x5000 dst=0x8000 bytes={xb}\n"
      "write_host src=0x7000 dst=0x9000 bytes={xb}\n"
      "write_host src=0x2180 dst=0xa000 bytes={cb}\n"
      "halt\n",
      fmt::arg("N", N), fmt::arg("C", C), fmt::arg("NC", NC), fmt::arg("xb", 4 * NC),
      fmt::arg("cb", 4 * C));
  const std::vector<isa::Instruction> program = isa::assemble(text, "batch_norm.s");
  sim.host.programs[0] = program;
  sim.host.programs[1] = {isa::Halt{}};
  sim.run();

  for (std::uint32_t c = 0; c < C; ++c) {
    float sum = 0.0f, squares = 0.0f;
    for (std::uint32_t r = 0; r < N; ++r) {
      sum = sum + x[r * C + c];
      squares = squares + x[r * C + c] * x[r * C + c];
    }
    const numerics::BatchStats st =
        numerics::batch_stats(sum, squares, static_cast<float>(N), kEps);
    ASSERT_EQ(get<std::uint32_t>(mem, 0xa000 + 4 * c), bits_of(st.rsqrt)) << c;
    for (std::uint32_t r = 0; r < N; ++r) {
      const std::uint32_t i = r * C + c;
      ASSERT_EQ(get<std::uint32_t>(mem, 0x8000 + 4 * i),
                bits_of(numerics::batch_norm(x[i], st, gamma[c], beta[c])))
          << r << " " << c;
      ASSERT_EQ(get<std::uint32_t>(mem, 0x9000 + 4 * i), bits_of((x[i] - st.mean) / st.var_eps))
          << r << " " << c;
    }
  }
  expect_vector_costs(sim, program, 1);
}

// The training instructions on v3 in fp32: a max pooling forward, its backward under one
// set_window, then an avg backward under a second set_window issued after the first pool_grad
// (each pool_grad keeps the window registers of its issue), a bias-style sum of dY over every
// pixel accumulated onto a running value, a column maximum, and a relu_grad. Every input is in the
// unified buffer before the layer starts (sync), so its instructions run back to back.
TEST(VectorProgram, TrainingOpsOnV3FollowTheirDefinitionsAndTheWindowAtIssue) {
  constexpr std::uint32_t B = 2, H = 4, W = 4, C = 3, OH = 2, OW = 2;
  constexpr std::uint32_t NX = B * H * W * C, NY = B * OH * OW * C;
  Simulation sim(shipped("v3"), 1 << 16);
  std::vector<std::uint8_t>& mem = sim.host.memory;
  std::mt19937 rng(33);
  std::uniform_int_distribution<int> few(-2, 2);  // ties inside windows
  std::uniform_real_distribution<float> v(-3.0f, 3.0f);
  std::vector<float> x(NX), dy(NY), g(NX), start(C);
  for (std::uint32_t i = 0; i < NX; ++i) {
    x[i] = static_cast<float>(few(rng));
    g[i] = v(rng);
    put(mem, 4 * i, x[i]);
    put(mem, 0x800 + 4 * i, g[i]);
  }
  for (std::uint32_t i = 0; i < NY; ++i) put(mem, 0x400 + 4 * i, dy[i] = v(rng));
  for (std::uint32_t c = 0; c < C; ++c) put(mem, 0xc00 + 4 * c, start[c] = v(rng));
  const std::string text = fmt::format(
      "read_host src=0x0 dst=0x0 bytes={xb}\n"
      "read_host src=0x400 dst=0x1000 bytes={yb}\n"
      "read_host src=0x800 dst=0x2000 bytes={xb}\n"
      "read_host src=0xc00 dst=0x7000 bytes={cb}\n"
      "sync\n"
      "tag id=1\n"
      "pool src=0x0 dst=0x4000 in_h={H} in_w={W} channels={C} kernel_h=2 kernel_w=2 stride_h=2 "
      "stride_w=2 images={B} pad_top=0 pad_left=0 out_h=0 out_w=0 kind=max type=fp32\n"
      "set_window in_h={H} in_w={W} in_c={C} kernel_h=2 kernel_w=2 stride_h=2 stride_w=2 "
      "out_h={OH} out_w={OW}\n"
      "pool_grad x=0x0 dy=0x1000 dst=0x5000 images={B} kind=max type=fp32\n"
      "set_window in_h={H} in_w={W} in_c={C} kernel_h=3 kernel_w=3 stride_h=2 stride_w=2 "
      "pad_top=1 pad_left=1 out_h={OH} out_w={OW}\n"
      "pool_grad x=0x0 dy=0x1000 dst=0x6000 images={B} kind=avg type=fp32\n"
      "reduce src=0x1000 dst=0x7000 rows={P} cols={C} stride={cb} op=sum type=fp32 acc\n"
      "reduce src=0x1000 dst=0x7100 rows={P} cols={C} stride={cb} op=max type=fp32\n"
      "eltwise a=0x0 b=0x2000 dst=0x3000 count={NX} op=relu_grad type=fp32\n"
      "tag id=2\n"
      "write_host src=0x4000 dst=0x8000 bytes={yb}\n"
      "write_host src=0x5000 dst=0x9000 bytes={xb}\n"
      "write_host src=0x6000 dst=0xa000 bytes={xb}\n"
      "write_host src=0x7000 dst=0xb000 bytes={cb}\n"
      "write_host src=0x7100 dst=0xb100 bytes={cb}\n"
      "write_host src=0x3000 dst=0xc000 bytes={xb}\n"
      "halt\n",
      fmt::arg("B", B), fmt::arg("H", H), fmt::arg("W", W), fmt::arg("C", C), fmt::arg("OH", OH),
      fmt::arg("OW", OW), fmt::arg("NX", NX), fmt::arg("P", B * OH * OW), fmt::arg("xb", 4 * NX),
      fmt::arg("yb", 4 * NY), fmt::arg("cb", 4 * C));
  const std::vector<isa::Instruction> program = isa::assemble(text, "train.s");
  sim.host.programs[0] = program;
  sim.host.programs[1] = {isa::Halt{}};
  sim.run();

  const auto at = [&](std::uint64_t a) { return get<float>(mem, a); };
  const auto bits = [](float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  // Pixel (y, x) of image b, channel c, in x's NHWC layout.
  const auto xi = [&](std::uint32_t b, std::int64_t y, std::int64_t xx, std::uint32_t c) {
    return ((b * H + static_cast<std::uint32_t>(y)) * W + static_cast<std::uint32_t>(xx)) * C + c;
  };
  std::vector<float> max_dx(NX, 0.0f), avg_dx(NX, 0.0f), sum(start),
      mx(C, -std::numeric_limits<float>::infinity());
  for (std::uint32_t b = 0; b < B; ++b)
    for (std::uint32_t oy = 0; oy < OH; ++oy)
      for (std::uint32_t ox = 0; ox < OW; ++ox)
        for (std::uint32_t c = 0; c < C; ++c) {
          const std::uint32_t o = ((b * OH + oy) * OW + ox) * C + c;
          // 2x2 stride 2: the forward maximum and the backward's first maximum.
          std::vector<float> win;
          std::vector<std::uint32_t> pos;
          for (std::int64_t ky = 0; ky < 2; ++ky)
            for (std::int64_t kx = 0; kx < 2; ++kx) {
              pos.push_back(xi(b, 2 * oy + ky, 2 * ox + kx, c));
              win.push_back(x[pos.back()]);
            }
          float m = win[0];
          for (float w : win) m = numerics::max_float(m, w);
          EXPECT_EQ(bits(at(0x8000 + 4 * o)), bits(m)) << o;
          max_dx[pos[numerics::max_pool_grad_position(win.data(), win.size())]] += dy[o];
          // 3x3 stride 2 pad 1: the positions inside the image share dy equally.
          std::vector<std::uint32_t> avg_pos;
          for (std::int64_t ky = 0; ky < 3; ++ky)
            for (std::int64_t kx = 0; kx < 3; ++kx) {
              const std::int64_t y = std::int64_t{2} * oy - 1 + ky,
                                 xx = std::int64_t{2} * ox - 1 + kx;
              if (y >= 0 && y < H && xx >= 0 && xx < W) avg_pos.push_back(xi(b, y, xx, c));
            }
          const float share =
              numerics::avg_pool_grad_share(dy[o], static_cast<std::int32_t>(avg_pos.size()));
          for (std::uint32_t p : avg_pos) avg_dx[p] += share;
          sum[c] += dy[o];
          mx[c] = numerics::max_float(mx[c], dy[o]);
        }
  for (std::uint32_t i = 0; i < NX; ++i) {
    EXPECT_EQ(bits(at(0x9000 + 4 * i)), bits(max_dx[i])) << i;
    EXPECT_EQ(bits(at(0xa000 + 4 * i)), bits(avg_dx[i])) << i;
    EXPECT_EQ(bits(at(0xc000 + 4 * i)), bits(numerics::relu_grad(x[i], g[i]))) << i;
  }
  for (std::uint32_t c = 0; c < C; ++c) {
    EXPECT_EQ(bits(at(0xb000 + 4 * c)), bits(sum[c])) << c;
    EXPECT_EQ(bits(at(0xb100 + 4 * c)), bits(mx[c])) << c;
  }
  expect_vector_costs(sim, program, 1);
}

// The host learns of halts from the chip's interrupts (irq2host, docs/isa.md §7), one per halt
// retired, carrying the core's halt count, at the cycle the halt retired.
TEST(HostInterrupts, EveryHaltInterruptsTheHostWithItsCountAtItsCycle) {
  Simulation sim(shipped("v3"));
  sim.host.programs[0] = {isa::Nop{}, isa::Halt{}, isa::Nop{}, isa::Nop{}, isa::Halt{}};
  sim.host.programs[1] = {isa::Halt{}};
  sim.run();
  const auto& taken = sim.host.interrupts_taken;
  ASSERT_EQ(taken.size(), 3u);
  std::vector<test::TestHost::Interrupt> core0;
  for (const auto& i : taken) {
    ASSERT_LT(i.core, 2u);
    if (i.core == 0) core0.push_back(i);
  }
  ASSERT_EQ(core0.size(), 2u);
  EXPECT_EQ(core0[0].halts, 1u);
  EXPECT_EQ(core0[1].halts, 2u);
  EXPECT_LT(core0[0].at, core0[1].at);
  EXPECT_EQ(core0[1].at, sim.chip.halted_at(0));
  for (const auto& i : taken)
    if (i.core == 1) {
      EXPECT_EQ(i.halts, 1u);
      EXPECT_EQ(i.at, sim.chip.halted_at(1));
    }
}

}  // namespace
}  // namespace tpu
