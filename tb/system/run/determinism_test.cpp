// Determinism (docs/robustness.md): the same inputs give the same bytes. Two `tpusim run`
// processes on TPU v3 — two TensorCores and four MXUs whose SystemC processes interleave, and the
// reference on a second host thread — must write identical JSON (but for its `host` wall times),
// CSV, Markdown and trace files (only the JSON carries host times).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/cli.h"
#include "common/temp_dir.h"

namespace tpu {
namespace {

std::string bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The report's text up to its `host` object, which run_json writes last.
std::string without_host(const std::string& report) {
  const auto at = report.find("\"host\":");
  EXPECT_NE(at, std::string::npos) << "the report has no host section";
  const auto j = nlohmann::ordered_json::parse(report);
  EXPECT_EQ(std::prev(j.end()).key(), "host") << "host is not the report's last member";
  return report.substr(0, at);
}

TEST(Determinism, TwoRunsOfTheSameInputsWriteTheSameBytes) {
  const test::TempDir dir("tpusim-determinism");
  const std::string source = TPUSIM_SOURCE_DIR;
  for (const std::string run : {"a", "b"}) {
    const auto r = test::run_tpusim(
        "run --chip " + source + "/configs/chips/v3.json --model " + source +
        "/configs/models/resnet50_block.json --random-weights --images 4 --batch 4 --json " +
        (dir / run + ".json") + " --scalesim-csv " + (dir / run) + " --markdown " +
        (dir / run + ".md") + " --trace " + (dir / run + ".trace.json"));
    ASSERT_EQ(r.status, 0) << r.out;
  }
  const std::string a = bytes(dir / "a.json");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(without_host(a), without_host(bytes(dir / "b.json")));
  EXPECT_EQ(bytes(dir / "a.trace.json"), bytes(dir / "b.trace.json"));
  for (const std::string csv : {"COMPUTE_REPORT.csv", "BANDWIDTH_REPORT.csv", "LAYERS.csv"}) {
    ASSERT_FALSE(bytes(dir / ("a/" + csv)).empty()) << csv;
    EXPECT_EQ(bytes(dir / ("a/" + csv)), bytes(dir / ("b/" + csv))) << csv;
  }
  ASSERT_FALSE(bytes(dir / "a.md").empty());
  EXPECT_EQ(bytes(dir / "a.md"), bytes(dir / "b.md"));
}

}  // namespace
}  // namespace tpu
