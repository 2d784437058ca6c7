// Timing rules of the whole chip, each checked against the formula in docs/timing-model.md
// evaluated from the config; hazards; and programs the chip must refuse.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>

#include "common/chip_sim.h"
#include "common/test_host.h"
#include "hw/chip/chip.h"
#include "hw/unit/program_error.h"
#include "hw/vector_unit/vector_ops.h"

namespace tpu {
namespace {

using test::shipped;
using test::Simulation;

isa::ReadWeights tile_from_ub(const ChipConfig& cfg, std::uint64_t addr) {
  return isa::ReadWeights{0, isa::WeightSource::UnifiedBuffer, addr,
                          static_cast<std::uint16_t>(cfg.mxu.rows),
                          static_cast<std::uint16_t>(cfg.mxu.cols)};
}

isa::MatMul matmul(const ChipConfig& cfg, std::uint32_t rows, bool swap, std::uint32_t src = 0,
                   std::uint32_t dst = 0) {
  isa::MatMul m;
  m.swap_weights = swap;
  m.src = UbAddr(src);
  m.dst = AccAddr(dst);
  m.rows = rows;
  m.src_stride = cfg.mxu.rows * size_of(cfg.mxu.input_type);
  return m;
}

TEST(MxuTiming, WeightShiftTakesRowsCyclesWithOneBuffer) {
  ChipConfig cfg = shipped("v1");
  cfg.mxu.weight_buffers = 1;
  Simulation sim(cfg);
  const std::uint32_t B = 10;
  sim.host.programs[0] = {tile_from_ub(cfg, 0), tile_from_ub(cfg, 0), matmul(cfg, B, true),
                          matmul(cfg, B, true), isa::Halt{}};
  sim.run();
  EXPECT_EQ(sim.mxu0().weight_shift, 2ull * cfg.mxu.rows);
  EXPECT_EQ(sim.mxu0().active, 2ull * B);
}

TEST(MxuTiming, DoubleBufferingHidesTheShiftBehindALongEnoughMultiply) {
  const ChipConfig cfg = shipped("v1");
  ASSERT_EQ(cfg.mxu.weight_buffers, 2u);
  Simulation sim(cfg);
  // The second tile shifts in while the first computes rows + ... cycles: nothing to wait for.
  const std::uint32_t B = 2 * cfg.mxu.rows;
  sim.host.programs[0] = {tile_from_ub(cfg, 0), tile_from_ub(cfg, 0), matmul(cfg, B, true),
                          matmul(cfg, B, true), isa::Halt{}};
  sim.run();
  EXPECT_EQ(sim.mxu0().weight_shift, std::uint64_t{cfg.mxu.rows}) << "only the first shift shows";
  EXPECT_EQ(sim.mxu0().active, 2ull * B);
}

TEST(MxuTiming, ShortMultipliesExposeTheRestOfTheShift) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  const std::uint32_t B = cfg.mxu.rows / 4;
  sim.host.programs[0] = {tile_from_ub(cfg, 0), tile_from_ub(cfg, 0), matmul(cfg, B, true),
                          matmul(cfg, B, true), isa::Halt{}};
  sim.run();
  // The second shift starts at the first swap and overlaps its B-cycle feed.
  EXPECT_EQ(sim.mxu0().weight_shift, std::uint64_t{cfg.mxu.rows} + (cfg.mxu.rows - B));
}

TEST(MxuTiming, WeightFetchIsLimitedByOffChipBandwidth) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  isa::ReadWeights rw = tile_from_ub(cfg, 0);
  rw.source = isa::WeightSource::OffChip;
  const std::uint32_t B = 1;
  sim.host.programs[0] = {rw, matmul(cfg, B, true), isa::Halt{}};
  const Cycle end = sim.run();
  // The instructions cross the host link, then: decode (1 cycle) -> fetch -> shift -> feed ->
  // drain; the halt is decoded meanwhile and waits for the drain.
  const Cycles delivered = sim.chip.host_link_in.uncontended_cycles(3 * isa::kInstructionBytes);
  const Cycles fetch = sim.chip.off_chip_bw->uncontended_cycles(cfg.weight_tile_bytes());
  const Cycle feed_start = delivered.value() + 1 + fetch.value() + cfg.mxu.rows;
  EXPECT_EQ(sim.chip.cores[0]->mxus[0]->last_feed_end(), feed_start + B);
  EXPECT_EQ(end, feed_start + B + (cfg.mxu.rows + cfg.mxu.cols - 1));
  EXPECT_EQ(sim.mxu0().weight_shift, cfg.mxu.rows);
  // From the matmul's issue, one decode cycle after the read_weights, to the tile's arrival.
  EXPECT_EQ(sim.mxu0().weight_stall, fetch.value() - 1);
}

