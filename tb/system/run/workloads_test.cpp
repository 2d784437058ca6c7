// Workloads beyond the Fashion-MNIST CNN, end to end (sw/sim/session): a ResNet-50
// bottleneck block on an int8 and a bf16 chip, with its activations in the unified buffer and
// spilled to off-chip memory; a Keras model.to_json() document; SCALE-Sim topology CSVs; and a
// layer the chip cannot run, refused by name before simulating. One chip per test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/cli.h"
#include "common/files.h"
#include "common/temp_dir.h"
#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "sw/compiler/rewrite.h"
#include "sw/import/import.h"
#include "sw/ir/graph.h"
#include "sw/sim/session.h"

namespace tpu {
namespace {

using nlohmann::ordered_json;
using ::testing::HasSubstr;

ChipConfig shipped(const std::string& name) {
  return load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + name + ".json");
}
using test::source;

sim::RunOptions options(const std::string& model, std::uint64_t images) {
  sim::RunOptions o;
  o.model = source(model);
  o.random_weights = true;
  o.images = images;
  o.batch = static_cast<std::uint32_t>(images);
  return o;
}

// Bit-exact with the quantized reference; one row per model layer (after setup) in model order,
// the rows adding up to the totals.
void expect_exact_with_rows(const ordered_json& r, const ir::Graph& m) {
  ASSERT_TRUE(r.contains("accuracy"));
  EXPECT_TRUE(r["accuracy"]["bit_exact"].get<bool>());
  const auto& rows = r["layers"];
  ASSERT_EQ(rows.size(), m.ops.size() + 1);
  double cycles = 0;
  std::uint64_t macs = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i > 0) {
      EXPECT_EQ(rows[i]["name"].get<std::string>(), m.ops[i - 1].name);
      EXPECT_EQ(rows[i]["macs"].get<std::uint64_t>(),
                m.ops[i - 1].macs() * r["workload"]["images"].get<std::uint64_t>());
    }
    cycles += rows[i]["cycles"].get<double>();
    macs += rows[i]["macs"].get<std::uint64_t>();
  }
  const auto total = r["totals"]["cycles"].get<std::uint64_t>();
  EXPECT_NEAR(cycles, static_cast<double>(total), 1e-6 * static_cast<double>(total));
  EXPECT_EQ(macs, r["totals"]["macs"].get<std::uint64_t>());
}

const ordered_json& row(const ordered_json& r, const std::string& name) {
  for (const auto& l : r["layers"])
    if (l["name"] == name) return l;
  ADD_FAILURE() << "no row " << name;
  return r["layers"][0];
}

ordered_json run_block(const ChipConfig& cfg) {
  const sim::RunOptions o = options("configs/models/resnet50_block.json", 4);
  const ordered_json r = sim::run_workload(cfg, o);
  expect_exact_with_rows(r, importers::load_model(o.model));
  EXPECT_EQ(row(r, "conv2_block1_2_bn")["macs"].get<std::uint64_t>(), 0u)
      << "a folded normalisation does no work of its own";
  return r;
}

TEST(ResNetBlock, V1RunsTheBottleneckBlockBitExactlyInInt8) { run_block(shipped("v1")); }
TEST(ResNetBlock, V3RunsTheBottleneckBlockBitExactlyInBf16) { run_block(shipped("v3")); }

// A unified buffer smaller than one image's tensors: every layer reads its inputs from off-chip
// memory and writes its output back, and still matches the reference bit for bit.
TEST(ResNetBlock, ActivationsSpillToOffChipMemoryWhenTheUnifiedBufferIsTooSmall) {
  ChipConfig cfg = shipped("v3");
  cfg.unified_buffer.bytes = 6 * 1024 * 1024;
  const ordered_json r = run_block(cfg);
  EXPECT_GT(row(r, "conv2_block1_add")["bytes_off_chip"].get<std::uint64_t>(), 0u)
      << "the Add reads both operands from off-chip memory";
  EXPECT_LE(r["workload"]["unified_buffer_bytes_used"].get<std::uint64_t>(),
            cfg.unified_buffer.bytes);
}

