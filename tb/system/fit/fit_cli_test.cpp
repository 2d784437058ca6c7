// `tpusim fit` as a user runs it (docs/training.md): the tutorial's network trained on every
// training chip with the chip's master weights checked bit for bit against the training reference
// after every step (a mismatch ends the run with status 3), Keras's log, the tpusim.fit/1 report,
// and one clear line for what cannot train.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/cli.h"
#include "common/files.h"
#include "hw/config/chip_config.h"
#include "hw/isa/isa.h"
#include "sw/nn/training_reference.h"

namespace tpu {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using test::source;

// Per process: test runs of several checkouts on one machine must not share directories.
fs::path scratch(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("tpusim-fit-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// What `tpusim fit --chip v3 <args> <option> FILE` writes into FILE (empty, and a failure, when
// it fails); `name` keeps the scratch directories of tests running at once apart.
std::string v3_output(const std::string& name, const std::string& args, const std::string& option) {
  const fs::path d = scratch(name);
  const fs::path file = d / "out";
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") + " " + args +
                                  " " + option + " " + file.string());
  if (r.status != 0) {
    ADD_FAILURE() << r.out;
    return "";
  }
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove_all(d);
  return text;
}

// The tpusim.fit/1 report (null when the run fails).
nlohmann::json v3_report(const std::string& name, const std::string& args) {
  const std::string text = v3_output(name, args, "--json");
  return text.empty() ? nlohmann::json() : nlohmann::json::parse(text);
}

// Each `tpusim fit --chip v3 --steps 1 <args>` is refused with status 2 in one line that holds
// its words.
void expect_refused_in_one_line(std::initializer_list<std::pair<const char*, const char*>> cases) {
  const std::string fit = "fit --chip " + source("configs/chips/v3.json") + " --steps 1 ";
  for (const auto& [args, words] : cases) {
    const auto r = test::run_tpusim(fit + args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr(words)) << args;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
  }
}

class FitChips : public ::testing::TestWithParam<std::string> {};

TEST_P(FitChips, TrainsTheTutorialsNetworkBitExactWithTheReferenceEveryStep) {
  const fs::path d = scratch(GetParam());
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/" + GetParam() + ".json") +
                                  " --epochs 2 --steps-per-epoch 2 --batch 16 --json " +
                                  (d / "fit.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Epoch 1/2\n2/2 - "));
  EXPECT_THAT(r.out, HasSubstr("ms/step (simulated) - loss: "));
  EXPECT_THAT(r.out, HasSubstr("Epoch 2/2\n2/2 - "));
  EXPECT_THAT(r.out, HasSubstr(" - val_loss: "));  // after the last epoch only
  const auto j = read_json(d / "fit.json");
  EXPECT_EQ(j["schema"], "tpusim.fit/1");
  EXPECT_EQ(j["steps"], 4);
  EXPECT_EQ(j["checked"], true);
  EXPECT_EQ(j["replicas"], 2);
  EXPECT_EQ(j["global_batch"], 16);
  ASSERT_EQ(j["epochs"].size(), 2u);
  EXPECT_FALSE(j["epochs"][0].contains("val_loss"));
  EXPECT_TRUE(j["epochs"][1].contains("val_accuracy"));
  EXPECT_GT(j["step"]["cycles_median"].get<double>(), 0.0);
  fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(TrainingChips, FitChips, ::testing::Values("v2", "v3", "v4"));

// Tensors read by two layers: their gradients are sums, the later contribution computed into a
// scratch and added (a Dense's input gradient in residual_mlp; an activation's in
// two_branch_cnn, whose convolution feeds a relu and a sigmoid branch).
class FitSharedTensors : public ::testing::TestWithParam<std::string> {};

TEST_P(FitSharedTensors, TrainBitExactOnEveryTrainingChip) {
  for (const std::string chip : {"v2", "v3", "v4"}) {
    const auto r = test::run_tpusim("fit --chip " + source("configs/chips/" + chip + ".json") +
                                    " --model " + source("tb/system/fit/data/" + GetParam()) +
                                    " --epochs 1 --steps-per-epoch 2 --batch 16"
                                    " --validation-freq 2");  // no validation: Keras's rule
    EXPECT_EQ(r.status, 0) << chip << ": " << r.out;
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("val_loss"))) << chip;
    EXPECT_THAT(r.out, HasSubstr("2/2 - ")) << chip;
  }
}

// Off-chip, a gradient passed to an Add's operand shares its source's home unless a later write
// to one of them (a second contribution, an activation's gradient in place) would change what
// the other still reads: both cases, bit for bit.
TEST_P(FitSharedTensors, TrainBitExactWithTheirTensorsOffChip) {
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") + " --model " +
                                  source("tb/system/fit/data/" + GetParam()) +
                                  " --steps 2 --batch 64 --activations off-chip");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("2/2 - "));
}

INSTANTIATE_TEST_SUITE_P(Models, FitSharedTensors,
                         ::testing::Values("residual_mlp.json", "two_branch_cnn.json"),
                         [](const auto& p) { return p.param.substr(0, p.param.find('.')); });

