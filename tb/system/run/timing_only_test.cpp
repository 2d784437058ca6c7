// `--timing-only` of `run`, `compare` and `sweep` as a user runs them (docs/timing-model.md,
// "Timing-only mode"): the report of a full run, cycle for cycle and byte for byte, less the
// accuracy, and saying "outputs_computed": false. Every shipped chip x golden workload is
// compared the same way by GoldenTimingOnly.* (tb/golden/golden.py timing-only).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/cli.h"
#include "common/files.h"
#include "common/temp_dir.h"

namespace tpu {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

using test::source;

// `tpusim run --chip configs/chips/<chip>.json <args> --json FILE`'s report, host times dropped.
json run_report(const test::TempDir& tmp, const std::string& chip, const std::string& args,
                test::CliResult* result = nullptr) {
  const std::string file = tmp / "run.json";
  const auto r = test::run_tpusim("run --chip " + source("configs/chips/" + chip + ".json") + " " +
                                  args + " --json " + file);
  if (result) *result = r;
  if (r.status != 0) {
    ADD_FAILURE() << r.out;
    return json();
  }
  json j = json::parse(test::read_file(file));
  j.erase("host");
  return j;
}

// A gather's rows lie where its indices say; timing only reads row 0 for every index without
// reading the indices. Every row is its own transfer of the same bytes, so the cycles are the
// same as with the real indices (checked here against a full, bit-exact run).
TEST(RunTimingOnly, AGatherReadsRowZeroForEveryIndexInTheSameCycles) {
  test::TempDir tmp("tpusim-timing-gather");
  const std::string args = "--model " + source("tb/system/run/data/embedding_mix.json") +
                           " --random-weights --images 20";
  for (const std::string chip : {"v1", "v3"}) {
    json full = run_report(tmp, chip, args);
    json timing = run_report(tmp, chip, args + " --timing-only");
    ASSERT_TRUE(full.contains("accuracy")) << chip;
    EXPECT_TRUE(full["accuracy"]["bit_exact"].get<bool>()) << chip;
    EXPECT_GT(full["totals"]["bytes"]["off_chip_read"].get<double>(), 0.0) << chip;
    full.erase("accuracy");
    EXPECT_EQ(timing["outputs_computed"], false) << chip;
    timing.erase("outputs_computed");
    EXPECT_EQ(full, timing) << chip;
  }
}

// The summary says what was not computed; the report has no accuracy block (docs/report.md).
TEST(RunTimingOnly, TheSummaryAndTheReportSayTheOutputsWereNotComputed) {
  test::TempDir tmp("tpusim-timing-summary");
  test::CliResult r;
  const json j = run_report(tmp, "v3", "--images 64 --timing-only", &r);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("outputs     not computed (--timing-only)"));
  EXPECT_EQ(r.out.find("bit-exact"), std::string::npos) << r.out;
  EXPECT_EQ(j["outputs_computed"], false);
  EXPECT_FALSE(j.contains("accuracy"));
  // --no-check says the same thing twice: accepted.
  const json k = run_report(tmp, "v3", "--images 64 --timing-only --no-check");
  EXPECT_EQ(k["totals"], j["totals"]);
}

// compare hands --timing-only to every chip's run, and its table says so.
TEST(CompareTimingOnly, EveryChipRunsTimingOnly) {
  test::TempDir tmp("tpusim-timing-compare");
  const auto r =
      test::run_tpusim("compare --chip " + source("configs/chips/v1.json") + " --chip " +
                       source("configs/chips/v3.json") + " --images 64 -j 2 --timing-only --json " +
                       (tmp / "cmp.json") + " --markdown " + (tmp / "cmp.md"));
  ASSERT_EQ(r.status, 0) << r.out;
  const json cmp = json::parse(test::read_file(tmp / "cmp.json"));
  ASSERT_EQ(cmp["runs"].size(), 2u);
  for (const auto& run : cmp["runs"]) {
    EXPECT_EQ(run["outputs_computed"], false);
    EXPECT_FALSE(run.contains("accuracy"));
  }
  EXPECT_THAT(test::read_file(tmp / "cmp.md"), HasSubstr("| timing only |"));
}

// A timing-only sweep's table is the unchecked sweep's, byte for byte: the same metrics of
// every point, from runs that computed nothing.
TEST(SweepTimingOnly, TheTableIsTheFullSweepsByteForByte) {
  test::TempDir tmp("tpusim-timing-sweep");
  const std::string spec = source("tb/system/sweep/data/small.json");
  auto r = test::run_tpusim("sweep " + spec + " -j 2 --out " + (tmp / "full"));
  ASSERT_EQ(r.status, 0) << r.out;
  r = test::run_tpusim("sweep " + spec + " -j 2 --timing-only --out " + (tmp / "timing"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(test::read_file(tmp / "full/results.csv"), test::read_file(tmp / "timing/results.csv"));
  const json plan = json::parse(test::read_file(tmp / "timing/sweep.json"));
  for (const auto& w : plan["workloads"])
    EXPECT_THAT(w["run_args"].dump(), HasSubstr("--timing-only"));
  const json point = json::parse(test::read_file(tmp / "timing/points/000/cnn.json"));
  EXPECT_EQ(point["outputs_computed"], false);
  // The same directory without the flag is another sweep.
  r = test::run_tpusim("sweep " + spec + " --out " + (tmp / "timing"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("holds a different sweep"));
}

// A sweep that checks every run cannot be timing only.
TEST(SweepTimingOnly, ASpecThatChecksIsRefused) {
  test::TempDir tmp("tpusim-timing-sweep-check");
  json spec = json::parse(test::read_file(source("tb/system/sweep/data/small.json")));
  spec["check"] = true;
  spec["base"] = source("configs/chips/v1.json");
  for (auto& w : spec["workloads"])
    w["model"] = source("configs/models/" + w["model"].get<std::string>().substr(
                                                std::string("../../../../configs/models/").size()));
  test::write_file(tmp / "spec.json", spec.dump());
  const auto r =
      test::run_tpusim("sweep " + (tmp / "spec.json") + " --timing-only --out " + (tmp / "out"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--timing-only computes no outputs to check"));
}

}  // namespace
}  // namespace tpu
