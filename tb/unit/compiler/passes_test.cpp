// The compiler's passes after the rewrites (docs/compiler.md, "Passes"): partitioning over
// cores, tiling, buffer lifetimes from the schedule and the first-fit arena. Expected values come
// from the chip config and the model, never typed in.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "sw/compiler/compiler.h"
#include "sw/compiler/lifetimes.h"
#include "sw/compiler/memory.h"
#include "sw/compiler/partition.h"
#include "sw/compiler/tiling.h"
#include "sw/import/import.h"
#include "sw/nn/weights.h"
#include "unit/import/layer_json.h"

namespace tpu::compiler {
namespace {

using nlohmann::json;
using nn::test::layer;
using ::testing::HasSubstr;

const std::string kChips = std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/";

ir::Graph graph(json layers, json input = {6, 6, 2}) {
  return importers::parse_model(json{{"name", "m"}, {"input", input}, {"layers", layers}},
                                "m.json");
}

nn::QuantizedModel quantized(const ir::Graph& g, const ChipConfig& cfg) {
  std::vector<float> cal(g.input.size(), 1.0f);
  return prepare(g, nn::random_weights(g, 5), cfg.mxu.input_type, cfg.mxu.rows, cal.data(), 1);
}

TEST(Partition, SplitsTheRunsImagesEvenlyOverTheCoresAndEachBatchLikewise) {
  const ChipConfig cfg = load_chip_config(kChips + "v3.json");
  ASSERT_GT(cfg.tensor_cores, 1u);
  const Partition p = partition(cfg, Options{1001, 200});
  ASSERT_EQ(p.images.size(), cfg.tensor_cores);
  EXPECT_EQ(p.images.front().first, 0u);
  EXPECT_EQ(p.images.back().second, 1001u);
  for (std::size_t c = 1; c < p.images.size(); ++c) {
    EXPECT_EQ(p.images[c].first, p.images[c - 1].second);
    const auto share = p.images[c].second - p.images[c].first;
    EXPECT_LE(share, 1001 / cfg.tensor_cores + 1);
  }
  EXPECT_EQ(p.per_core, (200 + cfg.tensor_cores - 1) / cfg.tensor_cores);
}

TEST(Partition, GivesEachMxuTwoAccumulatorSlots) {
  const ChipConfig cfg = load_chip_config(kChips + "v4.json");
  const Partition p = partition(cfg, Options{10, 10});
  EXPECT_EQ(p.acc_slot, cfg.accumulators.entries / (2 * cfg.mxu.count));
}

TEST(Partition, RefusesNoImagesAndAnEmptyBatch) {
  const ChipConfig cfg = load_chip_config(kChips + "v1.json");
  EXPECT_THROW(partition(cfg, Options{0, 8}), InputError);
  EXPECT_THROW(partition(cfg, Options{8, 0}), InputError);
}

TEST(Tiling, CutsKAndNIntoTilesOfTheArraysRowsAndColumns) {
  const ChipConfig cfg = load_chip_config(kChips + "v3.json");
  const std::uint32_t R = cfg.mxu.rows, C = cfg.mxu.cols;
  const std::uint32_t K = 2 * R + 3, N = C + 5;
  const ir::Graph g =
      graph(json::array({layer("Dense", {{"name", "d"}, {"units", N}})}), json{1, 1, K});
  const nn::QuantizedModel q = quantized(g, cfg);
  const Tiling t = tile(q, cfg);
  const WeightedPlan& p = t.plans[0];
  EXPECT_EQ(p.K, K);
  EXPECT_EQ(p.N, N);
  EXPECT_EQ(p.k_tiles, 3u);
  EXPECT_EQ(p.n_tiles, 2u);
  ASSERT_EQ(p.tile_off.size(), 6u);
  // Tile (j = 1, kt = 2): rows 2R.. (3 of them) by columns C.. (5), row-major bf16.
  const std::size_t at = p.tile_off[1 * p.k_tiles + 2];
  for (std::uint32_t k = 0; k < 3; ++k)
    for (std::uint32_t n = 0; n < 5; ++n) {
      std::uint16_t bits = 0;
      std::memcpy(&bits, &t.weights[at + 2 * (k * 5 + n)], 2);
      EXPECT_EQ(bits, q.layers[0].kernel_bf16[(std::size_t{2} * R + k) * N + C + n]);
    }
  for (std::uint64_t off : p.tile_off) EXPECT_EQ(off % kAlign, 0u) << "tiles start aligned";
  EXPECT_EQ(t.params.size(), align(N * kParamRecordBytes));
  EXPECT_EQ(t.params_addr, align(t.weights.size()));
  EXPECT_EQ(t.end, align(t.params_addr + t.params.size()));
}

// The order a round of work items streams the tiles when each column tile is one item: groups
// of mxu.count column tiles, K tile by K tile, so the MXUs' concurrent streams are one
// sequential stream (docs/compiler.md, "Memory"). The last group may be short.
TEST(Tiling, StoresTheTilesInTheOrderTheMxusStreamThem) {
  for (const char* chip : {"v1", "v3", "v4"}) {
    const ChipConfig cfg = load_chip_config(kChips + chip + ".json");
    const std::uint32_t M = cfg.mxu.count, R = cfg.mxu.rows, C = cfg.mxu.cols;
    const std::uint32_t K = 3 * R, N = (M + 1) * C;  // a full group and one column tile more
    const ir::Graph g =
        graph(json::array({layer("Dense", {{"name", "d"}, {"units", N}})}), json{1, 1, K});
    const WeightedPlan p = tile(quantized(g, cfg), cfg).plans[0];
    ASSERT_EQ(p.n_tiles, M + 1) << chip;
    const std::uint64_t tile_bytes = std::uint64_t{R} * C * size_of(cfg.mxu.input_type);
    std::uint64_t next = 0;
    for (std::uint32_t j0 = 0; j0 < p.n_tiles; j0 += M)
      for (std::uint32_t kt = 0; kt < p.k_tiles; ++kt)
        for (std::uint32_t j = j0; j < std::min(p.n_tiles, j0 + M); ++j) {
          EXPECT_EQ(p.tile_off[std::size_t{j} * p.k_tiles + kt], next)
              << chip << ": tile (" << j << ", " << kt << ")";
          next += align(tile_bytes);
        }
  }
}

TEST(Tiling, ParameterRecordsAreBiasMultiplierShiftOnInt8) {
  const ChipConfig cfg = load_chip_config(kChips + "v1.json");
  const ir::Graph g =
      graph(json::array({layer("Conv2D", {{"name", "c"}, {"filters", 4}, {"kernel_size", 3}}),
                         layer("Conv2D", {{"name", "d"}, {"filters", 2}, {"kernel_size", 1}})}));
  const nn::QuantizedModel q = quantized(g, cfg);
  const Tiling t = tile(q, cfg);
  const nn::QuantizedLayer& ql = q.layers[0];
  for (std::size_t c = 0; c < 4; ++c) {
    std::int32_t rec[3];
    std::memcpy(rec, &t.params[t.plans[0].params_off + c * kParamRecordBytes], sizeof rec);
    EXPECT_EQ(rec[0], ql.bias_i32[c]);
    EXPECT_EQ(rec[1], ql.multiplier[c]);
    EXPECT_EQ(rec[2], ql.shift[c]);
  }
}

TEST(Tiling, RefusesWeightsLargerThanOffChipMemory) {
  ChipConfig cfg = load_chip_config(kChips + "v1.json");
  cfg.off_chip_memory.bytes = 4096;
  const ir::Graph g =
      graph(json::array({layer("Dense", {{"name", "d"}, {"units", 256}})}), json{1, 1, 256});
  try {
    tile(quantized(g, cfg), cfg);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("need"));
    EXPECT_THAT(e.what(), HasSubstr("has 4096"));
  }
}

TEST(Tiling, ADepthwiseKernelIsBlockDiagonalAndItsZeroTilesAreNotStored) {
  ChipConfig cfg = load_chip_config(kChips + "v1.json");
  cfg.mxu.rows = cfg.mxu.cols = 8;    // small tiles: several of them, some all zero
  const std::uint32_t C = 16, m = 1;  // each 8-row tile holds 8 channels of one position
  const ir::Graph g =
      graph(json::array({layer("DepthwiseConv2D",
                               {{"name", "dw"}, {"kernel_size", 3}, {"depth_multiplier", m}})}),
            json{6, 6, C});
  const nn::QuantizedModel q = quantized(g, cfg);
  const Tiling t = tile(q, cfg);
  const WeightedPlan& p = t.plans[0];
  const std::uint32_t R = cfg.mxu.rows, N = C * m;
  EXPECT_EQ(p.K, 9 * C);
  EXPECT_EQ(p.N, N);
  std::size_t stored = 0;
  for (std::uint32_t j = 0; j < p.n_tiles; ++j)
    for (std::uint32_t kt = 0; kt < p.k_tiles; ++kt) {
      const std::uint64_t off = p.tile_off[j * p.k_tiles + kt];
      bool diagonal = false;  // does the tile cross the block diagonal?
      for (std::uint32_t k = kt * R; k < std::min(p.K, kt * R + R); ++k)
        for (std::uint32_t n = j * R; n < std::min(N, j * R + R); ++n)
          diagonal = diagonal || n / m == k % C;
      EXPECT_EQ(off != kNoTile, diagonal) << "tile " << j << "," << kt;
      if (off == kNoTile) continue;
      ++stored;
      const std::uint32_t kr = std::min(R, p.K - kt * R), nc = std::min(R, N - j * R);
      for (std::uint32_t k = 0; k < kr; ++k)
        for (std::uint32_t n = 0; n < nc; ++n) {
          const std::uint32_t row = kt * R + k, col = j * R + n;
          const auto v = static_cast<std::int8_t>(t.weights[off + k * nc + n]);
          const std::int8_t want =
              col / m == row % C ? q.layers[0].kernel_i8[(row / C) * N + col] : 0;
          EXPECT_EQ(v, want) << row << "," << col;
        }
    }
  EXPECT_LT(stored, p.tile_off.size()) << "some tiles hold only zeros";
}

TEST(Lifetimes, ATensorLivesUntilItsLastReaderInTheSchedule) {
  const ChipConfig cfg = load_chip_config(kChips + "v3.json");
  // a -> b -> sum(a, b): a is read last by the Add, b too; the Add is the output.
  const ir::Graph g = graph(
      json::array({layer("Conv2D", {{"name", "a"}, {"filters", 2}, {"kernel_size", 1}}),
                   layer("Conv2D", {{"name", "b"}, {"filters", 2}, {"kernel_size", 1}}, {"a"}),
                   layer("Add", {{"name", "sum"}}, {"a", "b"})}));
  const nn::QuantizedModel q = quantized(g, cfg);
  const Lifetimes l = lifetimes(q);
  EXPECT_EQ(l.schedule, (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(l.last_read, (std::vector<std::size_t>{2, 2, ir::kNoOp}));
  EXPECT_EQ(l.output, 2u);
}

TEST(Lifetimes, AViewsReaderKeepsTheViewedTensorAlive) {
  const ChipConfig cfg = load_chip_config(kChips + "v3.json");
  const ir::Graph g =
      graph(json::array({layer("Conv2D", {{"name", "c"}, {"filters", 2}, {"kernel_size", 1}}),
                         layer("Flatten", {{"name", "f"}}, {"c"}),
                         layer("Dense", {{"name", "d"}, {"units", 3}}, {"f"})}));
  const Lifetimes l = lifetimes(quantized(g, cfg));
  EXPECT_EQ(l.last_read[0], 2u) << "the Dense reads the convolution's tensor through the view";
}

TEST(Arena, ReusesTheFirstFreedRangeThatFitsAndJoinsNeighbours) {
  Arena a;
  const auto x = a.alloc(100), y = a.alloc(64), z = a.alloc(10);
  EXPECT_EQ(x, 0u);
  EXPECT_EQ(y, align(100));
  EXPECT_EQ(z, align(100) + 64);
  a.release(x, 100);
  EXPECT_EQ(a.alloc(64), 0u) << "first fit";
  a.release(0, 64);
  a.release(y, 64);
  EXPECT_EQ(a.alloc(align(100) + 64), 0u) << "freed neighbours join into one range";
  EXPECT_EQ(a.high(), align(100) + 64 + kAlign);
}

TEST(SpillHomes, TensorsAliveAtOnceNeverShareAByteAndDeadOnesAreReused) {
  const ChipConfig cfg = load_chip_config(kChips + "v3.json");
  json layers = json::array();
  std::string prev = "";
  for (int k = 0; k < 6; ++k) {
    const std::string name = "c" + std::to_string(k);
    json l = layer("Conv2D", {{"name", name}, {"filters", 2}, {"kernel_size", 1}},
                   prev.empty() ? std::vector<std::string>{} : std::vector<std::string>{prev});
    layers.push_back(l);
    prev = name;
  }
  const ir::Graph g = graph(layers);
  const nn::QuantizedModel q = quantized(g, cfg);
  const Lifetimes l = lifetimes(q);
  const std::uint64_t bytes = 1000;
  const Homes h = spill_homes(q, l, [&](std::size_t) { return bytes; });
  for (std::size_t i = 1; i < g.ops.size(); ++i) {
    // Operation i's tensor and its input's are alive at once.
    const auto a = h.offset[i - 1], b = h.offset[i];
    EXPECT_TRUE(a + align(bytes) <= b || b + align(bytes) <= a) << i;
  }
  EXPECT_EQ(h.bytes, 2 * align(bytes)) << "a chain needs two homes whatever its length";
}

}  // namespace
}  // namespace tpu::compiler