// ResNet's structure in miniature (configs/models/resnet_mini.json): ZeroPadding2D, strided
// convolutions, BatchNormalization in training mode, a max pool of a padded tensor, projection
// and identity shortcuts; the pass's tensors in the unified buffer, and off-chip, streamed
// through it in chunks of images.
class FitResNetMini : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(FitResNetMini, TrainsBitExactWithTheReferenceEveryStep) {
  const auto& [chip, activations] = GetParam();
  const fs::path d = scratch("resnet-" + chip + "-" + activations);
  const auto r = test::run_tpusim(
      "fit --chip " + source("configs/chips/" + chip + ".json") + " --model " +
      source("configs/models/resnet_mini.json") +
      " --epochs 1 --steps-per-epoch 2 --batch 16 --validation-freq 2 --optimizer momentum "
      "--learning-rate 0.01 --activations " +
      activations + " --json " + (d / "fit.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("2/2 - "));
  const auto j = read_json(d / "fit.json");
  EXPECT_EQ(j["activations"], activations == "off-chip" ? "off_chip" : "unified_buffer");
  EXPECT_EQ(j["checked"], true);
  fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(TrainingChips, FitResNetMini,
                         ::testing::Combine(::testing::Values("v2", "v3", "v4"),
                                            ::testing::Values("unified-buffer", "off-chip")),
                         [](const auto& p) {
                           std::string name = std::get<0>(p.param) + "_" + std::get<1>(p.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Validation of a BatchNormalization model reads its moving statistics, bit for bit against
// the reference's forward.
TEST(FitCli, ABatchNormalizationModelValidatesBitExact) {
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") + " --model " +
                                  source("configs/models/resnet_mini.json") +
                                  " --epochs 1 --steps-per-epoch 1 --batch 500");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(" - val_accuracy: "));
}

// The tutorial's batch with its tensors forced off-chip: each replica's 500 images are one pass,
// every operation's chunks sized to the arena, and the kernels' gradients summed chunk by chunk
// in the order the reference's plan follows.
TEST(FitCli, OffChipTensorsStreamThroughTheUnifiedBufferBitExact) {
  const auto j = v3_report("offchip", "--steps 1 --batch 1000 --activations off-chip");
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["activations"], "off_chip");
  EXPECT_EQ(j["micro_batch"], 500);
  EXPECT_GT(j["activation_bytes"].get<double>(), 16.0 * 1024 * 1024);
  EXPECT_EQ(j["steps"], 1);
  EXPECT_FALSE(j["epochs"][0].contains("val_loss"));  // --steps: no validation
}

// A model whose input is not Fashion-MNIST's trains on seeded random images and labels (as run
// infers on them) and validates on nothing; Keras's batch of 32 by default.
TEST(FitCli, AModelOnOtherInputsTrainsOnRandomImages) {
  const fs::path d = scratch("random");
  std::ofstream(d / "m.json") << R"({"name": "m", "input": [16, 16, 3], "layers": [
    {"class_name": "ZeroPadding2D", "config": {"name": "p", "padding": 3}},
    {"class_name": "Conv2D", "config": {"name": "c", "filters": 8, "kernel_size": [7, 7], "strides": [2, 2]}},
    {"class_name": "BatchNormalization", "config": {"name": "bn"}},
    {"class_name": "Activation", "config": {"name": "r", "activation": "relu"}},
    {"class_name": "GlobalAveragePooling2D", "config": {"name": "g"}},
    {"class_name": "Dense", "config": {"name": "d", "units": 20, "activation": "softmax"}}]})";
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v4.json") + " --model " +
                                  (d / "m.json").string() + " --steps 2 --random-weights --json " +
                                  (d / "fit.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = read_json(d / "fit.json");
  EXPECT_EQ(j["inputs"], "random (seed 1)");
  EXPECT_EQ(j["global_batch"], 32);
  EXPECT_EQ(j["steps"], 2);
  EXPECT_FALSE(j["epochs"][0].contains("val_loss"));
  fs::remove_all(d);
}

TEST(FitCli, StepsExcludesEpochsAndWeightsExcludesRandomWeights) {
  const std::string chip = " --chip " + source("configs/chips/v3.json");
  auto r = test::run_tpusim("fit" + chip + " --steps 2 --epochs 3");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--epochs excludes --steps"));
  r = test::run_tpusim("fit" + chip + " --weights " +
                       source("configs/weights/fashion_mnist_cnn.bin") + " --random-weights");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("excludes"));
}

// A model whose image does not fit the unified buffer, with its tensors held there by force,
// is refused in one line naming the bytes.
TEST(FitCli, TensorsThatDoNotFitTheUnifiedBufferAreRefusedWhenForcedThere) {
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") + " --model " +
                                  source("configs/models/resnet50.json") +
                                  " --steps 1 --batch 2 --activations unified-buffer");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("one image's tensors of a training pass take"));
  EXPECT_THAT(r.out, HasSubstr("16777216-byte unified buffer"));
}

// TPUStrategy on a system: every TensorCore of every chip a replica, the gradients summed by the
// chips over the ICI links; the reference sums them in the same documented order and every
// replica's weights are checked against it after every step.
class FitSystems : public ::testing::TestWithParam<std::string> {};

