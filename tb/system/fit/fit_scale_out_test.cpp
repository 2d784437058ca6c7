// `tpusim fit --system S --scale-out` (docs/systems.md, "Scale-out"): chip 0 simulated alone, the
// other chips taken as identical replicas and its ICI writes mirrored back to it, against the
// same fit with every chip simulated: the step's cycles within 1%, the chip's own work identical,
// and a report that says it computed no values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/cli.h"

namespace tpu {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using test::source;

struct Case {
  const char* system;
  const char* model;
  int batch;
  const char* optimizer = "adam";
  const char* bucket_bytes = nullptr;  // --bucket-bytes; none: the default
  const char* bn_group = nullptr;      // --bn-group; none: each replica's own statistics
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.system << " " << c.model; }

class FitScaleOut : public ::testing::TestWithParam<Case> {};

// One fit's report, or null after an ADD_FAILURE.
nlohmann::json fit(const Case& c, const std::string& mode, test::CliResult* out = nullptr) {
  const fs::path d = fs::temp_directory_path() / ("tpusim-scale-out-" + std::string(c.system) +
                                                  "-" + std::to_string(::getpid()));
  fs::create_directories(d);
  const fs::path file = d / (mode.empty() ? "every.json" : "scale.json");
  const auto r = test::run_tpusim(
      "fit --system " + source(std::string("configs/systems/") + c.system + ".json") + " --model " +
      source(std::string("configs/models/") + c.model + ".json") + " --steps 2 --batch " +
      std::to_string(c.batch) + " --optimizer " + c.optimizer + " --no-check " + mode +
      (c.bucket_bytes ? std::string(" --bucket-bytes ") + c.bucket_bytes : std::string()) +
      (c.bn_group ? std::string(" --bn-group ") + c.bn_group : std::string()) + " --json " +
      file.string());
  if (out) *out = r;
  if (r.status != 0) {
    ADD_FAILURE() << r.out;
    return nullptr;
  }
  std::ifstream in(file);
  const auto j = nlohmann::json::parse(in);
  fs::remove(file);
  return j;
}

TEST_P(FitScaleOut, TakesTheStepTimeOfEveryChipWithinOnePercent) {
  const Case& c = GetParam();
  const nlohmann::json every = fit(c, "");
  test::CliResult log;
  const nlohmann::json scale = fit(c, "--scale-out", &log);
  ASSERT_FALSE(every.is_null());
  ASSERT_FALSE(scale.is_null());
  EXPECT_EQ(every["mode"], "every_chip");
  EXPECT_EQ(scale["mode"], "scale_out");
  EXPECT_EQ(scale["checked"], false);
  EXPECT_EQ(scale["outputs_computed"], false);  // its values would not be the model's
  EXPECT_EQ(scale["replicas"], every["replicas"]);
  EXPECT_THAT(log.out, HasSubstr("scale-out: timing only"));
  EXPECT_THAT(log.out, Not(HasSubstr("loss:")));
  EXPECT_FALSE(scale["epochs"][0].contains("loss"));

  const auto a = every["step"]["last"], b = scale["step"]["last"];
  const double full = a["cycles"].get<double>(), one = b["cycles"].get<double>();
  std::printf("%s %s: %.0f cycles every chip, %.0f scale-out (%+.3f%%); all-reduce %.0f / %.0f\n",
              c.system, c.model, full, one, 100 * (one / full - 1),
              a["split_cycles"]["communication"].get<double>(),
              b["split_cycles"]["communication"].get<double>());
  EXPECT_NEAR(one, full, 0.01 * full);
  // The all-reduce's work and what the backward pass hid of it (docs/systems.md, "Overlap").
  EXPECT_EQ(b["all_reduce"]["buckets"], a["all_reduce"]["buckets"]);
  EXPECT_NEAR(b["all_reduce"]["exposed_cycles"].get<double>(),
              a["all_reduce"]["exposed_cycles"].get<double>(), 0.01 * full);
  // The chip's own work does not depend on its peers: only the all-reduce may differ, and the
  // update, whose first reads of the all-reduced total and last barrier wait for it.
  for (const char* part : {"infeed", "forward", "loss", "backward"})
    EXPECT_EQ(b["split_cycles"][part], a["split_cycles"][part]) << part;
  EXPECT_NEAR(b["split_cycles"]["update"].get<double>(), a["split_cycles"]["update"].get<double>(),
              0.01 * full);
  EXPECT_GT(b["split_cycles"]["communication"].get<double>(), 0.0);
  // Rates and energy count every chip, the representative's activity taken for each.
  EXPECT_NEAR(b["energy_j"].get<double>(), a["energy_j"].get<double>(),
              0.02 * a["energy_j"].get<double>());
}

INSTANTIATE_TEST_SUITE_P(
    Slices, FitScaleOut,
    ::testing::Values(Case{"v2-8", "fashion_mnist_cnn", 1000},
                      Case{"v3-8", "fashion_mnist_cnn", 1000},
                      Case{"v4-8", "fashion_mnist_cnn", 1000},
                      Case{"v3-32", "fashion_mnist_cnn", 1024}, Case{"v3-8", "resnet_mini", 64},
                      Case{"v3-8", "resnet_mini", 64, "lars"},
                      // Buckets: the all-reduce overlaps the backward pass.
                      Case{"v2-8", "fashion_mnist_cnn", 1000, "adam", "262144"},
                      Case{"v3-8", "fashion_mnist_cnn", 1000, "adam", "262144"},
                      // Distributed BatchNormalization: the groups' all-reduces, rings of one
                      // message a step over the whole v3-8 and over v3-32's rows.
                      Case{"v3-8", "resnet_mini", 64, "adam", nullptr, "8"},
                      Case{"v3-32", "resnet_mini", 128, "adam", nullptr, "8"}),
    [](const auto& p) {
      std::string n = std::string(p.param.system) + "_" + p.param.model;
      if (std::string(p.param.optimizer) != "adam") n += std::string("_") + p.param.optimizer;
      if (p.param.bucket_bytes) n += "_buckets";
      if (p.param.bn_group) n += std::string("_bn_group_") + p.param.bn_group;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

TEST(FitScaleOut, NeedsASystem) {
  const auto r =
      test::run_tpusim("fit --chip " + source("configs/chips/v3.json") + " --steps 1 --scale-out");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--scale-out requires --system"));
}

// --epochs-to-train: Keras's steps per epoch of the dataset at the median step.
TEST(FitTimeToTrain, IsTheEpochsStepsAtTheMedianStep) {
  const fs::path d = fs::temp_directory_path() / ("tpusim-ttt-" + std::to_string(::getpid()));
  fs::create_directories(d);
  const auto r = test::run_tpusim("fit --chip " + source("configs/chips/v3.json") +
                                  " --steps 2 --batch 16 --no-check --epochs-to-train 3 --json " +
                                  (d / "fit.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream in(d / "fit.json");
  const auto j = nlohmann::json::parse(in);
  const auto& t = j["time_to_train"];
  EXPECT_EQ(t["dataset_images"], 60000);
  EXPECT_EQ(t["steps_per_epoch"], 3750);
  EXPECT_EQ(t["steps"], 11250);
  const double step = j["step"]["seconds_median"].get<double>();
  EXPECT_DOUBLE_EQ(t["simulated_seconds"].get<double>(), 11250 * step);
  EXPECT_DOUBLE_EQ(j["step"]["images_per_s"].get<double>(), 16 / step);
  EXPECT_THAT(r.out, HasSubstr("Time to train: 3 epochs of 60000 images = 11250 steps x "));
  fs::remove_all(d);
}

TEST(FitTimeToTrain, RandomInputsNeedTheDatasetsSize) {
  const auto r =
      test::run_tpusim("fit --chip " + source("configs/chips/v3.json") + " --model " +
                       source("configs/models/resnet50.json") + " --steps 1 --epochs-to-train 90");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--epochs-to-train on a model with random inputs needs "
                               "--dataset-images"));
}

}  // namespace
}  // namespace tpu