// `images` of the model in tb/system/run/data on a shipped chip: bit-exact, one row per layer.
void run_exact(const std::string& model, std::uint64_t images, const std::string& chip) {
  const sim::RunOptions o = options("tb/system/run/data/" + model, images);
  // The report's rows are the layers that run: Dropout and its kin leave before (rewrite.h).
  expect_exact_with_rows(sim::run_workload(shipped(chip), o),
                         compiler::remove_identities(importers::load_model(o.model)));
}

TEST(KerasToJsonRun, FunctionalModelIsBitExactOnInt8) {
  run_exact("keras_functional.json", 12, "v1");
}
TEST(KerasToJsonRun, FunctionalModelIsBitExactOnBf16) {
  run_exact("keras_functional.json", 12, "v4");
}

// keras_functional.json with identities where Keras users put them: a Dropout after an
// activation, a SpatialDropout2D on one operand of the Add, a GaussianNoise on the input and a
// Dropout as the model's output.
nlohmann::json with_dropouts() {
  auto doc =
      nlohmann::json::parse(test::read_file(source("tb/system/run/data/keras_functional.json")));
  auto& layers = doc["config"]["layers"];
  auto insert_before = [&](const std::string& reader, const std::string& cls,
                           const std::string& name) {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      if (layers[i]["config"]["name"] != reader) continue;
      nlohmann::json& node = layers[i]["inbound_nodes"][0][0];
      nlohmann::json drop = {{"class_name", cls},
                             {"config", {{"name", name}, {"rate", 0.25}}},
                             {"inbound_nodes", {{{node[0], 0, 0, nlohmann::json::object()}}}}};
      if (cls == "GaussianNoise") drop["config"] = {{"name", name}, {"stddev", 0.1}};
      node[0] = name;
      layers.insert(layers.begin() + static_cast<std::ptrdiff_t>(i), drop);
      return;
    }
    ADD_FAILURE() << "no layer " << reader;
  };
  insert_before("conv1_pad", "GaussianNoise", "noise");
  insert_before("pool1_pad", "Dropout", "drop_after_relu");
  insert_before("block_add", "SpatialDropout2D", "spatial_drop");
  const std::string last = layers.back()["config"]["name"];
  layers.push_back({{"class_name", "Dropout"},
                    {"config", {{"name", "drop_out"}, {"rate", 0.5}}},
                    {"inbound_nodes", {{{last, 0, 0, nlohmann::json::object()}}}}});
  doc["config"]["output_layers"] = {{"drop_out", 0, 0}};
  return doc;
}

// Dropout and its kin are the identity at inference: the model runs bit-exactly and costs
// exactly what the same model without them costs, on an int8 and a bf16 chip. Two runs, so two
// processes of the tpusim binary (one simulation per process).
void expect_dropouts_change_nothing(const std::string& chip) {
  test::TempDir dir("tpusim-dropout");
  const std::string with = dir / "with_dropouts.json";
  test::write_file(with, with_dropouts().dump());
  auto run = [&](const std::string& model, const std::string& report) {
    const auto r =
        test::run_tpusim("run --chip " + source("configs/chips/" + chip + ".json") + " --model " +
                         model + " --random-weights --images 6 --batch 6 --json " + report);
    EXPECT_EQ(r.status, 0) << r.out;
    return nlohmann::json::parse(test::read_file(report));
  };
  const auto plain = run(source("tb/system/run/data/keras_functional.json"), dir / "plain.json");
  const auto r = run(with, dir / "with.json");
  EXPECT_TRUE(r["accuracy"]["bit_exact"].get<bool>());
  EXPECT_EQ(r["totals"], plain["totals"]);
  EXPECT_EQ(r["layers"], plain["layers"]);
  EXPECT_EQ(r["accuracy"], plain["accuracy"]);
}

// Reshape into a Dense, out of it into a convolution, and into a sequence: views of one
// tensor, bit-exact on an int8 and a bf16 chip.
// Keras's ReLU and Softmax layers (and a Dropout) in a Sequential to_json().
TEST(KerasToJsonRun, ActivationLayersAreBitExactOnInt8) {
  run_exact("activation_layers.json", 16, "v1");
}
TEST(KerasToJsonRun, ActivationLayersAreBitExactOnBf16) {
  run_exact("activation_layers.json", 16, "v3");
}