TEST(MxuTiming, FeedIsSlowedWhenTheUnifiedBufferPortIsNarrowerThanARow) {
  ChipConfig cfg = shipped("v1");
  cfg.unified_buffer.bytes_per_cycle = cfg.mxu.rows * size_of(cfg.mxu.input_type) / 4;
  Simulation sim(cfg);
  const std::uint32_t B = 100;
  sim.host.programs[0] = {tile_from_ub(cfg, 0), matmul(cfg, B, true), isa::Halt{}};
  sim.run();
  EXPECT_EQ(sim.mxu0().active, B);
  EXPECT_EQ(sim.mxu0().input_stall, 3ull * B) << "a quarter-row port takes 4 cycles per row";
}

// docs/timing-model.md, DMA: a gather of n rows of b bytes takes
// ⌈4n/P⌉ + n·max(L_mem + ⌈b/r⌉, ⌈b/P⌉) cycles alone, evaluated here from the config.
std::uint64_t gather_formula(const ChipConfig& cfg, std::uint64_t n, std::uint64_t b) {
  const Clock clock(cfg.clock_hz());
  const std::uint64_t port = cfg.unified_buffer.bytes_per_cycle;
  const auto port_cycles = [&](std::uint64_t bytes) { return (bytes + port - 1) / port; };
  const std::uint64_t far =
      clock.ns_to_cycles(cfg.off_chip_memory.latency_ns).value() +
      clock.transfer_cycles(static_cast<double>(b), cfg.off_chip_bytes_per_s()).value();
  return port_cycles(4 * n) + n * std::max(far, port_cycles(b));
}

// Reads `indices` from host memory into UB 0, then gathers their rows of `row_bytes` from a
// `rows`-row table at off-chip 0x100000 into UB 0x10000, after `before` (instructions of other
// units that run beside it), and halts. Returns the gather's slice: from its start to its end.
TraceSlice run_gather(Simulation& sim, const std::vector<std::int32_t>& indices,
                      std::uint32_t row_bytes, std::uint32_t rows,
                      const std::vector<isa::Instruction>& before = {}) {
  Trace trace;
  sim.chip.enable_trace(trace);
  const auto n = static_cast<std::uint32_t>(indices.size());
  std::memcpy(sim.host.memory.data(), indices.data(), 4 * indices.size());
  auto& p = sim.host.programs[0];
  p = before;
  p.push_back(isa::ReadHost{HostAddr(0), UbAddr(0), 4 * n});
  p.push_back(isa::Gather{MemAddr(0x100000), UbAddr(0), UbAddr(0x10000), n, row_bytes, rows});
  p.push_back(isa::Halt{});
  sim.run();
  for (const TraceSlice& t : trace.slices())
    if (!t.is_stall && t.opcode == isa::Opcode::Gather) return t;
  ADD_FAILURE() << "no gather in the trace";
  return {};
}

std::vector<std::int32_t> spread_indices(std::uint32_t n, std::uint32_t rows) {
  std::vector<std::int32_t> v(n);
  for (std::uint32_t i = 0; i < n; ++i) v[i] = static_cast<std::int32_t>(i * 7919u % rows);
  return v;
}

