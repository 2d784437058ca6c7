// `tpusim info` as a user runs it: the binary, its exit status and what it prints.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/cli.h"
#include "hw/config/chip_config.h"
#include "hw/config/system_config.h"

namespace tpu {
namespace {

using Result = test::CliResult;
Result run(const std::string& args) { return test::run_tpusim(args); }

std::string shipped(const std::string& c) {
  return std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + c + ".json";
}

std::string system(const std::string& s) {
  return std::string(TPUSIM_SOURCE_DIR) + "/configs/systems/" + s + ".json";
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

TEST(InfoCli, SystemJsonCarriesTheLoadersFiguresForEveryShippedSystem) {
  for (const char* name : {"v2-8", "v2-512", "v3-8", "v3-32", "v3-2048", "v4-8", "v4-8192"}) {
    SCOPED_TRACE(name);
    const Result r = run("info --system " + system(name) + " --json");
    ASSERT_EQ(r.status, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    const SystemConfig s = load_system_config(system(name));
    EXPECT_EQ(j["name"], s.name);
    EXPECT_EQ(j["system"]["chips"].get<std::uint32_t>(), s.chips());
    EXPECT_EQ(j["system"]["tensor_cores"].get<std::uint32_t>(), s.tensor_cores());
    EXPECT_EQ(j["system"]["hosts"].get<std::uint32_t>(), s.hosts());
    EXPECT_DOUBLE_EQ(j["system"]["peak_ops_per_s"].get<double>(), s.peak_ops_per_s());
    EXPECT_DOUBLE_EQ(j["system"]["all_reduce_bytes_per_s"].get<double>(),
                     s.all_reduce_bytes_per_s());
    EXPECT_DOUBLE_EQ(j["system"]["bisection_bytes_per_s"].get<double>(), s.bisection_bytes_per_s());
    EXPECT_EQ(j["ici"]["topology"]["dims"].get<std::vector<std::uint32_t>>(), s.ici.dims);
    EXPECT_EQ(j["ici"]["topology"]["wraparound"].get<std::vector<bool>>(), s.ici.wraparound);
    EXPECT_DOUBLE_EQ(j["ici"]["bandwidth_gbps"].get<double>(), s.ici.bandwidth_gbps);
    EXPECT_EQ(j["ici"]["links_per_chip"].get<std::uint32_t>(), s.ici.links_per_chip);
    // The chip as `info --chip --json` prints it.
    const Result chip = run("info --chip " + s.chip.file + " --json");
    ASSERT_EQ(chip.status, 0) << chip.out;
    EXPECT_EQ(j["chip"], nlohmann::json::parse(chip.out));
  }
}

TEST(InfoCli, SystemTextShowsTopologyPeaksBandwidthsAndTheChip) {
  const SystemConfig s = load_system_config(system("v3-2048"));
  const Result r = run("info --system " + system("v3-2048"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("chips           1024 = 32 x 32 of tpu-v3, 2048 TensorCores"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("wraparound per axis: yes, yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("126.2 PFLOPS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("340.0 TB/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::to_string(s.hosts()) + ", each driving up to"), std::string::npos)
      << r.out;
  // The chip's own lines, as `info --chip` prints them.
  const Result chip = run("info --chip " + s.chip.file);
  ASSERT_EQ(chip.status, 0) << chip.out;
  EXPECT_NE(r.out.find(chip.out), std::string::npos) << r.out;
}

TEST(InfoCli, ChipAndSystemExcludeEachOtherAndOneIsRequired) {
  const std::string chip = shipped("v3"), sys = system("v3-8");
  const std::vector<std::string> invocations = {"info", "info --json",
                                                "info --chip " + chip + " --system " + sys};
  for (const std::string& args : invocations) {
    SCOPED_TRACE(args);
    const Result r = run(args);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find("--chip"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--system"), std::string::npos) << r.out;
  }
}

TEST(InfoCli, BadSystemGivesOneLineNamingTheFilePointerAndValue) {
  nlohmann::json doc = nlohmann::json::parse(R"({"include": ""})");
  doc["include"] = system("v3-8");
  doc["ici"]["bandwidth_gbps"] = 0;
  const std::string file = write_temp("zero_ici.json", doc.dump());
  const Result r = run("info --system " + file);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find(file + ": /ici/bandwidth_gbps = 0 (must be a number >= 0.001"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace tpu