// GlobalMaxPooling2D beside GlobalAveragePooling2D of one tensor, their sum into a Dense.
TEST(GlobalPoolingRun, MaxAndAverageOfOneTensorAreBitExactOnInt8) {
  run_exact("global_pooling.json", 16, "v1");
}
TEST(GlobalPoolingRun, MaxAndAverageOfOneTensorAreBitExactOnBf16) {
  run_exact("global_pooling.json", 16, "v3");
}

TEST(ReshapeRun, ViewsOfOneTensorAreBitExactOnInt8) { run_exact("reshape_mix.json", 16, "v1"); }
TEST(ReshapeRun, ViewsOfOneTensorAreBitExactOnBf16) { run_exact("reshape_mix.json", 16, "v3"); }

TEST(KerasToJsonRun, DropoutsAreTheIdentityAtInferenceOnInt8) {
  expect_dropouts_change_nothing("v1");
}
TEST(KerasToJsonRun, DropoutsAreTheIdentityAtInferenceOnBf16) {
  expect_dropouts_change_nothing("v3");
}

// A softmax across more outputs than an MXU has columns: Activate normalizes one column tile,
// so the compiler activates each tile to fp32 logits and adds one softmax over the whole rows.
// Bit-exact with the reference's row-wide softmax, on an int8 chip (256 columns, 4 tiles) and a
// bf16 chip (128 columns, 8 tiles).
void run_wide_softmax(const std::string& chip) {
  const ChipConfig cfg = shipped(chip);
  const sim::RunOptions o = options("tb/system/run/data/wide_softmax.json", 16);
  const ir::Graph m = importers::load_model(o.model);
  ASSERT_GT(m.ops.back().out.c, cfg.mxu.cols) << "the test needs logits wider than a tile";
  const ordered_json r = sim::run_workload(cfg, o);
  expect_exact_with_rows(r, m);
}
TEST(WideSoftmax, AcrossColumnTilesIsBitExactOnInt8) { run_wide_softmax("v1"); }
TEST(WideSoftmax, AcrossColumnTilesIsBitExactOnBf16) { run_wide_softmax("v2"); }

ordered_json run_topology(const std::string& chip, const std::string& csv) {
  sim::RunOptions o = options("configs/models/fashion_mnist_cnn.json", 4);
  o.random_weights = false;
  o.topology = source("tb/system/run/data/" + csv);
  const ordered_json r = sim::run_workload(shipped(chip), o);
  expect_exact_with_rows(r, importers::load_model(o.topology));
  EXPECT_EQ(r["workload"]["model_file"].get<std::string>(), o.topology);
  return r;
}

TEST(TopologyRun, ScaleSimConvolutionRowsEachReadTheirOwnInputFromOffChipMemory) {
  const ordered_json r = run_topology("v1", "scalesim_conv.csv");
  EXPECT_GT(row(r, "Conv2")["bytes_off_chip"].get<std::uint64_t>(), 0u);
  EXPECT_GT(row(r, "CB2a_1")["macs"].get<std::uint64_t>(), 0u);
}
TEST(TopologyRun, ScaleSimGemmRowsRunOnBf16) { run_topology("v3", "scalesim_gemm.csv"); }

// Depthwise convolutions (multiplier 2 with a BatchNormalization and a ReLU6 after it; stride 2
// behind a ZeroPadding2D) and a SeparableConv2D beside a 1x1 convolution, into an Add: the MXU
// multiplies the block-diagonal kernel, the reference sums each channel's taps tile by tile.
TEST(DepthwiseRun, DepthwiseAndSeparableConvolutionsAreBitExactOnInt8) {
  run_exact("depthwise_mix.json", 16, "v1");
}
TEST(DepthwiseRun, DepthwiseAndSeparableConvolutionsAreBitExactOnBf16) {
  run_exact("depthwise_mix.json", 16, "v3");
}

// Dilated windows (a Conv2D with "same" padding, a depthwise convolution dilated unevenly, a
// strided one): set_window's dilation on the chip, the reference's own taps.
TEST(DilationRun, DilatedConvolutionsAreBitExactOnInt8) { run_exact("dilated_mix.json", 16, "v1"); }
TEST(DilationRun, DilatedConvolutionsAreBitExactOnBf16) { run_exact("dilated_mix.json", 16, "v3"); }