TEST_P(FitSystems, EveryReplicaTrainsBitExactWithTheReference) {
  const auto sys = read_json(source("configs/systems/" + GetParam() + ".json"));
  const fs::path d = scratch("system-" + GetParam());
  const auto r =
      test::run_tpusim("fit --system " + source("configs/systems/" + GetParam() + ".json") +
                       " --steps 2 --batch 64 --json " + (d / "fit.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("ms/step (simulated: compute "));
  EXPECT_THAT(r.out, HasSubstr("%, all-reduce "));
  const auto j = read_json(d / "fit.json");
  EXPECT_EQ(j["system"]["name"], sys["name"]);
  const auto chips = j["system"]["chips"].get<int>();
  EXPECT_EQ(j["replicas"], j["system"]["tensor_cores"]);
  EXPECT_GT(chips, 1);
  EXPECT_EQ(j["checked"], true);
  // The all-reduce over the chips shows in the step's communication part, and on its links.
  EXPECT_GT(j["step"]["last"]["split_cycles"]["communication"].get<double>(), 0.0);
  EXPECT_GT(j["per_step"][1]["ici_bytes"].get<double>(), 0.0);
  double bytes = 0;
  for (const auto& l : j["step"]["last"]["ici_links"]) {
    EXPECT_GT(l["busy_cycles"].get<double>(), 0.0) << l["link"];
    bytes += l["bytes"].get<double>();
  }
  EXPECT_EQ(bytes, j["per_step"][1]["ici_bytes"].get<double>());
  fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(Slices, FitSystems, ::testing::Values("v2-8", "v3-8", "v4-8", "v3-32"),
                         [](const auto& p) {
                           std::string n = p.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// The tutorial's network with its tensors off-chip on a system: the kernels' running sums are in
// the exchange slots the all-reduce reads.
TEST(FitCli, ASystemTrainsWithItsTensorsOffChip) {
  const auto r = test::run_tpusim("fit --system " + source("configs/systems/v3-8.json") +
                                  " --model " + source("configs/models/resnet_mini.json") +
                                  " --steps 2 --batch 32 --activations off-chip");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("2/2 - "));
}

TEST(FitCli, ChipAndSystemExcludeEachOtherAndOneIsNeeded) {
  auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") + " --system " +
                            source("configs/systems/v3-8.json"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("excludes"));
  r = test::run_tpusim("fit --steps 1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--chip"));
  EXPECT_THAT(r.out, HasSubstr("--system"));
}

// 10,000 test images in global batches of 24: 416 whole batches and 16 images padded to a
// 417th; every image counts once, checked bit for bit against the reference's forward.
TEST(FitCli, ValidationCountsEveryTestImageWhenTheLastBatchIsPartial) {
  const fs::path d = scratch("partial");
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") +
                                  " --epochs 1 --steps-per-epoch 1 --batch 24 --json " +
                                  (d / "fit.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = read_json(d / "fit.json");
  EXPECT_EQ(j["epochs"][0]["val_images"], 10000);
  fs::remove_all(d);
}

// The second convolution's input gradient (stride 2, valid: dY dilated by the stride, read by
// the window with the flipped kernel) feeds the first's kernel gradient, so a mismatch in either
// ends the run with status 3.
class FitTwoConvolutions : public ::testing::TestWithParam<std::string> {};

TEST_P(FitTwoConvolutions, AStridedConvolutionsInputGradientTrainsBitExactEveryStep) {
  const fs::path d = scratch("two-conv-" + GetParam());
  const auto r =
      test::run_tpusim("fit --chip " + source("configs/chips/" + GetParam() + ".json") +
                       " --model " + source("tb/system/fit/data/two_conv.json") +
                       " --epochs 2 --steps-per-epoch 2 --batch 16 --validation-freq 3 --json " +
                       (d / "fit.json").string());  // no validation (FitChips has it): CI's time
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Epoch 2/2\n2/2 - "));
  const auto j = read_json(d / "fit.json");
  EXPECT_EQ(j["steps"], 4);
  EXPECT_EQ(j["checked"], true);
  fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(TrainingChips, FitTwoConvolutions, ::testing::Values("v2", "v3", "v4"));

// A dilated convolution after another: its forward, kernel gradient and input gradient all read
// the window with the dilation.
class FitDilatedConvolution : public ::testing::TestWithParam<std::string> {};

TEST_P(FitDilatedConvolution, ADilatedConvolutionTrainsBitExactEveryStep) {
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/" + GetParam() + ".json") +
                                  " --model " + source("tb/system/fit/data/dilated_conv.json") +
                                  " --epochs 1 --steps-per-epoch 2 --batch 16 --validation-freq 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Epoch 1/1\n2/2 - "));
}

INSTANTIATE_TEST_SUITE_P(TrainingChips, FitDilatedConvolution, ::testing::Values("v2", "v3", "v4"));

TEST(FitCli, SgdAndMomentumStepsAreBitExactToo) {
  for (const std::string opt : {"sgd", "momentum"}) {
    const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") +
                                    " --epochs 1 --steps-per-epoch 3 --batch 8 --optimizer " + opt +
                                    " --learning-rate 0.0001 --validation-freq 2");
    EXPECT_EQ(r.status, 0) << opt << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("3/3 - ")) << opt;
  }
}

// LARS (docs/training.md): ResNet in miniature has kernels the trust ratio scales and decays, and
// biases and BatchNormalization's gamma and beta it leaves to plain momentum; every step is
// checked bit for bit against the reference. The same three steps with learning rate 0 leave
// the weights as they were, so a different loss shows the steps moved them.
TEST(FitLars, StepsBitExactWithTheReferenceAndMovesTheWeights) {
  const std::string args = "--model " + source("configs/models/resnet_mini.json") +
                           " --steps 3 --batch 16 --optimizer lars --learning-rate ";
  const auto moved = v3_report("lars", args + "2");
  const auto still = v3_report("lars-still", args + "0");
  ASSERT_FALSE(moved.is_null());
  ASSERT_FALSE(still.is_null());
  EXPECT_EQ(moved["optimizer"], "LARS");
  // Its hyper-parameters as fp32: the reference's defaults (MLPerf's weight decay, TF's eta).
  const nn::Optimizer defaults;
  EXPECT_EQ(moved["weight_decay"].get<float>(), defaults.weight_decay);
  EXPECT_EQ(moved["lars_eta"].get<float>(), defaults.lars_eta);
  EXPECT_EQ(moved["momentum"].get<float>(), defaults.momentum);
  EXPECT_EQ(moved["checked"], true);
  EXPECT_EQ(moved["steps"], 3);
  EXPECT_NE(moved["epochs"][0]["loss"], still["epochs"][0]["loss"]);
}

// The tutorial's network has kernels of more than one staging piece (its first Dense kernel's
// 802,816 values): their norms are summed over every piece before the first piece steps.
TEST(FitLars, ATensorOfSeveralPiecesStepsWithTheWholeTensorsNorms) {
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") +
                                  " --steps 2 --batch 8 --optimizer lars --learning-rate 0.1 "
                                  "--weight-decay 5e-4 --lars-eta 0.002");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("2/2 - "));
}

// LARS's norm pass reads a tensor of several pieces before its step pass does; on a chip of two
// cores the norm pass sums the cores' slots once and writes the sum back for the step pass, so
// the exchange's work (the communication part of the split) is momentum's, not twice it: the
// tutorial's first Dense kernel is 17 pieces.
TEST(FitLars, ATensorOfSeveralPiecesIsExchangedOnce) {
  const std::string args = " --steps 2 --batch 64 --learning-rate 0.01 --optimizer ";
  const auto lars = v3_report("lars-once", args + "lars");
  const auto momentum = v3_report("momentum-once", args + "momentum");
  ASSERT_FALSE(lars.is_null());
  ASSERT_FALSE(momentum.is_null());
  EXPECT_EQ(lars["checked"], true);
  const auto comm = [](const nlohmann::json& j) {
    return j["step"]["last"]["split_cycles"]["communication"].get<double>();
  };
  EXPECT_EQ(comm(lars), comm(momentum));
}

// --weight-decay and --lars-eta are LARS's: with another optimizer, or out of their range, one
// line and status 2.
TEST(FitLars, ItsFlagsNeedLarsAndAValueInRange) {
  expect_refused_in_one_line(
      {std::pair{"--weight-decay 1e-4",
                 "--weight-decay is LARS's: it needs --optimizer lars "
                 "(not adam)"},
       std::pair{"--optimizer momentum --lars-eta 0.01",
                 "--lars-eta is LARS's: it needs --optimizer lars (not momentum)"},
       std::pair{"--optimizer lars --weight-decay -1",
                 "--weight-decay -1 (must be finite and >= 0)"},
       std::pair{"--optimizer lars --lars-eta 0", "--lars-eta 0 (must be finite and > 0)"},
       std::pair{"--optimizer lars --lars-eta inf", "--lars-eta inf (must be finite and > 0)"},
       std::pair{"--optimizer lars --weight-decay x", "--weight-decay"}});
}

TEST(FitCli, InferenceChipsAreRefusedInOneLine) {
  for (const std::string chip : {"v1", "edge"}) {
    const auto r = test::run_tpusim("fit --chip " + source("configs/chips/" + chip + ".json"));
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr("configs/chips/" + chip + ".json: "));
    EXPECT_THAT(r.out, HasSubstr("is an inference chip (int8 MXU): fit trains on the bf16 chips"));
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
}