TEST(GatherTiming, TheIndicesThenEachRowAsItsOwnOffChipTransfer) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  const std::uint32_t n = 50, b = 256, rows = 10000;
  const TraceSlice t = run_gather(sim, spread_indices(n, rows), b, rows);
  // Each row pays the off-chip latency: far longer than one transfer of all the rows.
  const Clock clock(cfg.clock_hz());
  ASSERT_GT(clock.ns_to_cycles(cfg.off_chip_memory.latency_ns).value(),
            (b + cfg.unified_buffer.bytes_per_cycle - 1) / cfg.unified_buffer.bytes_per_cycle);
  EXPECT_EQ(t.end - t.begin, gather_formula(cfg, n, b));
}

TEST(GatherTiming, AUnifiedBufferPortSlowerThanOffChipMemoryPacesEachRow) {
  ChipConfig cfg = shipped("v1");
  cfg.unified_buffer.bytes_per_cycle = 16;
  Simulation sim(cfg);
  const std::uint32_t n = 20, b = 4096, rows = 64;
  const Clock clock(cfg.clock_hz());
  ASSERT_GT(b / cfg.unified_buffer.bytes_per_cycle,
            clock.ns_to_cycles(cfg.off_chip_memory.latency_ns).value() +
                clock.transfer_cycles(b, cfg.off_chip_bytes_per_s()).value())
      << "the port must be the slower side";
  const TraceSlice t = run_gather(sim, spread_indices(n, rows), b, rows);
  EXPECT_EQ(t.end - t.begin, gather_formula(cfg, n, b));
}

TEST(GatherTiming, RowsShareOffChipBandwidthWithOtherTransfers) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  const std::uint32_t n = 40, b = 1024, rows = 100;
  // A weight tile fetched from off-chip memory by the MXU's weight path while the gather runs.
  isa::ReadWeights rw = tile_from_ub(cfg, 0x200000);
  rw.source = isa::WeightSource::OffChip;
  const TraceSlice t = run_gather(sim, spread_indices(n, rows), b, rows, {rw});
  EXPECT_GT(t.end - t.begin, gather_formula(cfg, n, b));
}

TEST(Hazards, GatherWaitsForTheVectorUnitToWriteItsIndices) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  const std::uint32_t n = 64, row_bytes = 32, rows = 500;
  const std::uint64_t table = 0x100000;
  std::vector<std::uint8_t> table_bytes(std::size_t{rows} * row_bytes);
  for (std::size_t i = 0; i < table_bytes.size(); ++i)
    table_bytes[i] = static_cast<std::uint8_t>(i * 31 + 7);
  sim.host.load_memory(table, table_bytes);
  const std::vector<std::int32_t> indices = spread_indices(n, rows);
  std::memcpy(sim.host.memory.data(), indices.data(), 4 * n);
  // The indices arrive at UB 0x100 and an int8 add of zeros (UB 0x800, never written) copies them
  // to UB 0x400, where the gather reads them: until the eltwise is done UB 0x400 holds zeros, so
  // a gather that did not wait would fetch row 0 every time.
  isa::Eltwise copy;
  copy.a = UbAddr(0x100), copy.b = UbAddr(0x800), copy.dst = UbAddr(0x400), copy.count = 4 * n;
  sim.host.programs[0] = {
      isa::ReadHost{HostAddr(0), UbAddr(0x100), 4 * n}, copy,
      isa::Gather{MemAddr(table), UbAddr(0x400), UbAddr(0x1000), n, row_bytes, rows},
      isa::WriteHost{UbAddr(0x1000), HostAddr(0x10000), n * row_bytes}, isa::Halt{}};
  sim.run();
  for (std::uint32_t r = 0; r < n; ++r)
    ASSERT_EQ(std::memcmp(sim.host.memory.data() + 0x10000 + r * row_bytes,
                          table_bytes.data() + std::size_t(indices[r]) * row_bytes, row_bytes),
              0)
        << "row " << r;
}