// Token ids through an Embedding: the DMA gathers the table's rows from off-chip memory.
TEST(EmbeddingRun, GatheredRowsAreBitExactOnInt8) { run_exact("embedding_mix.json", 20, "v1"); }
TEST(EmbeddingRun, GatheredRowsAreBitExactOnBf16) { run_exact("embedding_mix.json", 20, "v3"); }

// The vector unit's other layers: Concatenate (strided copies), LeakyReLU, ELU, PReLU and a
// sigmoid standalone (map), a BatchNormalization after pooling (a per-channel map), "same" max
// and average pooling, Multiply and Subtract (eltwise), and on int8 chips the sigmoid and tanh
// of weighted layers before the last split into maps.
TEST(VectorRun, MapsCopiesAndElementwiseLayersAreBitExactOnInt8) {
  run_exact("vector_mix.json", 16, "v1");
}
TEST(VectorRun, MapsCopiesAndElementwiseLayersAreBitExactOnBf16) {
  run_exact("vector_mix.json", 16, "v3");
}

// configs/models/lstm.json: token ids through an Embedding and two stacked LSTMs, each step's
// gates on the MXU and the vector unit.
void run_lstm(const std::string& chip) {
  const sim::RunOptions o = options("configs/models/lstm.json", 4);
  expect_exact_with_rows(sim::run_workload(shipped(chip), o), importers::load_model(o.model));
}
TEST(LstmRun, EmbeddingAndStackedLstmsAreBitExactOnInt8) { run_lstm("v1"); }
TEST(LstmRun, EmbeddingAndStackedLstmsAreBitExactOnBf16) { run_lstm("v3"); }

// What Keras 3's to_json() writes for a Sequential CNN with Dropout and BatchNormalization (one
// folds into a convolution, one follows a ReLU, one follows pooling), on every shipped chip.
class Keras3Sequential : public ::testing::TestWithParam<std::string> {};
TEST_P(Keras3Sequential, RunsBitExact) { run_exact("keras3_sequential.json", 64, GetParam()); }
INSTANTIATE_TEST_SUITE_P(EveryChip, Keras3Sequential,
                         ::testing::Values("v1", "v2", "v3", "v4", "edge"));

// MobileNetV2 as keras.applications builds it (configs/models/mobilenet_v2.py): 17 inverted
// residual blocks of depthwise convolutions, ReLU6 and linear bottlenecks.
void run_mobilenet(const std::string& chip) {
  const sim::RunOptions o = options("configs/models/mobilenet_v2.json", 2);
  const ordered_json r = sim::run_workload(shipped(chip), o);
  expect_exact_with_rows(r, importers::load_model(o.model));
  EXPECT_LT(r["totals"]["utilization"].get<double>(), 0.5)
      << "utilization counts the network's MACs, not the zeros of a depthwise kernel";
}
TEST(MobileNetV2, RunsBitExactOnInt8) { run_mobilenet("v1"); }
TEST(MobileNetV2, RunsBitExactOnBf16) { run_mobilenet("v3"); }

TEST(Refusals, ALayerTheChipCannotRunStopsTheRunWithItsName) {
  sim::RunOptions o = options("tb/system/run/data/keras_functional.json", 2);
  const std::string path = std::string(TPUSIM_BINARY_DIR) + "/softmax_mid_network.json";
  {
    // A softmax that no weighted layer at the end of the network can take.
    nlohmann::json doc = nlohmann::json::parse(R"({"name": "s", "input": [4, 4, 1], "layers": [
        {"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 1}},
        {"class_name": "MaxPooling2D", "config": {"name": "p"}},
        {"class_name": "Activation", "config": {"name": "squash", "activation": "softmax"}},
        {"class_name": "Flatten", "config": {"name": "f"}},
        {"class_name": "Dense", "config": {"name": "d", "units": 2}}]})");
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    const std::string text = doc.dump();
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  o.model = path;
  try {
    sim::run_workload(shipped("v1"), o);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer squash"));
    EXPECT_THAT(e.what(), HasSubstr("softmax"));
  }
}

}  // namespace
}  // namespace tpu
