// `tpusim info` as a user runs it: the binary, its exit status and what it prints.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/cli.h"
#include "hw/config/chip_config.h"

namespace tpu {
namespace {

using Result = test::CliResult;
Result run(const std::string& args) { return test::run_tpusim(args); }

std::string shipped(const std::string& c) {
  return std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + c + ".json";
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

std::string v1_with(const std::string& pointer, const nlohmann::json& value) {
  nlohmann::json doc = load_json_with_includes(shipped("v1"));
  doc[nlohmann::json::json_pointer(pointer)] = value;
  return doc.dump();
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(InfoCli, PrintsThePublishedPeakForEveryShippedChip) {
  for (const char* c : {"v1", "v2", "v3", "v4", "edge"}) {
    const Result r = run("info --chip " + shipped(c) + " --json");
    ASSERT_EQ(r.status, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    const ChipConfig cfg = load_chip_config(shipped(c));
    EXPECT_DOUBLE_EQ(j["chip"]["peak_ops_per_s"].get<double>(), cfg.peak_ops_per_s()) << c;
    EXPECT_EQ(j["chip"]["peak_macs_per_cycle"].get<std::uint64_t>(), cfg.peak_macs_per_cycle());
    EXPECT_TRUE(j["chip"].contains("ridge_macs_per_byte"));
    EXPECT_TRUE(j["chip"].contains("idle_w"));
  }
  const Result text = run("info --chip " + shipped("v1"));
  EXPECT_NE(text.out.find("91.75 TOPS"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ridge point     1349"), std::string::npos) << text.out;
}

TEST(InfoCli, ZeroRowsUnknownKeyAndNotJsonEachGiveOneLineAndStatusTwo) {
  const std::string rows0 = write_temp("rows0.json", v1_with("/mxu/rows", 0));
  const std::string unknown = write_temp("unknown.json", v1_with("/mxu/rowz", 3));
  const std::string broken = write_temp("broken.json", "{\"name\": \"x\",");
  const struct {
    std::string file, expect;
  } cases[] = {{rows0, "/mxu/rows = 0"},
               {unknown, "/mxu/rowz is not a known key"},
               {broken, "not valid JSON"}};
  for (const auto& c : cases) {
    const Result r = run("info --chip " + c.file);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find(c.file), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace tpu