TEST(FitCli, ABatchThatDoesNotSplitOverTheTensorCoresIsRefused) {
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") +
                                  " --batch 7 --steps-per-epoch 2");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--batch 7: the global batch must split evenly over the 2 "
                               "TensorCores of tpu-v3"));
}

TEST(FitCli, AModelThatCannotTrainNamesEveryLayerThatCannot) {
  const fs::path d = scratch("model");
  std::ofstream(d / "m.json") << R"({"name": "m", "input": [28, 28, 1], "layers": [
    {"class_name": "Conv2D", "config": {"name": "c", "filters": 4, "kernel_size": [3, 3]}},
    {"class_name": "DepthwiseConv2D", "config": {"name": "dw", "kernel_size": [3, 3]}},
    {"class_name": "Dropout", "config": {"name": "drop", "rate": 0.5}},
    {"class_name": "Flatten", "config": {"name": "f"}},
    {"class_name": "Dense", "config": {"name": "d", "units": 10, "activation": "softmax"}}]})";
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") + " --model " +
                                  (d / "m.json").string());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("m.json: fit cannot train 2 layers:"));
  EXPECT_THAT(r.out, HasSubstr("layer dw (DepthwiseConv2D)"));
  EXPECT_THAT(r.out, HasSubstr("layer drop (Dropout)"));
  fs::remove_all(d);
}

// The step split of the report (docs/training.md, "The report's step split"): every cycle of a
// step lands in exactly one part, so the parts add up to the step's cycles.
TEST(FitReport, StepSplitAddsUpToTheStepsCycles) {
  const auto j = v3_report("split", "--epochs 1 --steps-per-epoch 2 --batch 16");
  ASSERT_FALSE(j.is_null());
  const std::vector<std::string> parts = {"infeed",   "forward",       "loss",
                                          "backward", "communication", "update"};
  ASSERT_EQ(j["per_step"].size(), 2u);
  for (const auto& s : j["per_step"]) {
    double sum = 0;
    ASSERT_EQ(s["split_cycles"].size(), parts.size());
    for (const auto& p : parts) {
      EXPECT_GT(s["split_cycles"][p].get<double>(), 0.0) << p;
      sum += s["split_cycles"][p].get<double>();
    }
    EXPECT_DOUBLE_EQ(sum, s["cycles"].get<double>());
    EXPECT_GT(s["tflops"].get<double>(), 0.0);
    EXPECT_GT(s["utilization"].get<double>(), 0.0);
    EXPECT_LT(s["utilization"].get<double>(), 1.0);
    EXPECT_GT(s["energy_j"].get<double>(), 0.0);
  }
  const auto& last = j["step"]["last"];
  EXPECT_EQ(last["step"], 2);
  EXPECT_EQ(last["cycles"], j["per_step"][1]["cycles"]);
  EXPECT_GT(last["tflops"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(last["energy_j"].get<double>(), j["per_step"][1]["energy_j"].get<double>());
  // The counters restart after every step: each MXU cycle of the last step is in one bucket.
  const auto chip = read_json(source("configs/chips/v3.json"));
  double mxu_cycles = 0;
  for (const auto& [bucket, cycles] : last["mxu_cycles"].items())
    mxu_cycles += cycles.get<double>();
  EXPECT_DOUBLE_EQ(mxu_cycles, last["cycles"].get<double>() * chip["tensor_cores"].get<double>() *
                                   chip["mxu"]["count"].get<double>());
  // The epoch's split and energy are its steps'.
  double epoch_cycles = 0;
  for (const auto& p : parts) epoch_cycles += j["epochs"][0]["split_cycles"][p].get<double>();
  EXPECT_DOUBLE_EQ(epoch_cycles, j["per_step"][0]["cycles"].get<double>() +
                                     j["per_step"][1]["cycles"].get<double>());
  EXPECT_GT(j["epochs"][0]["val_simulated_seconds"].get<double>(), 0.0);
}

// One row per tag of the last step: the tutorial's layers that compute (all but the view and the
// softmax, which the loss absorbs) each have a forward and a backward row, and the rows' cycles
// and energy add up to the step's.
TEST(FitReport, LastStepHasAForwardAndABackwardRowPerLayer) {
  const auto j = v3_report("layers", "--epochs 1 --steps-per-epoch 2 --batch 16");
  ASSERT_FALSE(j.is_null());
  const auto& last = j["step"]["last"];
  for (const std::string layer : {"conv2d", "max_pooling2d", "activation", "dense"})
    for (const std::string phase : {"forward", "backward"}) {
      const auto& rows = last["layers"];
      const auto row = std::find_if(rows.begin(), rows.end(), [&](const auto& x) {
        return x.contains("layer") && x["layer"] == layer && x["phase"] == phase;
      });
      ASSERT_NE(row, rows.end()) << layer << " " << phase;
      EXPECT_GT((*row)["cycles"].get<double>(), 0.0) << layer << " " << phase;
      EXPECT_TRUE(row->contains("energy_j")) << layer << " " << phase;
      EXPECT_TRUE(row->contains("mxu_cycles")) << layer << " " << phase;
    }
  double cycles = 0, energy = 0, macs = 0;
  for (const auto& row : last["layers"]) {
    cycles += row["cycles"].get<double>();
    energy += row["energy_j"].get<double>();
    macs += row["macs"].get<double>();
  }
  EXPECT_NEAR(cycles, last["cycles"].get<double>(), 1e-6);
  EXPECT_NEAR(energy, last["energy_j"].get<double>(), 1e-9 * last["energy_j"].get<double>());
  EXPECT_DOUBLE_EQ(2 * macs, last["flops"].get<double>());
}

TEST(FitReport, MarkdownHasTheEpochsTheSplitAndThePerTagTable) {
  const std::string md =
      v3_output("markdown", "--epochs 1 --steps-per-epoch 2 --batch 16", "--markdown");
  EXPECT_THAT(md, HasSubstr("# fashion_mnist_cnn trained on tpu-v3\n"));
  EXPECT_THAT(md, HasSubstr("| epoch | loss | accuracy |"));
  EXPECT_THAT(md, HasSubstr("## Step 2 (the last)"));
  EXPECT_THAT(md, HasSubstr("\nSteady state (steps 2..2): "));
  EXPECT_THAT(md, HasSubstr("| communication | "));
  EXPECT_THAT(md, HasSubstr("| conv2d (backward) | Conv2D | "));
  // The rates' span and basis (issue 17), the clock recovered from the step's cycles and seconds.
  EXPECT_THAT(md, HasSubstr("| layer | type | span (cycles) | retired (cycles) |"));
  EXPECT_THAT(md, HasSubstr("T ops/s = 2 × G MAC × 10⁹ × 940000000 Hz / span cycles"));
}

// --trace: the first and the last step only, slices named by instruction and layer.
TEST(FitTrace, TracesTheFirstAndTheLastStep) {
  const std::string text =
      v3_output("trace", "--epochs 1 --steps-per-epoch 3 --batch 16", "--trace");
  ASSERT_FALSE(text.empty());
  const auto t = nlohmann::json::parse(text);
  ASSERT_TRUE(t["traceEvents"].is_array());
  std::uint64_t slices = 0;
  bool backward = false, exchange = false, infeed = false;
  std::set<std::uint64_t> core0;  // instruction indices: they count on from step to step
  std::set<std::uint64_t> steps;  // the host's track
  std::uint64_t first_step_begin = 0, load_end = 0, loads = 0, load_bytes = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "step") {
      steps.insert(e["args"]["step"].get<std::uint64_t>());
      if (e["args"]["step"] == 1) first_step_begin = e["args"]["begin_cycle"].get<std::uint64_t>();
      continue;
    }
    if (e["cat"] == "load") {  // the host's model load, from cycle 0
      ++loads;
      EXPECT_EQ(e["args"]["begin_cycle"], 0);
      load_end = e["args"]["end_cycle"].get<std::uint64_t>();
      load_bytes = e["args"]["bytes_host_link"].get<std::uint64_t>();
      continue;
    }
    ++slices;
    const auto layer = e["args"]["layer"].get<std::string>();
    backward |= layer == "dense (backward)";
    exchange |= layer == "gradient exchange";
    infeed |= layer == "infeed";
    if (e["pid"] == 0) core0.insert(e["args"]["instruction"].get<std::uint64_t>());
  }
  EXPECT_GT(slices, 0u);
  EXPECT_EQ(steps, (std::set<std::uint64_t>{1, 3}));
  // The trace covers the fit from cycle 0: the memory image's upload, then (after the setup
  // program) the first step. The upload takes at least its bytes over the host link.
  const ChipConfig cfg = load_chip_config(test::source("configs/chips/v3.json"));
  EXPECT_EQ(loads, 1u);
  EXPECT_GT(load_bytes, 0u);
  EXPECT_GE(
      static_cast<double>(load_end),
      static_cast<double>(load_bytes) / (cfg.host_link.bandwidth_gbps * 1e9) * cfg.clock_hz());
  EXPECT_LE(load_end, first_step_begin);
  EXPECT_TRUE(backward);
  EXPECT_TRUE(exchange);
  EXPECT_TRUE(infeed);
  // The middle step is not traced: core 0's instructions jump over a whole step's worth, a third
  // of the span of the three steps' indices.
  ASSERT_FALSE(core0.empty());
  std::uint64_t jump = 0;
  for (auto it = std::next(core0.begin()); it != core0.end(); ++it)
    jump = std::max(jump, *it - *std::prev(it));
  EXPECT_GT(jump, (*core0.rbegin() - *core0.begin()) / 4);
}