TEST(Hazards, ActivateWaitsForTheMatMulToDrainIntoTheAccumulators) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  const std::uint32_t B = 64;
  isa::Activate a;
  a.src = AccAddr(0), a.dst = UbAddr(1 << 20), a.params = UbAddr(2 << 20);
  a.rows = B, a.cols = static_cast<std::uint16_t>(cfg.mxu.cols), a.dst_stride = cfg.mxu.cols;
  a.out_type = DType::Int8;
  sim.host.programs[0] = {tile_from_ub(cfg, 0), matmul(cfg, B, true), a, isa::Halt{}};
  const Cycle end = sim.run();
  // The activate starts when the matmul's results are in the accumulators, then runs its cost.
  const Cycle matmul_done =
      sim.chip.cores[0]->mxus[0]->last_feed_end() + cfg.mxu.rows + cfg.mxu.cols - 1;
  EXPECT_EQ(end, matmul_done + VectorOps(cfg).cost(a).cycles);
}

TEST(Hazards, DmaDoesNotOverwriteUnifiedBufferDataAMatMulStillNeeds) {
  ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  // Weights: identity in the top-left corner, so each output equals its input.
  const std::uint32_t R = cfg.mxu.rows, C = cfg.mxu.cols;
  const std::uint32_t w_ub = 0, x_ub = R * C, acc_out = 4 << 20, params = 5 << 20;
  std::vector<std::uint8_t> w(std::size_t{R} * C, 0);
  for (std::uint32_t i = 0; i < std::min(R, C); ++i) w[std::size_t{i} * C + i] = 1;
  std::memcpy(sim.host.memory.data(), w.data(), w.size());
  std::vector<std::uint8_t> x(R, 0), y(R, 0);
  for (std::uint32_t i = 0; i < R; ++i) x[i] = static_cast<std::uint8_t>(i % 100), y[i] = 99;
  std::memcpy(sim.host.memory.data() + 0x40000, x.data(), R);
  std::memcpy(sim.host.memory.data() + 0x50000, y.data(), R);
  // params: bias 0, multiplier 2^30 (0.5 in Q31) with shift -1 -> scale 1.0 requantization.
  for (std::uint32_t j = 0; j < C; ++j) {
    const std::int32_t rec[3] = {0, 1 << 30, -1};
    std::memcpy(sim.host.memory.data() + 0x60000 + 12 * j, rec, 12);
  }
  isa::Activate a;
  a.src = AccAddr(0), a.dst = UbAddr(acc_out), a.params = UbAddr(params);
  a.rows = 1, a.cols = static_cast<std::uint16_t>(C), a.dst_stride = C;
  a.out_type = DType::Int8;
  sim.host.programs[0] = {
      isa::ReadHost{HostAddr(0), UbAddr(w_ub), R * C},
      isa::ReadHost{HostAddr(0x40000), UbAddr(x_ub), R},
      isa::ReadHost{HostAddr(0x60000), UbAddr(params), 12 * C},
      isa::ReadWeights{0, isa::WeightSource::UnifiedBuffer, w_ub, static_cast<std::uint16_t>(R),
                       static_cast<std::uint16_t>(C)},
      matmul(cfg, 1, true, x_ub),
      isa::ReadHost{HostAddr(0x50000), UbAddr(x_ub), R},  // WAR: must wait for the matmul
      a,
      isa::WriteHost{UbAddr(acc_out), HostAddr(0x70000), C},
      isa::Halt{}};
  sim.run();
  for (std::uint32_t i = 0; i < std::min(R, C); ++i)
    ASSERT_EQ(sim.host.memory[0x70000 + i], x[i]) << "output " << i << " saw the overwritten input";
}

