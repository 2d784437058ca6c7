// Validation of the model against first principles (docs/validation.md): a large GEMM whose
// operands sit in the unified buffer keeps every MXU of every core busy, so utilization
// approaches 100% on every shipped chip; a batch-1 dense layer lands on the weight-streaming
// roof.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/temp_dir.h"
#include "common/test_host.h"
#include "hw/chip/chip.h"
#include "hw/unit/trace.h"
#include "sw/sim/session.h"

namespace tpu {
namespace {

ChipConfig shipped(const std::string& name) {
  return load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + name + ".json");
}

class OnChipGemm : public ::testing::TestWithParam<const char*> {};

// Per core and MXU: `tiles` full weight tiles read from the unified buffer, each multiplied by
// B = 4 x rows input rows (long enough to hide the next tile's shift and fetch). Each MXU writes
// its own accumulator range, so nothing but the array's own pipeline orders the work.
TEST_P(OnChipGemm, UtilizationApproachesOneHundredPercent) {
  const ChipConfig cfg = shipped(GetParam());
  Chip chip("chip", cfg);
  test::TestHost host("host", chip, 1 << 16);
  // The program streams in writes as large as the instruction queue, so that the host link's
  // per-transfer latency (10 us on Edge's USB) does not starve the sequencer.
  host.instructions_per_write = 256;
  const std::uint32_t B = 4 * cfg.mxu.rows;
  const std::uint32_t tiles = 64;
  const std::uint64_t elem = size_of(cfg.mxu.input_type);
  const std::uint64_t tile_bytes = std::uint64_t{cfg.mxu.rows} * cfg.mxu.cols * elem;
  ASSERT_LE(std::uint64_t{B} * cfg.mxu.count, cfg.accumulators.entries);
  for (std::uint32_t c = 0; c < cfg.tensor_cores; ++c) {
    auto& p = host.programs[c];
    for (std::uint32_t t = 0; t < tiles; ++t)
      for (std::uint32_t m = 0; m < cfg.mxu.count; ++m) {
        p.push_back(isa::ReadWeights{static_cast<std::uint8_t>(m), isa::WeightSource::UnifiedBuffer,
                                     0, static_cast<std::uint16_t>(cfg.mxu.rows),
                                     static_cast<std::uint16_t>(cfg.mxu.cols)});
        isa::MatMul mm;
        mm.mxu = static_cast<std::uint8_t>(m);
        mm.swap_weights = true;
        mm.src = UbAddr(static_cast<std::uint32_t>(tile_bytes));
        mm.dst = AccAddr(m * B);
        mm.rows = B;
        mm.src_stride = static_cast<std::uint32_t>(cfg.mxu.rows * elem);
        p.push_back(mm);
      }
    p.push_back(isa::Halt{});
  }
  Trace trace;
  chip.enable_trace(trace);
  sc_core::sc_start();
  Cycle end = 0;
  for (Cycle h : host.halted_at) end = std::max(end, h);
  chip.finish(end);
  // From the first unit's first work: before it, the program is still crossing the host link.
  Cycle start = end;
  for (const TraceSlice& sl : trace.slices()) start = std::min(start, sl.begin);
  const double macs = static_cast<double>(chip.counters().total().macs);
  ASSERT_EQ(macs, static_cast<double>(cfg.tensor_cores) * cfg.mxu.count * tiles * B * cfg.mxu.rows *
                      cfg.mxu.cols);
  const double utilization =
      macs / (static_cast<double>(cfg.peak_macs_per_cycle()) * static_cast<double>(end - start));
  RecordProperty("utilization", std::to_string(utilization));
  // What is left is the first tile's fetch and shift and the last drain (docs/validation.md).
  EXPECT_GT(utilization, 0.97) << cfg.name << ": cycles " << start << " to " << end;
  EXPECT_LE(utilization, 1.0);
}

INSTANTIATE_TEST_SUITE_P(ShippedChips, OnChipGemm,
                         ::testing::Values("v1", "v2", "v3", "v4", "edge"));

class MatrixVector : public ::testing::TestWithParam<const char*> {};

// Batch 1 per core through a 4096 x 4096 dense layer: every weight byte is used once, so the
// layer is bound by streaming the weights — from off-chip memory at its bandwidth, or into the
// array at one tile per `rows` cycles, whichever is slower (docs/validation.md). Four batches
// run back to back; the steady-state period is the time between the last multiplies of two
// consecutive batches, on the slowest core (from the trace). The first batch also waits for its
// input over the host link while its first tiles arrive, which the period leaves out: its span
// is recorded, not asserted.
TEST_P(MatrixVector, BatchOneDenseLandsOnTheWeightStreamingRoof) {
  const ChipConfig cfg = shipped(GetParam());
  const std::uint32_t k = 4096, n = 4096, batches = 4;
  const test::TempDir dir("tpusim-mv");
  const std::string model = dir / "matvec.json";
  std::ofstream(model) << nlohmann::json{
      {"name", "matvec"},
      {"input", {1, 1, k}},
      {"layers",
       {{{"class_name", "Flatten"}, {"config", {{"name", "flatten"}}}},
        {{"class_name", "Dense"},
         {"config", {{"name", "dense"}, {"units", n}, {"activation", "linear"}}}}}}};
  sim::RunOptions o;
  o.model = model;
  o.images = batches * cfg.tensor_cores;
  o.batch = cfg.tensor_cores;
  o.trace = dir / "trace.json";
  const auto r = sim::run_workload(cfg, o);
  ASSERT_TRUE(r["accuracy"]["bit_exact"].get<bool>());

  const double e = size_of(cfg.mxu.input_type);
  const double tiles_per_core =
      std::ceil(double{k} / cfg.mxu.rows) * std::ceil(double{n} / cfg.mxu.cols);
  double bytes = cfg.tensor_cores * double{k} * n * e;
  // Edge's weights cross the host link, which also carries each batch's instructions and input:
  // the link's bytes into the chip after the model load, per batch.
  if (cfg.off_chip_memory.kind == MemoryKind::HostLink)
    bytes += (r["totals"]["bytes"]["host_link_in"].get<double>() -
              r["load"]["bytes_host_link"].get<double>()) /
             batches;
  const double bandwidth_roof = bytes / cfg.off_chip_bytes_per_s() * cfg.clock_hz();
  const double shift_roof = tiles_per_core / cfg.mxu.count * cfg.mxu.rows;
  const double roof = std::max(bandwidth_roof, shift_roof);

  // Per core (a trace process): its multiplies' end cycles; every batch has one per tile.
  const auto trace = nlohmann::json::parse(test::read_file(o.trace));
  std::map<int, std::vector<double>> ends;
  double first_fetch = 1e300;
  for (const auto& ev : trace["traceEvents"]) {
    if (ev["ph"] != "X" || ev["args"]["layer"] != "dense") continue;
    if (ev["cat"] == "matmul") ends[ev["pid"].get<int>()].push_back(ev["args"]["end_cycle"]);
    if (ev["cat"] == "read_weights")
      first_fetch = std::min(first_fetch, ev["args"]["begin_cycle"].get<double>());
  }
  ASSERT_EQ(ends.size(), cfg.tensor_cores);
  std::vector<double> batch_end(batches, 0);
  for (auto& [core, v] : ends) {
    ASSERT_EQ(v.size(), batches * tiles_per_core) << "core " << core;
    std::sort(v.begin(), v.end());
    for (std::uint32_t b = 0; b < batches; ++b)
      batch_end[b] =
          std::max(batch_end[b], v[static_cast<std::size_t>((b + 1) * tiles_per_core) - 1]);
  }
  RecordProperty("first_batch_over_roof", std::to_string((batch_end[0] - first_fetch) / roof));
  RecordProperty("bound", bandwidth_roof >= shift_roof ? "off-chip bandwidth" : "weight shift");
  for (std::uint32_t b = 1; b + 1 < batches; ++b) {
    const double period = batch_end[b + 1] - batch_end[b];
    RecordProperty("period_over_roof_" + std::to_string(b), std::to_string(period / roof));
    EXPECT_GE(period, 0.99 * roof) << cfg.name << ": batch " << b + 1;
    EXPECT_LE(period, 1.01 * roof)
        << cfg.name << ": batch " << b + 1 << ", bandwidth roof " << bandwidth_roof
        << " cycles, shift roof " << shift_roof << " cycles";
  }
}

// v1 and Edge are bound by their memory's bandwidth (DDR3, USB), v2 by the weight shift, v3 and
// v4 by HBM bandwidth.
INSTANTIATE_TEST_SUITE_P(ShippedChips, MatrixVector,
                         ::testing::Values("v1", "v2", "v3", "v4", "edge"));

}  // namespace
}  // namespace tpu