// `tpusim fit <args> --json --trace`: the report and the trace (nulls when the run fails).
std::pair<nlohmann::json, nlohmann::json> traced_fit(const std::string& name,
                                                     const std::string& args) {
  const fs::path d = scratch(name);
  const auto r = test::run_tpusim("fit " + args + " --json " + (d / "fit.json").string() +
                                  " --trace " + (d / "fit.trace.json").string());
  if (r.status != 0) {
    ADD_FAILURE() << r.out;
    return {};
  }
  auto out = std::pair{read_json(d / "fit.json"), read_json(d / "fit.trace.json")};
  fs::remove_all(d);
  return out;
}

// Issue 17: a fit's trace has the run trace's counter tracks for every one of its `cores`, over
// each traced step (docs/trace.md, "The model load and the counters"). Within a step the
// bandwidth counters integrate to the bytes the report counted in it: over the host links all of
// them but the instruction stream's (isa::kInstructionBytes per instruction), to or from off-chip
// memory all but what other chips wrote into it over the ICI (the ring all-reduce writes to
// neighbours only, so that is the links' bytes). Outside the steps every counter is 0.
void expect_counters_integrate_to_each_steps_bytes(const nlohmann::json& j, const nlohmann::json& t,
                                                   std::uint32_t cores) {
  const double us_per_cycle = 1e6 / t["otherData"]["clock_hz"].get<double>();
  std::map<std::uint64_t, std::pair<double, double>> steps;  // step -> [begin, end) in µs
  std::map<std::pair<std::uint32_t, std::string>, std::vector<std::pair<double, double>>> counters;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "step")
      steps[e["args"]["step"].get<std::uint64_t>()] = {
          e["args"]["begin_cycle"].get<double>() * us_per_cycle,
          e["args"]["end_cycle"].get<double>() * us_per_cycle};
    if (e["ph"] == "C")
      counters[{e["pid"].get<std::uint32_t>(), e["name"].get<std::string>()}].emplace_back(
          e["ts"].get<double>(), e["args"]["value"].get<double>());
  }
  ASSERT_FALSE(steps.empty());
  // One sampled span per traced step, from its first cycle to its last.
  const auto& spans = t["otherData"]["counter_spans"];
  ASSERT_EQ(spans.size(), steps.size());
  auto step = steps.begin();
  for (const auto& sp : spans) {
    EXPECT_EQ(sp["begin_cycle"].get<double>() * us_per_cycle, step->second.first);
    EXPECT_EQ(sp["end_cycle"].get<double>() * us_per_cycle, step->second.second);
    ++step;
  }
  // A counter's integral over [t0, t1): each value holds until the next sample.
  auto integral = [](const std::vector<std::pair<double, double>>& v, double t0, double t1) {
    double sum = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double lo = std::max(t0, v[i].first);
      const double hi = std::min(t1, i + 1 < v.size() ? v[i + 1].first : t1);
      if (hi > lo) sum += v[i].second * (hi - lo);
    }
    return sum;
  };
  const char* const names[] = {"host link (GB/s)", "off-chip memory (GB/s)", "MXUs streaming (%)"};
  std::map<std::uint64_t, double> host, mem;  // per step: bytes, every core's
  for (std::uint32_t c = 0; c < cores; ++c)
    for (const std::string name : names) {
      const auto& v = counters[{c, name}];
      ASSERT_GE(v.size(), 2 * steps.size()) << "core " << c << " " << name;
      EXPECT_EQ(v.front().first, steps.begin()->second.first) << "core " << c << " " << name;
      EXPECT_EQ(v.back().second, 0.0) << "core " << c << " " << name;
      for (std::size_t i = 0; i < v.size(); ++i) {
        EXPECT_GE(v[i].second, 0.0) << "core " << c << " " << name;
        if (name == names[2]) {
          EXPECT_LE(v[i].second, 100.0 + 1e-9);
        }
        if (i > 0) {
          EXPECT_LE(v[i - 1].first, v[i].first) << "core " << c << " " << name;
        }
      }
      // 0 before the first traced step, between the traced steps and after the last.
      double gap_from = 0;
      for (const auto& [n, span] : steps) {
        EXPECT_EQ(integral(v, gap_from, span.first), 0.0) << "core " << c << " " << name;
        gap_from = span.second;
        // GB/s × µs = 10³ bytes.
        const double in_step = integral(v, span.first, span.second);
        if (name == names[0]) host[n] += 1e3 * in_step;
        if (name == names[1]) mem[n] += 1e3 * in_step;
        if (name == names[2]) {
          EXPECT_GT(in_step, 0.0) << "core " << c << " step " << n;
        }
      }
      EXPECT_EQ(integral(v, gap_from, 2 * gap_from), 0.0) << "core " << c << " " << name;
    }
  for (const auto& [n, span] : steps) {
    const auto& s = j["per_step"][n - 1];
    const double host_bytes =
        s["bytes_host_link"].get<double>() -
        static_cast<double>(isa::kInstructionBytes) * s["instructions"].get<double>();
    const double mem_bytes = s["bytes_off_chip"].get<double>() - s["ici_bytes"].get<double>();
    EXPECT_GT(host_bytes, 0.0) << "step " << n;
    EXPECT_GT(mem_bytes, 0.0) << "step " << n;
    EXPECT_NEAR(host[n], host_bytes, 1e-6 * host_bytes) << "step " << n;
    EXPECT_NEAR(mem[n], mem_bytes, 1e-6 * mem_bytes) << "step " << n;
  }
}

