// The system-config loader (hw/config/system_config) and the shipped systems (configs/systems):
// every shipped system loads; its chip count is the product of its dims and matches the
// TensorCores its slice name counts; neighbours wrap exactly where the config says; an include
// overrides dims and keeps the rest; the derived figures (docs/systems.md) follow from the config
// and, for the full pods, agree with the published ones; a malformed config is refused with a
// message naming the file, the JSON pointer and the value.
#include "hw/config/system_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "hw/common/error.h"

namespace tpu {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

std::string system_path(const std::string& name) {
  return std::string(TPUSIM_SOURCE_DIR) + "/configs/systems/" + name + ".json";
}
std::string data_path(const std::string& file) {
  return std::string(TPUSIM_SOURCE_DIR) + "/tb/unit/config/data/systems/" + file;
}

json read_raw(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

const char* const kShipped[] = {"v2-8", "v2-512", "v3-8", "v3-32", "v3-2048", "v4-8", "v4-8192"};

// Every shipped file is in the list above, so a new one is tested too.
TEST(ShippedSystems, TheListCoversConfigsSystems) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(std::string(TPUSIM_SOURCE_DIR) + "/configs/systems"))
    files.push_back(e.path().stem().string());
  std::sort(files.begin(), files.end());
  std::vector<std::string> listed(std::begin(kShipped), std::end(kShipped));
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(files, listed);
}

class ShippedSystem : public ::testing::TestWithParam<const char*> {
 protected:
  [[nodiscard]] std::string path() const { return system_path(GetParam()); }
};

TEST_P(ShippedSystem, ChipsAreTheProductOfTheDims) {
  const json doc = load_json_with_includes(path());
  const SystemConfig s = load_system_config(path());
  std::uint64_t product = 1;
  for (const auto& d : doc.at("ici").at("topology").at("dims")) product *= d.get<std::uint64_t>();
  EXPECT_EQ(s.chips(), product);
  EXPECT_EQ(s.ici.dims.size(), doc.at("ici").at("topology").at("dims").size());
  EXPECT_EQ(s.ici.wraparound.size(), s.ici.dims.size());
}

// Slice names count TensorCores (v4's count chips x 2, which is the same: two per chip).
TEST_P(ShippedSystem, TensorCoresAreWhatTheSliceNameCounts) {
  const SystemConfig s = load_system_config(path());
  const std::string name = GetParam();
  EXPECT_EQ(s.name, name);
  const std::uint32_t counted =
      static_cast<std::uint32_t>(std::stoul(name.substr(name.find('-') + 1)));
  EXPECT_EQ(s.tensor_cores(), counted);
  EXPECT_EQ(s.tensor_cores(), s.chips() * s.chip.tensor_cores);
}

TEST_P(ShippedSystem, ItsChipIsTheShippedChipOfItsVersion) {
  const SystemConfig s = load_system_config(path());
  const std::string version = std::string(GetParam()).substr(0, 2);
  const ChipConfig chip =
      load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + version + ".json");
  EXPECT_EQ(s.chip.name, chip.name);
  EXPECT_TRUE(fs::equivalent(s.chip.file, chip.file)) << s.chip.file;
  EXPECT_DOUBLE_EQ(s.chip.peak_ops_per_s(), chip.peak_ops_per_s());
}

bool has_status(const std::string& cite) {
  for (const char* status : {"(C)", "(S)", "(U)", "(derived)", "A:"})
    if (cite.find(status) != std::string::npos) return true;
  return false;
}

// A value's citation is at its pointer or at an enclosing one (/ici/topology/dims covers
// /ici/topology/dims/0).
const std::string* citation(const std::map<std::string, std::string>& sources, std::string ptr) {
  while (!ptr.empty()) {
    if (auto it = sources.find(ptr); it != sources.end()) return &it->second;
    ptr = ptr.substr(0, ptr.rfind('/'));
  }
  return nullptr;
}

TEST_P(ShippedSystem, EveryNumberAndSwitchCitesItsSourceAndStatus) {
  const SystemConfig s = load_system_config(path());
  const json leaves = load_json_with_includes(path()).flatten();
  for (const auto& [ptr, value] : leaves.items()) {
    if (ptr.rfind("/sources/", 0) == 0 || !(value.is_number() || value.is_boolean())) continue;
    const std::string* cite = citation(s.sources, ptr);
    ASSERT_NE(cite, nullptr) << path() << ": " << ptr << " has no entry in /sources";
    EXPECT_TRUE(has_status(*cite)) << path() << ": " << ptr << " cites \"" << *cite
                                   << "\" without a status (C, S, U, derived or A:)";
  }
}