TEST(BadPrograms, IllegalOpcodeStopsTheRunNamingTheInstruction) {
  Simulation sim(shipped("v1"));
  std::vector<std::uint8_t> words = isa::encode_all({isa::Nop{}, isa::Nop{}});
  words.resize(words.size() + isa::kInstructionBytes, 0);
  words[2 * isa::kInstructionBytes] = 0x7e;
  sim.host.raw[0] = words;
  const std::string msg = sim.run_expecting_error();
  EXPECT_NE(msg.find("core 0 instruction 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("illegal opcode 0x7e"), std::string::npos) << msg;
}

TEST(BadPrograms, UnifiedBufferAddressOutOfRangeNamesInstructionAndAddress) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  const auto end = static_cast<std::uint32_t>(cfg.unified_buffer.bytes - 16);
  sim.host.programs[0] = {isa::Nop{}, isa::ReadHost{HostAddr(0), UbAddr(end), 64}, isa::Halt{}};
  const std::string msg = sim.run_expecting_error();
  EXPECT_NE(msg.find("core 0 instruction 1 (read_host)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(fmt::format("{:#x}", end)), std::string::npos) << msg;
}

TEST(BadPrograms, OffChipAddressOutOfRangeGetsATlmErrorResponse) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  const std::uint64_t beyond = cfg.off_chip_memory.bytes - 8;
  sim.host.programs[0] = {isa::ReadMem{MemAddr(beyond), UbAddr(0), 64}, isa::Halt{}};
  const std::string msg = sim.run_expecting_error();
  EXPECT_NE(msg.find("core 0 instruction 0 (read_mem)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("address error"), std::string::npos) << msg;
  EXPECT_NE(msg.find(fmt::format("{:#x}", beyond)), std::string::npos) << msg;
}

// A gather whose indices (read from host memory) include `bad` stops at that index, naming the
// instruction, the index, where it was read and the table's bound.
void expect_gather_refuses(std::int32_t bad) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  const std::uint32_t rows = 1000;
  const std::vector<std::int32_t> indices = {3, 999, bad, 5};
  std::memcpy(sim.host.memory.data(), indices.data(), 4 * indices.size());
  const auto n = static_cast<std::uint32_t>(indices.size());
  sim.host.programs[0] = {isa::ReadHost{HostAddr(0), UbAddr(0x40), 4 * n},
                          isa::Gather{MemAddr(0), UbAddr(0x40), UbAddr(0x1000), n, 64, rows},
                          isa::Halt{}};
  const std::string msg = sim.run_expecting_error();
  EXPECT_NE(msg.find("core 0 instruction 1 (gather)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(fmt::format("index {} (indices[2] at {:#x})", bad, 0x40 + 8)),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(fmt::format("[0, {})", rows)), std::string::npos) << msg;
  // Checked before any row moved: the destination is as it was.
  UnifiedBuffer& ub = sim.chip.cores[0]->ub;
  for (std::uint32_t i = 0; i < n * 64; ++i) ASSERT_EQ(ub.data()[0x1000 + i], 0) << i;
}

TEST(BadPrograms, GatherIndexAtTheTablesRowCountIsRefusedBeforeAnyRowMoves) {
  expect_gather_refuses(1000);
}

TEST(BadPrograms, NegativeGatherIndexIsRefusedBeforeAnyRowMoves) { expect_gather_refuses(-1); }

TEST(BadPrograms, MatMulWithoutWeightsIsRefused) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  sim.host.programs[0] = {matmul(cfg, 4, false), isa::Halt{}};
  const std::string msg = sim.run_expecting_error();
  EXPECT_NE(msg.find("no resident weights"), std::string::npos) << msg;
}

// Timing only (docs/timing-model.md, "Timing-only mode"): the indices are values, so every row
// is row 0 of the table; indices outside it are not refused, and each row takes the formula's
// time wherever it lies.
TEST(TimingOnly, AGatherReadsRowZeroForIndicesOutsideItsTableInTheFormulasCycles) {
  const ChipConfig cfg = shipped("v1");
  SimOptions timing_only;
  timing_only.timing_only = true;
  Simulation sim(cfg, 1 << 20, timing_only);
  const std::uint32_t b = 256, rows = 1000;
  const std::vector<std::int32_t> indices = {3, 999, 1000, -1, 5};
  const TraceSlice t = run_gather(sim, indices, b, rows);
  EXPECT_EQ(t.end - t.begin, gather_formula(cfg, indices.size(), b));
  EXPECT_EQ(sim.chip.memory.allocated_bytes(), 0u);
}

// Timing only: the DMA, the MXU and the vector unit run, are timed and counted, and no memory of
// the chip keeps a byte: no off-chip page is allocated, the unified buffer reads as it was.
TEST(TimingOnly, NoMemoryKeepsAByteAndTheCountsAreAFullRuns) {
  const ChipConfig cfg = shipped("v3");
  SimOptions timing_only;
  timing_only.timing_only = true;
  Simulation sim(cfg, 1 << 20, timing_only);
  std::fill(sim.host.memory.begin(), sim.host.memory.end(), std::uint8_t{0x5a});
  sim.host.load_memory(0x1000, std::vector<std::uint8_t>(1 << 16, 0xa5));
  const std::uint32_t kb = cfg.mxu.rows * size_of(cfg.mxu.input_type);
  isa::Eltwise e;
  e.a = UbAddr(0), e.b = UbAddr(0), e.dst = UbAddr(1 << 20), e.count = 1 << 12;
  e.type = DType::Fp32;
  sim.host.programs[0] = {isa::ReadHost{HostAddr(0), UbAddr(0), 1 << 16},
                          isa::WriteMem{UbAddr(0), MemAddr(1 << 24), 1 << 16},
                          isa::ReadMem{MemAddr(0x1000), UbAddr(1 << 17), 1 << 16},
                          tile_from_ub(cfg, 0),
                          matmul(cfg, 16, true),
                          e,
                          isa::Halt{}};
  sim.run();
  EXPECT_EQ(sim.chip.memory.allocated_bytes(), 0u);
  UnifiedBuffer& ub = sim.chip.cores[0]->ub;
  for (std::uint32_t i = 0; i < (1 << 16); i += 4093) ASSERT_EQ(ub.data()[i], 0) << i;
  const Counters c = sim.chip.counters().total();
  EXPECT_EQ(c.host_bytes_in, (1u << 16) + 7 * isa::kInstructionBytes);
  EXPECT_EQ(c.off_chip_bytes_written, 1u << 16);
  EXPECT_EQ(c.off_chip_bytes_read, 1u << 16);
  EXPECT_EQ(c.macs, 16ull * cfg.mxu.rows * cfg.mxu.cols);
  EXPECT_EQ(c.mxu_input_bytes, 16ull * kb);
  EXPECT_EQ(c.vector_ops, std::uint64_t{e.count});
  EXPECT_EQ(sim.mxu0().active, 16u);
}

// Timing only checks every instruction as a full run does: what a full run refuses, it refuses
// with the same message.
TEST(TimingOnly, AnOffChipAddressOutOfRangeIsRefusedAsInAFullRun) {
  const ChipConfig cfg = shipped("v1");
  SimOptions timing_only;
  timing_only.timing_only = true;
  Simulation sim(cfg, 1 << 20, timing_only);
  const std::uint64_t beyond = cfg.off_chip_memory.bytes - 16;
  sim.host.programs[0] = {isa::ReadMem{MemAddr(beyond), UbAddr(0), 64}, isa::Halt{}};
  const std::string msg = sim.run_expecting_error();
  EXPECT_NE(msg.find("core 0 instruction 0 (read_mem)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("address error"), std::string::npos) << msg;
}

TEST(HostInterface, InstructionQueueBackPressuresTheHost) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  // Slow vector instructions: the host's writes are accepted only as the queue drains.
  isa::Eltwise e;
  e.a = UbAddr(0), e.b = UbAddr(0), e.dst = UbAddr(1 << 20), e.count = 1 << 16;
  const std::size_t n = 600;
  std::vector<isa::Instruction> p(n, e);
  p.push_back(isa::Halt{});
  sim.host.programs[0] = p;
  sim.run();
  EXPECT_EQ(sim.chip.cores[0]->sequencer->issued(), p.size());
  // At most queue depth + unit queue + one write's worth can be ahead of execution.
  const std::uint64_t each = VectorOps(cfg).cost(e).cycles;
  EXPECT_GT(sim.host.written_at[0], (n - 256 - 16 - sim.host.instructions_per_write - 1) * each);
}

}  // namespace
}  // namespace tpu