// The first and the last step of a three-step fit: the last one's instructions begin two
// programs (and the setup's) further on in each core's stream than the first one's.
TEST(FitTrace, CountersIntegrateToEachTracedStepsBytesAndDropToZeroBetween) {
  const auto [j, t] = traced_fit("counters", "--chip " + source("configs/chips/v3.json") +
                                                 " --epochs 1 --steps-per-epoch 3 --batch 16");
  ASSERT_FALSE(j.is_null());
  const ChipConfig cfg = load_chip_config(test::source("configs/chips/v3.json"));
  expect_counters_integrate_to_each_steps_bytes(j, t, cfg.tensor_cores);
}

// --trace on a system: a track per directed ICI link under "ICI links", its slices the intervals
// the link streamed bytes in with the transfers (chips and bytes) that moved them, within the
// traced steps (the host's "training steps" track), and
// per link as busy as the report's last step says (its busy cycles are the exact sum rounded up
// to a whole cycle, so they agree within one).
TEST(FitTrace, ASystemsTraceHasATrackPerIciLinkBusyAsTheReportSays) {
  const auto [j, t] = traced_fit(
      "ici-trace", "--system " + source("configs/systems/v2-8.json") + " --steps 2 --batch 64");
  ASSERT_FALSE(j.is_null());
  const double cycles_per_us = t["otherData"]["clock_hz"].get<double>() / 1e6;

  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> threads;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "M") continue;
    const int pid = e["pid"].get<int>();
    if (e["name"] == "process_name") processes[pid] = e["args"]["name"].get<std::string>();
    if (e["name"] == "thread_name")
      threads[{pid, e["tid"].get<int>()}] = e["args"]["name"].get<std::string>();
  }
  const auto pid_of = [&](const std::string& name) {
    for (const auto& [pid, n] : processes)
      if (n == name) return pid;
    return -1;
  };
  const int host = pid_of("host"), ici = pid_of("ICI links");
  ASSERT_GE(host, 0);
  ASSERT_GE(ici, 0);
  std::map<std::string, int> link_tid;
  for (const auto& [key, name] : threads)
    if (key.first == ici) link_tid[name] = key.second;
  // Every directed link has its track: two directions per link of the system.
  EXPECT_EQ(link_tid.size(), 2 * j["system"]["links"].get<std::size_t>());

  // The traced steps, as the host saw them.
  std::map<std::uint64_t, std::pair<double, double>> steps;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == host && e["cat"] == "step")
      steps[e["args"]["step"].get<std::uint64_t>()] = {e["args"]["begin_cycle"].get<double>(),
                                                       e["args"]["end_cycle"].get<double>()};
  ASSERT_EQ(steps.size(), 2U);
  const auto [last_begin, last_end] = steps.at(2);
  EXPECT_EQ(last_end - last_begin, j["per_step"][1]["cycles"].get<double>());

  std::map<std::string, double> busy, bytes;  // per link, in the last step
  std::size_t slices = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X" || e["pid"] != ici) continue;
    ++slices;
    const auto link = e["args"]["link"].get<std::string>();
    ASSERT_TRUE(link_tid.count(link)) << link;
    EXPECT_EQ(e["tid"], link_tid[link]);
    const auto b = e["args"]["begin_cycle"].get<double>();
    const auto end = e["args"]["end_cycle"].get<double>();
    EXPECT_LT(b, end) << link;
    EXPECT_NEAR(e["ts"].get<double>() * cycles_per_us, b, 1e-6 * end) << link;
    EXPECT_NEAR(e["dur"].get<double>() * cycles_per_us, end - b, 1e-6 * end) << link;
    EXPECT_GT(e["args"]["bytes"].get<double>(), 0.0) << link;
    // The transfers that moved the bytes: the ring all-reduce sends to neighbours only, so each
    // starts at the link's own chip ("chip N +x").
    double moved = 0;
    ASSERT_FALSE(e["args"]["transfers"].empty()) << link;
    for (const auto& tr : e["args"]["transfers"]) {
      const auto from = tr["from"].get<std::uint32_t>(), to = tr["to"].get<std::uint32_t>();
      EXPECT_LT(to, j["system"]["chips"].get<std::uint32_t>()) << link;
      EXPECT_NE(from, to) << link;
      EXPECT_EQ(link.rfind("chip " + std::to_string(from) + " ", 0), 0U)
          << link << " from chip " << from;
      EXPECT_NE(e["name"].get<std::string>().find("chip " + std::to_string(from) + " \u2192 chip " +
                                                  std::to_string(to)),
                std::string::npos)
          << e["name"];
      moved += tr["bytes"].get<double>();
    }
    EXPECT_NEAR(moved, e["args"]["bytes"].get<double>(),
                static_cast<double>(e["args"]["transfers"].size()))
        << link;
    const bool in_a_step = std::any_of(steps.begin(), steps.end(), [&](const auto& s) {
      return b >= s.second.first && end <= s.second.second;
    });
    EXPECT_TRUE(in_a_step) << link << " [" << b << ", " << end << ")";
    if (b >= last_begin && end <= last_end) {
      busy[link] += end - b;
      bytes[link] += e["args"]["bytes"].get<double>();
    }
  }
  EXPECT_GT(slices, 0U);
  const auto& links = j["step"]["last"]["ici_links"];
  ASSERT_GT(links.size(), 0U);
  EXPECT_EQ(busy.size(), links.size());  // the links that carried bytes, and no other
  for (const auto& l : links) {
    const auto name = l["link"].get<std::string>();
    EXPECT_TRUE(link_tid.count(name)) << name;
    EXPECT_NEAR(busy[name], l["busy_cycles"].get<double>(), 1.0) << name;
    EXPECT_NEAR(bytes[name], l["bytes"].get<double>(), 1.0) << name;
  }
  // Every chip's cores have their counters (a replica per core).
  expect_counters_integrate_to_each_steps_bytes(j, t, j["replicas"].get<std::uint32_t>());
}