// A slice that includes its pod cites what it changes itself: the pod's citation of the pod's
// dims must not stand beside the slice's dims.
TEST_P(ShippedSystem, AnIncludingFileCitesEveryValueItSets) {
  const json raw = read_raw(path());
  std::map<std::string, std::string> own;
  if (raw.contains("sources"))
    for (const auto& [k, v] : raw.at("sources").items()) own[k] = v.get<std::string>();
  const json leaves = raw.flatten();
  for (const auto& [ptr, value] : leaves.items()) {
    if (ptr.rfind("/sources/", 0) == 0 || !(value.is_number() || value.is_boolean())) continue;
    EXPECT_NE(citation(own, ptr), nullptr) << path() << " sets " << ptr << " without citing it";
  }
}

TEST_P(ShippedSystem, CoordinatesAreRowMajorOverTheDims) {
  const SystemConfig s = load_system_config(path());
  for (std::uint32_t chip = 0; chip < s.chips(); ++chip) {
    const std::vector<std::uint32_t> c = s.coordinates(chip);
    ASSERT_EQ(c.size(), s.ici.dims.size());
    std::uint32_t id = 0;
    for (std::size_t d = 0; d < c.size(); ++d) {
      ASSERT_LT(c[d], s.ici.dims[d]);
      id = id * s.ici.dims[d] + c[d];
    }
    ASSERT_EQ(id, chip);
    ASSERT_EQ(s.chip_at(c), chip);
  }
}

// Along each axis a chip's neighbour is one step away; at an end the step wraps to the other
// end exactly when the axis wraps, and is nothing otherwise.
TEST_P(ShippedSystem, NeighboursWrapExactlyWhereWraparoundSays) {
  const SystemConfig s = load_system_config(path());
  for (std::uint32_t chip = 0; chip < s.chips(); ++chip) {
    const std::vector<std::uint32_t> c = s.coordinates(chip);
    for (std::size_t d = 0; d < s.ici.dims.size(); ++d) {
      const std::int64_t extent = s.ici.dims[d];
      for (int step : {+1, -1}) {
        const std::int64_t to = static_cast<std::int64_t>(c[d]) + step;
        const bool off_the_end = to < 0 || to >= extent;
        const auto n = s.neighbour(chip, d, step);
        if (extent == 1 || (off_the_end && !s.ici.wraparound[d])) {
          ASSERT_FALSE(n.has_value()) << "chip " << chip << " dim " << d << " step " << step;
          continue;
        }
        ASSERT_TRUE(n.has_value()) << "chip " << chip << " dim " << d << " step " << step;
        std::vector<std::uint32_t> expected = c;
        expected[d] = static_cast<std::uint32_t>((to + extent) % extent);
        ASSERT_EQ(s.coordinates(*n), expected) << "chip " << chip << " dim " << d;
      }
    }
  }
}

// Links counted by walking every chip's neighbours (one link per existing +1 neighbour: a ring of
// two with wraparound has two), against the closed forms of docs/systems.md.
TEST_P(ShippedSystem, LinkCountsAndAllReduceBandwidthFollowFromTheNeighbours) {
  const SystemConfig s = load_system_config(path());
  std::uint64_t links = 0;
  std::uint32_t most = 0;
  for (std::uint32_t chip = 0; chip < s.chips(); ++chip) {
    std::uint32_t at_chip = 0;
    for (std::size_t d = 0; d < s.ici.dims.size(); ++d)
      for (int step : {+1, -1}) at_chip += s.neighbour(chip, d, step).has_value() ? 1 : 0;
    for (std::size_t d = 0; d < s.ici.dims.size(); ++d)
      links += s.neighbour(chip, d, +1).has_value() ? 1 : 0;
    most = std::max(most, at_chip);
  }
  EXPECT_EQ(s.links(), links);
  EXPECT_EQ(s.links_in_use(), most);
  EXPECT_LE(s.links_in_use(), s.ici.links_per_chip);
  // Each link carries one direction out of each of its two chips.
  EXPECT_DOUBLE_EQ(s.all_reduce_bytes_per_s(),
                   2.0 * static_cast<double>(links) * s.ici.bandwidth_gbps * 1e9);
}

