// `tpusim fit --timing-only` (docs/training.md, "Timing only"): the same steps as a full run,
// cycle for cycle, byte for byte and joule for joule, with nothing computed: no losses in the
// log or the report, no check, and "outputs_computed": false.
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
using ::testing::HasSubstr;
using ::testing::Not;

using test::source;

struct Fit {
  test::CliResult run;
  nlohmann::json report;
};

// `tpusim fit <args> --json FILE` and its report (null when it fails).
Fit fit(const std::string& name, const std::string& args) {
  const fs::path d =
      fs::temp_directory_path() / ("tpusim-fit-timing-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  Fit f;
  f.run = test::run_tpusim("fit " + args + " --json " + (d / "fit.json").string());
  if (f.run.status == 0) {
    std::ifstream in(d / "fit.json");
    f.report = nlohmann::json::parse(in);
  }
  fs::remove_all(d);
  return f;
}

// A report less what only a computation gives (the losses, the check) and the host's times.
nlohmann::json timing_of(nlohmann::json r) {
  r.erase("host");
  r.erase("checked");
  r.erase("outputs_computed");
  for (auto& e : r["epochs"])
    for (const char* k : {"loss", "accuracy", "val_loss", "val_accuracy"}) e.erase(k);
  return r;
}

// Runs `args` in full and with --timing-only, and requires every step's cycles, split, bytes,
// counts and energy to be the same.
void expect_same_timing(const std::string& name, const std::string& args) {
  const Fit full = fit(name + "-full", args);
  const Fit timing = fit(name + "-timing", args + " --timing-only");
  ASSERT_EQ(full.run.status, 0) << full.run.out;
  ASSERT_EQ(timing.run.status, 0) << timing.run.out;
  EXPECT_EQ(full.report["checked"], true);
  EXPECT_EQ(timing.report["checked"], false);
  EXPECT_EQ(timing.report["outputs_computed"], false);
  EXPECT_FALSE(full.report.contains("outputs_computed"));
  // The figures the issue names, step by step, for a readable failure...
  const auto& fsteps = full.report["per_step"];
  const auto& ts = timing.report["per_step"];
  ASSERT_EQ(fsteps.size(), ts.size());
  for (std::size_t i = 0; i < fsteps.size(); ++i)
    for (const char* k : {"cycles", "split_cycles", "energy_j", "ici_bytes", "tflops"})
      EXPECT_EQ(fsteps[i][k], ts[i][k]) << "step " << i + 1 << ": " << k;
  const auto& fl = full.report["step"]["last"];
  const auto& tl = timing.report["step"]["last"];
  for (const char* k : {"cycles", "bytes", "mxu_cycles", "energy", "instructions", "vector_ops",
                        "weight_tiles", "ici_links"})
    EXPECT_EQ(fl[k], tl[k]) << "last step: " << k;
  // ... and then everything else, the per-tag rows included.
  EXPECT_EQ(timing_of(full.report), timing_of(timing.report));
}

// Every chip of a v3-8 trains (8 replicas, the all-reduce over the ICI links): a timing-only step
// is the checked step's, cycle for cycle.
TEST(FitTimingOnly, ASystemsStepsTakeTheSameCyclesSplitBytesAndEnergyAsAFullRun) {
  expect_same_timing("v3-8",
                     "--system " + source("configs/systems/v3-8.json") + " --steps 2 --batch 64");
}

// LARS's norms (reduce sum_squares over every kernel) and its update cost the same cycles with
// nothing computed; on a system, the replicas' summed gradients are what the norms read.
TEST(FitTimingOnly, LarsStepsTakeTheSameCyclesAsAFullRun) {
  expect_same_timing("lars", "--system " + source("configs/systems/v3-8.json") + " --model " +
                                 source("configs/models/resnet_mini.json") +
                                 " --steps 2 --batch 32 --optimizer lars --learning-rate 0.5");
}

// Tensors off-chip: the kernels' tiles are fetched from off-chip memory row by row (strided),
// activations stream through the unified buffer; none of it is stored, and the timing is the same.
TEST(FitTimingOnly, OffChipTensorsTakeTheSameCyclesWithNothingStored) {
  expect_same_timing("off-chip", "--chip " + source("configs/chips/v3.json") + " --model " +
                                     source("configs/models/resnet_mini.json") +
                                     " --steps 2 --batch 32 --activations off-chip");
}

// Keras's line keeps the simulated time per step and gives its split instead of the losses; the
// validation runs (for its simulated time) without figures; the report says nothing was computed.
TEST(FitTimingOnly, TheLogGivesTheSplitAndNoLossesAndTheReportNoFigures) {
  const Fit f = fit("log", "--chip " + source("configs/chips/v3.json") +
                               " --epochs 1 --steps-per-epoch 1 --batch 24 --timing-only");
  ASSERT_EQ(f.run.status, 0) << f.run.out;
  EXPECT_THAT(f.run.out, HasSubstr("1/1 - "));
  EXPECT_THAT(f.run.out, HasSubstr(" ms/step (simulated: compute "));
  EXPECT_THAT(f.run.out, HasSubstr("timing only, no losses - validation: "));
  EXPECT_THAT(f.run.out, Not(HasSubstr("loss:")));
  EXPECT_THAT(f.run.out, Not(HasSubstr("accuracy")));
  const auto& r = f.report;
  EXPECT_EQ(r["outputs_computed"], false);
  EXPECT_EQ(r["checked"], false);
  const auto& e = r["epochs"][0];
  for (const char* k : {"loss", "accuracy", "val_loss", "val_accuracy"})
    EXPECT_FALSE(e.contains(k)) << k;
  EXPECT_EQ(e["val_images"], 10000);
  EXPECT_GT(e["val_simulated_seconds"].get<double>(), 0.0);
  EXPECT_GT(e["simulated_seconds"].get<double>(), 0.0);
  EXPECT_GT(r["step"]["last"]["energy_j"].get<double>(), 0.0);
}

}  // namespace
}  // namespace tpu
