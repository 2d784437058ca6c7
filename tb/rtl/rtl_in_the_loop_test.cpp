// RTL in the loop: `tpusim run` on configs/chips/tiny-rtl.json, whose MXU is the Verilated array,
// and on the same chip with mxu.impl "tlm" must write the same report (outputs checked against
// the reference, every cycle count, bucket, counter and energy) and the same execution trace.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/cli.h"

namespace tpu {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// The first JSON pointer where a and b differ, or "".
std::string first_difference(const json& a, const json& b, const std::string& at = "") {
  if (a.type() != b.type()) return at + " (types differ)";
  if (a.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!b.contains(it.key())) return at + "/" + it.key() + " (only in the RTL run)";
      const std::string d = first_difference(it.value(), b[it.key()], at + "/" + it.key());
      if (!d.empty()) return d;
    }
    return a.size() == b.size() ? "" : at + " (keys only in the TLM run)";
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return at + " (lengths differ)";
    for (std::size_t i = 0; i < a.size(); ++i) {
      const std::string d = first_difference(a[i], b[i], at + "/" + std::to_string(i));
      if (!d.empty()) return d;
    }
    return "";
  }
  return a == b ? "" : at + ": " + a.dump() + " in the RTL run, " + b.dump() + " in the TLM run";
}

TEST(RtlInTheLoop, FashionMnistOnTinyRtlEqualsTheSameChipWithTheTlmMxu) {
  const fs::path dir = fs::temp_directory_path() / ("rtl_in_the_loop_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path rtl_chip = fs::path(TPUSIM_SOURCE_DIR) / "configs/chips/tiny-rtl.json";
  json twin;
  twin["include"] = rtl_chip.string();
  twin["mxu"] = read_json(rtl_chip)["mxu"];
  ASSERT_EQ(twin["mxu"]["impl"], "rtl");
  twin["mxu"]["impl"] = "tlm";
  std::ofstream(dir / "tiny-tlm.json") << twin.dump(2);

  // Two batches, the second partial: two programs through the chip.
  const std::string common = " --images 320 --batch 256";
  for (const char* run : {"rtl", "tlm"}) {
    const fs::path chip = std::string(run) == "rtl" ? rtl_chip : dir / "tiny-tlm.json";
    const test::CliResult r = test::run_tpusim("run --chip " + chip.string() + common + " --json " +
                                               (dir / run).string() + ".json" + " --trace " +
                                               (dir / run).string() + ".trace.json");
    ASSERT_EQ(r.status, 0) << r.out;
  }
  json rtl = read_json(dir / "rtl.json"), tlm = read_json(dir / "tlm.json");
  EXPECT_TRUE(rtl["accuracy"]["bit_exact"].get<bool>());
  // What may differ: the host's wall times and the config file's name.
  for (json* r : {&rtl, &tlm}) {
    r->erase("host");
    (*r)["chip"].erase("file");
  }
  EXPECT_EQ(first_difference(rtl, tlm), "");

  // The same slices, cycle for cycle; the RTL MXU reports each MatMul when its last result
  // leaves the array rather than when its feed ends, so the order of the events may differ.
  auto events = [](const json& t) {
    std::vector<std::string> e;
    for (const json& x : t["traceEvents"]) e.push_back(x.dump());
    std::sort(e.begin(), e.end());
    return e;
  };
  const auto rtl_events = events(read_json(dir / "rtl.trace.json"));
  const auto tlm_events = events(read_json(dir / "tlm.trace.json"));
  ASSERT_FALSE(rtl_events.empty());
  const auto [r, t] =
      std::mismatch(rtl_events.begin(), rtl_events.end(), tlm_events.begin(), tlm_events.end());
  EXPECT_TRUE(r == rtl_events.end() && t == tlm_events.end())
      << "first trace event only in the RTL run: " << (r == rtl_events.end() ? "" : *r)
      << "\nfirst only in the TLM run: " << (t == tlm_events.end() ? "" : *t);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tpu
