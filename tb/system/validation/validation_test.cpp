// Validation of the model against first principles (docs/validation.md): a large GEMM whose
// operands sit in the unified buffer keeps every MXU of every core busy, so utilization
// approaches 100% on every shipped chip; a batch-1 dense layer lands on the weight-streaming
// roof.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
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
// array at one tile per `rows` cycles, whichever is slower (docs/validation.md). The layer's span
// is taken from the trace: first weight fetch to last multiply.
// The span of that layer on `cfg`, batch 1 per core.
double dense_span(const ChipConfig& cfg, std::uint32_t k, std::uint32_t n) {
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
  o.images = cfg.tensor_cores;
  o.batch = cfg.tensor_cores;
  o.trace = dir / "trace.json";
  const auto r = sim::run_workload(cfg, o);
  EXPECT_TRUE(r["accuracy"]["bit_exact"].get<bool>()) << cfg.name;
  const auto trace = nlohmann::json::parse(test::read_file(o.trace));
  double begin = 1e300, end = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["args"]["layer"] == "dense" && e["cat"] != "stall") {
      begin = std::min(begin, e["args"]["begin_cycle"].get<double>());
      end = std::max(end, e["args"]["end_cycle"].get<double>());
    }
  return end - begin;
}

TEST_P(MatrixVector, BatchOneDenseLandsOnTheWeightStreamingRoof) {
  const ChipConfig cfg = shipped(GetParam());
  const std::uint32_t k = 4096, n = 4096;
  const double span = dense_span(cfg, k, n);

  const double e = size_of(cfg.mxu.input_type);
  const double tiles_per_core =
      std::ceil(double{k} / cfg.mxu.rows) * std::ceil(double{n} / cfg.mxu.cols);
  const double bytes = cfg.tensor_cores * double{k} * n * e;
  const double bandwidth_roof = bytes / cfg.off_chip_bytes_per_s() * cfg.clock_hz();
  const double shift_roof = tiles_per_core / cfg.mxu.count * cfg.mxu.rows;
  const double roof = std::max(bandwidth_roof, shift_roof);
  RecordProperty("span_over_roof", std::to_string(span / roof));
  RecordProperty("bound", bandwidth_roof >= shift_roof ? "off-chip bandwidth" : "weight shift");
  EXPECT_GE(span, 0.99 * roof) << cfg.name;
  EXPECT_LE(span, 1.05 * roof) << cfg.name << ": bandwidth roof " << bandwidth_roof
                               << " cycles, shift roof " << shift_roof << " cycles";
}

// v1 is bound by DDR3 bandwidth, v2 by the weight shift. v3, v4 and Edge land 17-36% above their
// roof, for reasons docs/validation.md gives; they are not claimed here.
INSTANTIATE_TEST_SUITE_P(ShippedChips, MatrixVector, ::testing::Values("v1", "v2"));

// The same layer on v1 with structured DDR3 (docs/memory-model.md): the weights stream at the
// sequential efficiency E_seq = 1 - (tRFC + tRCD) / tREFI, so the bandwidth roof grows by 1 / E_seq
// and the span lands on that roof, never on the datasheet one. (The other chips' spans with
// structured memory are in docs/memory-model.md; they are not bandwidth bound, or, Edge, not
// within 5% of any roof.)
TEST(StructuredMatrixVector, BatchOneDenseOnV1LandsOnTheRefreshBoundRoof) {
  const ChipConfig cfg =
      load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/structured-memory/v1.json");
  const std::uint32_t k = 4096, n = 4096;
  const double span = dense_span(cfg, k, n);
  const OffChipTimingConfig& t = cfg.off_chip_memory.timing;
  const double e_seq = 1 - (t.t_rfc_ns + t.t_rcd_ns) / t.t_refi_ns;
  const double bytes = cfg.tensor_cores * double{k} * n * size_of(cfg.mxu.input_type);
  const double roof = bytes / cfg.off_chip_bytes_per_s() * cfg.clock_hz() / e_seq;
  RecordProperty("span_over_structured_roof", std::to_string(span / roof));
  EXPECT_GE(span, 0.99 * roof);
  EXPECT_LE(span, 1.02 * roof);
}

}  // namespace
}  // namespace tpu