// The cheapest cut through the middle of one axis, counted by walking the links that cross it.
TEST_P(ShippedSystem, BisectionIsTheCheapestCutThatHalvesAnAxis) {
  const SystemConfig s = load_system_config(path());
  std::uint64_t fewest = 0;
  bool any = false;
  for (std::size_t d = 0; d < s.ici.dims.size(); ++d) {
    const std::uint32_t half = s.ici.dims[d] / 2;
    if (s.ici.dims[d] < 2) continue;
    std::uint64_t crossing = 0;
    for (std::uint32_t chip = 0; chip < s.chips(); ++chip)
      if (const auto n = s.neighbour(chip, d, +1))
        crossing += (s.coordinates(chip)[d] < half) != (s.coordinates(*n)[d] < half) ? 1 : 0;
    fewest = any ? std::min(fewest, crossing) : crossing;
    any = true;
  }
  EXPECT_DOUBLE_EQ(s.bisection_bytes_per_s(),
                   static_cast<double>(fewest) * s.ici.bandwidth_gbps * 1e9);
}

TEST_P(ShippedSystem, PeakIsChipsTimesTheChipsPeak) {
  const SystemConfig s = load_system_config(path());
  EXPECT_DOUBLE_EQ(s.peak_ops_per_s(), s.chips() * s.chip.peak_ops_per_s());
}

TEST_P(ShippedSystem, HostsDriveEveryChipAlike) {
  const SystemConfig s = load_system_config(path());
  const std::uint32_t per_host = std::min(s.chips(), s.chips_per_host);
  EXPECT_EQ(s.hosts() * per_host, s.chips());
}

