// The progress line of `tpusim run` and `tpusim fit` (sw/sim/progress.h): shown on request, and
// the simulation run in slices gives the same report as the one run at once.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "common/cli.h"
#include "common/files.h"
#include "common/temp_dir.h"

namespace tpu {
namespace {

test::CliResult run_with_progress(const char* value, const std::string& args) {
  ::setenv("TPUSIM_PROGRESS", value, 1);
  test::CliResult r = test::run_tpusim(args);
  ::unsetenv("TPUSIM_PROGRESS");
  return r;
}

// The reports with.json and without.json are the same but for the host's wall times.
void expect_the_same_reports(const test::TempDir& tmp) {
  auto a = nlohmann::json::parse(test::read_file(tmp / "with.json"));
  auto b = nlohmann::json::parse(test::read_file(tmp / "without.json"));
  a.erase("host");
  b.erase("host");
  EXPECT_EQ(a, b);
}

TEST(Progress, ARunShowsItsLineClearsItAndReportsWhatARunWithoutItReports) {
  test::TempDir tmp("tpusim-progress");
  const std::string args =
      "run --chip " + test::source("configs/chips/v1.json") + " --images 512 --batch 64 --json ";
  const auto with = run_with_progress("1", args + (tmp / "with.json"));
  ASSERT_EQ(with.status, 0) << with.out;
  const auto without = run_with_progress("0", args + (tmp / "without.json"));
  ASSERT_EQ(without.status, 0) << without.out;

  EXPECT_NE(with.out.find("\rtpusim: run: "), std::string::npos) << with.out;
  EXPECT_NE(with.out.find(" instructions issued, "), std::string::npos) << with.out;
  EXPECT_NE(with.out.find("\r\033[K"), std::string::npos) << "the line is cleared at the end";
  EXPECT_EQ(with.out.find("W571"), std::string::npos) << "no slice without activity: " << with.out;
  EXPECT_EQ(without.out.find("instructions issued"), std::string::npos) << without.out;

  expect_the_same_reports(tmp);
}

// fit: the line says the epoch and step between the Keras log's lines (each of which clears it
// first), and the report is the one a fit without it writes.
TEST(Progress, AFitShowsTheEpochAndStepBetweenItsLogLinesAndReportsWhatAFitWithoutItReports) {
  test::TempDir tmp("tpusim-progress");
  const std::string args = "fit --chip " + test::source("configs/chips/v3.json") +
                           " --epochs 2 --steps-per-epoch 2 --batch 16 --validation-freq 2 --json ";
  const auto with = run_with_progress("1", args + (tmp / "with.json"));
  ASSERT_EQ(with.status, 0) << with.out;
  const auto without = run_with_progress("0", args + (tmp / "without.json"));
  ASSERT_EQ(without.status, 0) << without.out;

  EXPECT_NE(with.out.find("\rtpusim: fit: epoch 1/2, step "), std::string::npos) << with.out;
  EXPECT_NE(with.out.find("\r\033[KEpoch 2/2\n"), std::string::npos)
      << "a log line clears the progress line: " << with.out;
  EXPECT_EQ(with.out.find("W571"), std::string::npos) << with.out;
  EXPECT_EQ(without.out.find("tpusim: fit: epoch"), std::string::npos) << without.out;
  EXPECT_EQ(without.out.find('\r'), std::string::npos) << without.out;
  EXPECT_NE(without.out.find("2/2 - "), std::string::npos) << without.out;

  expect_the_same_reports(tmp);
}

}  // namespace
}  // namespace tpu
