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
constexpr std::uint32_t kDenseK = 4096, kDenseN = 4096, kDenseBatches = 4;

struct DenseRun {
  std::vector<double> batch_end;  // per batch, the last multiply of the slowest core
  double first_fetch = 0;         // the first weight fetch
  double weight_bytes = 0;        // per batch, every core's
  double link_bytes = 0;          // per batch, the host link's bytes into the chip after the load
  double shift_roof = 0;          // cycles: one tile per `rows` cycles into each array
};

DenseRun run_dense(const ChipConfig& cfg) {
  const test::TempDir dir("tpusim-mv");
  const std::string model = dir / "matvec.json";
  std::ofstream(model) << nlohmann::json{
      {"name", "matvec"},
      {"input", {1, 1, kDenseK}},
      {"layers",
       {{{"class_name", "Flatten"}, {"config", {{"name", "flatten"}}}},
        {{"class_name", "Dense"},
         {"config", {{"name", "dense"}, {"units", kDenseN}, {"activation", "linear"}}}}}}};
  sim::RunOptions o;
  o.model = model;
  o.images = kDenseBatches * cfg.tensor_cores;
  o.batch = cfg.tensor_cores;
  o.trace = dir / "trace.json";
  const auto r = sim::run_workload(cfg, o);
  EXPECT_TRUE(r["accuracy"]["bit_exact"].get<bool>()) << cfg.name;

  DenseRun d;
  const std::size_t tiles_per_core =
      ((kDenseK + cfg.mxu.rows - 1) / cfg.mxu.rows) * ((kDenseN + cfg.mxu.cols - 1) / cfg.mxu.cols);
  d.weight_bytes = cfg.tensor_cores * double{kDenseK} * kDenseN * size_of(cfg.mxu.input_type);
  d.link_bytes = (r["totals"]["bytes"]["host_link_in"].get<double>() -
                  r["load"]["bytes_host_link"].get<double>()) /
                 kDenseBatches;
  d.shift_roof = static_cast<double>(tiles_per_core) / cfg.mxu.count * cfg.mxu.rows;
  // Per core (a trace process): its multiplies' end cycles; every batch has one per tile.
  const auto trace = nlohmann::json::parse(test::read_file(o.trace));
  std::map<int, std::vector<double>> ends;
  d.first_fetch = 1e300;
  for (const auto& ev : trace["traceEvents"]) {
    // Not every slice has a layer (the load, the steps): look, never index a const json blindly.
    if (ev.value("ph", "") != "X" || !ev.contains("args") ||
        ev["args"].value("layer", "") != "dense")
      continue;
    if (ev["cat"] == "matmul") ends[ev["pid"].get<int>()].push_back(ev["args"]["end_cycle"]);
    if (ev["cat"] == "read_weights")
      d.first_fetch = std::min(d.first_fetch, ev["args"]["begin_cycle"].get<double>());
  }
  EXPECT_EQ(ends.size(), cfg.tensor_cores) << cfg.name;
  d.batch_end.assign(kDenseBatches, 0);
  for (auto& [core, v] : ends) {
    EXPECT_EQ(v.size(), kDenseBatches * tiles_per_core) << cfg.name << " core " << core;
    if (v.size() != kDenseBatches * tiles_per_core) continue;
    std::sort(v.begin(), v.end());
    for (std::uint32_t b = 0; b < kDenseBatches; ++b)
      d.batch_end[b] = std::max(d.batch_end[b], v[(b + 1) * tiles_per_core - 1]);
  }
  return d;
}

// Every steady-state period within 1% of `roof` (cycles); the first batch's span recorded.
void expect_periods_on(const ChipConfig& cfg, const DenseRun& d, double roof, const char* bound) {
  using ::testing::Test;
  Test::RecordProperty("bound", bound);
  Test::RecordProperty("first_batch_over_roof",
                       std::to_string((d.batch_end[0] - d.first_fetch) / roof));
  for (std::uint32_t b = 1; b + 1 < kDenseBatches; ++b) {
    const double period = d.batch_end[b + 1] - d.batch_end[b];
    Test::RecordProperty("period_over_roof_" + std::to_string(b), std::to_string(period / roof));
    EXPECT_GE(period, 0.99 * roof) << cfg.name << ": batch " << b + 1;
    EXPECT_LE(period, 1.01 * roof)
        << cfg.name << ": batch " << b + 1 << ", roof " << roof << " cycles (" << bound << ")";
  }
}

// Ideal memory: the roof is the configured bandwidth. Edge's weights cross the host link, which
// also carries each batch's instructions and input, so its bytes are the weights and those.
TEST_P(MatrixVector, BatchOneDenseLandsOnTheWeightStreamingRoof) {
  const ChipConfig cfg = shipped(GetParam());
  const DenseRun d = run_dense(cfg);
  const bool link = cfg.off_chip_memory.kind == MemoryKind::HostLink;
  const double bytes = d.weight_bytes + (link ? d.link_bytes : 0);
  const double bandwidth_roof = bytes / cfg.off_chip_bytes_per_s() * cfg.clock_hz();
  expect_periods_on(cfg, d, std::max(bandwidth_roof, d.shift_roof),
                    bandwidth_roof >= d.shift_roof ? "off-chip bandwidth" : "weight shift");
}

// v1 and Edge are bound by their memory's bandwidth (DDR3, USB), v2 by the weight shift, v3 and
// v4 by HBM bandwidth.
INSTANTIATE_TEST_SUITE_P(ShippedChips, MatrixVector,
                         ::testing::Values("v1", "v2", "v3", "v4", "edge"));

// Structured memory (docs/memory-model.md): a DRAM streams the weights at the sequential
// efficiency E_seq = 1 - (tRFC + tRCD) / tREFI, so its bandwidth roof grows by 1 / E_seq; Edge's
// weights cross USB in packets of P payload bytes and O bytes of framing, (P + O) / P bytes of
// link time per weight byte (the instructions and input cross unframed).
class StructuredMatrixVector : public ::testing::TestWithParam<const char*> {};

TEST_P(StructuredMatrixVector, BatchOneDenseLandsOnTheEfficiencyScaledRoof) {
  const ChipConfig cfg = load_chip_config(
      std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/structured-memory/" + GetParam() + ".json");
  ASSERT_EQ(cfg.off_chip_memory.model, MemoryModel::Structured);
  const DenseRun d = run_dense(cfg);
  const OffChipTimingConfig& t = cfg.off_chip_memory.timing;
  double bytes = 0;
  if (cfg.off_chip_memory.kind == MemoryKind::HostLink) {
    const double p = t.packet_payload_bytes, framing = t.packet_overhead_bytes;
    bytes = d.weight_bytes * (p + framing) / p + d.link_bytes;
  } else {
    bytes = d.weight_bytes / (1 - (t.t_rfc_ns + t.t_rcd_ns) / t.t_refi_ns);
  }
  const double bandwidth_roof = bytes / cfg.off_chip_bytes_per_s() * cfg.clock_hz();
  expect_periods_on(
      cfg, d, std::max(bandwidth_roof, d.shift_roof),
      bandwidth_roof >= d.shift_roof ? "structured off-chip bandwidth" : "weight shift");
}

INSTANTIATE_TEST_SUITE_P(ShippedChips, StructuredMatrixVector,
                         ::testing::Values("v1", "v2", "v3", "v4", "edge"));

}  // namespace
}  // namespace tpu
