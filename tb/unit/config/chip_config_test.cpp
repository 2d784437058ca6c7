// The chip-config loader (hw/config) and the shipped chips (configs/chips). Derived peaks must
// equal the published ones (docs/sources.md: "a config whose derived peak disagrees with
// the published one is wrong"), and a malformed config must be rejected with a message that
// names the file, the JSON pointer and the offending value (STYLE "Configuration").
#include "hw/config/chip_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "hw/common/dtype.h"
#include "hw/common/error.h"

namespace tpu {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

std::string chip_path(const std::string& chip) {
  return std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + chip + ".json";
}
std::string data_path(const std::string& file) {
  return std::string(TPUSIM_SOURCE_DIR) + "/tb/unit/config/data/" + file;
}

json read_raw(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// What docs/sources.md lists for a chip: the structure whose product is the peak ("checks on the
// derived peaks") and the headline figure, which the publication rounds to whole TOPS/TFLOPS.
struct PublishedChip {
  const char* file;
  std::uint32_t tensor_cores;
  std::uint32_t mxus_per_core;
  std::uint32_t rows;
  std::uint32_t cols;
  double clock_mhz;
  double headline_tops;
};

const PublishedChip kPublished[] = {
    {"v1", 1, 1, 256, 256, 700, 92},    // J17: 92 TOPS
    {"v2", 2, 1, 128, 128, 700, 46},    // JAX: 46 TFLOPS
    {"v3", 2, 2, 128, 128, 940, 123},   // GC: 123 TFLOPS
    {"v4", 2, 4, 128, 128, 1050, 275},  // GC: 275 TFLOPS
    {"edge", 1, 1, 64, 64, 480, 4},     // CORAL: 4 TOPS
};

void PrintTo(const PublishedChip& chip, std::ostream* os) { *os << chip.file; }

class ShippedChip : public ::testing::TestWithParam<PublishedChip> {
 protected:
  [[nodiscard]] std::string path() const { return chip_path(GetParam().file); }
};

TEST_P(ShippedChip, DerivedPeakEqualsFactsFormula) {
  const PublishedChip& p = GetParam();
  const ChipConfig cfg = load_chip_config(path());
  // docs/sources.md: cores x MXUs x rows x cols x 2 ops x clock.
  const double expected = static_cast<double>(p.tensor_cores) * p.mxus_per_core * p.rows * p.cols *
                          2.0 * p.clock_mhz * 1e6;
  EXPECT_NEAR(cfg.peak_ops_per_s(), expected, expected * 1e-12);
  EXPECT_EQ(cfg.peak_macs_per_cycle(),
            std::uint64_t{p.tensor_cores} * p.mxus_per_core * p.rows * p.cols);
}

TEST_P(ShippedChip, DerivedPeakRoundsToPublishedHeadline) {
  const ChipConfig cfg = load_chip_config(path());
  // Published peaks are whole TOPS: the derived one must round to it.
  EXPECT_NEAR(cfg.peak_ops_per_s() / 1e12, GetParam().headline_tops, 0.5);
}

TEST_P(ShippedChip, EveryNumberCitesItsSourceAndStatus) {
  const json doc = load_json_with_includes(path());
  const ChipConfig cfg = load_chip_config(path());
  const json leaves = doc.flatten();
  for (const auto& [ptr, value] : leaves.items()) {
    if (ptr.rfind("/sources/", 0) == 0 || !value.is_number()) continue;
    const auto it = cfg.sources.find(ptr);
    ASSERT_NE(it, cfg.sources.end()) << path() << ": " << ptr << " has no entry in /sources";
    // docs/sources.md status letters, SB17's derived factors, or a named assumption.
    const std::string& cite = it->second;
    const bool has_status =
        cite.find("(C)") != std::string::npos || cite.find("(S)") != std::string::npos ||
        cite.find("(U)") != std::string::npos || cite.find("(C/S)") != std::string::npos ||
        cite.find("(derived)") != std::string::npos || cite.find("A:") != std::string::npos;
    EXPECT_TRUE(has_status) << path() << ": " << ptr << " cites \"" << cite
                            << "\" without a status (C, S, U, derived or A:)";
  }
}

TEST_P(ShippedChip, OnChipEnergiesAre45nmFiguresTimesScale) {
  const json e = load_json_with_includes(path()).at("energy");
  const ChipConfig cfg = load_chip_config(path());
  const double scale = e.at("scale_from_45nm").get<double>();
  EXPECT_DOUBLE_EQ(cfg.energy.scale_from_45nm, scale);
  EXPECT_DOUBLE_EQ(cfg.energy.mac_pj, e.at("mac_pj_45nm").get<double>() * scale);
  EXPECT_DOUBLE_EQ(cfg.energy.acc_pj_per_byte, e.at("acc_pj_per_byte_45nm").get<double>() * scale);
  EXPECT_DOUBLE_EQ(cfg.energy.ub_pj_per_byte, e.at("ub_pj_per_byte_45nm").get<double>() * scale);
  EXPECT_DOUBLE_EQ(cfg.energy.vector_op_pj, e.at("vector_op_pj_45nm").get<double>() * scale);
  EXPECT_DOUBLE_EQ(cfg.energy.instruction_pj, e.at("instruction_pj_45nm").get<double>() * scale);
}

TEST_P(ShippedChip, InterfaceEnergiesAndIdlePowerAreNotScaled) {
  const json e = load_json_with_includes(path()).at("energy");
  const ChipConfig cfg = load_chip_config(path());
  EXPECT_DOUBLE_EQ(cfg.energy.off_chip_pj_per_byte, e.at("off_chip_pj_per_byte").get<double>());
  EXPECT_DOUBLE_EQ(cfg.energy.host_link_pj_per_byte, e.at("host_link_pj_per_byte").get<double>());
  EXPECT_DOUBLE_EQ(cfg.energy.idle_w, e.at("idle_w").get<double>());
}

TEST_P(ShippedChip, UnifiedBufferPortFeedsOneMxuInputRowPerCycle) {
  const ChipConfig cfg = load_chip_config(path());
  // docs/config.md: the port assumption is one MXU input row per cycle.
  EXPECT_EQ(cfg.unified_buffer.bytes_per_cycle, cfg.mxu.rows * size_of(cfg.mxu.input_type));
}

INSTANTIATE_TEST_SUITE_P(Configs, ShippedChip, ::testing::ValuesIn(kPublished),
                         [](const ::testing::TestParamInfo<PublishedChip>& chip) {
                           return std::string(chip.param.file);
                         });

TEST(ChipConfigV1, RidgeIsAbout1350MacsPerByte) {
  const ChipConfig cfg = load_chip_config(chip_path("v1"));
  // J17 §2: 46 TMAC/s / 34 GB/s ~ 1350 MAC per byte of weight traffic.
  const double j17_ridge = 1350;
  EXPECT_NEAR(cfg.ridge_macs_per_byte(), j17_ridge, 0.01 * j17_ridge);
}

TEST(ChipConfigV1, AccumulatorsAreRidgeRoundedUpToPowerOfTwoThenDoubled) {
  const ChipConfig cfg = load_chip_config(chip_path("v1"));
  // J17 §2: the ridge rounded up to 2048, doubled for double buffering.
  std::uint64_t pow2 = 1;
  while (static_cast<double>(pow2) < cfg.ridge_macs_per_byte()) pow2 *= 2;
  EXPECT_EQ(cfg.accumulators.entries, 2 * pow2);
}

TEST(ChipConfigV1, AccumulatorsHoldEntriesTimesColumnsOf32Bits) {
  const ChipConfig cfg = load_chip_config(chip_path("v1"));
  // J17 §2: 4096 x 256 x 32 bit = 4 MiB.
  EXPECT_EQ(cfg.accumulator_bytes_per_core(), std::uint64_t{4096} * 256 * 32 / 8);
  EXPECT_EQ(cfg.on_chip_bytes(), cfg.unified_buffer.bytes + cfg.accumulator_bytes_per_core());
}

TEST(ChipConfigEdge, HostLinkMemoryTakesTheHostLinkFigures) {
  const ChipConfig cfg = load_chip_config(chip_path("edge"));
  ASSERT_EQ(cfg.off_chip_memory.kind, MemoryKind::HostLink);
  EXPECT_DOUBLE_EQ(cfg.off_chip_memory.bandwidth_gbps, cfg.host_link.bandwidth_gbps);
  EXPECT_DOUBLE_EQ(cfg.off_chip_memory.latency_ns, cfg.host_link.latency_ns);
  EXPECT_EQ(cfg.off_chip_memory.channels, 1u);
  EXPECT_DOUBLE_EQ(cfg.off_chip_bytes_per_s(), cfg.host_link_bytes_per_s());
}

TEST(ChipConfigInclude, IncludingFileKeysOverrideAndNestedObjectsMerge) {
  const json raw = read_raw(data_path("include_override.json"));
  const ChipConfig base = load_chip_config(chip_path("v1"));
  const ChipConfig cfg = load_chip_config(data_path("include_override.json"));
  EXPECT_EQ(cfg.name, raw.at("name").get<std::string>());
  EXPECT_DOUBLE_EQ(cfg.clock_mhz, raw.at("clock_mhz").get<double>());
  EXPECT_EQ(cfg.mxu.rows, raw.at("mxu").at("rows").get<std::uint32_t>());
  // Keys the including file does not name keep the included file's values, also inside /mxu.
  EXPECT_EQ(cfg.mxu.cols, base.mxu.cols);
  EXPECT_EQ(cfg.mxu.input_type, base.mxu.input_type);
  EXPECT_EQ(cfg.unified_buffer.bytes, base.unified_buffer.bytes);
  EXPECT_EQ(cfg.off_chip_memory.bytes, base.off_chip_memory.bytes);
  EXPECT_EQ(cfg.sources.at("/clock_mhz"), raw.at("sources").at("/clock_mhz").get<std::string>());
  EXPECT_EQ(cfg.sources.at("/mxu/cols"), base.sources.at("/mxu/cols"));
  EXPECT_DOUBLE_EQ(cfg.peak_ops_per_s(),
                   2.0 * cfg.mxu.rows * base.mxu.cols * raw.at("clock_mhz").get<double>() * 1e6);
}

TEST(ChipConfigInclude, AFieldTheIncludingFileOverridesLosesTheIncludedFilesCitation) {
  // v1's citation of its 256 rows does not describe the variant's 128; the variant cites its
  // clock, and the fields it leaves alone keep v1's citations.
  const ChipConfig base = load_chip_config(chip_path("v1"));
  ASSERT_TRUE(base.sources.count("/mxu/rows"));
  const ChipConfig cfg = load_chip_config(data_path("include_override.json"));
  EXPECT_EQ(cfg.sources.count("/mxu/rows"), 0u);
  EXPECT_EQ(cfg.sources.at("/clock_mhz"), "test: 1.5 times the clock");
  EXPECT_EQ(cfg.sources.at("/mxu/cols"), base.sources.at("/mxu/cols"));
  EXPECT_EQ(cfg.sources.at("/unified_buffer/bytes"), base.sources.at("/unified_buffer/bytes"));
}

TEST(ChipConfigInclude, ACitationTheIncludingFileGivesForAnInheritedFieldIsKept) {
  const ChipConfig base = load_chip_config(chip_path("v1"));
  const ChipConfig cfg = load_chip_config(data_path("include_recite.json"));
  EXPECT_EQ(cfg.mxu.cols, base.mxu.cols);
  EXPECT_EQ(cfg.sources.at("/mxu/cols"), "test: cited again by the including file");
  EXPECT_EQ(cfg.sources.at("/mxu/rows"), base.sources.at("/mxu/rows"));
}

TEST(ChipConfigInclude, V3AndV4ShareTheHbmSubFile) {
  namespace fs = std::filesystem;
  const json raw3 = read_raw(chip_path("v3"));
  const json raw4 = read_raw(chip_path("v4"));
  const std::string inc3 = raw3.at("off_chip_memory").at("include").get<std::string>();
  const std::string inc4 = raw4.at("off_chip_memory").at("include").get<std::string>();
  const fs::path sub3 = fs::path(chip_path("v3")).parent_path() / inc3;
  const fs::path sub4 = fs::path(chip_path("v4")).parent_path() / inc4;
  ASSERT_TRUE(fs::equivalent(sub3, sub4));

  const json hbm = read_raw(sub3.string());
  for (const char* chip : {"v3", "v4"}) {
    SCOPED_TRACE(chip);
    const ChipConfig cfg = load_chip_config(chip_path(chip));
    EXPECT_EQ(std::string(name_of(cfg.off_chip_memory.kind)), hbm.at("kind").get<std::string>());
    EXPECT_EQ(cfg.off_chip_memory.bytes, hbm.at("bytes").get<std::uint64_t>());
    EXPECT_DOUBLE_EQ(cfg.off_chip_memory.latency_ns, hbm.at("latency_ns").get<double>());
    EXPECT_EQ(cfg.off_chip_memory.channels, hbm.at("channels").get<std::uint32_t>());
  }
  // Bandwidth differs per chip and comes from the chip's own file.
  EXPECT_DOUBLE_EQ(load_chip_config(chip_path("v3")).off_chip_memory.bandwidth_gbps,
                   raw3.at("off_chip_memory").at("bandwidth_gbps").get<double>());
  EXPECT_DOUBLE_EQ(load_chip_config(chip_path("v4")).off_chip_memory.bandwidth_gbps,
                   raw4.at("off_chip_memory").at("bandwidth_gbps").get<double>());
}

TEST(ChipConfigParse, PatchedDocumentErrorsNameTheOrigin) {
  json doc = load_json_with_includes(chip_path("v1"));
  doc["mxu"]["weight_buffers"] = 3;
  try {
    parse_chip_config(doc, "sweep point 7");
    ADD_FAILURE() << "weight_buffers = 3 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("sweep point 7: /mxu/weight_buffers = 3"));
    EXPECT_THAT(e.what(), HasSubstr("[1, 2]"));
  }
}

TEST(ChipConfig, ShippedChipsKeepTheIdealMemoryModelAndItsResolvedJson) {
  for (const char* name : {"v1", "v2", "v3", "v4", "edge"}) {
    const ChipConfig cfg = load_chip_config(chip_path(name));
    EXPECT_EQ(cfg.off_chip_memory.model, MemoryModel::Ideal) << name;
    EXPECT_FALSE(to_json(cfg)["off_chip_memory"].contains("model")) << name;
  }
}

TEST(ChipConfig, StructuredMemoryVariantsCiteEveryTimingFigure) {
  for (const char* name : {"v1", "v2", "v3", "v4", "edge"}) {
    const ChipConfig cfg = load_chip_config(chip_path(std::string("structured-memory/") + name));
    const ChipConfig base = load_chip_config(chip_path(name));
    EXPECT_EQ(cfg.off_chip_memory.model, MemoryModel::Structured) << name;
    // Only the model differs from the shipped chip: same bandwidth, channels and latency.
    EXPECT_EQ(cfg.off_chip_memory.bandwidth_gbps, base.off_chip_memory.bandwidth_gbps) << name;
    EXPECT_EQ(cfg.off_chip_memory.channels, base.off_chip_memory.channels) << name;
    const auto timing = to_json(cfg)["off_chip_memory"]["timing"];
    EXPECT_FALSE(timing.empty()) << name;
    for (const auto& [key, value] : timing.items()) {
      const auto it = cfg.sources.find("/off_chip_memory/timing/" + key);
      ASSERT_NE(it, cfg.sources.end()) << name << " " << key;
      // A status as every shipped figure has (docs/sources.md): the standards are U, ours A:.
      EXPECT_TRUE(it->second.find("(U)") != std::string::npos ||
                  it->second.find("A:") != std::string::npos)
          << name << " " << key << ": " << it->second;
    }
  }
}

// A malformed config and what its rejection must say: "<file>: <pointer> = <value> (<rule>)".
struct BadConfig {
  const char* name;
  const char* file;  // in tb/unit/config/data/
  std::vector<std::string> message_contains;
};

const BadConfig kBad[] = {
    {"ZeroMxuRows", "zero_rows.json", {"zero_rows.json: /mxu/rows = 0", "integer in [1, "}},
    {"UnknownTopLevelKey",
     "unknown_top_key.json",
     {"unknown_top_key.json: /clock_mhzz is not a known key", "clock_mhz"}},
    {"UnknownNestedKey",
     "unknown_nested_key.json",
     {"unknown_nested_key.json: /mxu/rowz is not a known key", "rows"}},
    {"StringWhereNumberGoes",
     "string_for_number.json",
     {"string_for_number.json: /clock_mhz = \"700\"", "must be a number"}},
    {"FloatWhereIntegerGoes",
     "float_for_integer.json",
     {"float_for_integer.json: /mxu/cols = 256.5", "must be an integer"}},
    {"NegativeSize",
     "negative_size.json",
     {"negative_size.json: /unified_buffer/bytes = -1", "must be an integer"}},
    {"MissingRequiredFieldIsBlamedOnTheIncludingFile",
     "missing_field.json",
     {"missing_field.json: /off_chip_memory/bandwidth_gbps is missing"}},
    {"NotJson", "not_json.json", {"not_json.json: not valid JSON", "line 1"}},
    {"EmptyFile", "empty.json", {"empty.json: file is empty"}},
    {"FileDoesNotExist",
     "no_such_file.json",
     {"no_such_file.json: cannot read the chip config (no such file"}},
    {"Int8InputWithFp32Accumulator",
     "int8_with_fp32_accumulator.json",
     {"int8_with_fp32_accumulator.json: /mxu/acc_type = \"fp32\"", "\"int32\""}},
    {"HostLinkMemoryWithOwnBandwidth",
     "host_link_memory_with_bandwidth.json",
     {"host_link_memory_with_bandwidth.json: /off_chip_memory/bandwidth_gbps = 0.5", "host-link"}},
    {"IncludeOfMissingFile",
     "include_missing_file.json",
     {"include_missing_file.json: /off_chip_memory/include = \"no_such_memory.json\"",
      "no such file"}},
    {"IncludeCycle",
     "include_cycle_a.json",
     {"include_cycle_b.json: /include = \"include_cycle_a.json\"", "cycle"}},
    {"BadValueInIncludedFileIsBlamedOnThatFile",
     "bad_value_in_include.json",
     {"bad_hbm.json: /off_chip_memory/channels = 0"}},
    {"SourceNamesNoField",
     "source_names_no_field.json",
     {"source_names_no_field.json: /sources/~1mxu~1rowz = \"/mxu/rowz\" names no field"}},
    {"TimingWithIdealModel",
     "timing_with_ideal_model.json",
     {"/off_chip_memory/timing = ", "only with \"model\": \"structured\""}},
    {"UnknownMemoryModel",
     "unknown_memory_model.json",
     {"unknown_memory_model.json: /off_chip_memory/model = \"cycle-accurate\"",
      "\"ideal\", \"structured\""}},
    {"StructuredTimingUncited",
     "structured_timing_uncited.json",
     {"ddr3-2133-timing.json: /off_chip_memory/timing/banks = 8", "needs its source"}},
    {"StructuredRowNotWholeStripes",
     "structured_row_not_whole_stripes.json",
     {"structured_row_not_whole_stripes.json: /off_chip_memory/timing/row_bytes = 8000",
      "multiple of interleave_bytes 256"}},
    {"StructuredRefreshTooShort",
     "structured_refresh_too_short.json",
     {"structured_refresh_too_short.json: /off_chip_memory/timing/t_refi_ns = 300",
      "0 (no refresh)"}},
    {"StructuredTimingMissingField",
     "structured_timing_missing_field.json",
     {"structured_timing_missing_field.json: /off_chip_memory/timing/row_bytes is missing"}},
};

void PrintTo(const BadConfig& bad, std::ostream* os) { *os << bad.file; }

class BadChipConfig : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadChipConfig, RejectedNamingFilePointerAndValue) {
  const BadConfig& bad = GetParam();
  try {
    load_chip_config(data_path(bad.file));
    ADD_FAILURE() << bad.file << " was accepted";
  } catch (const ConfigError& e) {
    for (const std::string& s : bad.message_contains) EXPECT_THAT(e.what(), HasSubstr(s));
    // The message is one line: the CLI prints it as is.
    EXPECT_THAT(e.what(), Not(HasSubstr("\n")));
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, BadChipConfig, ::testing::ValuesIn(kBad),
                         [](const ::testing::TestParamInfo<BadConfig>& bad) {
                           return std::string(bad.param.name);
                         });

}  // namespace
}  // namespace tpu
