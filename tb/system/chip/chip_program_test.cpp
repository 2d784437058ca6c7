// Whole-chip tests: hand-written programs streamed through the host interface into a chip built
// from a shipped config. Each TEST elaborates its own chip (one process per test).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/test_host.h"
#include "hw/chip/chip.h"
#include "hw/config/chip_config.h"
#include "numerics/bf16.h"

namespace tpu {
namespace {

using isa::Instruction;

ChipConfig shipped(const std::string& name) {
  return load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + name + ".json");
}

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

struct Simulation {
  Chip chip;
  test::TestHost host;
  Simulation(ChipConfig cfg, std::size_t host_bytes)
      : chip("chip", std::move(cfg)), host("host", chip, host_bytes) {}

  Cycle run() {
    sc_core::sc_start();
    Cycle end = 0;
    for (Cycle c : host.halted_at) end = std::max(end, c);
    chip.finish(end);
    return end;
  }
};

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

}  // namespace
}  // namespace tpu
