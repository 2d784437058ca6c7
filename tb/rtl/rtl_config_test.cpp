// Selecting the RTL array: what the config loader refuses, what the factory needs from the build,
// and that every chip JSON asking for the RTL got its Verilated array (the sizes come from those
// files and nowhere else).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "hw/mxu/mxu_factory.h"
#include "rtl/model/array_model.h"
#include "tb/rtl/cosim.h"

namespace tpu {
namespace {

nlohmann::json shipped_json(const std::string& name) {
  return load_json_with_includes(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + name +
                                 ".json");
}

std::string config_error(const nlohmann::json& doc) {
  try {
    parse_chip_config(doc, "test.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(RtlConfig, Bf16ChipWithTheRtlArrayIsRefusedNamingImpl) {
  nlohmann::json doc = shipped_json("v2");
  ASSERT_EQ(doc["mxu"]["input_type"], "bf16");
  doc["mxu"]["impl"] = "rtl";
  const std::string e = config_error(doc);
  EXPECT_NE(e.find("test.json: /mxu/impl = \"rtl\""), std::string::npos) << e;
  EXPECT_NE(e.find("int8"), std::string::npos) << e;
}

TEST(RtlConfig, SingleWeightBufferWithTheRtlArrayIsRefusedNamingImpl) {
  nlohmann::json doc = shipped_json("edge");
  doc["mxu"]["weight_buffers"] = 1;
  doc["mxu"]["impl"] = "rtl";
  const std::string e = config_error(doc);
  EXPECT_NE(e.find("test.json: /mxu/impl = \"rtl\""), std::string::npos) << e;
  EXPECT_NE(e.find("double-buffered"), std::string::npos) << e;
}

TEST(RtlConfig, ArraySizeTheBuildDidNotVerilateIsAConfigErrorNamingImplAndTheBuiltSizes) {
  ChipConfig cfg =
      load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/tiny-rtl.json");
  cfg.mxu.rows = 3;
  cfg.mxu.cols = 5;
  ASSERT_EQ(rtl::make_array_model(3, 5), nullptr);
  const Clock clock(cfg.clock_hz());
  LayerCounters counters;
  try {
    make_mxu("mxu", cfg, clock, CoreStorage{}, counters, "core 0");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tiny-rtl.json: /mxu/impl = \"rtl\""), std::string::npos) << m;
    EXPECT_NE(m.find("3 x 5"), std::string::npos) << m;
    for (const auto& [r, c] : rtl::array_model_sizes())
      EXPECT_NE(m.find(std::to_string(r) + "x" + std::to_string(c)), std::string::npos) << m;
  }
}

TEST(RtlConfig, EveryChipJsonSelectingTheRtlHasItsVerilatedArray) {
  std::vector<std::string> files = cosim::config_files();
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips"))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  int rtl = 0;
  for (const std::string& f : files) {
    const ChipConfig cfg = load_chip_config(f);
    if (cfg.mxu.impl != MxuImpl::Rtl) continue;
    ++rtl;
    EXPECT_NE(rtl::make_array_model(cfg.mxu.rows, cfg.mxu.cols), nullptr) << f;
  }
  EXPECT_GE(rtl, 4);
}

}  // namespace
}  // namespace tpu
