// End to end: a network compiled, streamed into a simulated chip and checked bit for bit against
// the quantized reference (sw/sim/session). One chip per test (one process each).
#include <gtest/gtest.h>

#include <cmath>

#include "common/cli.h"
#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "sw/sim/session.h"

namespace tpu {
namespace {

using nlohmann::ordered_json;

ChipConfig shipped(const std::string& name) {
  return load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + name + ".json");
}
using test::source;

void expect_bit_exact(const ordered_json& r) {
  ASSERT_TRUE(r.contains("accuracy"));
  EXPECT_TRUE(r["accuracy"]["bit_exact"].get<bool>());
  EXPECT_EQ(r["accuracy"]["mismatches"].get<std::uint64_t>(), 0u);
  if (r["accuracy"].contains("top1")) {
    EXPECT_EQ(r["accuracy"]["top1"].get<double>(), r["accuracy"]["reference_top1"].get<double>());
  }
}

// The report's rows add up: layers to totals, MXU buckets to MXU cycles, energy parts to total.
void expect_consistent(const ordered_json& r, const ChipConfig& cfg) {
  const auto& t = r["totals"];
  double cycles = 0, energy = 0;
  std::uint64_t macs = 0;
  for (const auto& l : r["layers"]) {
    cycles += l["cycles"].get<double>();
    energy += l["energy_j"].get<double>();
    macs += l["macs"].get<std::uint64_t>();
  }
  const auto total_cycles = t["cycles"].get<std::uint64_t>();
  EXPECT_NEAR(cycles, static_cast<double>(total_cycles), 1e-6 * static_cast<double>(total_cycles));
  EXPECT_NEAR(energy, t["energy_j"].get<double>(), 1e-9 * t["energy_j"].get<double>());
  EXPECT_EQ(macs, t["macs"].get<std::uint64_t>());
  std::uint64_t buckets = 0;
  for (const auto& [k, v] : t["mxu_cycles"].items()) buckets += v.get<std::uint64_t>();
  EXPECT_EQ(buckets, total_cycles * cfg.tensor_cores * cfg.mxu.count);
  double parts = 0;
  for (const auto& [k, v] : r["energy"].items()) parts += v.get<double>();
  EXPECT_NEAR(parts, t["energy_j"].get<double>(), 1e-12 * t["energy_j"].get<double>());
  EXPECT_NEAR(r["energy"]["static_j"].get<double>(), cfg.energy.idle_w * t["seconds"].get<double>(),
              1e-12);
  EXPECT_NEAR(
      t["utilization"].get<double>(),
      static_cast<double>(t["macs"].get<std::uint64_t>()) /
          (static_cast<double>(cfg.peak_macs_per_cycle()) * static_cast<double>(total_cycles)),
      1e-12);
}

ordered_json run_cnn(const std::string& chip, std::uint64_t images) {
  sim::RunOptions o;
  o.model = source("configs/models/fashion_mnist_cnn.json");
  o.images = images;
  const ChipConfig cfg = shipped(chip);
  const ordered_json r = sim::run_workload(cfg, o);
  expect_consistent(r, cfg);
  return r;
}

TEST(FashionMnistRun, V1IsBitExactWithTheInt8Reference) { expect_bit_exact(run_cnn("v1", 600)); }
TEST(FashionMnistRun, V2IsBitExactWithTheBf16Reference) { expect_bit_exact(run_cnn("v2", 600)); }
TEST(FashionMnistRun, V3IsBitExactWithTheBf16Reference) { expect_bit_exact(run_cnn("v3", 600)); }
TEST(FashionMnistRun, V4IsBitExactWithTheBf16Reference) { expect_bit_exact(run_cnn("v4", 600)); }
TEST(FashionMnistRun, EdgeIsBitExactWithTheInt8Reference) {
  const ordered_json r = run_cnn("edge", 600);
  expect_bit_exact(r);
  EXPECT_TRUE(r["workload"]["weights_in_unified_buffer"].get<bool>())
      << "Edge keeps parameters in its SRAM instead of streaming them over USB";
}

// A unified buffer far too small for a whole batch forces many micro-batches; the MLP's layers
// are wider and deeper than the array, so every layer is several K and N tiles.
ordered_json run_mlp(ChipConfig cfg) {
  cfg.unified_buffer.bytes = 256 * 1024;
  sim::RunOptions o;
  o.model = source("configs/models/mlp.json");
  o.random_weights = true;
  o.images = 300;
  o.batch = 128;
  const ordered_json r = sim::run_workload(cfg, o);
  EXPECT_LT(r["workload"]["micro_batch_per_core"].get<std::uint64_t>(), o.batch / cfg.tensor_cores)
      << "the schedule must take several passes per batch";
  expect_consistent(r, cfg);
  return r;
}

TEST(LargerModels, MlpWiderThanTheArrayRunsInManyTilesAndPassesBitExactlyOnInt8) {
  expect_bit_exact(run_mlp(shipped("v1")));
}
TEST(LargerModels, MlpWiderThanTheArrayRunsInManyTilesAndPassesBitExactlyOnBf16) {
  expect_bit_exact(run_mlp(shipped("v4")));
}

ordered_json run_conv_mix(const std::string& chip) {
  sim::RunOptions o;
  o.model = source("tb/system/run/data/conv_mix.json");
  o.random_weights = true;
  o.images = 40;
  o.batch = 16;
  const ChipConfig cfg = shipped(chip);
  const ordered_json r = sim::run_workload(cfg, o);
  EXPECT_NE(r["workload"]["inputs"].get<std::string>().find("random inputs"), std::string::npos)
      << "a model whose input is not Fashion-MNIST's runs on generated inputs, and says so";
  expect_consistent(r, cfg);
  return r;
}

TEST(LargerModels, StridedPaddedConvolutionsAndAveragePoolingAreBitExactOnInt8) {
  expect_bit_exact(run_conv_mix("v1"));
}
TEST(LargerModels, StridedPaddedConvolutionsAndAveragePoolingAreBitExactOnBf16) {
  expect_bit_exact(run_conv_mix("v2"));
}
TEST(LargerModels, TheEdgeArrayTilesTheWideConvolutionIntoSeveralColumnTiles) {
  expect_bit_exact(run_conv_mix("edge"));
}

TEST(RunErrors, AModelThatCannotFitNamesTheLayerAndTheSizes) {
  ChipConfig cfg = shipped("v1");
  cfg.unified_buffer.bytes = 16 * 1024;
  sim::RunOptions o;
  o.model = source("configs/models/fashion_mnist_cnn.json");
  o.images = 10;
  try {
    sim::run_workload(cfg, o);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer conv2d"), std::string::npos) << msg;
    EXPECT_NE(msg.find("43264 bytes"), std::string::npos) << "26 x 26 x 64 int8: " << msg;
    EXPECT_NE(msg.find("16384 bytes"), std::string::npos) << msg;
  }
}

TEST(RunErrors, MoreImagesThanTheTestSetHasIsRefused) {
  sim::RunOptions o;
  o.model = source("configs/models/fashion_mnist_cnn.json");
  o.images = 10001;
  EXPECT_THROW(sim::run_workload(shipped("v1"), o), InputError);
}

}  // namespace
}  // namespace tpu
