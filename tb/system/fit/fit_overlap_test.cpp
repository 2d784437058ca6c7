// `tpusim fit --system S --bucket-bytes N` (docs/systems.md, "Overlap"): the gradient's
// all-reduce in buckets, each issued as soon as the backward pass has finished its gradients, so
// that the links work while the backward pass goes on; --bucket-bytes 0 is the all-reduce after
// the backward pass. Both are checked bit for bit against the reference after every step.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/cli.h"

namespace tpu {
namespace {

namespace fs = std::filesystem;
using test::source;
using ::testing::HasSubstr;

// The tutorial's network on a v3-8, three checked steps of 1,000 images, buckets of `bytes`.
nlohmann::json v3_8(const std::string& bytes, test::CliResult* log = nullptr) {
  const fs::path d = fs::temp_directory_path() / ("tpusim-overlap-" + std::to_string(::getpid()));
  fs::create_directories(d);
  const fs::path file = d / ("fit-" + bytes + ".json");
  const auto r = test::run_tpusim("fit --system " + source("configs/systems/v3-8.json") +
                                  " --steps 3 --batch 1000 --bucket-bytes " + bytes + " --json " +
                                  file.string());
  if (log) *log = r;
  if (r.status != 0) {
    ADD_FAILURE() << r.out;
    return nullptr;
  }
  std::ifstream in(file);
  const auto j = nlohmann::json::parse(in);
  fs::remove_all(d);
  return j;
}

// 256 KiB buckets cut the tutorial's gradient in two: its Dense kernels and biases, finished
// first, all-reduce while the convolutions' gradients are computed. The step is shorter, and on
// a 2 x 2 torus every element's sum is the same whichever bucket it lies in (rings of two), so
// the weights after every step are the same bits with and without buckets: both runs are
// checked against the reference after every step, and their losses agree exactly.
TEST(FitOverlap, BucketsShortenTheStepOnAV3_8AndLeaveTheWeightsBitIdentical) {
  test::CliResult log;
  const auto overlap = v3_8("262144", &log);
  const auto plain = v3_8("0");
  ASSERT_FALSE(overlap.is_null());
  ASSERT_FALSE(plain.is_null());
  EXPECT_EQ(overlap["checked"], true);
  EXPECT_EQ(plain["checked"], true);
  const auto& a = overlap["step"]["last"];
  const auto& b = plain["step"]["last"];
  std::printf(
      "v3-8 tutorial: %.0f cycles with 256 KiB buckets, %.0f without; all-reduce busy "
      "%.0f, exposed %.0f (%.1f%% hidden) against %.0f, %.0f\n",
      a["cycles"].get<double>(), b["cycles"].get<double>(), a["all_reduce"]["cycles"].get<double>(),
      a["all_reduce"]["exposed_cycles"].get<double>(),
      100 * a["all_reduce"]["hidden_share"].get<double>(), b["all_reduce"]["cycles"].get<double>(),
      b["all_reduce"]["exposed_cycles"].get<double>());
  EXPECT_LT(a["cycles"].get<double>(), b["cycles"].get<double>());
  EXPECT_EQ(a["all_reduce"]["buckets"], 2);
  EXPECT_EQ(a["all_reduce"]["overlap"], true);
  EXPECT_EQ(b["all_reduce"]["buckets"], 1);
  EXPECT_EQ(b["all_reduce"]["overlap"], false);
  EXPECT_LT(a["all_reduce"]["exposed_cycles"].get<double>(),
            b["all_reduce"]["exposed_cycles"].get<double>());
  EXPECT_GT(a["all_reduce"]["hidden_share"].get<double>(),
            b["all_reduce"]["hidden_share"].get<double>());
  EXPECT_EQ(
      a["all_reduce"]["hidden_cycles"].get<double>(),
      a["all_reduce"]["cycles"].get<double>() - a["all_reduce"]["exposed_cycles"].get<double>());
  EXPECT_EQ(overlap["epochs"][0]["loss"], plain["epochs"][0]["loss"]);
  EXPECT_EQ(overlap["epochs"][0]["accuracy"], plain["epochs"][0]["accuracy"]);
  // Per step too, and Keras's line says how much was hidden.
  EXPECT_TRUE(overlap["per_step"][0].contains("exposed_all_reduce_cycles"));
  EXPECT_THAT(log.out, HasSubstr("% of it hidden)"));
}

// The default, 25 MiB, is more than the tutorial's whole gradient (3.3 MB): one bucket, the
// program of --bucket-bytes 0.
TEST(FitOverlap, AGradientSmallerThanABucketIsOneAllReduceAfterTheBackwardPass) {
  const fs::path d = fs::temp_directory_path() / ("tpusim-overlap1-" + std::to_string(::getpid()));
  fs::create_directories(d);
  const auto r =
      test::run_tpusim("fit --system " + source("configs/systems/v2-8.json") +
                       " --steps 1 --batch 1000 --no-check --json " + (d / "fit.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream in(d / "fit.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["step"]["last"]["all_reduce"]["bucket_bytes"], 25u << 20);
  EXPECT_EQ(j["step"]["last"]["all_reduce"]["buckets"], 1);
  EXPECT_EQ(j["step"]["last"]["all_reduce"]["overlap"], false);
  fs::remove_all(d);
}

TEST(FitOverlap, BucketBytesOutOfRangeIsOneLineAndStatus2) {
  for (const char* bad : {"-1", "1073741825", "many"}) {
    const auto r = test::run_tpusim("fit --system " + source("configs/systems/v3-8.json") +
                                    " --steps 1 --bucket-bytes " + bad);
    EXPECT_EQ(r.status, 2) << bad << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("--bucket-bytes: Value " + std::string(bad) +
                                 " not in range 0 to 1073741824"));
  }
}

}  // namespace
}  // namespace tpu
