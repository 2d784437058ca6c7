// `tpusim compare` and `tpusim run`'s output files, as a user runs them.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "common/cli.h"
#include "common/files.h"
#include "common/temp_dir.h"

namespace tpu {
namespace {

namespace fs = std::filesystem;

std::string chip(const std::string& name) {
  return std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + name + ".json";
}

// compare takes run's workload options, --topology among them, and hands them to each chip's run.
TEST(CompareCli, RunsATopologyOnEachChipAsRunDoes) {
  test::TempDir tmp("tpusim-cli-topology");
  const std::string csv = std::string(TPUSIM_SOURCE_DIR) + "/tb/system/run/data/scalesim_conv.csv";
  const auto r =
      test::run_tpusim("compare --chip " + chip("v1") + " --chip " + chip("v3") + " --topology " +
                       csv + " --images 1 --batch 1 -j 2 --json " + (tmp / "cmp.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto cmp = nlohmann::json::parse(test::read_file(tmp / "cmp.json"));
  ASSERT_EQ(cmp["runs"].size(), 2u);
  for (const auto& run : cmp["runs"]) EXPECT_EQ(run["workload"]["model_file"], csv);
}

TEST(CompareCli, RunsEachChipAndPutsThemSideBySide) {
  test::TempDir tmp("tpusim-cli");
  const auto r = test::run_tpusim(
      "compare --chip " + chip("v1") + " --chip " + chip("edge") + " --images 64 -j 2 --json " +
      (tmp / "cmp.json") + " --markdown " + (tmp / "cmp.md") + " --csv " + (tmp / "cmp.csv"));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto cmp = nlohmann::json::parse(test::read_file(tmp / "cmp.json"));
  EXPECT_EQ(cmp["schema"], "tpusim.compare/1");
  ASSERT_EQ(cmp["runs"].size(), 2u);
  // In the order given, each a full run report, bit-exact with the reference.
  EXPECT_EQ(cmp["runs"][0]["chip"]["name"], "tpu-v1");
  EXPECT_EQ(cmp["runs"][1]["chip"]["name"], "edge-tpu");
  for (const auto& run : cmp["runs"]) {
    EXPECT_EQ(run["schema"], "tpusim.run/1");
    EXPECT_TRUE(run["accuracy"]["bit_exact"].get<bool>());
    EXPECT_EQ(run["workload"]["images"], 64);
  }
  EXPECT_EQ(cmp["workload"]["images"], 64);
  const std::string md = test::read_file(tmp / "cmp.md");
  EXPECT_NE(md.find("| tpu-v1 |"), std::string::npos);
  EXPECT_NE(md.find("| edge-tpu |"), std::string::npos);
  const std::string csv = test::read_file(tmp / "cmp.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);
}

// A system beside a chip (docs/systems.md, "Inference on a system"): its row is named by the
// system and counts every chip's peak; the chip's share of the workload is not the comparison's.
TEST(CompareCli, ASystemRunsBesideAChipAfterTheChips) {
  test::TempDir tmp("tpusim-cli");
  const auto r = test::run_tpusim(
      "compare --system " + std::string(TPUSIM_SOURCE_DIR) + "/configs/systems/v2-8.json" +
      " --chip " + chip("v2") + " --images 16 --batch 8 -j 2 --json " + (tmp / "cmp.json") +
      " --markdown " + (tmp / "cmp.md") + " --csv " + (tmp / "cmp.csv"));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto cmp = nlohmann::json::parse(test::read_file(tmp / "cmp.json"));
  ASSERT_EQ(cmp["runs"].size(), 2u);
  EXPECT_EQ(cmp["runs"][0]["chip"]["name"], "tpu-v2");
  EXPECT_FALSE(cmp["runs"][0].contains("system"));
  EXPECT_EQ(cmp["runs"][1]["system"]["name"], "v2-8");
  EXPECT_EQ(cmp["runs"][1]["workload"]["images_per_chip"], 4);
  EXPECT_FALSE(cmp["workload"].contains("images_per_chip"));
  for (const auto& run : cmp["runs"]) EXPECT_TRUE(run["accuracy"]["bit_exact"].get<bool>());
  EXPECT_DOUBLE_EQ(cmp["runs"][1]["totals"]["peak_ops_per_s"].get<double>(),
                   4 * cmp["runs"][0]["totals"]["peak_ops_per_s"].get<double>());
  const std::string md = test::read_file(tmp / "cmp.md");
  EXPECT_NE(md.find("| v2-8 |"), std::string::npos) << md;
  EXPECT_NE(md.find("## v2-8"), std::string::npos) << md;
  EXPECT_NE(test::read_file(tmp / "cmp.csv").find("v2-8,"), std::string::npos);
}

TEST(CompareCli, ABadChipConfigStopsBeforeAnythingRuns) {
  test::TempDir tmp("tpusim-cli");
  const std::string bad = tmp / "bad.json";
  test::write_file(bad, "{\"name\": 3}");
  const auto r = test::run_tpusim("compare --chip " + chip("v1") + " --chip " + bad +
                                  " --images 16 --json " + (tmp / "cmp.json"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(bad), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("done in"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(tmp / "cmp.json"));
}

TEST(CompareCli, AChipThatCannotRunTheWorkloadIsReportedAndTheOthersStillRun) {
  test::TempDir tmp("tpusim-cli");
  // A valid chip whose unified buffer cannot hold one image's tensors: the compiler refuses.
  const std::string small = tmp / "small.json";
  test::write_file(small, "{\"include\": \"" + chip("v1") +
                              "\", \"unified_buffer\": {\"bytes\": 4096, "
                              "\"bytes_per_cycle\": 256}}");
  const auto r = test::run_tpusim("compare --chip " + chip("v1") + " --chip " + small +
                                  " --images 16 --json " + (tmp / "cmp.json"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("FAILED"), std::string::npos) << r.out;
  const auto cmp = nlohmann::json::parse(test::read_file(tmp / "cmp.json"));
  ASSERT_EQ(cmp["runs"].size(), 1u);
  ASSERT_EQ(cmp["failed"].size(), 1u);
  EXPECT_EQ(cmp["failed"][0]["chip_file"], small);
  EXPECT_NE(cmp["failed"][0]["error"].get<std::string>().find("exit status 2"), std::string::npos);
}

TEST(CompareCli, TwoChipsWithTheSameNameAreToldApartByTheirFiles) {
  test::TempDir tmp("tpusim-cli");
  // A variant that keeps its parent's name: the table and the sections name each file.
  const std::string fast = tmp / "fast.json";
  test::write_file(fast, "{\"include\": \"" + chip("v1") + "\", \"clock_mhz\": 1000}");
  const auto r = test::run_tpusim("compare --chip " + chip("v1") + " --chip " + fast +
                                  " --images 16 --batch 16 --markdown " + (tmp / "cmp.md"));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string md = test::read_file(tmp / "cmp.md");
  for (const std::string& file : {chip("v1"), fast}) {
    const std::string label = "tpu-v1 (" + file + ")";
    EXPECT_NE(md.find("| " + label + " |"), std::string::npos) << md;
    EXPECT_NE(md.find("## " + label + "\n"), std::string::npos) << md;
    EXPECT_NE(r.out.find("| " + label + " |"), std::string::npos) << r.out;
  }
}

TEST(CompareCli, TraceHoldsEveryRunsTracksUnderItsChipsName) {
  test::TempDir tmp("tpusim-cli");
  const std::string args = " --images 16 --batch 16 --trace ";
  const auto r = test::run_tpusim("compare --chip " + chip("v1") + " --chip " + chip("v3") + args +
                                  (tmp / "cmp.trace.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  // The same runs alone, for what each contributes.
  std::map<std::string, std::size_t> alone;
  for (const char* c : {"v1", "v3"}) {
    const auto one =
        test::run_tpusim("run --chip " + chip(c) + args + (tmp / (std::string(c) + ".json")));
    ASSERT_EQ(one.status, 0) << one.out;
    alone[c] =
        nlohmann::json::parse(test::read_file(tmp / (std::string(c) + ".json")))["traceEvents"]
            .size();
  }
  const auto t = nlohmann::json::parse(test::read_file(tmp / "cmp.trace.json"));
  EXPECT_EQ(t["traceEvents"].size(), alone["v1"] + alone["v3"]);
  std::map<std::uint64_t, std::string> process;
  std::map<std::uint64_t, std::size_t> slices;
  for (const auto& e : t["traceEvents"]) {
    if (e.value("name", "") == "process_name") process[e["pid"]] = e["args"]["name"];
    if (e.value("ph", "") == "X") ++slices[e["pid"]];
  }
  // Each run's host process holds its model load (docs/trace.md).
  const std::map<std::uint64_t, std::string> want = {{0, "tpu-v1 core 0"},
                                                     {1, "tpu-v1: host"},
                                                     {2, "tpu-v3 core 0"},
                                                     {3, "tpu-v3 core 1"},
                                                     {4, "tpu-v3: host"}};
  EXPECT_EQ(process, want);
  for (const auto& [pid, name] : want) EXPECT_GT(slices[pid], 0u) << name;
  ASSERT_EQ(t["otherData"]["runs"].size(), 2u);
  EXPECT_EQ(t["otherData"]["runs"][1]["label"], "tpu-v3");
}

TEST(RunCli, WritesCsvMarkdownAndTraceBesideTheJson) {
  test::TempDir tmp("tpusim-cli");
  const auto r =
      test::run_tpusim("run --chip " + chip("v1") + " --images 32 --scalesim-csv " + (tmp / "csv") +
                       " --csv " + (tmp / "layers.csv") + " --markdown " + (tmp / "run.md") +
                       " --trace " + (tmp / "run.trace.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* f : {"csv/COMPUTE_REPORT.csv", "csv/BANDWIDTH_REPORT.csv", "csv/LAYERS.csv",
                        "layers.csv", "run.md", "run.trace.json"})
    EXPECT_TRUE(fs::exists(tmp / f)) << f;
  // --csv is the per-layer table of the SCALE-Sim directory's LAYERS.csv.
  EXPECT_EQ(test::read_file(tmp / "layers.csv"), test::read_file(tmp / "csv/LAYERS.csv"));
  // Nothing temporary is left behind.
  for (const auto& e : fs::recursive_directory_iterator(tmp.path))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace tpu