// ---- big-batch practice: label smoothing and the learning rate's warm-up ----

// Label smoothing (docs/training.md, "Label smoothing"): the chip's xent and the reference take
// the smoothed targets, so every step stays bit-exact. The first step's loss is computed from
// the initial weights, the same logits with and without smoothing: per image the smoothed loss
// is (1 - E)·CE + E·mean_c(-log p_c), and the mean over the classes of -log p_c is at least
// log(classes) (Jensen), so it is at least (1 - E)·CE + E·log(10). --label-smoothing 0 is the
// default's run, loss and cycles alike.
TEST(FitLabelSmoothing, StaysBitExactAndChangesTheLossAsTheFormulaSays) {
  const std::string args = "--steps 1 --batch 8";
  const auto hard = v3_report("smooth-none", args);
  const auto zero = v3_report("smooth-zero", args + " --label-smoothing 0");
  const auto soft = v3_report("smooth-0.1", args + " --label-smoothing 0.1");
  ASSERT_FALSE(hard.is_null());
  ASSERT_FALSE(zero.is_null());
  ASSERT_FALSE(soft.is_null());
  EXPECT_EQ(soft["checked"], true);
  EXPECT_EQ(soft["label_smoothing"].get<float>(), 0.1f);
  EXPECT_FALSE(hard.contains("label_smoothing"));
  EXPECT_EQ(zero["epochs"][0]["loss"], hard["epochs"][0]["loss"]);
  EXPECT_EQ(zero["per_step"][0]["cycles"], hard["per_step"][0]["cycles"]);
  const double ce = hard["epochs"][0]["loss"].get<double>();
  const double smoothed = soft["epochs"][0]["loss"].get<double>();
  EXPECT_NE(smoothed, ce);
  EXPECT_GE(smoothed, (1 - 0.1) * ce + 0.1 * std::log(10.0) - 1e-4 * ce);
  // The prediction is the logits', not the targets': the same accuracy.
  EXPECT_EQ(soft["epochs"][0]["accuracy"], hard["epochs"][0]["accuracy"]);
  // Smoothing adds one vector operation per logit to the loss: the step is no faster.
  EXPECT_GE(soft["per_step"][0]["cycles"].get<double>(),
            hard["per_step"][0]["cycles"].get<double>());
}

// Warm-up (docs/training.md, "Warm-up"): step t runs at lr·t/W until the base rate; the host
// writes each step's rate into the update's record, the reference steps with the same rate, and
// every step is checked bit for bit. A warm-up of one step is no warm-up.
TEST(FitWarmup, EachStepsLearningRateRisesLinearlyAndTheChipStepsWithItBitExact) {
  const std::string args = "--steps 5 --batch 8 --optimizer sgd --learning-rate 0.01";
  const auto warm = v3_report("warmup-4", args + " --warmup-steps 4");
  const auto none = v3_report("warmup-none", args);
  const auto one = v3_report("warmup-1", args + " --warmup-steps 1");
  ASSERT_FALSE(warm.is_null());
  ASSERT_FALSE(none.is_null());
  ASSERT_FALSE(one.is_null());
  EXPECT_EQ(warm["checked"], true);
  EXPECT_EQ(warm["warmup"]["steps"], 4);
  EXPECT_FALSE(warm["warmup"].contains("epochs"));
  ASSERT_EQ(warm["per_step"].size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    const float want =
        i + 1 >= 4 ? 0.01f : static_cast<float>(double{0.01f} * static_cast<double>(i + 1) / 4.0);
    EXPECT_EQ(warm["per_step"][i]["learning_rate"].get<float>(), want) << "step " << i + 1;
  }
  EXPECT_FALSE(none["per_step"][0].contains("learning_rate"));
  // Smaller first steps: a different loss; one step of warm-up: none's, bit for bit.
  EXPECT_NE(warm["epochs"][0]["loss"], none["epochs"][0]["loss"]);
  EXPECT_EQ(one["epochs"][0]["loss"], none["epochs"][0]["loss"]);
}

// --warmup-epochs: floor(epochs x steps per epoch) steps, as MLPerf's reference rounds them; the
// Markdown report says the schedule.
TEST(FitWarmup, EpochsBecomeStepsOfTheRunsEpochs) {
  const std::string args =
      "--epochs 2 --steps-per-epoch 2 --batch 8 --validation-freq 3 --warmup-epochs 1.5 "
      "--learning-rate 0.004";
  const auto j = v3_report("warmup-epochs", args);
  EXPECT_THAT(v3_output("warmup-epochs-md", args, "--markdown"),
              HasSubstr("Warm-up: the learning rate rises linearly over the first 3 steps, step t "
                        "at 0.004 x t / 3, then stays at 0.004"));
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["warmup"]["steps"], 3);
  EXPECT_EQ(j["warmup"]["epochs"], 1.5);
  EXPECT_EQ(j["per_step"][0]["learning_rate"].get<float>(),
            static_cast<float>(double{0.004f} / 3.0));
  EXPECT_EQ(j["per_step"][3]["learning_rate"].get<float>(), 0.004f);
  EXPECT_EQ(j["checked"], true);
}

