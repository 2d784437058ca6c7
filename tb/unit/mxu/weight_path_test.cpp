// read_weights with `transpose` and `stride` on a chip (docs/isa.md §4.4, docs/timing-model.md
// "Training forms"): a strided tile from off-chip memory costs what a dense tile of the same
// bytes costs, and the checks name the field and what is allowed. One elaboration per test.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/chip_sim.h"
#include "common/mxu_helpers.h"

namespace tpu {
namespace {

using test::shipped;

// Core 0 runs the test's program; every other core halts at once.
struct Simulation : test::Simulation {
  explicit Simulation(const ChipConfig& cfg) : test::Simulation(cfg, 1 << 16) {
    for (std::size_t c = 1; c < host.programs.size(); ++c) host.programs[c] = {isa::Halt{}};
  }
};

isa::MatMul swap_one_row(std::uint32_t k, std::uint32_t e) {
  isa::MatMul m;
  m.swap_weights = true, m.rows = 1, m.src_stride = k * e;
  return m;
}

// A full tile whose rows lie 64 bytes apart beyond their own length, read transposed: its rows
// are fetched as separate transfers in flight together, so the tile reaches the FIFO when one
// transfer of all its bytes would (give or take the rounding of each row's end), and the
// transpose adds nothing (docs/timing-model.md: assumption).
TEST(WeightPath, AStridedTransposedTileFetchTakesWhatItsBytesTake) {
  const ChipConfig cfg = shipped("v1");
  const std::uint32_t e = size_of(cfg.mxu.input_type), R = cfg.mxu.rows, C = cfg.mxu.cols;
  Simulation sim(cfg);
  const std::uint32_t pitch = C * e + 64;
  sim.host.programs[0] = {test::read_weights(false, 0, C, R, pitch, true), swap_one_row(R, e),
                          isa::Halt{}};
  sc_core::sc_start();
  // As MxuTiming.WeightFetchIsLimitedByOffChipBandwidth: delivery of the 3 instructions, decode,
  // fetch, shift, then the one-row feed.
  const Cycles delivered = sim.chip.host_link_in.uncontended_cycles(3 * isa::kInstructionBytes);
  const Cycles fetch = sim.chip.off_chip_bw->uncontended_cycles(cfg.weight_tile_bytes());
  const Cycle feed_start = delivered.value() + 1 + fetch.value() + R;
  const Cycle got = sim.chip.cores[0]->mxus[0]->last_feed_end() - 1;
  EXPECT_LE(std::llabs(static_cast<long long>(got) - static_cast<long long>(feed_start)), 1)
      << "feed started at " << got << ", a dense tile's at " << feed_start;
  EXPECT_EQ(sim.chip.cores[0]->mxus[0]->buckets().weight_shift, R);
}

TEST(WeightPath, ATransposedTileMustFitTheArrayAfterTheTranspose) {
  ChipConfig cfg = shipped("tiny-rtl");
  cfg.mxu.impl = MxuImpl::Tlm;
  cfg.mxu.cols = cfg.mxu.rows / 2;  // N <= C is now the tighter bound
  Simulation sim(cfg);
  // Stored rows x cols = (C + 1) x 1: fits untransposed, not as a 1 x (C + 1) tile.
  sim.host.programs[0] = {test::read_weights(true, 0, cfg.mxu.cols + 1, 1, 0, true), isa::Halt{}};
  const std::string msg = sim.run_expecting_error();
  EXPECT_NE(msg.find("read_weights): transposed tile of 1 x " + std::to_string(cfg.mxu.cols + 1) +
                     " (cols 1 x rows " + std::to_string(cfg.mxu.cols + 1) + ") does not fit"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("cols must be 1.." + std::to_string(cfg.mxu.rows) + " and rows 1.." +
                     std::to_string(cfg.mxu.cols)),
            std::string::npos)
      << msg;
}

TEST(WeightPath, AStrideShorterThanARowIsRefused) {
  const ChipConfig cfg = shipped("v2");  // bf16: a row of 4 columns is 8 bytes
  Simulation sim(cfg);
  sim.host.programs[0] = {test::read_weights(true, 0, 3, 4, 6, false), isa::Halt{}};
  EXPECT_NE(sim.run_expecting_error().find(
                "stride = 6 bytes (must be 0 for dense rows or >= cols 4 x 2 bytes = 8"),
            std::string::npos);
}

TEST(WeightPath, AStridedTilePastTheUnifiedBufferIsRefusedAtIssue) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  // 2 rows 1 MiB apart from 1 KiB below the end: the second row lies outside.
  const std::uint64_t addr = cfg.unified_buffer.bytes - 1024;
  sim.host.programs[0] = {test::read_weights(true, addr, 2, 16, 1 << 20, false), isa::Halt{}};
  const std::string msg = sim.run_expecting_error();
  EXPECT_NE(msg.find(fmt::format("addr range {:#x} + {} bytes is outside", addr, (1 << 20) + 16)),
            std::string::npos)
      << msg;
}

TEST(WeightPath, AStridedTilePastOffChipMemoryNamesTheFirstRowOutside) {
  const ChipConfig cfg = shipped("v1");
  Simulation sim(cfg);
  const std::uint64_t addr = cfg.off_chip_memory.bytes - 3 * 256 - 16;
  sim.host.programs[0] = {test::read_weights(false, addr, 8, 16, 256, false), isa::Halt{}};
  const std::string msg = sim.run_expecting_error();
  // Row 3 ends at the last byte of memory; row 4 is the first outside.
  EXPECT_NE(msg.find(fmt::format("off-chip memory answered address error for row 4: 16 bytes at "
                                 "{:#x}",
                                 addr + 4 * 256)),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace tpu