INSTANTIATE_TEST_SUITE_P(Configs, ShippedSystem, ::testing::ValuesIn(kShipped),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string n = p.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// The full pods' published figures (docs/sources.md, "System figures"), which the derived ones
// must meet at the precision they are published with.
TEST(PublishedPods, V3PodPeakAndAllReduceBandwidth) {
  const SystemConfig s = load_system_config(system_path("v3-2048"));
  EXPECT_NEAR(s.peak_ops_per_s() / 1e15, 126, 0.5);          // 126 PFLOPS
  EXPECT_NEAR(s.all_reduce_bytes_per_s() / 1e12, 340, 0.5);  // 340 TB/s
}

// docs/systems.md: the 83 GB/s chosen for v3 reproduces the all-reduce figure; the published
// 6.4 TB/s bisection would need 100 GB/s, so the derived bisection is 83/100 of it.
TEST(PublishedPods, V3PodBisectionIsTheChosenLinkBandwidthOverTheScalingBooks) {
  const SystemConfig s = load_system_config(system_path("v3-2048"));
  const double scaling_book_gbps = 100;
  EXPECT_NEAR(s.bisection_bytes_per_s(), 6.4e12 * s.ici.bandwidth_gbps / scaling_book_gbps,
              1e-6 * 6.4e12);
}

TEST(PublishedPods, V4PodPeakAllReduceAndBisection) {
  const SystemConfig s = load_system_config(system_path("v4-8192"));
  EXPECT_NEAR(s.peak_ops_per_s() / 1e18, 1.1, 0.05);          // 1.1 EFLOPS
  EXPECT_NEAR(s.all_reduce_bytes_per_s() / 1e15, 1.1, 0.05);  // 1.1 PB/s
  EXPECT_NEAR(s.bisection_bytes_per_s() / 1e12, 24, 1.0);     // 24 TB/s (23.04 derived)
}

TEST(SystemInclude, ASliceTakesItsDimsAndKeepsThePodsLinksHostsAndChip) {
  const json raw = read_raw(system_path("v3-32"));
  const SystemConfig pod = load_system_config(system_path("v3-2048"));
  const SystemConfig slice = load_system_config(system_path("v3-32"));
  const json& topology = raw.at("ici").at("topology");
  EXPECT_EQ(slice.ici.dims, topology.at("dims").get<std::vector<std::uint32_t>>());
  EXPECT_EQ(slice.ici.wraparound, topology.at("wraparound").get<std::vector<bool>>());
  EXPECT_NE(slice.ici.dims, pod.ici.dims);
  EXPECT_DOUBLE_EQ(slice.ici.bandwidth_gbps, pod.ici.bandwidth_gbps);
  EXPECT_DOUBLE_EQ(slice.ici.latency_ns, pod.ici.latency_ns);
  EXPECT_EQ(slice.ici.links_per_chip, pod.ici.links_per_chip);
  EXPECT_EQ(slice.chips_per_host, pod.chips_per_host);
  EXPECT_EQ(slice.chip.name, pod.chip.name);
  // The slice's citations of what it changes win; the pod's of the rest stay.
  EXPECT_EQ(slice.sources.at("/ici/topology/dims"),
            raw.at("sources").at("/ici/topology/dims").get<std::string>());
  EXPECT_EQ(slice.sources.at("/ici/bandwidth_gbps"), pod.sources.at("/ici/bandwidth_gbps"));
}

TEST(SystemInclude, ChangingTheWraparoundAloneKeepsTheIncludedDims) {
  const SystemConfig s = load_system_config(data_path("pod_opened.json"));
  const SystemConfig pod = load_system_config(system_path("v3-2048"));
  EXPECT_EQ(s.ici.dims, pod.ici.dims);
  EXPECT_EQ(s.ici.wraparound, std::vector<bool>(pod.ici.dims.size(), false));
  EXPECT_LT(s.bisection_bytes_per_s(), pod.bisection_bytes_per_s());
}

// A 3 x 2 mesh-torus written beside this test: axis 0 open, axis 1 a closed ring of two.
TEST(SystemTopology, ARingOfTwoReachesTheSameNeighbourBothWaysOverTwoLinks) {
  const SystemConfig s = load_system_config(data_path("three_by_two.json"));
  ASSERT_EQ(s.ici.dims, (std::vector<std::uint32_t>{3, 2}));
  ASSERT_EQ(s.ici.wraparound, (std::vector<bool>{false, true}));
  EXPECT_EQ(s.neighbour(0, 1, +1), s.neighbour(0, 1, -1));
  EXPECT_EQ(s.neighbour(0, 1, +1), std::optional<std::uint32_t>(1));
  EXPECT_EQ(s.neighbour(0, 0, -1), std::nullopt);
  EXPECT_EQ(s.neighbour(0, 0, +1), std::optional<std::uint32_t>(2));
  EXPECT_EQ(s.neighbour(4, 0, +1), std::nullopt);
  // Axis 0: 2 open lines of 3 = 2 links each; axis 1: 3 rings of two = 2 links each.
  EXPECT_EQ(s.links(), 2u * 2 + 3u * 2);
  // Open axis of 3 (two neighbours in the middle) + closed ring of two.
  EXPECT_EQ(s.links_in_use(), 2u + 2);
}

TEST(SystemTopology, AskingBeyondTheSystemIsACallersBug) {
  const SystemConfig s = load_system_config(system_path("v3-8"));
  EXPECT_THROW((void)s.coordinates(s.chips()), std::out_of_range);
  EXPECT_THROW((void)s.neighbour(0, s.ici.dims.size(), +1), std::out_of_range);
  EXPECT_THROW((void)s.neighbour(0, 0, 2), std::out_of_range);
  EXPECT_THROW((void)s.chip_at({0}), std::out_of_range);
}

TEST(SystemOfChip, AChipAloneIsOneChipOnOneHostWithoutLinks) {
  const ChipConfig chip =
      load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/v3.json");
  const SystemConfig s = system_of_chip(chip);
  EXPECT_EQ(s.chips(), 1u);
  EXPECT_EQ(s.ici.dims, std::vector<std::uint32_t>{1});
  EXPECT_EQ(s.tensor_cores(), chip.tensor_cores);
  EXPECT_EQ(s.hosts(), 1u);
  EXPECT_EQ(s.links(), 0u);
  EXPECT_EQ(s.links_in_use(), 0u);
  EXPECT_EQ(s.ici.links_per_chip, 0u);
  EXPECT_EQ(s.neighbour(0, 0, +1), std::nullopt);
  EXPECT_DOUBLE_EQ(s.peak_ops_per_s(), chip.peak_ops_per_s());
  EXPECT_DOUBLE_EQ(s.all_reduce_bytes_per_s(), 0);
  EXPECT_DOUBLE_EQ(s.bisection_bytes_per_s(), 0);
  EXPECT_EQ(s.name, chip.name);
}

TEST(SystemJson, InfoJsonCarriesTheSystemAndTheChipAsInfoChipPrintsIt) {
  const SystemConfig s = load_system_config(system_path("v4-8"));
  const auto j = to_json(s);
  EXPECT_EQ(j.at("system").at("chips").get<std::uint32_t>(), s.chips());
  EXPECT_DOUBLE_EQ(j.at("system").at("all_reduce_bytes_per_s").get<double>(),
                   s.all_reduce_bytes_per_s());
  EXPECT_EQ(j.at("chip"), to_json(s.chip));
  EXPECT_EQ(j.at("ici").at("topology").at("dims").get<std::vector<std::uint32_t>>(), s.ici.dims);
}

// A malformed system config and what its rejection must say.
struct BadSystem {
  const char* name;
  const char* file;  // in tb/unit/config/data/systems/
  std::vector<std::string> message_contains;
};

const BadSystem kBad[] = {
    {"TorusNeedsMoreLinksThanTheChipHas",
     "torus_needs_more_links.json",
     {"torus_needs_more_links.json: /ici/links_per_chip = 4", "fewer than the 6 links per chip",
      "dims [4, 4, 4], wraparound [true, true, true]"}},
    {"SliceThatSetsDimsMustSetWraparound",
     "slice_without_wraparound.json",
     {"slice_without_wraparound.json: /ici/topology/wraparound is missing",
      "v3-2048.json describes other dims"}},
    {"ChipsPerHostMustDivideTheChips",
     "chips_per_host_remainder.json",
     {"chips_per_host_remainder.json: /chips_per_host = 5", "must divide the 16 chips"}},
    {"WraparoundOnAnAxisOfOneChip",
     "wraparound_on_extent_one.json",
     {"wraparound_on_extent_one.json: /ici/topology/wraparound/1 = true", "extent 1"}},
    {"WraparoundForEveryDim",
     "wraparound_too_short.json",
     {"wraparound_too_short.json: /ici/topology/wraparound = [false]", "2 booleans"}},
    {"DimsProductPastTheLimit",
     "too_many_chips.json",
     {"too_many_chips.json: /ici/topology/dims = [256,257]", "65792 chips"}},
    {"ZeroExtent", "zero_extent.json", {"zero_extent.json: /ici/topology/dims/1 = 0"}},
    {"MissingChipFileNamesTheSystemPointerAndValue",
     "chip_missing_file.json",
     {"chip_missing_file.json: /chip = \"no_such_chip.json\"", "no such file"}},
    {"BadChipIsBlamedOnTheChipFileAndTheSystemNamed",
     "bad_chip.json",
     {"zero_rows_chip.json: /mxu/rows = 0", "; the chip config ", "bad_chip.json names at /chip"}},
    {"UnknownIciKey",
     "unknown_ici_key.json",
     {"unknown_ici_key.json: /ici/bandwidth_gbs is not a known key", "bandwidth_gbps"}},
    {"ZeroBandwidth",
     "zero_bandwidth.json",
     {"zero_bandwidth.json: /ici/bandwidth_gbps = 0", "must be a number >= 0.001"}},
    {"SourceNamesNoField",
     "source_names_no_field.json",
     {"source_names_no_field.json: /sources/~1ici~1links", "names no field"}},
    {"FileDoesNotExist",
     "no_such_system.json",
     {"no_such_system.json: cannot read the system config (no such file"}},
};

void PrintTo(const BadSystem& bad, std::ostream* os) { *os << bad.file; }

class BadSystemConfig : public ::testing::TestWithParam<BadSystem> {};

TEST_P(BadSystemConfig, RejectedNamingFilePointerAndValue) {
  const BadSystem& bad = GetParam();
  try {
    load_system_config(data_path(bad.file));
    ADD_FAILURE() << bad.file << " was accepted";
  } catch (const ConfigError& e) {
    for (const std::string& s : bad.message_contains) EXPECT_THAT(e.what(), HasSubstr(s));
    EXPECT_THAT(e.what(), Not(HasSubstr("\n")));
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, BadSystemConfig, ::testing::ValuesIn(kBad),
                         [](const ::testing::TestParamInfo<BadSystem>& bad) {
                           return std::string(bad.param.name);
                         });

}  // namespace
}  // namespace tpu