// Out of range, or both forms of the warm-up: one line naming the flag, status 2.
TEST(FitBigBatch, BadSmoothingAndWarmupAreRefusedInOneLine) {
  expect_refused_in_one_line(
      {std::pair{"--label-smoothing 1", "--label-smoothing 1 (must be in [0, 1))"},
       std::pair{"--label-smoothing -0.1", "--label-smoothing -0.1 (must be in [0, 1))"},
       std::pair{"--label-smoothing x", "--label-smoothing"},
       std::pair{"--warmup-epochs -1", "--warmup-epochs -1 (must be a finite number >= 0)"},
       std::pair{"--warmup-epochs 1 --warmup-steps 2", "excludes --warmup-"},
       std::pair{"--warmup-steps -3", "--warmup-steps"}});
}

// On a system (TPUStrategy): every replica's xent scales its share's gradient by 1/global batch
// with the smoothed targets, the all-reduce sums them, and every replica steps with the host's
// warmed-up rate; LARS, as the big-batch runs train. Every replica checked bit for bit.
TEST(FitBigBatch, ASystemTrainsWithSmoothingAndWarmupBitExact) {
  const fs::path d = scratch("system-big-batch");
  const auto r = test::run_tpusim(
      "fit --system " + source("configs/systems/v3-8.json") +
      " --steps 3 --batch 64 --optimizer lars --learning-rate 0.1 --label-smoothing 0.1 "
      "--warmup-steps 2 --json " +
      (d / "fit.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = read_json(d / "fit.json");
  EXPECT_EQ(j["checked"], true);
  EXPECT_GT(j["replicas"].get<int>(), 2);
  EXPECT_EQ(j["label_smoothing"].get<float>(), 0.1f);
  EXPECT_EQ(j["per_step"][0]["learning_rate"].get<float>(), 0.05f);
  EXPECT_EQ(j["per_step"][2]["learning_rate"].get<float>(), 0.1f);
  fs::remove_all(d);
}

// Distributed BatchNormalization (docs/training.md, "Distributed BatchNormalization"): every
// BatchNormalization's statistics, and its backward's two sums, over a group of replicas — one
// chip's two cores, two chips, the whole v3-8 — all-reduced by the chips in the order the
// reference sums them; every replica checked bit for bit after every step. A larger group
// normalises over more rows, so the loss moves; its all-reduces take time in the step.
TEST(FitDistributedBatchNorm, EveryGroupTrainsBitExactWithTheGroupsStatistics) {
  const fs::path d = scratch("bn-group");
  const auto fit = [&](int group) {
    const fs::path file = d / ("fit-" + std::to_string(group) + ".json");
    const auto r = test::run_tpusim(
        "fit --system " + source("configs/systems/v3-8.json") + " --model " +
        source("configs/models/resnet_mini.json") +
        " --steps 2 --batch 32 --optimizer momentum --learning-rate 0.01 --bn-group " +
        std::to_string(group) + " --json " + file.string() + " --markdown " +
        (d / ("fit-" + std::to_string(group) + ".md")).string());
    EXPECT_EQ(r.status, 0) << group << ": " << r.out;
    return r.status == 0 ? read_json(file) : nlohmann::json();
  };
  const auto alone = fit(1);
  ASSERT_FALSE(alone.is_null());
  EXPECT_FALSE(alone.contains("bn_group"));
  for (int group : {2, 4, 8}) {
    const auto j = fit(group);
    ASSERT_FALSE(j.is_null()) << group;
    EXPECT_EQ(j["checked"], true) << group;
    EXPECT_EQ(j["bn_group"], group);
    // The replica's share, one pass.
    EXPECT_EQ(j["micro_batch"], j["global_batch"].get<int>() / j["replicas"].get<int>()) << group;
    EXPECT_NE(j["epochs"][0]["loss"], alone["epochs"][0]["loss"]) << group;
    EXPECT_GT(j["step"]["last"]["cycles"].get<double>(),
              alone["step"]["last"]["cycles"].get<double>())
        << group;
    // The groups' all-reduces are communication, in a row of their own.
    const auto& rows = j["step"]["last"]["layers"];
    const auto row = std::find_if(rows.begin(), rows.end(), [](const nlohmann::json& l) {
      return l["name"] == "BatchNormalization group sums";
    });
    ASSERT_NE(row, rows.end()) << group;
    EXPECT_EQ((*row)["phase"], "communication");
    EXPECT_GT((*row)["cycles"].get<double>(), 0.0);
    EXPECT_THAT(test::read_file((d / ("fit-" + std::to_string(group) + ".md")).string()),
                HasSubstr("statistics over groups of " + std::to_string(group) + " replicas"));
  }
  fs::remove_all(d);
}

// One chip's two cores make a group on a chip alone.
TEST(FitDistributedBatchNorm, AChipsCoresMakeAGroup) {
  const auto j = v3_report("bn-chip", "--model " + source("configs/models/resnet_mini.json") +
                                          " --steps 2 --batch 16 --bn-group 2");
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["checked"], true);
  EXPECT_EQ(j["bn_group"], 2);
}

TEST(FitDistributedBatchNorm, AGroupThatDoesNotSplitTheReplicasIsRefusedInOneLine) {
  const std::string mini = " --model " + source("configs/models/resnet_mini.json");
  expect_refused_in_one_line(
      {std::pair{"--bn-group 2", "has no BatchNormalization whose statistics a group could share"},
       std::pair{"--bn-group 0", "--bn-group"}});
  const std::string four = "--bn-group 4" + mini;
  // A group's statistics are over every replica's whole share: one pass, which the unified
  // buffer cannot hold here (auto takes the tensors off-chip).
  const std::string forced = "--bn-group 2 --batch 1024 --activations unified-buffer" + mini;
  expect_refused_in_one_line(
      {std::pair{four.c_str(), "--bn-group 4: a group must be a divisor of the 2 replicas"},
       std::pair{forced.c_str(), "takes a replica's 512 images in one pass"}});
  const auto r = test::run_tpusim("fit --system " + source("configs/systems/v3-8.json") + mini +
                                  " --steps 1 --bn-group 3");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--bn-group 3: a group must be a divisor of the 8 replicas"));
}

}  // namespace
}  // namespace tpu
