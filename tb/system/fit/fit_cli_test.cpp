// `tpusim fit` as a user runs it (docs/training.md): the tutorial's network trained on every
// training chip with the chip's master weights checked bit for bit against the training reference
// after every step (a mismatch ends the run with status 3), Keras's log, the tpusim.fit/1 report,
// and one clear line for what cannot train.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/cli.h"

namespace tpu {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string source(const std::string& rel) { return std::string(TPUSIM_SOURCE_DIR) + "/" + rel; }

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

INSTANTIATE_TEST_SUITE_P(Models, FitSharedTensors,
                         ::testing::Values("residual_mlp.json", "two_branch_cnn.json"),
                         [](const auto& p) {
                           return p.param.substr(0, p.param.find('.'));
                         });

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
  const auto r = test::run_tpusim(
      "fit --chip " + source("configs/chips/" + GetParam() + ".json") + " --model " +
      source("tb/system/fit/data/two_conv.json") +
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
  const auto r = test::run_tpusim("fit --chip " +
                                  source("configs/chips/" + GetParam() + ".json") + " --model " +
                                  source("tb/system/fit/data/dilated_conv.json") +
                                  " --epochs 1 --steps-per-epoch 2 --batch 16 --validation-freq 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Epoch 1/1\n2/2 - "));
}

INSTANTIATE_TEST_SUITE_P(TrainingChips, FitDilatedConvolution,
                         ::testing::Values("v2", "v3", "v4"));

TEST(FitCli, SgdAndMomentumStepsAreBitExactToo) {
  for (const std::string opt : {"sgd", "momentum"}) {
    const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") +
                                    " --epochs 1 --steps-per-epoch 3 --batch 8 --optimizer " + opt +
                                    " --learning-rate 0.0001 --validation-freq 2");
    EXPECT_EQ(r.status, 0) << opt << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("3/3 - ")) << opt;
  }
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
    {"class_name": "ZeroPadding2D", "config": {"name": "zp", "padding": 1}},
    {"class_name": "Dropout", "config": {"name": "drop", "rate": 0.5}},
    {"class_name": "Flatten", "config": {"name": "f"}},
    {"class_name": "Dense", "config": {"name": "d", "units": 10, "activation": "softmax"}}]})";
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") + " --model " +
                                  (d / "m.json").string());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("m.json: fit cannot train 2 layers:"));
  EXPECT_THAT(r.out, HasSubstr("layer zp (ZeroPadding2D)"));
  EXPECT_THAT(r.out, HasSubstr("layer drop (Dropout)"));
  fs::remove_all(d);
}

}  // namespace
}  // namespace tpu
