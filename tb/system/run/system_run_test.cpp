// `tpusim run --system` as a user runs it (docs/systems.md, "Inference on a system"): every chip
// of the system runs the same program on its share of the images and of the batch, each fed by
// its own host link, with no traffic between them. So each chip does exactly what a chip alone
// does with its share, and the system's report is that chip's, its work and energy times the
// chips, its time the same.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
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

json report(const test::TempDir& tmp, const std::string& config, const std::string& args) {
  const std::string file = tmp / "run.json";
  const auto r = test::run_tpusim("run " + config + " " + args + " --json " + file);
  if (r.status != 0) {
    ADD_FAILURE() << r.out;
    return json();
  }
  return json::parse(test::read_file(file));
}

double num(const json& j, const char* key) { return j.at(key).get<double>(); }

TEST(RunSystem, EveryChipOfTheV2_8RunsItsShareAsAChipAloneWould) {
  test::TempDir tmp("tpusim-run-system");
  const json sys =
      report(tmp, "--system " + source("configs/systems/v2-8.json"), "--images 400 --batch 200");
  const json one =
      report(tmp, "--chip " + source("configs/chips/v2.json"), "--images 100 --batch 50");
  ASSERT_FALSE(sys.is_null());
  ASSERT_FALSE(one.is_null());
  ASSERT_TRUE(sys["accuracy"]["bit_exact"].get<bool>());
  EXPECT_EQ(sys["system"]["chips"], 4);
  EXPECT_EQ(sys["workload"]["images"], 400);
  EXPECT_EQ(sys["workload"]["images_per_chip"], 100);
  EXPECT_EQ(sys["workload"]["batch_per_chip"], 50);
  EXPECT_EQ(sys["workload"]["instructions"], one["workload"]["instructions"]);

  const json& s = sys["totals"];
  const json& o = one["totals"];
  EXPECT_EQ(s["cycles"], o["cycles"]);
  EXPECT_EQ(s["memory_image_loaded_cycle"], o["memory_image_loaded_cycle"]);
  EXPECT_DOUBLE_EQ(num(s, "peak_ops_per_s"), 4 * num(o, "peak_ops_per_s"));
  EXPECT_NEAR(num(s, "images_per_s"), 4 * num(o, "images_per_s"), 1e-9 * num(s, "images_per_s"));
  EXPECT_NEAR(num(s, "utilization"), num(o, "utilization"), 1e-12);
  EXPECT_EQ(s["bytes_off_chip"].get<std::uint64_t>(), 4 * o["bytes_off_chip"].get<std::uint64_t>());
  EXPECT_EQ(s["bytes_host_link"].get<std::uint64_t>(),
            4 * o["bytes_host_link"].get<std::uint64_t>());
  EXPECT_NEAR(num(s, "energy_j"), 4 * num(o, "energy_j"), 1e-9 * num(s, "energy_j"));
  EXPECT_NEAR(num(sys["energy"], "static_j"), 4 * num(one["energy"], "static_j"),
              1e-9 * num(sys["energy"], "static_j"));
  // Every chip's MXUs, numbered by chip.
  ASSERT_EQ(sys["mxus"].size(), 4 * one["mxus"].size());
  EXPECT_EQ(sys["mxus"].back()["chip"], 3);
  EXPECT_EQ(sys["mxus"].back()["cycles"], one["mxus"].back()["cycles"]);
  // A layer's cycles are the average over every core of every chip: a lone chip's.
  ASSERT_EQ(sys["layers"].size(), one["layers"].size());
  for (std::size_t i = 0; i < sys["layers"].size(); ++i)
    EXPECT_NEAR(num(sys["layers"][i], "cycles"), num(one["layers"][i], "cycles"), 1e-6) << i;
}

TEST(RunSystem, AShareThatDoesNotSplitEvenlyIsRefusedBeforeAnythingRuns) {
  test::TempDir tmp("tpusim-run-system-uneven");
  const std::string file = tmp / "run.json";
  for (const std::string args : {"--images 402 --batch 200", "--images 400 --batch 202"}) {
    const auto r = test::run_tpusim("run --system " + source("configs/systems/v2-8.json") + " " +
                                    args + " --json " + file);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr("does not split evenly over the 4 chips of v2-8")) << r.out;
    EXPECT_THAT(r.out, HasSubstr("give a multiple of 4")) << r.out;
    EXPECT_FALSE(std::filesystem::exists(file)) << args;
  }
  const auto none = test::run_tpusim("run --images 4");
  EXPECT_EQ(none.status, 2) << none.out;
  EXPECT_THAT(none.out,
              HasSubstr("run needs a chip config (--chip) or a system config (--system)"));
}

}  // namespace
}  // namespace tpu
